"""The host side of the GPU pull solver: a model kept on the device, solved batch by batch.

:class:`PullSolver` puts one model on the device once (padded slowness, edge lengths,
precomputed weights, the band) together with one batch's state (times, predecessors, node
stamps, the buffer the results leave through), and solves any number of sources against
it; :func:`solve_pull` is one solver used once. The kernels are in
:mod:`raygrid.kernels.cuda.pull`; this module launches them pass by pass, in one
cooperative launch, or phase by phase (:mod:`raygrid.kernels.cuda.tile_queue`), reading the
device's counters as rarely as it can.

Why a resident model: on an H100 the setup (model to the device, allocations, fills) took
8-31 ms of a 62-87 ms solve at 1601^2 and 0.15-0.19 s against 75 ms of relaxation at
256^3 (benchmarks/results/gpu_study_h100.md); a survey worker paid it for every batch.
"""

from __future__ import annotations

import logging
import math
import threading
import time

import numba
import numpy as np
from numba import cuda

from ..bounds import reach_lengths
from ..crossings import star_crossings
from ..layout import PaddedLayout, checked_slowness, checked_spacing
from ..rules import EXACT, checked_rule
from ..seeds import checked_precision, checked_seeds
from ..star import Star
from . import tile_queue
from .arrays import (
    Staging,
    padded_slowness,
    prepared_fills,
    prepared_from_padded,
    prepared_scatter,
    to_padded,
)
from .device import simulating
from .launch import prepared_launch
from .memory import check_device_memory
from .pull import (
    DEFAULT_BLOCK_2D,
    DEFAULT_BLOCK_3D,
    MAX_INNER,
    PHASES_REGISTERS,
    SHARED_BYTES,
    check_constants,
    check_launch,
    check_settings,
    pull_kernels,
    register_capped,
    shared_bytes,
)
from .weights import precompute_weights_gpu

__all__ = [
    "PullSolver", "solve_pull", "pull_layout", "pull_device_bytes", "check_launch",
    "default_delta", "DELTA_TILES", "SCHEDULES",
]  # fmt: skip

logger = logging.getLogger("raygrid")

#: Default width of the band of tiles relaxed in a pass, in tiles crossed at the median
#: slowness (see ``delta`` in :class:`PullSolver`).
DELTA_TILES = 4.0
#: Nodes whose median slowness sets the default band (a sample on larger models: 65 k
#: nodes took 1.1 ms of a 48 ms solve at 1601^2 on an H200).
DELTA_SAMPLE = 1 << 12
#: Passes launched between two reads of the change counter (launch-per-pass mode).
PASSES_PER_CHECK = 8
#: Passes of the next group queued before the host looks at the last group's counter.
READ_LAG = 2
#: Phases launched between two reads of the far list's length (phases schedule).
PHASES_PER_CHECK = 4
#: How passes are run: see ``schedule`` in :class:`PullSolver`.
SCHEDULES = ("passes", "cooperative", "phases")

#: Fewest threads a default tile shrinks to (a warp: smaller blocks leave lanes idle);
#: under the simulator a model smaller than that has one tile of its own size.
MIN_THREADS = 32
#: Seeds per source a solver stages room for at first (it grows the room for more).
SEED_ROOM = 64
#: Set once a cooperative launch failed in this process (e.g. no cudadevrt to link).
_cooperative_failed = False


