"""Pull relaxation over shared-memory tiles with an update map (the GPU tile solver).

One thread per node reads its neighbours' times and writes only its own time and
predecessor, so no atomics are needed and a time and its predecessor always agree
(Monsegny & Agudelo 2013, section 3). A thread block owns a tile of nodes and loads it, with
a halo of width ``radius``, into shared memory, then iterates there until the tile is stable
before writing back (Kanoksirirath, "in-block iteration").

The update map (Kanoksirirath) is a queue of tiles kept on the device: a tile that writes
queues the neighbours whose halo holds a written node, with the smallest time it wrote
there, and a pass visits only the queued tiles. Of those, it relaxes the ones whose pending
time lies within ``delta`` of the smallest pending time of all and queues the others again
(delta-stepping, Meyer & Sanders 2003, over tiles instead of nodes): a tile is relaxed once
the times reaching it are close to final, not every time they move.

Passes run as one launch each, with one read of the queue's length per batch of passes; or,
opt-in, inside one cooperative kernel (a grid sync between passes, convergence read on the
device); or, opt-in and not yet measured on a GPU, without passes: resident blocks take
queued tiles as they finish, in phases of the band (:mod:`raygrid.kernels.cuda.tile_queue`).
"""

from __future__ import annotations

import logging
import math
import time
from functools import cache

import numba
import numpy as np
from numba import cuda

from ..bounds import reach_lengths
from ..crossings import star_crossings
from ..layout import PaddedLayout
from ..rules import EXACT
from ..star import Star
from . import tile_queue
from .arrays import device_full, from_padded, scatter, to_padded
from .device import simulating
from .tile_queue import end_phase, finish_tile, notify_phase, take_tile
from .weights import precompute_weights_gpu

__all__ = ["solve_pull", "pull_kernels", "DEFAULT_BLOCK_2D", "DEFAULT_BLOCK_3D"]

logger = logging.getLogger("raygrid")

#: Tile shapes for real GPUs: 256 threads per block.
DEFAULT_BLOCK_2D = (16, 1, 16)
DEFAULT_BLOCK_3D = (4, 8, 8)
#: In-block iterations before a tile writes back even if not yet stable (it is then queued
#: again): a pass lasts as long as its slowest tile, so a tile still busy after a few
#: iterations yields (1601^2, radius 5 on an H100: 8 -> 62 ms, 64 -> 70 ms).
MAX_INNER = 8
#: Default width of the band of tiles relaxed in a pass, in tiles crossed at the median
#: slowness (see ``delta`` in :func:`solve_pull`).
DELTA_TILES = 4.0
#: Nodes whose median slowness sets the default band (a sample on larger models).
DELTA_SAMPLE = 1 << 16
#: Passes launched between two reads of the change counter (launch-per-pass mode).
PASSES_PER_CHECK = 8
#: Phases launched between two reads of the far list's length (phases schedule).
PHASES_PER_CHECK = 4
#: How passes are run: see ``schedule`` in :func:`solve_pull`.
SCHEDULES = ("passes", "cooperative", "phases")
#: Static shared memory a block may use (CUDA's limit without opting in to more).
SHARED_BYTES = 48 * 1024

#: Set once a cooperative launch failed in this process (e.g. no cudadevrt to link).
_cooperative_failed = False


def shared_bytes(layout: PaddedLayout, batch: int, dtype) -> int:
    """Shared memory of one block: its slowness tile (float64), ``batch`` time tiles, a
    change stamp (int32) per tile node and one per tile row, the smallest new time on each
    of the 27 sides (float64) and a few scalars."""
    tz, ty, tx = layout.tile
    nodes = tz * ty * tx
    return nodes * (8 + batch * np.dtype(dtype).itemsize + 4) + 4 * tz * ty + 27 * 8 + 44


def check_launch(layout: PaddedLayout, batch: int, dtype) -> None:
    """Raise ``ValueError`` for a configuration no GPU can launch, saying what to shrink."""
    if layout.threads > 1024:
        raise ValueError(f"block {layout.block} has {layout.threads} threads; at most 1024")
    need = shared_bytes(layout, batch, dtype)
    if need > SHARED_BYTES:
        raise ValueError(
            f"block {layout.block} with radius {layout.radius} and batch {batch} needs "
            f"{need} bytes of shared memory, more than {SHARED_BYTES}: use a smaller batch "
            "or block, or float32"
        )


