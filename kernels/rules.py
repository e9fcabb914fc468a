"""Weight rule codes shared by every backend."""

from __future__ import annotations

from numbers import Integral

__all__ = ["EXACT", "MEAN", "WEIGHT_RULES", "checked_rule"]

#: Traveltime along the straight segment, integrated cell by cell (Kanoksirirath, App. A).
EXACT = 0
#: Mean of the end-node slownesses times the length (Moser 1991, equation 2).
MEAN = 1
WEIGHT_RULES = {"exact": EXACT, "mean": MEAN}


def checked_rule(rule: int | str) -> int:
    """The code of a weight rule given as :data:`EXACT`, :data:`MEAN` or their names
    (``"exact"``, ``"mean"``).

    Raises
    ------
    ValueError
        For anything else: the kernels branch on ``rule == EXACT``, so any other value
        (``"exact"`` among them, before names were taken) silently meant the mean rule.
    """
    if isinstance(rule, str) and rule in WEIGHT_RULES:
        return WEIGHT_RULES[rule]
    if isinstance(rule, Integral) and not isinstance(rule, bool) and rule in (EXACT, MEAN):
        return int(rule)
    raise ValueError(
        f"rule must be raygrid.kernels.EXACT ({EXACT}) or MEAN ({MEAN}), or one of "
        f"{sorted(WEIGHT_RULES)}; got {rule!r}"
    )