def pull_layout(
    shape3: tuple[int, int, int],
    radius: tuple[int, int, int],
    block: tuple[int, int, int] | None = None,
    batch: int = 1,
    dtype: type = np.float64,
) -> PaddedLayout:
    """The padded tiles a :class:`PullSolver` on ``shape3`` uses: ``block``, or the default
    tile, shrunk where it does not fit a block's shared memory.

    Parameters
    ----------
    shape3 : tuple of int
        The grid ``(nz, ny, nx)``; ``ny == 1`` for 2D.
    radius : tuple of int
        The star's radius per axis: the halo's width.
    block : tuple of int, optional
        Tile shape ``(bz, by, bx)``, kept as given. ``None``: the default tile for 2D or 3D
        (:data:`~raygrid.kernels.cuda.pull.DEFAULT_BLOCK_2D`, ``DEFAULT_BLOCK_3D``; 256
        threads) grown to at least the halo along each axis, shrunk while its tile, halo
        and ``batch`` time tiles in ``dtype`` exceed a block's shared memory; under the
        simulator, then cut to the grid (a model smaller than a tile gets one tile of its
        own size, which may have fewer than :data:`MIN_THREADS` threads).
    batch : int
        Sources relaxed together by one block.
    dtype : numpy dtype
        Precision of the times.

    Returns
    -------
    PaddedLayout

    Notes
    -----
    Shrinking halves the longest axis (the slowest-varying first, so rows stay long for
    coalesced reads), never below the halo nor below :data:`MIN_THREADS` threads. It is
    what lets large stars run at all: in 3D at radius 4 the default 4 x 8 x 8 tile with its
    halo is 12 x 16 x 16 nodes, 61 KB in float64, over the 48 KB a block has; 4 x 4 x 8
    (46 KB) fits. Each owned node then carries more halo, so such tiles are slower per
    node (not yet timed on a GPU). Where no tile down to those limits fits, the smallest
    is returned, and does not fit either:
    :func:`~raygrid.kernels.cuda.pull.check_launch` refuses it, so a caller can refuse a
    configuration before any GPU is touched.
    """
    if block is None:
        default = DEFAULT_BLOCK_2D if shape3[1] == 1 else DEFAULT_BLOCK_3D
        block = tuple(max(b, r) for b, r in zip(default, radius))  # tiles >= halo
        while shared_bytes(PaddedLayout(shape3, radius, block), batch, dtype) > SHARED_BYTES:
            halved = [max(b // 2, r, 1) for b, r in zip(block, radius)]
            shrinkable = [
                axis
                for axis in range(3)
                if halved[axis] < block[axis]
                and np.prod(block) // block[axis] * halved[axis] >= MIN_THREADS
            ]
            if not shrinkable:
                break
            axis = max(shrinkable, key=lambda axis: (block[axis], -axis))
            block = tuple(halved[axis] if a == axis else b for a, b in enumerate(block))
        if simulating():
            # Under the simulator, no longer than the grid along an axis: each thread is a
            # Python thread, and a small model's one tile was mostly padding. Not on a GPU,
            # where idle lanes cost little and each tile shape is a kernel compiled anew
            # (its shared arrays' sizes are constants): small models and a tiled solve's
            # edge tiles share the default's. After the shrinking, not before: cut first,
            # sizes such as 7 or 14 halved to the thread floor still did not fit.
            block = tuple(max(min(b, n), r) for b, n, r in zip(block, shape3, radius))
    return PaddedLayout(tuple(shape3), tuple(radius), tuple(block))


class PullSolver:
    """A model resident on the GPU, solved by tiled pull relaxation for any number of sources.

    Building it puts the model on the device (padded slowness, edge lengths, precomputed
    weights if asked, the band) and allocates one batch's state; :meth:`solve` then pays per
    batch only for its seeds, a reset of that state, the relaxation and the copy back. One
    solve runs at a time: calls from several threads wait for each other (they share the
    device buffers). The device memory is held until the solver is dropped.

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx), float64
    spacing : numpy.ndarray, shape (3,)
    star : Star
    rule : int
        Weight rule (:data:`raygrid.kernels.EXACT` or :data:`raygrid.kernels.MEAN`).
    precomputed : bool
        Precompute every edge weight once on the device (a value per padded node and forward
        offset, half the star) and read them; otherwise compute each weight in the kernel
        from the shared slowness tile.
    dtype : numpy dtype
        Precision of the times; weights are computed in float64 and rounded once to it.
    block : tuple of int, optional
        Tile shape ``(bz, by, bx)``; by default 256 threads, fewer where the radius, batch
        and precision need it (:func:`pull_layout`). Each must be at least the radius along
        its axis (tests shrink it so small grids span many tiles).
    batch : int
        Sources relaxed together by one block: each weight computed is used ``batch`` times.
    max_inner : int
        Bound on the in-block iterations per pass.
    schedule : {"passes", "cooperative", "phases"}
        ``"passes"``: one launch per pass. ``"cooperative"``: every pass in one cooperative
        launch; on an H100 this wins only where launches dominate (small grids: 64^2 in
        1.4 ms of passes instead of 3.3 ms) and loses on large ones, where only the
        co-resident blocks take the queue (1601^2, radius 5: 55 ms of passes instead of
        44-50 ms); see benchmarks/results. The simulator runs a cooperative grid of one
        block. ``"phases"``: no passes; resident blocks take queued tiles as they finish,
        one launch per phase of the band (:mod:`raygrid.kernels.cuda.tile_queue`); not yet
        timed on a GPU. For ``"phases"``, ``passes`` in the statistics counts phases.
    delta : float, optional
        Width (seconds) of the band of tiles relaxed in a pass: a queued tile is relaxed
        only if the smallest time that changed around it is within ``delta`` of the
        smallest over all queued tiles; the others wait. ``None``: :data:`DELTA_TILES`
        tiles' worth of the model's median slowness; ``numpy.inf``: every queued tile in
        every pass. Any value gives the same times; it sets how much work is repeated.
    seed_room : int, optional
        Seeds of a batch (all its sources together) the solver makes room for as it is
        built, and counts in its device memory; default :data:`SEED_ROOM` per source. A
        batch with more grows the room as it is solved.
    walk : {"scan", "rows"}
        How an in-block iteration walks a node's star (see
        :func:`~raygrid.kernels.cuda.pull.pull_kernels`): ``"scan"``, the kernel timed on
        devices; ``"rows"``, the offsets of changed tile rows only, an experiment not yet
        timed. The same times either way; ``stats["walk"]`` says which ran.

    Attributes
    ----------
    setup_s : float
        Wall seconds spent building the solver (the model's part of a one-off solve).

    Notes
    -----
    Pull relaxation, tiles and halos: Monsegny & Agudelo (2013), section 3. Update map and
    in-block iteration: Kanoksirirath. The times are the unique fixed point of
    ``t(v) = min(seed(v), min_u t(u) + w(u, v))`` in floating point, the same floats as the
    CPU Dijkstra's (docs/method.md section 1), on a real GPU too: the weights' products are
    rounded on their own there, never fused into a sum (:mod:`raygrid.kernels.segment`'s
    notes; checked on the PTX, not yet compared on a device).
    """

    def __init__(
        self,
        slowness: np.ndarray,
        spacing: np.ndarray,
        star: Star,
        *,
        rule: int = EXACT,
        precomputed: bool = False,
        dtype: type = np.float64,
        block: tuple[int, int, int] | None = None,
        batch: int = 1,
        max_inner: int = MAX_INNER,
        schedule: str = "passes",
        delta: float | None = None,
        seed_room: int | None = None,
        walk: str = "scan",
    ) -> None:
        clock = time.perf_counter()
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        check_settings(max_inner, walk)  # before anything goes to the device
        dtype = checked_precision(dtype)
        spacing, rule = checked_spacing(spacing), checked_rule(rule)
        slowness = checked_slowness(slowness, values=False)  # values: checked on the device
        layout = pull_layout(slowness.shape, star.radius, block, batch, dtype)
        check_launch(layout, batch, dtype)
        check_constants(layout, star, rule, precomputed, walk)
        seed_room = SEED_ROOM * batch if seed_room is None else max(seed_room, 1)
        check_device_memory(
            pull_device_bytes(
                layout, star, precomputed=precomputed, dtype=dtype, batch=batch,
                schedule=schedule, seed_room=seed_room,
            ),
            f"the CUDA pull solver of {slowness.size:,} nodes",
        )  # fmt: skip
        self.layout, self.star, self.dtype, self.batch = layout, star, dtype, batch
        self.schedule, self.walk = schedule, walk
        self._lock = threading.Lock()

        slowness_padded = padded_slowness(layout, slowness)
        # On-the-fly weights are the CPU's crossing-table sums over the shared tile; the
        # kernels hold the cells and fractions as constants, the lengths (and the bounds'
        # reach) depend on the spacing and ride with each batch's staged state.
        self._length = star_crossings(star, spacing, rule, layout.tile).length
        self._stage(seed_room)
        if precomputed:
            weights = precompute_weights_gpu(slowness_padded, spacing, star.forward, rule, dtype)
        else:
            weights = cuda.device_array((1, 1), dtype=dtype)
        self._slowness, self._weights = slowness_padded, weights
        self._kernels = pull_kernels(
            layout.block, star, batch, dtype.type, precomputed, max_inner, rule, walk
        )
        # A bound no solve reaches (every pass lowers some time or relaxes the lowest queued
        # tile): a safety net, not a setting.
        self._limit = 64 * layout.n_blocks * max_inner + 1024
        self.delta = default_delta(slowness, spacing, layout) if delta is None else delta

        # One batch's state, reset by each batch: times and predecessors on the padded grid,
        # the buffers the results leave through (one source's real grid), and the pass
        # stamps of nodes and tiles (a stand-in for the node stamps where phases do not use
        # them).
        padded = (batch, *layout.padded)
        self._times = cuda.device_array(padded, dtype=dtype)
        self._predecessor = cuda.device_array(padded, dtype=star.predecessor_dtype)
        self._times_real = cuda.device_array((1, *layout.shape), dtype=dtype)
        self._predecessor_real = cuda.device_array((1, *layout.shape), dtype=star.predecessor_dtype)
        stamps = (1, 1, 1) if schedule == "phases" else layout.padded
        self._node_pass = cuda.device_array(stamps, dtype=np.int32)
        self._tile_pass = cuda.device_array(layout.blocks, dtype=np.int32)
        # Tile relaxations, in-block iterations, passes of the last cooperative launch,
        # weights read or computed, tiles deferred, most in-block iterations of a relaxation.
        self._relaxed = cuda.device_array(6, dtype=np.int64)
        # Every batch's reset (times, predecessors, and the pass stamps of nodes and tiles:
        # -1, never written or run), the statistics' reset and the results' way out, each
        # marshalled once.
        self._reset_state = prepared_fills([
            (self._times, np.inf), (self._predecessor, -1), (self._node_pass, -1),
            (self._tile_pass, -1),
        ])  # fmt: skip
        self._reset_counters = prepared_fills([(self._relaxed, 0)])
        self._copy_times = prepared_from_padded(layout, self._times, self._times_real)
        self._copy_predecessor = prepared_from_padded(
            layout, self._predecessor, self._predecessor_real
        )
        # Where the passes schedule's queue lengths land on the host (pinned: copied while
        # the device works on).
        self._snapshot = cuda.pinned_array(3, dtype=np.int32)
        cuda.synchronize()
        self.setup_s = time.perf_counter() - clock

    def _stage(self, seeds: int) -> None:
        """(Re)build the staged state of a batch with room for ``seeds`` seeds: the passes
        schedules' update map (each tile's pending time, queued flag and the queue, by pass
        parity; the queue lengths and smallest pending times, rings of three), the seeds,
        and the star's lengths, sent to the device in one copy per batch."""
        self._staging = Staging(_staged(self.layout, self.star, self.dtype, seeds))
        host = self._staging.host
        host["seed_predecessor"][:] = -1
        host["reach"][:] = reach_lengths(self._length)
        host["length"][:] = self._length
        self._seed_room = seeds
        # Launches that read the staged arrays, prepared when first needed.
        self._scatter = self._pass_launch = None

    def solve(
        self,
        seeds: list[tuple[np.ndarray, np.ndarray]],
        *,
        stats: dict | None = None,
        times: np.ndarray | None = None,
        predecessor: np.ndarray | None = None,
        predecessors: bool = True,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Traveltimes and predecessors of several sources, ``batch`` at a time.

        Parameters
        ----------
        seeds : list of (seed_nodes, seed_times)
            One entry per source: flat indices of its seeded nodes and their times.
        times, predecessor : numpy.ndarray, optional
            ``(n_sources, nz * ny * nx)`` starting upper bounds and their predecessors (a
            domain-decomposition tile's state); only the seeds' tiles start active, so the
            bounds must already be consistent away from the seeds, as a previous solve
            leaves them.
        predecessors : bool, default True
            Copy the predecessors back to the host. The kernels keep them on the device
            either way (a time and its predecessor are written together); ``False`` saves
            their copy (about 1 ms at 1601^2 on an H100) and returns ``None`` for them.
        stats : dict, optional
            Filled with ``passes``, ``host_reads`` (counter reads), ``tiles`` and ``block``
            (their number and shape), ``tiles_relaxed`` (tile relaxations, summed over
            passes and batches), ``inner_iterations`` (in-block iterations, summed over tile
            relaxations), ``weights_evaluated`` (edge weights computed or read: once per
            edge and pull, for all the sources of a batch), ``tiles_deferred`` (queued tiles
            left for a later pass by the ``delta`` band), ``most_inner`` (most in-block
            iterations of one tile relaxation), ``delta``, ``schedule`` (the one that ran:
            ``"cooperative"`` falls back to ``"passes"`` where the device cannot launch it),
            ``walk`` (see ``walk``),
            and wall seconds: ``setup_s`` (each batch's seeds and state reset), ``passes_s``
            (the relaxation), ``copy_s`` (results back to the host), ``launch_s`` (of
            ``passes_s``, host time spent launching passes) and ``setup_model_s`` (building
            this solver, :attr:`setup_s`).

        Returns
        -------
        times, predecessor : numpy.ndarray, shape (n_sources, nz * ny * nx)
            Same conventions as :func:`raygrid.kernels.dijkstra`; ``predecessor`` is
            ``None`` with ``predecessors=False``.
        """
        with self._lock:
            # The batch's first launches go straight to the driver (prepared), which needs
            # a current context: Numba makes one current in a thread only at its own API
            # calls, so a worker thread's first solve would fail without this. (The device
            # is the process's: one GPU per process, as dask-cuda's workers have.)
            cuda.current_context()
            return self._solve(seeds, stats, times, predecessor, predecessors)

    def _solve(self, seeds, stats, times, predecessor, predecessors):
        layout, star, dtype, batch = self.layout, self.star, self.dtype, self.batch
        n_sources = len(seeds)
        n_nodes = int(np.prod(layout.shape))
        if self.schedule == "cooperative" and _cooperative_failed:
            self.schedule = "passes"
        times_out = np.empty((n_sources, n_nodes), dtype=dtype)
        predecessor_out = None
        if predecessors:
            predecessor_out = np.empty((n_sources, n_nodes), dtype=star.predecessor_dtype)
        relaxed = self._relaxed
        self._reset_counters()
        seconds = {"setup_s": 0.0, "passes_s": 0.0, "copy_s": 0.0, "launch_s": 0.0}
        passes_total = reads_total = 0
        for first in range(0, n_sources, batch):
            clock = time.perf_counter()
            group = seeds[first : first + batch]
            count = len(group)
            start = None
            if times is not None:
                start = (times[first : first + batch], predecessor[first : first + batch])
            first_pending = self._reset(group, start)
            if self.schedule == "phases":
                queue = self._phase_queue(first_pending)
            else:
                queue = self._pass_queue(first_pending)
            staged = self._staging.device  # (rebuilt where a batch brings more seeds)
            model = (
                self._slowness, staged["reach"], staged["length"], self._weights,
                self._times, self._predecessor,
            )  # fmt: skip
            arguments = (*model, *queue, relaxed, np.float64(self.delta))
            cuda.synchronize()
            seconds["setup_s"] += time.perf_counter() - clock
            clock = time.perf_counter()
            passes, reads = self._relax(arguments, seconds)
            passes_total += passes
            reads_total += reads
            seconds["passes_s"] += time.perf_counter() - clock
            clock = time.perf_counter()
            rows = slice(first, first + count)
            self._copy_times(times_out[rows])
            if predecessors:
                self._copy_predecessor(predecessor_out[rows])
            seconds["copy_s"] += time.perf_counter() - clock
        if stats is not None:
            counters = relaxed.copy_to_host()
            stats.update(
                **seconds,
                setup_model_s=self.setup_s,
                passes=passes_total,
                host_reads=reads_total,
                tiles=layout.n_blocks,
                block=layout.block,
                tiles_relaxed=int(counters[0]),
                inner_iterations=int(counters[1]),
                weights_evaluated=int(counters[3]),
                tiles_deferred=int(counters[4]),
                most_inner=int(counters[5]),
                delta=float(self.delta),
                schedule=self.schedule,
                walk=self.walk,
            )
        return times_out, predecessor_out

    def _reset(self, group, start) -> np.ndarray:
        """Put one batch's seeds (and starting bounds, if any) into the device state; the
        first tiles to relax: each tile's smallest seed time in its tile and halo."""
        layout, dtype = self.layout, self.dtype
        n_nodes = int(np.prod(layout.shape))
        n_padded = int(np.prod(layout.padded))
        first_pending = np.full(layout.n_blocks, np.inf)
        seed_real, seed_index, seed_time = [], [], []
        for s, (nodes, values) in enumerate(group):
            # Several seeds on one node keep the smallest time, as in the CPU solver.
            unique, lowest = checked_seeds(nodes, values, n_nodes, dtype)
            seed_real.append(s * n_nodes + unique)
            seed_index.append(s * n_padded + layout.padded_flat(unique))
            seed_time.append(lowest)
            np.minimum(first_pending, layout.least_reading(unique, lowest), out=first_pending)
        seed_real = np.concatenate(seed_real)
        seed_index = np.concatenate(seed_index)
        seed_time = np.concatenate(seed_time)
        self._reset_state()
        if start is not None:
            # Starting upper bounds (a decomposition tile's state): a seed replaces a bound
            # only where it is smaller, and then has no predecessor.
            count = len(group)
            bounds = np.asarray(start[0], dtype=dtype)
            old = bounds.reshape(-1)[seed_real]
            smaller = seed_time < old
            seed_index, seed_time = seed_index[smaller], seed_time[smaller]
            real = (count, *layout.shape)
            # Each start is uploaded whole before it is padded into the solver's buffers.
            check_device_memory(
                bounds.nbytes, f"the starting times of {count} source(s) on {bounds.size:,} nodes"
            )
            to_padded(layout, bounds.reshape(real), np.inf, self.batch, self._times)
            start_predecessor = np.asarray(start[1], dtype=self.star.predecessor_dtype)
            to_padded(layout, start_predecessor.reshape(real), -1, self.batch, self._predecessor)
        n_seeds = len(seed_index)
        if n_seeds > self._seed_room:
            room = max(n_seeds, 2 * self._seed_room)
            staged = Staging.nbytes(_staged(layout, self.star, dtype, room))
            check_device_memory(staged, f"room for {room:,} seeds")
            self._stage(room)
        self._staging.wait()  # the last batch's upload has read the host views
        host = self._staging.host
        host["seed_index"][:n_seeds] = seed_index
        host["seed_time"][:n_seeds] = seed_time
        if self._scatter is None:
            device = self._staging.device
            self._scatter = prepared_scatter(
                (self._times.reshape(-1), self._predecessor.reshape(-1)), device["seed_index"],
                (device["seed_time"], device["seed_predecessor"]),
            )  # fmt: skip
        self._n_seeds = n_seeds  # scattered once the staging is on the device
        return first_pending

    def _upload(self) -> None:
        """Send the staged state to the device and put the seeds in place."""
        self._staging.upload()
        self._scatter(self._n_seeds)

    def _pass_queue(self, first_pending: np.ndarray) -> tuple:
        """Device arrays of the passes schedules' update map, its first pass queued: node and
        tile pass stamps, then each tile's smallest pending time, queued flag and the queue
        (by pass parity), and the queue lengths and smallest pending times (rings of
        three). Uploads the staged state."""
        host = self._staging.host
        first_tiles = np.flatnonzero(np.isfinite(first_pending)).astype(np.int32)
        host["pending"][0] = first_pending
        host["pending"][1] = np.inf
        host["queue"][0, : len(first_tiles)] = first_tiles
        host["queue"][0, len(first_tiles) :] = 0
        host["queue"][1] = 0
        np.isfinite(host["pending"], out=host["queued"], casting="unsafe")  # see notify_pass
        host["counts"][:] = (len(first_tiles), 0, 0)
        host["lowest"][:] = (first_pending.min(initial=np.inf), np.inf, np.inf)
        self._upload()
        device = self._staging.device
        return (
            self._node_pass, self._tile_pass,
            *(device[name] for name in ("pending", "queued", "queue", "counts", "lowest")),
        )  # fmt: skip

    def _phase_queue(self, first_pending: np.ndarray) -> tuple:
        """Device arrays of the phases schedule, the first tiles in phase 0's far list
        (:func:`raygrid.kernels.cuda.tile_queue.first_phase`), after a stand-in for the node
        stamps it does not use and the tile grid (for its shape)."""
        self._upload()
        queue = tuple(cuda.to_device(a) for a in tile_queue.first_phase(first_pending))
        return (self._node_pass, self._tile_pass, *queue)

    def _relax(self, arguments, seconds: dict) -> tuple[int, int]:
        """Relax one batch by the solver's schedule: ``(passes or phases, host reads)``."""
        per_pass, persistent, phases = self._kernels
        if self.schedule == "cooperative":
            passes = _run_cooperative(persistent, self.layout, arguments, self._limit)
            if passes is not None:
                return passes, 1
            self.schedule = "passes"
        if self.schedule == "phases":
            return _run_phases(phases, self.layout, arguments, self._limit)
        # The pass launch, marshalled once per staging and band: every batch passes the
        # same arrays (a resident solver's batch paid ~0.2 ms to marshal 19 arguments).
        if self._pass_launch is None or self._pass_launch[0] != self.delta:
            # One block per tile: blocks beyond the queue's length exit at once. (A grid of
            # only as many blocks as the device holds at once, looping over the queue, made
            # whole calls 23-30 % slower in 2D and 10-13 % in 3D on an H200, launches being
            # cheap: benchmarks/results/gpu_ab_h200_c35b35f.md.)
            launch = prepared_launch(
                per_pass, self.layout.n_blocks, self.layout.threads, (*arguments, 0),
                variable=len(arguments),
            )  # fmt: skip
            self._pass_launch = (self.delta, launch)
        launch = self._pass_launch[1]
        return _run_passes(launch, self.layout, arguments, self._limit, seconds, self._snapshot)


def _staged(layout: PaddedLayout, star: Star, dtype: np.dtype, seeds: int) -> dict:
    """The arrays a batch stages (:meth:`PullSolver._stage`), as :class:`Staging` takes them."""
    n_tiles, n_forward = layout.n_blocks, star.forward.shape[0]
    return {
        "pending": ((2, n_tiles), np.float64),
        "queued": ((2, n_tiles), np.int32),
        "queue": ((2, n_tiles), np.int32),
        "counts": ((3,), np.int32),
        "lowest": ((3,), np.float64),
        "seed_index": ((seeds,), np.int64),
        "seed_time": ((seeds,), dtype),
        "seed_predecessor": ((seeds,), star.predecessor_dtype),
        "reach": ((n_forward,), np.float64),
        "length": ((n_forward,), np.float64),
    }


def pull_device_bytes(
    layout: PaddedLayout,
    star: Star,
    *,
    precomputed: bool = False,
    dtype: type = np.float64,
    batch: int = 1,
    schedule: str = "passes",
    seed_room: int | None = None,
) -> int:
    """Device memory a :class:`PullSolver` of ``layout`` holds (every array it keeps, as
    :meth:`PullSolver.__init__` allocates them), checked before it allocates any.

    Per padded node ``P``: the slowness (8 bytes), ``batch`` times and predecessors, a
    pass stamp (4, not for ``"phases"``) and, precomputed, half the star's weights; per
    real node: one source's times and predecessors on their way out; per tile: the update
    map's stamps and staged state (and, for ``"phases"``, the tile queue).
    """
    itemsize, predecessor = np.dtype(dtype).itemsize, star.predecessor_dtype.itemsize
    padded = int(np.prod(layout.padded, dtype=np.int64))
    nodes = int(np.prod(layout.shape, dtype=np.int64))
    weights = padded * star.forward.shape[0] if precomputed else 1
    stamps = 1 if schedule == "phases" else padded
    # A phases solve's tile queue (tile_queue.first_phase), sent with each batch: per tile
    # its pending time, state, near slot, two far slots and far mark.
    queue = 32 * (layout.n_blocks + 1) + 4 * tile_queue.CONTROL_SIZE + 16
    return (
        8 * padded
        + weights * itemsize
        + batch * padded * (itemsize + predecessor)
        + nodes * (itemsize + predecessor)
        + 4 * stamps
        + 4 * layout.n_blocks
        + 8 * 6  # the statistics' counters
        + Staging.nbytes(_staged(layout, star, np.dtype(dtype), seed_room or SEED_ROOM * batch))
        + (queue if schedule == "phases" else 0)
    )


def solve_pull(
    slowness: np.ndarray,
    spacing: np.ndarray,
    star: Star,
    seeds: list[tuple[np.ndarray, np.ndarray]],
    *,
    stats: dict | None = None,
    times: np.ndarray | None = None,
    predecessor: np.ndarray | None = None,
    predecessors: bool = True,
    **settings,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Traveltimes of several sources by tiled pull relaxation on the GPU: one
    :class:`PullSolver` (``settings``: its keyword arguments), used once.

    ``stats``, ``times``, ``predecessor`` and ``predecessors`` are
    :meth:`PullSolver.solve`'s, with ``setup_s`` counting the solver's construction too
    (``setup_model_s`` of it).
    """
    # Room for every seed at once (a decomposition tile's boundary can seed thousands of
    # nodes), counted with the solver's memory instead of grown mid-solve.
    room = sum(len(np.atleast_1d(nodes)) for nodes, _ in seeds)
    settings.setdefault("seed_room", max(room, SEED_ROOM * settings.get("batch", 1)))
    solver = PullSolver(slowness, spacing, star, **settings)
    out = solver.solve(
        seeds, stats=stats, times=times, predecessor=predecessor, predecessors=predecessors
    )
    if stats is not None:
        stats["setup_s"] += solver.setup_s
    return out


def _run_passes(
    launch, layout: PaddedLayout, arguments, limit: int, seconds: dict, snapshot
) -> tuple[int, int]:
    """Passes launched one by one by ``launch(pass)``, the queue's length read once per
    :data:`PASSES_PER_CHECK`; ``(passes, host reads)``.

    The read never drains the device: after each group of passes the queue's lengths are
    copied into ``snapshot`` (pinned host memory) in stream order, and the host looks at
    that copy only once :data:`READ_LAG` passes of the next group are queued behind it, so
    the GPU has work while the host waits and launches on. (A blocking read after the last
    pass of a group left the GPU idle for a launch, ~0.1-0.2 ms, once per group.) Passes
    launched after the queue emptied find no tile and exit; ``passes`` counts those that
    had work to do or were needed to see none was left, as before.
    """
    counts = arguments[-4]
    stream = cuda.default_stream()  # the stream every launch and copy here runs on
    copied = cuda.event()  # (the simulator takes no timing flag)
    passes = reads = 0
    read_at = None  # passes before the copy in flight
    while True:
        for k in range(PASSES_PER_CHECK):
            if k == READ_LAG and read_at is not None:
                copied.synchronize()
                reads += 1
                if snapshot[read_at % 3] == 0:
                    return read_at, reads
                if read_at >= limit:
                    raise RuntimeError("pull relaxation did not converge")  # cannot happen
            try:
                launched = time.perf_counter()
                launch(passes)
                seconds["launch_s"] += time.perf_counter() - launched
            except Exception as error:
                raise _launch_error(error, layout) from error
            passes += 1
        counts.copy_to_host(snapshot, stream=stream)
        copied.record(stream)
        read_at = passes


def _run_phases(phases, layout: PaddedLayout, arguments, limit: int):
    """Phases launched one by one (the far tiles promoted, then resident blocks taking
    queued tiles until none is queued or running), the far list's length read once per
    :data:`PHASES_PER_CHECK`; ``(phases, host reads)``."""
    queue = arguments[-9:-2]  # pending, state, ring, far lists, marks, control, bounds
    control = queue[5]
    relaxed, delta = arguments[-2:]
    try:
        # Specialized here, not by prepared_launch: its registers decide the cap.
        uncapped = phases
        phases = uncapped.specialize(*arguments, 0)
        if not simulating() and phases.get_regs_per_thread() > PHASES_REGISTERS:
            phases = register_capped(uncapped).specialize(*arguments, 0)
    except Exception as error:
        logger.warning("phases kernel unavailable (%s)", error)
        phases = None
    blocks = None if phases is None else _resident_grid(phases, layout, (*arguments, 0))
    if blocks is None:
        raise RuntimeError(
            f"the phases kernel for block {layout.block} did not compile or no block fits on "
            "the device (see the log); use schedule='passes'"
        )
    promote_arguments = (*queue, relaxed, delta, 0)
    promote = prepared_launch(
        tile_queue.promote_kernel(), max(-(-layout.n_blocks // 256), 1), 256,
        promote_arguments, variable=len(promote_arguments) - 1,
    )  # fmt: skip
    launch = prepared_launch(
        phases, blocks, layout.threads, (*arguments, 0), variable=len(arguments)
    )
    phase = reads = 0
    while True:
        for _ in range(PHASES_PER_CHECK):
            promote(phase)
            try:
                launch(phase)
            except Exception as error:
                raise _launch_error(error, layout) from error
            phase += 1
        reads += 1
        counters = control.copy_to_host()
        if counters[tile_queue.ERROR]:
            raise RuntimeError(
                "the phases schedule's tile queue stalled (a device-side wait ran past its "
                "bound); use schedule='passes'"
            )
        if counters[tile_queue.FAR_COUNT + phase % 2] == 0:
            return phase, reads
        if phase >= limit:
            raise RuntimeError("pull relaxation did not converge")  # cannot happen


def default_delta(slowness: np.ndarray, spacing: np.ndarray, layout: PaddedLayout) -> float:
    """The default band of :class:`PullSolver`: the time to cross :data:`DELTA_TILES` tiles
    (along their shortest side) at the model's median slowness.

    Large models give the median of about :data:`DELTA_SAMPLE` nodes, every ``step``-th,
    the step prime to the length of a plane so the sample covers every row and column:
    the full median of 1601^2 nodes took 14 ms, a quarter of the GPU solve. The band only
    orders the work, so any estimate gives the same times.
    """
    extents = [b * h for b, h, n in zip(layout.block, spacing, layout.shape) if n > 1]
    plane = layout.shape[1] * layout.shape[2]
    step = max(slowness.size // DELTA_SAMPLE, 1)
    while math.gcd(step, plane) > 1:
        step += 1
    flat = np.asarray(slowness).reshape(-1)[::step]
    finite = flat[np.isfinite(flat)]
    if not extents or not finite.size:
        return np.inf
    return float(DELTA_TILES * min(extents) * np.median(finite))


def _resident_grid(kernel, layout: PaddedLayout, arguments) -> int | None:
    """Blocks of ``kernel`` the device runs at once (at most one per tile), for the kernels
    whose blocks stay resident; ``None`` where it cannot be compiled or no block fits.

    The simulator runs blocks one after another: it gets three (or one per tile), so the
    tests see blocks that find nothing left to do.
    """
    if simulating():
        return min(3, layout.n_blocks)
    signature = tuple(numba.typeof(a) for a in arguments)
    try:
        compiled = kernel.compile(signature)
    except Exception as error:  # e.g. no cudadevrt to link a grid sync against
        logger.warning("kernel unavailable (%s)", error)
        return None
    blocks = min(compiled.max_cooperative_grid_blocks(layout.threads), layout.n_blocks)
    return blocks if blocks >= 1 else None


def _run_cooperative(persistent, layout: PaddedLayout, arguments, limit: int) -> int | None:
    """Every pass in one cooperative launch; the number of passes, or ``None`` where the
    device or driver cannot launch it (then the caller launches pass by pass)."""
    global _cooperative_failed
    relaxed = arguments[-2]
    # The simulator syncs a grid of one block only.
    blocks = 1 if simulating() else _resident_grid(persistent, layout, (*arguments, limit))
    if blocks is None:
        _cooperative_failed = True
        logger.warning("no cooperative launch of %s; launching pass by pass", layout.block)
        return None
    persistent[blocks, layout.threads](*arguments, limit)
    passes = int(relaxed.copy_to_host()[2])
    if passes >= limit:
        raise RuntimeError("pull relaxation did not converge")  # cannot happen
    return passes


def _launch_error(error: Exception, layout: PaddedLayout) -> Exception:
    """A clear error for a block the kernel's registers do not allow, else ``error``."""
    if "OUT_OF_RESOURCES" in str(error):
        return ValueError(
            f"block {layout.block} ({layout.threads} threads) needs more registers than a "
            "multiprocessor has for this kernel: use blocks of at most 512 threads"
        )
    return error