def pull_kernels(
    block: tuple[int, int, int],
    star: Star,
    batch: int,
    dtype: type,
    precomputed: bool,
    max_inner: int = MAX_INNER,
):
    """The pull kernels for one tile shape, star, batch and precision (compiled on first
    launch): ``(per_pass, persistent, phases)``.

    ``per_pass`` relaxes, in one launch, every tile of the pass (block ``b`` takes tile
    ``b``); ``persistent`` runs all passes in one cooperative launch, each block taking the
    tiles ``b, b + grid, ...`` of every pass, with a grid sync between passes; ``phases``
    runs one phase of the band, its resident blocks taking queued tiles until none is queued
    or running (:mod:`raygrid.kernels.cuda.tile_queue`). All run the same tile relaxation
    (``phases`` without the pass stamps, below). Shapes of shared and local arrays must be
    compile-time constants on a real GPU, so each configuration gets its own kernels; the
    simulator would accept computed shapes and hide that (STYLE.md). The star's offsets,
    their steps in the shared tile and their half-star indices are compile-time constants
    too (constant memory, and the compiler folds each step into an address offset where it
    unrolls the star loop): they depend only on the radius and the tile shape, unlike the
    crossing tables, which depend on the spacing and stay arguments.

    Work is spent only where something changed, which makes relaxing a tile again cheap:

    - in-block iteration ``i`` pulls only from nodes whose time changed in iteration
      ``i - 1`` or later (a change stamp per tile node in shared memory), and a node skips
      its whole star when no tile row within its radius changed (a stamp per row);
    - a tile relaxed again in a later pass starts from the nodes of its tile and halo that
      changed since it last ran (``node_pass``, the pass of each node's last write, against
      ``tile_pass``, the pass the tile last ran), not from all of them (passes schedules);
    - an edge whose lower bound (length x the tile's smallest slowness) cannot improve the
      node is skipped before its weight is read or computed, as in the CPU Dijkstra
      (:mod:`raygrid.kernels.bounds`).

    None of this changes the fixed point: a node skips only neighbours it has already
    pulled from at their present time, or edges that cannot win.
    """
    key = (star.offsets.tobytes(), star.half.tobytes(), star.is_forward.tobytes())
    return _pull_kernels(tuple(block), star.radius, key, batch, dtype, precomputed, max_inner)


