"""Pull relaxation over shared-memory tiles with an update map (the GPU tile solver).

One thread per node reads its neighbours' times and writes only its own time and
predecessor, so no atomics are needed and a time and its predecessor always agree
(Monsegny & Agudelo 2013, section 3). A thread block owns a tile of nodes and loads it, with
a halo of width ``radius``, into shared memory, then iterates there until the tile is stable
before writing back (Kanoksirirath, "in-block iteration"). An update map keeps one stamp per
tile; only tiles whose neighbourhood changed in the last pass are launched, from a list
compacted on the device, and the host reads one counter per batch of passes.
"""

from __future__ import annotations

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
from .weights import precompute_weights_gpu

__all__ = ["solve_pull", "pull_kernel", "compact_kernel", "DEFAULT_BLOCK_2D", "DEFAULT_BLOCK_3D"]

#: Tile shapes for real GPUs: 256 threads per block.
DEFAULT_BLOCK_2D = (16, 1, 16)
DEFAULT_BLOCK_3D = (4, 8, 8)
#: In-block iterations before a tile writes back even if not yet stable.
MAX_INNER = 64
#: Passes launched between two reads of the active-tile counter.
PASSES_PER_CHECK = 8
#: Static shared memory a block may use (CUDA's limit without opting in to more).
SHARED_BYTES = 48 * 1024


def shared_bytes(layout: PaddedLayout, batch: int, dtype) -> int:
    """Shared memory of one block: its slowness tile (float64), ``batch`` time tiles and a
    change stamp (int32) per tile node."""
    nodes = int(np.prod(layout.tile))
    return nodes * (8 + batch * np.dtype(dtype).itemsize + 4) + 16


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


