"""How much memory a solve will take, checked before the large arrays are allocated.

A model too large for the machine used to fail late and unreadably: a NumPy or Numba
``MemoryError`` traceback after seconds of work, or, on a Dask worker, the nanny killing
the worker and the client reporting a closed stream. Every array the CPU solver allocates
has a size known from the grid's shape, the forward star and the precision, so the total
is counted here and compared with what the machine (or the worker) has, before anything
large is allocated.

The count is of the arrays raygrid itself allocates (the figures below, bytes per node,
``P`` the padded grid's nodes over the real grid's); Python objects, a heap frontier wider
than an eighth of the grid and the Zarr encoder's buffers come on top, so an estimate that
passes can still be tight, but one that fails would fail for real. Measured on one thread (the
peak resident memory ``traveltimes`` added, over this estimate): 1601^2 radius 5 0.97 (four
sources 0.98), 121^3 radius 2 0.98, 801^2 radius 5 with precomputed weights 1.00, a little
under because the heap's storage is not all touched; the arrays alone (``tracemalloc``'s
peak) are within 0.2 % of it.

============================  ======================================================
CPU graph, once per model     the grid's slowness ``8``, its padded copy and
                              lower bounds ``16 P``, interior index ``8``;
                              precomputed weights ``offsets/2 * itemsize`` plus
                              their index ``8 P``
each source being solved      padded times, predecessors, settled flags and heap
                              index ``(itemsize + predecessor + 1 + 4) P``; the
                              heap's keys and nodes ``(itemsize + 8) P / 8`` (its
                              first size, grown only for a wider frontier); the
                              real grid's predecessors ``predecessor`` when they
                              are not kept (else they are the result's)
each source's result          times ``itemsize``, and predecessors ``predecessor``
                              when they are kept (rays)
============================  ======================================================
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from dask.utils import format_bytes

from ..kernels import Star
from ..kernels.heap import heap_capacity
from .errors import InputError, setting

__all__ = [
    "Footprint", "footprint", "tile_footprint", "available_memory", "check_fits",
    "worker_fractions", "device_memory_said", "one_of", "WORKER_BYTES",
]  # fmt: skip

#: What a worker process holds once it has run a task, before counting its data: Python,
#: Dask, raygrid and Numba imported and the solver's cached machine code loaded. Measured
#: on a CPU LocalCluster worker: 61 MiB when it started, 247-253 MiB after one small solve
#: (a fresh worker reports the first, and was let run tasks its nanny then killed it for).
WORKER_BYTES = 250 * 2**20


@dataclass(frozen=True)
class Footprint:
    """Bytes a solve allocates, in three parts that scale differently.

    Attributes
    ----------
    model : int
        Shared by every source: the CPU solver's graph (and its precomputed weights).
    per_solve : int
        Working arrays of one source while it is being solved.
    per_result : int
        One source's result, kept until it is returned or written.
    """

    model: int
    per_solve: int
    per_result: int

    def total(self, n_sources: int, at_once: int) -> int:
        """Bytes for ``n_sources`` results with ``at_once`` of them solved together."""
        return self.model + min(at_once, n_sources) * self.per_solve + n_sources * self.per_result


def footprint(
    shape3: tuple[int, int, int],
    star: Star,
    dtype: np.dtype | type,
    *,
    backend: str = "cpu",
    precompute: bool = False,
    predecessors: bool = True,
) -> Footprint:
    """The host memory of solving sources on a grid of ``shape3`` nodes (see the module's
    table).

    On the GPU (``backend="cuda"``) the model and the working arrays live on the device;
    the host holds only the results (predecessors only when asked for).
    """
    itemsize = np.dtype(dtype).itemsize
    predecessor = star.predecessor_dtype.itemsize
    nodes = int(np.prod(shape3, dtype=np.int64))
    padded = int(np.prod([n + 2 * r for n, r in zip(shape3, star.radius)], dtype=np.int64))
    if backend == "cuda":
        return Footprint(0, 0, nodes * (itemsize + (predecessor if predecessors else 0)))
    # The grid's float64 slowness, then the graph's padded copy, lower bounds and index.
    model = 8 * nodes + 16 * padded + 8 * nodes
    if precompute:
        model += nodes * star.forward.shape[0] * itemsize + 8 * padded
    return Footprint(
        model=model,
        # A solve writes predecessors with its times: into the result when they are kept,
        # else into an array of its own that lives while it runs.
        per_solve=(itemsize + predecessor + 1 + 4) * padded
        + heap_capacity(padded, star.offsets.shape[0]) * (itemsize + 8)
        + (0 if predecessors else predecessor * nodes),
        per_result=nodes * (itemsize + (predecessor if predecessors else 0)),
    )


def tile_footprint(
    extended3: tuple[int, int, int], star: Star, dtype: np.dtype | type, *, backend: str = "cpu"
) -> Footprint:
    """The host memory of one tile of a tiled solve, ``extended3`` its shape with its halo
    (:mod:`raygrid.pipeline.decompose`).

    ``per_result`` is its state, which its owner keeps between rounds until the source is
    written: float64 slowness, times and predecessors over the extended tile (8 + the
    times' and the predecessors' bytes a node, 18 for float64 times at most radii).
    ``per_solve`` is what its solve adds while it runs: the CPU solver's graph of the tile
    and its working arrays, its slowness and results being the state's own (on the GPU,
    where the tile's model and work live, the host's copies of its times and
    predecessors). ``model`` is 0: no graph is shared.
    """
    itemsize = np.dtype(dtype).itemsize
    nodes = int(np.prod(extended3, dtype=np.int64))
    state = nodes * (8 + itemsize + star.predecessor_dtype.itemsize)
    if backend == "cuda":
        # The host's copies of the tile's times and predecessors, in and out of the device.
        return Footprint(0, 2 * nodes * (itemsize + star.predecessor_dtype.itemsize), state)
    solve = footprint(extended3, star, dtype, predecessors=True)
    # (The graph's float64 slowness is the state's; the results are written into its own.)
    return Footprint(0, solve.model - 8 * nodes + solve.per_solve, state)


def available_memory() -> int:
    """Bytes this process may still allocate: the smaller of the memory the system has
    available and what is left under a cgroup or RSS limit (a SLURM job's, a container's),
    as Dask's own worker limit reads it."""
    import psutil  # a dependency of distributed
    from distributed.system import MEMORY_LIMIT

    process = psutil.Process(os.getpid()).memory_info().rss
    return int(min(psutil.virtual_memory().available, MEMORY_LIMIT - process))


