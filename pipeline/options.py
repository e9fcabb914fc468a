"""Solver options: their vocabulary (backends, algorithms, precisions, weights), their
checks, and which backend ``auto`` is on this machine or another's.

One set of checks for every entry point: the Python API, workflows (whose schema takes the
same types, so a YAML typo and a bad keyword get the same choices) and the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

import numpy as np

from ..kernels import WEIGHT_RULES
from .errors import InputError, setting, warn_input

__all__ = [
    "Options", "check_options", "check_flag", "unused_settings", "BACKENDS", "ALGORITHMS",
    "PRECISIONS", "METHODS", "Backend", "Algorithm", "Precision", "Weights",
]  # fmt: skip

# The options' vocabulary, once: the Python API checks against these and the workflow
# schema uses the types (so a YAML typo and a bad keyword get the same choices).
Backend = Literal["cpu", "cuda", "auto"]
Algorithm = Literal["dijkstra", "pull", "near-far"]
Precision = Literal["float64", "float32"]
Weights = Literal["exact", "mean"]  # the keys of raygrid.kernels.WEIGHT_RULES
BACKENDS = get_args(Backend)
ALGORITHMS = {"cpu": ("dijkstra",), "cuda": ("pull", "near-far")}  # every Algorithm once
PRECISIONS = dict(zip(get_args(Precision), (np.float64, np.float32), strict=True))

METHODS = {
    "dijkstra": "shortest-path ray tracing (Moser 1991): multi-seeded Dijkstra, 4-ary indexed heap",
    "pull": "shortest-path ray tracing (Moser 1991): GPU pull relaxation over shared-memory "
    "tiles with an update map (Monsegny & Agudelo 2013; Kanoksirirath)",
    "near-far": "shortest-path ray tracing (Moser 1991): GPU Near-Far push relaxation "
    "(Davidson et al. 2014)",
}


@dataclass(frozen=True)
class Options:
    """Validated solver options shared by every entry point (API, CLI, workflows)."""

    rule: int
    weights: str
    backend: str
    precision: str
    algorithm: str
    batch: int = 1
    precompute: bool = False

    @property
    def dtype(self) -> type:
        return PRECISIONS[self.precision]

    def for_sources(self, n_sources: int) -> Options:
        """These options for solves of at most ``n_sources`` sources: a GPU batch beyond
        them would only shrink the pull tiles (or refuse them) for nothing."""
        return replace(self, batch=min(self.batch, n_sources))


def _resolve_backend(backend: str, algorithm: str | None, here: bool, gpu: bool | None) -> str:
    if backend == "cpu":
        return "cpu"
    if not here:  # checking a file for another machine: no look at this one's hardware
        if backend == "auto" and gpu is not None and algorithm not in ALGORITHMS["cpu"]:
            return "cuda" if gpu else "cpu"  # as it will resolve there
        return "cuda" if backend == "cuda" or algorithm in ALGORITHMS["cuda"] else "cpu"
    from ..kernels import cuda as cuda_kernels  # numba.cuda only when asked for

    if backend == "auto":
        if algorithm in ALGORITHMS["cpu"]:  # the algorithm runs on the CPU only
            return "cpu"
        if cuda_kernels.cuda_usable():
            return "cuda"
        reason = cuda_kernels.unusable_reason()
        if algorithm in ALGORITHMS["cuda"]:
            # (A workflow's refusals are said at compute.backend's line: the key is there.)
            auto = setting("backend='auto'", "auto")
            chosen = setting(f"algorithm={algorithm!r}", f"compute.algorithm: {algorithm}")
            raise InputError(
                f"{auto} cannot use a GPU here: {reason}. And {chosen} runs only on one: "
                "leave the algorithm out (each backend has its default), or run where there "
                "is a GPU"
            )
        if cuda_kernels.gpu_present():  # a GPU its user expects used: say why it is not
            auto = setting("backend='auto'", "compute.backend: auto")
            warn_input(f"{auto} runs on the CPU: {reason}")
        return "cpu"
    if not (cuda_kernels.cuda_usable() or cuda_kernels.simulating()):
        cuda = setting("backend='cuda'", "cuda")
        cpu, auto = setting("backend='cpu'", "cpu"), setting("'auto'", "auto")
        raise InputError(
            f"{cuda} cannot run here: {cuda_kernels.unusable_reason()}; use {cpu}, or {auto} "
            "to use a GPU only when there is one"
        )
    return "cuda"


def check_flag(name: str, value: Any) -> None:
    """Refuse an on/off option that is not a bool: ``"no"`` would read as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name} must be True or False, got {value!r}")