@cache
def pull_kernel(
    block: tuple[int, int, int],
    radius: tuple[int, int, int],
    batch: int,
    dtype: type,
    precomputed: bool,
    max_inner: int = MAX_INNER,
):
    """Compile-on-first-launch pull kernel for one tile shape, radius, batch and precision.

    Shapes of shared and local arrays must be compile-time constants on a real GPU, so each
    configuration gets its own kernel; the simulator would accept computed shapes and hide
    that (STYLE.md).

    Work is spent only where something changed, which makes re-relaxing a tile cheap:

    - in-block iteration ``i`` pulls only from nodes whose time changed in iteration ``i - 1``
      or later (a change stamp per tile node in shared memory);
    - a tile relaxed again in a later pass starts from the nodes of its tile and halo that
      changed since it last ran (``node_pass``, the pass of each node's last write, against
      ``tile_pass``, the pass the tile last ran), not from all of them;
    - an edge whose lower bound (length x the tile's smallest slowness) cannot improve the
      node is skipped before its weight is read or computed, as in the CPU Dijkstra
      (:mod:`raygrid.kernels.bounds`).

    None of this changes the fixed point: a node's pull skips only neighbours it has already
    pulled from at their current time, or edges that cannot win.
    """
    bz, by, bx = block
    rz, ry, rx = radius
    tz, ty, tx = bz + 2 * rz, by + 2 * ry, bx + 2 * rx
    tile_nodes = tz * ty * tx
    threads = bz * by * bx
    time_type = numba.from_dtype(np.dtype(dtype))
    cast = np.float32 if np.dtype(dtype) == np.float32 else np.float64

    def relax(
        slowness, offsets, tile_step, half, is_forward, reach,
        cross_start, cross_step, cross_fraction, cross_length, weights,
        times, predecessor, node_pass, tile_pass, active, counts, stamps, pass_id, relaxed,
    ):  # fmt: skip
        s_tile = cuda.shared.array(tile_nodes, numba.float64)
        t_tile = cuda.shared.array((batch, tile_nodes), time_type)
        # Inner iteration of each tile node's last change: 0 = changed before this run.
        changed_at = cuda.shared.array(tile_nodes, numba.int32)
        flag = cuda.shared.array(1, numba.int32)
        floor = cuda.shared.array(1, numba.float64)
        improved = cuda.local.array(batch, numba.int32)

        tid = cuda.threadIdx.x
        slot = cuda.blockIdx.x
        parity = pass_id % 2
        if slot == 0 and tid == 0:
            counts[1 - parity] = 0  # the next compaction counts from zero
            relaxed[0] += counts[parity]  # tiles relaxed, for the statistics
        if slot >= counts[parity]:
            return  # inactive this pass: the whole block leaves before any barrier
        nbz, nby, nbx = stamps.shape
        b = active[parity, slot]
        cz = b // (nby * nbx)
        cy = (b // nbx) % nby
        cx = b % nbx
        last = tile_pass[cz, cy, cx]
        # Padded index of the tile's first halo node: the interior starts `radius` later.
        oz = cz * bz
        oy = cy * by
        ox = cx * bx

        if tid == 0:
            floor[0] = np.inf
        cuda.syncthreads()
        lowest = np.inf
        for i in range(tid, tile_nodes, threads):
            lz = i // (ty * tx)
            ly = (i // tx) % ty
            lx = i % tx
            value = slowness[oz + lz, oy + ly, ox + lx]
            s_tile[i] = value
            lowest = min(lowest, value)
            for s in range(batch):
                t_tile[s, i] = times[s, oz + lz, oy + ly, ox + lx]
            # Pulled from already at its present time, unless it changed since this tile
            # last ran (or during that run: the pass is included).
            changed_at[i] = 0 if node_pass[oz + lz, oy + ly, ox + lx] >= last else -2
        for s in range(batch):
            improved[s] = -1
        cuda.atomic.min(floor, 0, lowest)
        cuda.syncthreads()
        if tid == 0:
            tile_pass[cz, cy, cx] = pass_id  # every thread has read `last`
        tile_floor = floor[0]

        mz = tid // (by * bx) + rz
        my = (tid // bx) % by + ry
        mx = tid % bx + rx
        me = (mz * ty + my) * tx + mx
        pz, py, px = slowness.shape
        for inner in range(1, max_inner + 1):
            if tid == 0:
                flag[0] = 0
            cuda.syncthreads()
            changed = False
            for k in range(offsets.shape[0]):
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
                                # The CPU's crossing table, with steps in the tile's shape:
                                # the same sum in the same order (raygrid.kernels.crossings).
                                low = u if is_forward[k] else me
                                total = 0.0
                                for e in range(cross_start[j], cross_start[j + 1]):
                                    total += s_tile[low + cross_step[e]] * cross_fraction[e]
                                w = total * cross_length[j]
                        candidate = tu + cast(w)  # rounded once to the precision, as on the CPU
                        if candidate < tv:
                            t_tile[s, me] = candidate
                            improved[s] = k
                            changed = True
            if changed:
                changed_at[me] = inner
                flag[0] = 1
            cuda.syncthreads()
            again = flag[0]
            cuda.syncthreads()  # every thread has read the flag before it is reset
            if again == 0:
                break

        wrote = False
        for s in range(batch):
            if improved[s] >= 0:
                times[s, oz + mz, oy + my, ox + mx] = t_tile[s, me]
                predecessor[s, oz + mz, oy + my, ox + mx] = improved[s]
                wrote = True
        if wrote:
            node_pass[oz + mz, oy + my, ox + mx] = pass_id
            stamps[cz, cy, cx] = pass_id + 1  # every writer stores the same value

    return cuda.jit(relax)


@cache
def compact_kernel():
    """Build the next pass's active list: tiles whose 3x3(x3) neighbourhood changed.

    A halo is at most one tile wide (tiles are at least the radius), so a tile can only be
    improved through the tiles next to it. The list order depends on atomics; the result does
    not, because the fixed point of the relaxation is unique (DESIGN.md section 1).
    """

    def compact(stamps, pass_id, active, counts):
        nbz, nby, nbx = stamps.shape
        b = cuda.grid(1)
        if b >= nbz * nby * nbx:
            return
        cz = b // (nby * nbx)
        cy = (b // nbx) % nby
        cx = b % nbx
        wanted = pass_id + 1
        hit = False
        for dz in range(-1, 2):
            for dy in range(-1, 2):
                for dx in range(-1, 2):
                    z = cz + dz
                    y = cy + dy
                    x = cx + dx
                    if 0 <= z < nbz and 0 <= y < nby and 0 <= x < nbx:
                        if stamps[z, y, x] == wanted:
                            hit = True
        if hit:
            parity = (pass_id + 1) % 2
            slot = cuda.atomic.add(counts, parity, 1)
            active[parity, slot] = b

    return cuda.jit(compact)


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
        Filled with ``passes``, ``host_reads`` (counter reads), ``tiles`` and
        ``tiles_relaxed`` (tile relaxations launched, summed over passes and batches), and
        wall seconds: ``setup_s`` (arrays to the device, weights), ``passes_s`` (the
        relaxation) and ``copy_s`` (results back to the host).

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
    if block is None:
        default = DEFAULT_BLOCK_2D if slowness.shape[1] == 1 else DEFAULT_BLOCK_3D
        block = tuple(max(b, r) for b, r in zip(default, star.radius))  # tiles >= halo
    layout = PaddedLayout(slowness.shape, star.radius, tuple(block))
    dtype = np.dtype(dtype)
    check_launch(layout, batch, dtype)
    n_sources = len(seeds)
    n_nodes = slowness.size

    slowness_padded = cuda.to_device(layout.pad(np.asarray(slowness, np.float64), np.inf))
    offsets = cuda.to_device(star.offsets)
    # Flat step of each offset inside the shared tile, and the crossing tables with steps in
    # the tile's shape: on-the-fly weights are the CPU's table sums over the shared tile.
    tz, ty, tx = layout.tile
    tile_step = cuda.to_device(
        (star.offsets[:, 0] * ty + star.offsets[:, 1]) * tx + star.offsets[:, 2]
    )

    crossings = star_crossings(star, spacing, rule, layout.tile)
    cross_start = cuda.to_device(crossings.start)
    cross_step = cuda.to_device(crossings.step)
    cross_fraction = cuda.to_device(crossings.fraction)
    cross_length = cuda.to_device(crossings.length)
    reach = cuda.to_device(reach_lengths(crossings.length))
    half = cuda.to_device(star.half)
    is_forward = cuda.to_device(star.is_forward.astype(np.uint8))
    if precomputed:
        weights = precompute_weights_gpu(slowness_padded, spacing, star.forward, rule, dtype)
    else:
        weights = cuda.to_device(np.empty((1, 1), dtype=dtype))
    # Configured once: every pass launches the same grids (inactive tiles leave at once).
    relax = pull_kernel(tuple(block), star.radius, batch, dtype.type, precomputed, max_inner)[
        layout.n_blocks, layout.threads
    ]
    compact_threads = 128
    compact = compact_kernel()[-(-layout.n_blocks // compact_threads), compact_threads]

    times_out = np.empty((n_sources, n_nodes), dtype=dtype)
    predecessor_out = np.empty((n_sources, n_nodes), dtype=star.predecessor_dtype)
    passes_total = 0
    reads_total = 0
    relaxed = cuda.to_device(np.zeros(1, dtype=np.int64))
    seconds = {"setup_s": 0.0, "passes_s": 0.0, "copy_s": 0.0}
    for first in range(0, n_sources, batch):
        group = seeds[first : first + batch]
        start = np.full((batch, n_nodes), np.inf, dtype=dtype)
        start_predecessor = np.full((batch, n_nodes), -1, dtype=star.predecessor_dtype)
        if times is not None:
            start[: len(group)] = times[first : first + batch]
        if predecessor is not None:
            start_predecessor[: len(group)] = predecessor[first : first + batch]
        stamps = np.full(layout.blocks, -1, dtype=np.int32)
        for s, (nodes, values) in enumerate(group):
            nodes = np.asarray(nodes, dtype=np.int64)
            # Several seeds on one node keep the smallest time, as in the CPU solver.
            improved = np.asarray(values, dtype=dtype) < start[s, nodes]
            start_predecessor[s, nodes[improved]] = -1
            np.minimum.at(start[s], nodes, np.asarray(values, dtype=dtype))
            stamps.reshape(-1)[layout.block_of(nodes)] = 0  # seed tiles start "changed"
        times_device = cuda.to_device(layout.pad(start.reshape((batch, *slowness.shape)), np.inf))
        predecessor_device = cuda.to_device(
            layout.pad(start_predecessor.reshape((batch, *slowness.shape)), -1)
        )
        stamps_device = cuda.to_device(stamps)
        # Pass of each node's last write and of each tile's last run (-1: never), so a tile
        # run again re-pulls only from what changed since.
        node_pass = cuda.to_device(np.full(layout.padded, -1, dtype=np.int32))
        tile_pass = cuda.to_device(np.full(layout.blocks, -1, dtype=np.int32))
        active = cuda.to_device(np.zeros((2, layout.n_blocks), dtype=np.int32))
        counts = cuda.to_device(np.zeros(2, dtype=np.int32))

        compact(stamps_device, -1, active, counts)
        cuda.synchronize()
        seconds["setup_s"] += time.perf_counter() - clock
        clock = time.perf_counter()
        pass_id = 0
        while True:
            for _ in range(PASSES_PER_CHECK):
                relax(
                    slowness_padded, offsets, tile_step, half, is_forward, reach,
                    cross_start, cross_step, cross_fraction, cross_length, weights,
                    times_device, predecessor_device, node_pass, tile_pass, active, counts,
                    stamps_device, pass_id, relaxed,
                )  # fmt: skip
                compact(stamps_device, pass_id, active, counts)
                pass_id += 1
            reads_total += 1
            if counts.copy_to_host()[pass_id % 2] == 0:
                break
            if pass_id > 4 * layout.n_blocks * MAX_INNER + 64:
                raise RuntimeError("pull relaxation did not converge")  # cannot happen
        passes_total += pass_id
        seconds["passes_s"] += time.perf_counter() - clock
        clock = time.perf_counter()
        count = len(group)
        times_out[first : first + count] = layout.unpad(times_device.copy_to_host())[
            :count
        ].reshape(count, n_nodes)
        predecessor_out[first : first + count] = layout.unpad(predecessor_device.copy_to_host())[
            :count
        ].reshape(count, n_nodes)
        seconds["copy_s"] += time.perf_counter() - clock
        clock = time.perf_counter()
    if stats is not None:
        stats.update(
            **seconds,
            passes=passes_total,
            host_reads=reads_total,
            tiles=layout.n_blocks,
            tiles_relaxed=int(relaxed.copy_to_host()[0]),
        )
    return times_out, predecessor_out