def float32_hint() -> str:
    """A refusal's offer of float32 times, spelt for its reader (:func:`errors.setting`)."""
    return setting('precision="float32"', "grid.precision: float32")


def precompute_hint() -> str:
    """A refusal's offer of weights computed as they are used, spelt for its reader."""
    return setting("precompute=False", "compute.precompute: false")


def batch_hint() -> str:
    """A refusal's offer of fewer sources per CUDA block, spelt for its reader."""
    return setting("a smaller batch=", "a smaller compute.cuda_batch")


def tiles_hint() -> str:
    """A refusal's offer of a tiled solve, spelt for its reader."""
    return setting(
        "traveltime(..., tiles=) for one source at a time on a Dask cluster",
        "compute.tiles (one source at a time, over the cluster)",
    )


def one_of(hints: list[str]) -> str:
    """What a refusal offers to change, listed: ``"a"``, or ``"a, b, or c"``."""
    return hints[0] if len(hints) == 1 else ", ".join(hints[:-1]) + ", or " + hints[-1]


def check_fits(needed: int, available: int, what: str, hint: str) -> None:
    """Raise :class:`InputError` if ``needed`` bytes exceed ``available``.

    ``what`` says what needs them (``"this solve"``), ``hint`` what the user can do.
    """
    if needed > available:
        raise InputError(
            f"{what} needs about {format_bytes(needed)} of memory and "
            f"{format_bytes(max(available, 0))} is available; {hint}"
        )


@contextmanager
def device_memory_said(what: str, hints: list[str]) -> Iterator[None]:
    """A GPU solver refused in the block for the device's memory
    (:class:`~raygrid.kernels.cuda.memory.DeviceMemoryError`, raised before it allocates
    anything) as an :class:`InputError` that names ``what`` did not fit and offers
    ``hints``. The GPU's memory is counted by the solvers themselves
    (:mod:`raygrid.kernels.cuda.memory`); this module counts the host's."""
    try:
        yield
    except MemoryError as error:
        from ..kernels.cuda.memory import DeviceMemoryError  # CUDA imported only if it ran

        if not isinstance(error, DeviceMemoryError):
            raise
        raise InputError(f"{what} does not fit on this GPU: {error}; try {one_of(hints)}") from None


def worker_fractions() -> tuple[float, float]:
    """``(pause, terminate)``: the shares of a worker's ``memory_limit`` past which Dask
    pauses it (it takes no new task until its memory falls back) and its nanny kills it.
    What a worker holds at rest (the model) must stay under ``pause``, or it never runs
    another task (a 300 MB worker, paused for good); its peak, with its tasks under way,
    under ``terminate`` (a task's peak past ``pause`` only holds the next tasks back). A
    setting of false is the limit itself; ``pause`` is at most ``terminate``."""
    import dask.config

    config = dask.config.get
    terminate = config("distributed.worker.memory.terminate", 0.95) or 1.0
    pause = config("distributed.worker.memory.pause", 0.8) or terminate
    return min(pause, terminate), terminate