def check_options(
    weights: str,
    backend: str,
    precision: str,
    algorithm: str | None = None,
    batch: int = 1,
    precompute: bool = False,
    here: bool = True,
    gpu: bool | None = None,
) -> Options:
    """Validate the options; raise :class:`InputError` naming the bad one.

    ``backend="auto"`` resolves to ``"cuda"`` only when a real GPU is usable (never the
    simulator); ``algorithm=None`` picks the backend's default (``dijkstra`` on the CPU,
    ``pull`` on CUDA). ``here=False`` checks the options for another machine (a batch
    job's, from a login node): ``"cuda"`` is not refused for want of a GPU here, and
    ``"auto"`` resolves to CUDA where ``gpu`` says that machine has one (a batch job's
    cluster file asks for GPUs) or, if unknown, only where the algorithm says so.
    ``"auto"`` with a CPU-only algorithm (``dijkstra``) is the CPU on every machine.
    """
    # A name, tested as text first: a list is unhashable, and "in" a dict raised TypeError.
    if not isinstance(weights, str) or weights not in WEIGHT_RULES:
        raise InputError(f"weights must be one of {sorted(WEIGHT_RULES)}, got {weights!r}")
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InputError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if not isinstance(precision, str) or precision not in PRECISIONS:
        try:  # np.float32 or "f4" for "float32": named, not taken (it is a name everywhere)
            named = precision is not None and not isinstance(precision, str | bool)
            name = np.dtype(precision).name if named else None  # np.dtype(None): float64
        except (TypeError, ValueError):
            name = None
        said = f" (by name: {name!r})" if name in PRECISIONS else ""
        raise InputError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}{said}")
    known = sorted({a for names in ALGORITHMS.values() for a in names})
    if algorithm is not None and algorithm not in known:
        raise InputError(f"algorithm must be one of {known}, got {algorithm!r}")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise InputError(f"batch must be a positive integer, got {batch!r}")
    check_flag("precompute", precompute)
    resolved = _resolve_backend(backend, algorithm, here, gpu)
    if algorithm is None:
        algorithm = ALGORITHMS[resolved][0]
    elif algorithm not in ALGORITHMS[resolved]:
        offers = list(ALGORITHMS[resolved])
        raise InputError(
            setting(
                f"algorithm={algorithm!r} does not run on backend={resolved!r}",
                f"{resolved} does not run compute.algorithm: {algorithm}",
            )
            + f"; it offers {offers}"
        )
    return Options(
        rule=WEIGHT_RULES[weights],
        weights=weights,
        backend=resolved,
        precision=precision,
        algorithm=algorithm,
        batch=int(batch),
        precompute=bool(precompute),
    )


def unused_settings(options: Options, backend: str, batch: int, threads: int | None) -> str:
    """What a solve on a fixed backend (``"cpu"``, the default, or ``"cuda"``) does not use
    of ``batch`` (the CUDA pull solver's) and ``threads`` (the CPU's), said; ``""`` if
    nothing. With ``"auto"`` the caller left the backend open, so settings for either are
    expected."""
    if backend == "auto":
        return ""
    unused = [
        f"{name}={int(value)} is for {whose}"
        for name, value, whose, used in (
            ("batch", batch, "the CUDA pull solver", batch == 1 or options.algorithm == "pull"),
            ("threads", threads, "the CPU backend", threads is None or backend == "cpu"),
        )
        if not used
    ]
    if not unused:
        return ""
    solver = f"backend={backend!r}, algorithm={options.algorithm!r}"
    them = "them" if len(unused) > 1 else "it"
    return f"{' and '.join(unused)}: this solve ({solver}) does not use {them}"
