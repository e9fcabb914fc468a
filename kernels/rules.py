"""Weight rule codes shared by every backend."""

from __future__ import annotations

__all__ = ["EXACT", "MEAN", "WEIGHT_RULES"]

#: Traveltime along the straight segment, integrated cell by cell (Kanoksirirath, App. A).
EXACT = 0
#: Mean of the end-node slownesses times the length (Moser 1991, equation 2).
MEAN = 1
WEIGHT_RULES = {"exact": EXACT, "mean": MEAN}