@cache
def _pull_kernels(block, radius, star_key, batch, dtype, precomputed, max_inner):
    bz, by, bx = block
    rz, ry, rx = radius
    tz, ty, tx = bz + 2 * rz, by + 2 * ry, bx + 2 * rx
    tile_nodes = tz * ty * tx
    tile_rows = tz * ty
    threads = bz * by * bx
    time_type = numba.from_dtype(np.dtype(dtype))
    cast = np.float32 if np.dtype(dtype) == np.float32 else np.float64
    offsets = np.frombuffer(star_key[0], dtype=np.int64).reshape(-1, 3).copy()
    half = np.frombuffer(star_key[1], dtype=np.int64).copy()
    is_forward = np.frombuffer(star_key[2], dtype=np.bool_).astype(np.uint8)
    tile_step = (offsets[:, 0] * ty + offsets[:, 1]) * tx + offsets[:, 2]
    n_offsets = len(offsets)

    @cuda.jit(device=True, inline="always")
    def clear_slot(pass_id, counts, lowest):
        # The queue length and smallest pending time live in rings of three: pass p reads
        # slot p % 3, fills slot (p + 1) % 3 and clears slot (p + 2) % 3, which pass p - 1
        # read and the host has no more use for (it reads the slot the last pass filled).
        counts[(pass_id + 2) % 3] = 0
        lowest[(pass_id + 2) % 3] = np.inf

    @cuda.jit(device=True, inline="always")
    def notify_pass(tile, value, pass_id, worklist):
        # Tile `tile` must pull again from a change whose smallest time is `value`: it joins
        # the next pass's queue once, and the next pass's threshold sees the value. The
        # integer flag decides who appends it: Numba's float atomic min returns the value
        # it read before its compare-and-swap loop, so two threads lowering the same entry
        # from infinity would both see infinity and queue the tile twice (two blocks would
        # then relax it at once; seen on an H100).
        pending, queued, queue, counts, lowest = worklist
        parity = (pass_id + 1) % 2
        cuda.atomic.min(pending, (parity, tile), value)
        cuda.atomic.min(lowest, (pass_id + 1) % 3, value)
        if cuda.atomic.exch(queued, (parity, tile), 1) == 0:
            slot = cuda.atomic.add(counts, (pass_id + 1) % 3, 1)
            queue[parity, slot] = tile

    def tile_relaxation(notify, concurrent):
        # The tile relaxation for a schedule's `notify`. A tile starts from the nodes that
        # changed since it last ran: a stamp per node (the pass of its last write) against
        # one per tile (the pass it last ran). `concurrent` (the phases schedule, whose
        # tiles run while their neighbours write): every node counts as changed, since a
        # write's stamp may land after its time does and a tile could load the new time
        # with the old stamp. (Keeping stamps for the tile's own nodes, which only it
        # writes, took the kernel from 128 to 156 registers per thread in ptxas 13.0 for
        # sm_90: one block of 256 threads per SM instead of two.)

        @cuda.jit(device=True, inline="always")
        def relax_tile(
            b, pass_id, slowness, reach, crossing,
            weights, times, predecessor, node_pass, tile_pass, worklist, relaxed,
            s_tile, t_tile, changed_at, row_changed, flag, floor, work, improved, side_min,
        ):  # fmt: skip
            # Tables and queue travel as tuples: CPython passes a call of 30 arguments or more
            # as *args, which Numba cannot inline.
            cross_start, cross_step, cross_fraction, cross_length = crossing
            tid = cuda.threadIdx.x
            nbz, nby, nbx = tile_pass.shape
            cz = b // (nby * nbx)
            cy = (b // nbx) % nby
            cx = b % nbx
            last = 0 if concurrent else tile_pass[cz, cy, cx]  # unused when concurrent
            # Padded index of the tile's first halo node: the interior starts `radius` later.
            oz = cz * bz
            oy = cy * by
            ox = cx * bx

            if tid == 0:
                floor[0] = np.inf
                work[0] = 0
            for side in range(tid, 27, threads):  # tests shrink blocks below 27 threads
                side_min[side] = np.inf
            for r in range(tid, tile_rows, threads):
                row_changed[r] = -2
            cuda.syncthreads()
            lowest_slowness = np.inf
            for i in range(tid, tile_nodes, threads):
                lz = i // (ty * tx)
                ly = (i // tx) % ty
                lx = i % tx
                value = slowness[oz + lz, oy + ly, ox + lx]
                s_tile[i] = value
                lowest_slowness = min(lowest_slowness, value)
                for s in range(batch):
                    t_tile[s, i] = times[s, oz + lz, oy + ly, ox + lx]
                # Pulled from already at its present time, unless it changed since this tile
                # last ran (or during that run: the pass is included).
                if concurrent or node_pass[oz + lz, oy + ly, ox + lx] >= last:
                    changed_at[i] = 0
                    row_changed[i // tx] = 0
                else:
                    changed_at[i] = -2
            for s in range(batch):
                improved[s] = -1
            cuda.atomic.min(floor, 0, lowest_slowness)
            cuda.syncthreads()
            if tid == 0:
                if not concurrent:
                    tile_pass[cz, cy, cx] = pass_id  # every thread has read `last`
                cuda.atomic.add(relaxed, 0, 1)
            tile_floor = floor[0]

            mz = tid // (by * bx) + rz
            my = (tid // bx) % by + ry
            mx = tid % bx + rx
            me = (mz * ty + my) * tx + mx
            pz, py, px = slowness.shape
            inner = 0
            again = 0
            evaluated = 0  # weights read or computed, for the statistics
            for inner in range(1, max_inner + 1):
                if tid == 0:
                    flag[0] = 0
                cuda.syncthreads()
                near = False
                for z in range(mz - rz, mz + rz + 1):
                    for y in range(my - ry, my + ry + 1):
                        if row_changed[z * ty + y] >= inner - 1:
                            near = True
                changed = False
                if near:
                    for k in range(n_offsets):
                        u = me - tile_step[k]
                        if changed_at[u] < inner - 1:
                            continue  # u has not changed since this node last pulled from it
                        j = half[k]
                        bound = cast(tile_floor * reach[j])
                        w = -1.0  # read or computed at most once, then used by every source
                        for s in range(batch):
                            tu = t_tile[s, u]
                            tv = t_tile[s, me]
                            if tu + bound < tv:
                                if w < 0.0:
                                    evaluated += 1
                                    if precomputed:
                                        if is_forward[k]:
                                            uz = mz - offsets[k, 0]
                                            uy = my - offsets[k, 1]
                                            ux = mx - offsets[k, 2]
                                            node = ((oz + uz) * py + oy + uy) * px + ox + ux
                                        else:
                                            node = ((oz + mz) * py + oy + my) * px + ox + mx
                                        w = weights[node, j]
                                    else:
                                        # The CPU's crossing table, with steps in the tile's
                                        # shape: the same sum in the same order
                                        # (raygrid.kernels.crossings).
                                        low = u if is_forward[k] else me
                                        total = 0.0
                                        for e in range(cross_start[j], cross_start[j + 1]):
                                            total += s_tile[low + cross_step[e]] * cross_fraction[e]
                                        w = total * cross_length[j]
                                candidate = tu + cast(w)  # rounded once, as on the CPU
                                if candidate < tv:
                                    t_tile[s, me] = candidate
                                    improved[s] = k
                                    changed = True
                if changed:
                    changed_at[me] = inner
                    row_changed[mz * ty + my] = inner
                    flag[0] = 1
                cuda.syncthreads()
                again = flag[0]
                cuda.syncthreads()  # every thread has read the flag before it is reset
                if again == 0:
                    break
            if tid == 0:
                cuda.atomic.add(relaxed, 1, inner)
                cuda.atomic.max(relaxed, 5, inner)

            # Write back, and collect for each side of the tile the smallest new time among the
            # written nodes that a neighbour's halo holds (index 13: the tile itself).
            best = np.inf
            for s in range(batch):
                if improved[s] >= 0:
                    times[s, oz + mz, oy + my, ox + mx] = t_tile[s, me]
                    predecessor[s, oz + mz, oy + my, ox + mx] = improved[s]
                    best = min(best, np.float64(t_tile[s, me]))
            if best < np.inf:
                if not concurrent:
                    node_pass[oz + mz, oy + my, ox + mx] = pass_id
                iz = mz - rz
                iy = my - ry
                ix = mx - rx
                for dz in range(-1, 2):
                    if (dz == -1 and iz >= rz) or (dz == 1 and iz < bz - rz):
                        continue  # not in that neighbour's halo
                    for dy in range(-1, 2):
                        if (dy == -1 and iy >= ry) or (dy == 1 and iy < by - ry):
                            continue
                        for dx in range(-1, 2):
                            if (dx == -1 and ix >= rx) or (dx == 1 and ix < bx - rx):
                                continue
                            cuda.atomic.min(side_min, (dz + 1) * 9 + (dy + 1) * 3 + dx + 1, best)
            cuda.atomic.add(work, 0, evaluated)
            if concurrent:
                cuda.threadfence()  # the times land before any neighbour is notified
            cuda.syncthreads()
            for side in range(tid, 27, threads):
                value = side_min[side]
                nz = cz + side // 9 - 1
                ny = cy + (side // 3) % 3 - 1
                nx = cx + side % 3 - 1
                # The tile itself only if it stopped at the bound before it was stable.
                if value < np.inf and (side != 13 or again != 0):
                    if 0 <= nz < nbz and 0 <= ny < nby and 0 <= nx < nbx:
                        notify((nz * nby + ny) * nbx + nx, value, pass_id, worklist)
            if tid == 0:
                cuda.atomic.add(relaxed, 3, work[0])
            cuda.syncthreads()  # the block may load its next tile into the same shared arrays

        return relax_tile

    @cuda.jit(device=True, inline="always")
    def pick_tile(i, pass_id, threshold, worklist, relaxed, decision):
        # The i-th queued tile of the pass, if its smallest pending time lies within the
        # band (`threshold`); else -1, and the tile is queued again for the next pass
        # (delta-stepping over tiles: a tile is relaxed once the times reaching it are
        # close to final, not every time they move). Every thread of the block returns the
        # same answer.
        pending, queued, queue, counts, lowest = worklist
        parity = pass_id % 2
        if cuda.threadIdx.x == 0:
            tile = queue[parity, i]
            value = pending[parity, tile]
            # Consumed: only this block touches this entry during the pass (notify writes
            # the other parity), so the next pass of this parity finds it clear.
            pending[parity, tile] = np.inf
            queued[parity, tile] = 0
            if value <= threshold:
                decision[0] = tile
            else:
                decision[0] = -1
                notify_pass(tile, value, pass_id, worklist)
                cuda.atomic.add(relaxed, 4, 1)
        cuda.syncthreads()
        tile = decision[0]
        cuda.syncthreads()  # every thread has read the decision before the next one
        return tile

    relax_in_pass = tile_relaxation(notify_pass, False)
    relax_in_phase = tile_relaxation(notify_phase, True)

    def per_pass(
        slowness, reach,
        cross_start, cross_step, cross_fraction, cross_length, weights,
        times, predecessor, node_pass, tile_pass, pending, queued, queue, counts, lowest,
        relaxed,
        delta, pass_id,
    ):  # fmt: skip
        s_tile = cuda.shared.array(tile_nodes, numba.float64)
        t_tile = cuda.shared.array((batch, tile_nodes), time_type)
        changed_at = cuda.shared.array(tile_nodes, numba.int32)
        row_changed = cuda.shared.array(tile_rows, numba.int32)
        flag = cuda.shared.array(1, numba.int32)
        floor = cuda.shared.array(1, numba.float64)
        work = cuda.shared.array(1, numba.int32)
        side_min = cuda.shared.array(27, numba.float64)
        decision = cuda.shared.array(1, numba.int32)
        improved = cuda.local.array(batch, numba.int32)
        worklist = (pending, queued, queue, counts, lowest)
        if cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0:
            clear_slot(pass_id, counts, lowest)
        # The pass's queued tiles, spread over the grid's blocks.
        threshold = lowest[pass_id % 3] + delta
        for i in range(cuda.blockIdx.x, counts[pass_id % 3], cuda.gridDim.x):
            tile = pick_tile(i, pass_id, threshold, worklist, relaxed, decision)
            if tile >= 0:
                relax_in_pass(
                    tile, pass_id, slowness, reach,
                    (cross_start, cross_step, cross_fraction, cross_length), weights,
                    times, predecessor, node_pass, tile_pass,
                    worklist, relaxed,
                    s_tile, t_tile, changed_at, row_changed, flag, floor, work, improved,
                    side_min,
                )  # fmt: skip

    def persistent(
        slowness, reach,
        cross_start, cross_step, cross_fraction, cross_length, weights,
        times, predecessor, node_pass, tile_pass, pending, queued, queue, counts, lowest,
        relaxed,
        delta, limit,
    ):  # fmt: skip
        s_tile = cuda.shared.array(tile_nodes, numba.float64)
        t_tile = cuda.shared.array((batch, tile_nodes), time_type)
        changed_at = cuda.shared.array(tile_nodes, numba.int32)
        row_changed = cuda.shared.array(tile_rows, numba.int32)
        flag = cuda.shared.array(1, numba.int32)
        floor = cuda.shared.array(1, numba.float64)
        work = cuda.shared.array(1, numba.int32)
        side_min = cuda.shared.array(27, numba.float64)
        decision = cuda.shared.array(1, numba.int32)
        improved = cuda.local.array(batch, numba.int32)
        worklist = (pending, queued, queue, counts, lowest)
        grid = cuda.cg.this_grid()
        pass_id = 0
        while pass_id < limit:
            if cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0:
                clear_slot(pass_id, counts, lowest)
            threshold = lowest[pass_id % 3] + delta
            for i in range(cuda.blockIdx.x, counts[pass_id % 3], cuda.gridDim.x):
                tile = pick_tile(i, pass_id, threshold, worklist, relaxed, decision)
                if tile >= 0:
                    relax_in_pass(
                        tile, pass_id, slowness, reach,
                        (cross_start, cross_step, cross_fraction, cross_length),
                        weights, times, predecessor, node_pass, tile_pass,
                        worklist, relaxed,
                        s_tile, t_tile, changed_at, row_changed, flag, floor, work,
                        improved, side_min,
                    )  # fmt: skip
            grid.sync()
            finished = counts[(pass_id + 1) % 3] == 0  # read by every thread after the sync
            pass_id += 1
            if finished:
                break
        if cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0:
            relaxed[2] = pass_id

    def phases(
        slowness, reach,
        cross_start, cross_step, cross_fraction, cross_length, weights,
        times, predecessor, node_pass, tile_pass, pending, state, near, far, far_mark,
        control, bounds, relaxed,
        delta, phase,
    ):  # fmt: skip
        s_tile = cuda.shared.array(tile_nodes, numba.float64)
        t_tile = cuda.shared.array((batch, tile_nodes), time_type)
        changed_at = cuda.shared.array(tile_nodes, numba.int32)
        row_changed = cuda.shared.array(tile_rows, numba.int32)
        flag = cuda.shared.array(1, numba.int32)
        floor = cuda.shared.array(1, numba.float64)
        work = cuda.shared.array(1, numba.int32)
        side_min = cuda.shared.array(27, numba.float64)
        decision = cuda.shared.array(1, numba.int32)
        improved = cuda.local.array(batch, numba.int32)
        threshold = bounds[phase % 2] + delta
        worklist = (pending, state, near, far, far_mark, control, bounds, threshold, relaxed)
        rounds = 0  # thread 0's rounds without work, for its back-off
        while True:
            if cuda.threadIdx.x == 0:
                taken = take_tile(near, state, pending, control, rounds)
                rounds = 0 if taken >= 0 else rounds + 1
                decision[0] = taken
            cuda.syncthreads()
            tile = decision[0]
            cuda.syncthreads()  # every thread has read the decision before the next one
            if tile == -2:
                break
            if tile >= 0:
                relax_in_phase(
                    tile, phase, slowness, reach,
                    (cross_start, cross_step, cross_fraction, cross_length), weights,
                    times, predecessor, node_pass, tile_pass,
                    worklist, relaxed,
                    s_tile, t_tile, changed_at, row_changed, flag, floor, work, improved,
                    side_min,
                )  # fmt: skip
                if cuda.threadIdx.x == 0:
                    finish_tile(tile, phase, worklist)
        if cuda.threadIdx.x == 0:
            end_phase(phase, control, bounds)

    # The pass body above is written out in each kernel on purpose: folding it into one
    # inlined device function gave the same PTX but ~1.5 s more compile time per kernel.
    # ptxas 13.0 for sm_90 gives `phases` 125-165 registers per thread by configuration
    # (3D radius 2: 165, so one block of 256 threads per SM where `per_pass` has two);
    # capped at 128 it spills 28-76 bytes. The cap is a guess from those counts, not a
    # measurement (the simulator's jit takes no such option).
    options = {} if simulating() else {"max_registers": 128}
    return cuda.jit(per_pass), cuda.jit(persistent), cuda.jit(phases, **options)


def solve_pull(
    slowness: np.ndarray,
    spacing: np.ndarray,
    star: Star,
    seeds: list[tuple[np.ndarray, np.ndarray]],
    *,
    rule: int = EXACT,
    precomputed: bool = False,
    dtype: type = np.float64,
    block: tuple[int, int, int] | None = None,
    batch: int = 1,
    max_inner: int = MAX_INNER,
    stats: dict | None = None,
    schedule: str = "passes",
    delta: float | None = None,
    times: np.ndarray | None = None,
    predecessor: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Traveltimes of several sources by tiled pull relaxation on the GPU.

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx), float64
    spacing : numpy.ndarray, shape (3,)
    star : Star
    seeds : list of (seed_nodes, seed_times)
        One entry per source: flat indices of its seeded nodes and their times.
    rule : int
        Weight rule (:data:`raygrid.kernels.EXACT` or :data:`raygrid.kernels.MEAN`).
    precomputed : bool
        Precompute every edge weight once on the device (``N * n_offsets / 2`` values) and
        read them; otherwise compute each weight in the kernel from the shared slowness tile.
    dtype : numpy dtype
        Precision of the times; weights are computed in float64 and rounded once to it.
    block : tuple of int, optional
        Tile shape ``(bz, by, bx)``; defaults to 256 threads. Each must be at least the
        radius along its axis (tests shrink it so small grids span many tiles).
    batch : int
        Sources relaxed together by one block: each weight computed is used ``batch`` times.
    max_inner : int
        Bound on the in-block iterations per pass.
    times, predecessor : numpy.ndarray, optional
        ``(n_sources, nz * ny * nx)`` starting upper bounds and their predecessors (a
        domain-decomposition tile's state); only the seeds' tiles start active, so the
        bounds must already be consistent away from the seeds, as a previous solve leaves
        them.
    stats : dict, optional
        Filled with ``passes``, ``host_reads`` (counter reads), ``tiles``,
        ``tiles_relaxed`` (tile relaxations, summed over passes and batches),
        ``inner_iterations`` (in-block iterations, summed over tile relaxations),
        ``weights_evaluated`` (edge weights computed or read: once per edge and pull, for
        all the sources of a batch), ``tiles_deferred`` (queued tiles left for a later
        pass by the ``delta`` band), ``most_inner`` (most in-block iterations of one tile
        relaxation), ``delta``,
        ``schedule`` (the one that ran: ``"cooperative"`` falls back to ``"passes"`` where
        the device cannot launch it), and wall seconds:
        ``setup_s`` (arrays to the device, weights), ``passes_s`` (the relaxation),
        ``copy_s`` (results back to the host) and ``launch_s`` (of ``passes_s``, host
        time spent launching passes); ``setup_model_s`` is the part of ``setup_s`` spent on
        the model (padded slowness, tables, weights, band), the rest on the batches' seeds
        and device state.
    schedule : {"passes", "cooperative", "phases"}
        ``"passes"``: one launch per pass. ``"cooperative"``: every pass in one cooperative
        launch; on an H100 this wins only where launches dominate (small grids: 64^2 in
        1.4 ms of passes instead of 3.3 ms) and loses on large ones, where only the
        co-resident blocks take the queue (1601^2, radius 5: 55 ms of passes instead of
        44-50 ms); see benchmarks/results. The simulator runs a cooperative grid of one
        block. ``"phases"``: no passes; resident blocks take queued tiles as they finish,
        one launch per phase of the band (:mod:`raygrid.kernels.cuda.tile_queue`); not yet
        timed on a GPU. For ``"phases"``, ``passes`` in ``stats`` counts phases.
    delta : float, optional
        Width (seconds) of the band of tiles relaxed in a pass: a queued tile is relaxed
        only if the smallest time that changed around it is within ``delta`` of the
        smallest over all queued tiles; the others wait. ``None``: :data:`DELTA_TILES`
        tiles' worth of the model's median slowness; ``numpy.inf``: every queued tile in
        every pass. Any value gives the same times; it sets how much work is repeated.

    Returns
    -------
    times, predecessor : numpy.ndarray, shape (n_sources, nz * ny * nx)
        Same conventions as :func:`raygrid.kernels.dijkstra`.

    Notes
    -----
    Pull relaxation, tiles and halos: Monsegny & Agudelo (2013), section 3. Update map and
    in-block iteration: Kanoksirirath. The times are the unique fixed point of
    ``t(v) = min(seed(v), min_u t(u) + w(u, v))`` in floating point, the same floats as the
    CPU Dijkstra's (DESIGN.md section 1); a real GPU may differ where the compiler contracts
    a multiply and an add into one FMA inside the weight.
    """
    clock = time.perf_counter()
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if block is None:
        default = DEFAULT_BLOCK_2D if slowness.shape[1] == 1 else DEFAULT_BLOCK_3D
        block = tuple(max(b, r) for b, r in zip(default, star.radius))  # tiles >= halo
    layout = PaddedLayout(slowness.shape, star.radius, tuple(block))
    dtype = np.dtype(dtype)
    check_launch(layout, batch, dtype)
    n_sources = len(seeds)
    n_nodes = slowness.size
    n_padded = int(np.prod(layout.padded))
    if schedule == "cooperative" and _cooperative_failed:
        schedule = "passes"

    slowness_padded = to_padded(layout, np.asarray(slowness, np.float64), np.inf)
    # The crossing tables with steps in the tile's shape: on-the-fly weights are the CPU's
    # table sums over the shared tile.
    crossings = star_crossings(star, spacing, rule, layout.tile)
    tables = (
        cuda.to_device(reach_lengths(crossings.length)),
        cuda.to_device(crossings.start),
        cuda.to_device(crossings.step),
        cuda.to_device(crossings.fraction),
        cuda.to_device(crossings.length),
    )
    if precomputed:
        weights = precompute_weights_gpu(slowness_padded, spacing, star.forward, rule, dtype)
    else:
        weights = cuda.to_device(np.empty((1, 1), dtype=dtype))
    per_pass, persistent, phases = pull_kernels(
        tuple(block), star, batch, dtype.type, precomputed, max_inner
    )
    # A bound no solve reaches (every pass lowers some time or relaxes the lowest queued
    # tile): a safety net, not a setting.
    limit = 64 * layout.n_blocks * max_inner + 1024
    if delta is None:
        delta = default_delta(slowness, spacing, layout)

    times_out = np.empty((n_sources, n_nodes), dtype=dtype)
    predecessor_out = np.empty((n_sources, n_nodes), dtype=star.predecessor_dtype)
    passes_total = 0
    reads_total = 0
    # Tile relaxations, in-block iterations, passes of the last cooperative launch, weights
    # read or computed, tiles deferred, most in-block iterations of one relaxation.
    relaxed = cuda.to_device(np.zeros(6, dtype=np.int64))
    # The model's share of the setup, apart from each batch's seeds and state (synchronized
    # here so the split is real; a few microseconds).
    cuda.synchronize()
    model_s = time.perf_counter() - clock
    seconds = {"setup_s": 0.0, "passes_s": 0.0, "copy_s": 0.0, "launch_s": 0.0}
    for first in range(0, n_sources, batch):
        group = seeds[first : first + batch]
        count = len(group)
        # The first tiles to relax: every tile whose tile and halo hold a seed, keyed by the
        # smallest seed time it holds.
        first_pending = np.full(layout.n_blocks, np.inf)
        seed_real, seed_index, seed_time = [], [], []
        for s, (nodes, values) in enumerate(group):
            nodes = np.asarray(nodes, dtype=np.int64)
            values = np.asarray(values, dtype=dtype)
            # Several seeds on one node keep the smallest time, as in the CPU solver.
            unique, where = np.unique(nodes, return_inverse=True)
            lowest = np.full(len(unique), np.inf, dtype=dtype)
            np.minimum.at(lowest, where, values)
            seed_real.append(s * n_nodes + unique)
            seed_index.append(s * n_padded + layout.padded_flat(unique))
            seed_time.append(lowest)
            holder, tile = layout.tiles_reading(unique)
            np.minimum.at(first_pending, tile, lowest[holder].astype(np.float64))
        seed_real = np.concatenate(seed_real)
        seed_index = np.concatenate(seed_index)
        seed_time = np.concatenate(seed_time)
        if times is None:
            times_device = device_full((batch, *layout.padded), np.inf, dtype)
            predecessor_device = device_full((batch, *layout.padded), -1, star.predecessor_dtype)
        else:
            # Starting upper bounds (a decomposition tile's state): a seed replaces a bound
            # only where it is smaller, and then has no predecessor.
            start = np.asarray(times[first : first + batch], dtype=dtype)
            start_predecessor = np.asarray(predecessor[first : first + batch])
            old = start.reshape(-1)[seed_real]
            smaller = seed_time < old
            seed_index, seed_time = seed_index[smaller], seed_time[smaller]
            times_device = to_padded(layout, start.reshape(count, *slowness.shape), np.inf, batch)
            predecessor_device = to_padded(
                layout, start_predecessor.reshape(count, *slowness.shape), -1, batch
            )
        scatter(times_device.reshape(-1), seed_index, seed_time)
        scatter(predecessor_device.reshape(-1), seed_index,
                np.full(len(seed_index), -1, dtype=star.predecessor_dtype))  # fmt: skip
        model = (slowness_padded, *tables, weights, times_device, predecessor_device)
        if schedule == "phases":
            queue = _phase_queue(layout, first_pending)
        else:
            queue = _pass_queue(layout, first_pending)
        arguments = (*model, *queue, relaxed, np.float64(delta))
        cuda.synchronize()
        seconds["setup_s"] += time.perf_counter() - clock
        clock = time.perf_counter()

        if schedule == "cooperative":
            passes = _run_cooperative(persistent, layout, arguments, limit)
            if passes is None:
                schedule = "passes"
            else:
                reads_total += 1
        if schedule == "phases":
            passes, reads = _run_phases(phases, layout, arguments, limit)
            reads_total += reads
        elif schedule == "passes":
            passes, reads = _run_passes(per_pass, layout, arguments, limit, seconds)
            reads_total += reads
        passes_total += passes
        seconds["passes_s"] += time.perf_counter() - clock
        clock = time.perf_counter()
        from_padded(layout, times_device, times_out[first : first + count])
        from_padded(layout, predecessor_device, predecessor_out[first : first + count])
        seconds["copy_s"] += time.perf_counter() - clock
        clock = time.perf_counter()
    if stats is not None:
        counters = relaxed.copy_to_host()
        stats.update(
            **seconds,
            setup_model_s=model_s,
            passes=passes_total,
            host_reads=reads_total,
            tiles=layout.n_blocks,
            tiles_relaxed=int(counters[0]),
            inner_iterations=int(counters[1]),
            weights_evaluated=int(counters[3]),
            tiles_deferred=int(counters[4]),
            most_inner=int(counters[5]),
            delta=float(delta),
            schedule=schedule,
        )
    return times_out, predecessor_out


def _pass_queue(layout: PaddedLayout, first_pending: np.ndarray) -> tuple:
    """Device arrays of the passes schedules' update map, its first pass queued: node and
    tile pass stamps, then each tile's smallest pending time, queued flag and the queue
    (by pass parity), and the queue lengths and smallest pending times (rings of three)."""
    first_tiles = np.flatnonzero(np.isfinite(first_pending)).astype(np.int32)
    pending = np.full((2, layout.n_blocks), np.inf)
    pending[0] = first_pending
    queue = np.zeros((2, layout.n_blocks), dtype=np.int32)
    queue[0, : len(first_tiles)] = first_tiles
    queued_flags = np.isfinite(pending).astype(np.int32)  # see notify_pass
    counts = np.array([len(first_tiles), 0, 0], dtype=np.int32)
    lowest = np.array([first_pending.min(initial=np.inf), np.inf, np.inf])
    # Pass of each node's last write and of each tile's last run (-1: never), so a tile
    # run again re-pulls only from what changed since.
    node_pass = device_full(layout.padded, -1, np.int32)
    tile_pass = device_full(layout.blocks, -1, np.int32)
    return (
        node_pass, tile_pass, cuda.to_device(pending), cuda.to_device(queued_flags),
        cuda.to_device(queue), cuda.to_device(counts), cuda.to_device(lowest),
    )  # fmt: skip


def _phase_queue(layout: PaddedLayout, first_pending: np.ndarray) -> tuple:
    """Device arrays of the phases schedule, the first tiles in phase 0's far list
    (:func:`raygrid.kernels.cuda.tile_queue.first_phase`), after a stand-in for the node
    stamps it does not use and the tile grid (for its shape)."""
    queue = tuple(cuda.to_device(a) for a in tile_queue.first_phase(first_pending))
    return (device_full((1, 1, 1), -1, np.int32), device_full(layout.blocks, -1, np.int32), *queue)


def _run_passes(per_pass, layout: PaddedLayout, arguments, limit: int, seconds: dict):
    """Passes launched one by one, the queue's length read once per
    :data:`PASSES_PER_CHECK`; ``(passes, host reads)``."""
    launch = per_pass[layout.n_blocks, layout.threads]
    counts = arguments[-4]
    passes = reads = 0
    while True:
        for _ in range(PASSES_PER_CHECK):
            try:
                launched = time.perf_counter()
                # One block per tile: blocks beyond the queue's length exit at once. (A grid
                # of only as many blocks as the device holds at once, looping over the
                # queue, was no faster.)
                launch(*arguments, passes)
                seconds["launch_s"] += time.perf_counter() - launched
            except Exception as error:
                raise _launch_error(error, layout) from error
            passes += 1
        reads += 1
        if counts.copy_to_host()[passes % 3] == 0:
            return passes, reads
        if passes >= limit:
            raise RuntimeError("pull relaxation did not converge")  # cannot happen


def _run_phases(phases, layout: PaddedLayout, arguments, limit: int):
    """Phases launched one by one (the far tiles promoted, then resident blocks taking
    queued tiles until none is queued or running), the far list's length read once per
    :data:`PHASES_PER_CHECK`; ``(phases, host reads)``."""
    queue = arguments[11:18]  # pending, state, ring, far lists, marks, control, bounds
    control = queue[5]
    relaxed, delta = arguments[-2:]
    blocks = _resident_grid(phases, layout, (*arguments, 0))
    if blocks is None:
        raise RuntimeError(
            f"the phases kernel for block {layout.block} did not compile or no block fits on "
            "the device (see the log); use schedule='passes'"
        )
    promote = tile_queue.promote_kernel()[max(-(-layout.n_blocks // 256), 1), 256]
    launch = phases[blocks, layout.threads]
    phase = reads = 0
    while True:
        for _ in range(PHASES_PER_CHECK):
            promote(*queue, relaxed, delta, phase)
            try:
                launch(*arguments, phase)
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
    """The default band of :func:`solve_pull`: the time to cross :data:`DELTA_TILES` tiles
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
