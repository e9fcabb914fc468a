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

This module holds the kernels: one launch per pass; all passes inside one cooperative
kernel (a grid sync between passes); or, not yet measured on a GPU, no passes: resident
blocks take queued tiles as they finish, in phases of the band
(:mod:`raygrid.kernels.cuda.tile_queue`). :mod:`raygrid.kernels.cuda.pull_solver` keeps a
model on the device and launches them.
"""

from __future__ import annotations

from functools import cache

import numba
import numpy as np
from numba import cuda

from ..crossings import star_crossings
from ..layout import PaddedLayout, flat_steps
from ..rules import EXACT
from ..star import Star
from .device import product_rn, total_rn
from .tile_queue import end_phase, finish_tile, next_tile, notify_phase

__all__ = [
    "pull_kernels", "register_capped", "check_launch", "MAX_INNER", "PHASES_REGISTERS",
    "DEFAULT_BLOCK_2D", "DEFAULT_BLOCK_3D", "SHARED_BYTES", "shared_bytes",
    "check_settings", "WALKS", "CONSTANT_BYTES", "constant_bytes", "check_constants",
]  # fmt: skip

#: Tile shapes for real GPUs: 256 threads per block.
DEFAULT_BLOCK_2D = (16, 1, 16)
DEFAULT_BLOCK_3D = (4, 8, 8)
#: In-block iterations before a tile writes back even if not yet stable (it is then queued
#: again): a pass lasts as long as its slowest tile, so a tile still busy after a few
#: iterations yields (1601^2, radius 5 on an H100: 8 -> 62 ms, 64 -> 70 ms).
MAX_INNER = 8
#: How an in-block iteration walks a node's star (``pull_kernels``' ``walk``).
WALKS = ("scan", "rows")
#: Static shared memory a block may use (CUDA's limit without opting in to more).
SHARED_BYTES = 48 * 1024
#: Constant memory a module may hold (CUDA's limit on every GPU): the star's tables.
CONSTANT_BYTES = 64 * 1024


def shared_bytes(layout: PaddedLayout, batch: int, dtype) -> int:
    """Shared memory of one block: its slowness tile (float64), ``batch`` time tiles, a
    change stamp (int32) per tile node and one per tile row, the smallest new time on each
    of the 27 sides (float64) and a few scalars. (int16 node stamps, which avoid a 2-way
    bank conflict Nsight Compute counted on their loads, made the kernel 6-8 % slower on an
    H200: benchmarks/results/gpu_targets_h200_7eb8cdd.md.)"""
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


def constant_bytes(
    star: Star,
    tile: tuple[int, int, int],
    rule: int = EXACT,
    precomputed: bool = False,
    walk: str = "scan",
) -> int:
    """Constant memory the pull kernel's star tables take (:func:`pull_kernels` compiles
    them in), for a padded ``tile`` (the block plus its halo).

    As numba-cuda 0.30 and NVVM 13 lay them out for sm_90, measured on the PTX (2D radius
    12 and 13 with either walk, 2D radius 16 with precomputed weights, 3D radius 4: equal
    to the byte; ``tests/test_cuda_pull.py`` compares one on each compile): each offset's
    step in the tile and half-star index; the crossing tables with weights computed on the
    fly (their uint32 starts three times: one copy per use), the offsets three times with
    precomputed weights (to find an edge's stored weight); the rows walk's row tables.
    """
    n = len(star.offsets)
    size = n * (8 + 4)  # tile_step (int64), half (uint32)
    if precomputed:
        size += 3 * n * 3 * 8
    else:
        crossings = star_crossings(star, np.ones(3), rule, tile)
        size += 3 * 4 * crossings.start.size + 8 * (crossings.step.size + crossings.fraction.size)
    if walk == "rows":
        rows = len(np.unique(star.offsets[:, 0] * (2 * star.radius[1] + 1) + star.offsets[:, 1]))
        size += 3 * 4 * (rows + 1) + 8 * rows
    return int(size)


def check_constants(
    layout: PaddedLayout, star: Star, rule: int = EXACT, precomputed: bool = False,
    walk: str = "scan",
) -> None:  # fmt: skip
    """Raise ``ValueError`` where the star's tables exceed a module's constant memory
    (:data:`CONSTANT_BYTES`): the compiler refuses the kernel only at its first launch, on
    the device ("ptxas error: File uses too much global constant data"); 2D radius 14 and
    up with weights computed on the fly, each offset's crossing table growing with its
    length."""
    need = constant_bytes(star, layout.tile, rule, precomputed, walk)
    if need > CONSTANT_BYTES:
        weights = "precomputed weights" if precomputed else "weights computed on the fly"
        raise ValueError(
            f"radius {tuple(star.radius)} with {weights} needs {need} bytes of the GPU's "
            f"constant memory for its star's tables, more than {CONSTANT_BYTES}"
        )


def check_settings(max_inner: int, walk: str = "scan") -> None:
    """Raise ``ValueError`` for an in-block bound the int32 change stamps cannot count to,
    or a walk of the star no kernel has."""
    if not 1 <= max_inner <= np.iinfo(np.int32).max:
        raise ValueError(
            f"max_inner must be between 1 and {np.iinfo(np.int32).max}, got {max_inner}"
        )
    if walk not in WALKS:
        raise ValueError(f"walk must be one of {WALKS}, got {walk!r}")


def pull_kernels(
    block: tuple[int, int, int],
    star: Star,
    batch: int,
    dtype: type,
    precomputed: bool,
    max_inner: int = MAX_INNER,
    rule: int = EXACT,
    walk: str = "scan",
):
    """The pull kernels for one tile shape, star, batch and precision (compiled when first
    specialized or launched): ``(per_pass, persistent, phases)``.

    ``walk``: how an in-block iteration walks a node's star. ``"scan"`` (the default, the
    kernel the H100 and H200 timed): if any tile row within the radius changed since the
    last iteration, every offset, each tested against its neighbour's change stamp.
    ``"rows"`` (an experiment, not yet timed on a device): the star's offsets grouped by
    tile row (the star lists them row by row), a row's offsets tested only if that row
    changed, so a front crossing a few rows of the tile costs those rows' offsets, not the
    whole star's. The same offsets are pulled from in the same order either way (an
    unchanged row holds no changed neighbour), so the times and predecessors are the same
    (on a device, up to which of two equal times a node keeps: both walks see other
    threads' changes at moments that vary from run to run).
    On an H200 a pass lasts about as long as its slowest tile's 8 in-block iterations,
    each ~13 us at radius 5 for 80 offsets (benchmarks/results/gpu_ab_h200_c35b35f.md). In
    the simulator (a vertical gradient, 8 x 8 tiles) the rows walk tested 34 % fewer
    offsets an iteration at 24^2 radius 3 and 44 % fewer at 40^2 radius 5, the weights
    evaluated the same; whether that shortens an iteration on a device is what the A/B
    (``benchmarks/gpu_ab.py``, variants ``passes-rows``, ``passes-resident-rows``) is for.

    An in-block iteration clears one shared change flag, lets the threads that improved a
    time set it and reads it, with a barrier after each. Three flags used in turn with one
    barrier per iteration were no faster on an H200 (within 2 %, either way, at radius 3
    and 5 and in 3D; benchmarks/results/gpu_ab_h200_c35b35f.md), so the simpler kernel
    stays.

    ``per_pass`` relaxes, in one launch, every tile of the pass (block ``b`` takes tile
    ``b``); ``persistent`` runs all passes in one cooperative launch, each block taking the
    tiles ``b, b + grid, ...`` of every pass, with a grid sync between passes; ``phases``
    runs one phase of the band, its resident blocks taking queued tiles until none is queued
    or running (:mod:`raygrid.kernels.cuda.tile_queue`). All run the same tile relaxation
    (``phases`` without the pass stamps, below). Shapes of shared and local arrays must be
    compile-time constants on a real GPU, so each configuration gets its own kernels; the
    simulator would accept computed shapes and hide that. The star's offsets,
    their steps in the shared tile and their half-star indices are compile-time constants
    too (constant memory, and the compiler folds each step into an address offset where it
    unrolls the star loop): they depend only on the radius and the tile shape. So do the
    crossing tables' cells and length fractions (face parameters in node-index units, see
    :mod:`raygrid.kernels.crossings`), for the weight ``rule``: only the edges' lengths
    and the bounds' reach depend on the spacing, and stay arguments, so a new spacing
    does not compile new kernels.

    Work is spent only where something changed, which makes relaxing a tile again cheap:

    - in-block iteration ``i`` pulls only from nodes whose time changed in iteration
      ``i - 1`` or later (a change stamp per tile node in shared memory, tested offset by
      offset), and a node skips its whole star when no tile row within its radius changed
      (a stamp per row);
    - a tile relaxed again in a later pass starts from the nodes of its tile and halo that
      changed since it last ran (``node_pass``, the pass of each node's last write, against
      ``tile_pass``, the pass the tile last ran), not from all of them (passes schedules);
    - an edge whose lower bound (length x the tile's smallest slowness) cannot improve the
      node is skipped before its weight is read or computed, as in the CPU Dijkstra
      (:mod:`raygrid.kernels.bounds`).

    None of this changes the fixed point: a node skips only neighbours it has already
    pulled from at their present time, or edges that cannot win.
    """
    check_settings(max_inner, walk)
    tile = tuple(b + 2 * r for b, r in zip(block, star.radius))
    # Unit spacing: the cells and fractions do not depend on it (tested), the lengths do.
    crossings = star_crossings(star, np.ones(3), rule, tile)
    key = (
        star.offsets.tobytes(), star.half.tobytes(), star.is_forward.tobytes(),
        crossings.start.tobytes(), crossings.step.tobytes(), crossings.fraction.tobytes(),
    )  # fmt: skip
    return _pull_kernels(tuple(block), star.radius, key, batch, dtype, precomputed, max_inner, walk)


@cache
def _pull_kernels(block, radius, star_key, batch, dtype, precomputed, max_inner, walk):
    bz, by, bx = block
    rz, ry, rx = radius
    tz, ty, tx = bz + 2 * rz, by + 2 * ry, bx + 2 * rx
    tile_nodes = tz * ty * tx
    tile_rows = tz * ty
    threads = bz * by * bx
    time_type = numba.from_dtype(np.dtype(dtype))
    cast = np.float32 if np.dtype(dtype) == np.float32 else np.float64
    offsets = np.frombuffer(star_key[0], dtype=np.int64).reshape(-1, 3).copy()
    half = np.frombuffer(star_key[1], dtype=np.int64).astype(np.uint32)
    is_forward = np.frombuffer(star_key[2], dtype=np.bool_).astype(np.uint8)
    cross_start = np.frombuffer(star_key[3], dtype=np.int64).astype(np.uint32)
    cross_step = np.frombuffer(star_key[4], dtype=np.int64).copy()
    cross_fraction = np.frombuffer(star_key[5], dtype=np.float64).copy()
    tile_step = flat_steps(offsets, (tz, ty, tx))
    n_offsets = len(offsets)
    one = np.uint32(1)
    by_rows = walk == "rows"
    # The star's rows (dz, dy), in the star's order: the step from a node's tile row to the
    # row its neighbours through them lie in (offset k pulls from me - tile_step[k]), and
    # the row's offsets k in [row_first[i], row_first[i + 1]). forward_star lists offsets
    # row by row; the rows walk needs it (the scan does not).
    row_of = offsets[:, 0] * (2 * ry + 1) + offsets[:, 1]
    if by_rows and np.any(np.diff(row_of) < 0):
        raise ValueError("walk='rows' needs the star's offsets listed row by row")
    row_first = np.append(np.unique(row_of, return_index=True)[1], n_offsets).astype(np.uint32)
    row_step = -(offsets[row_first[:-1], 0] * ty + offsets[row_first[:-1], 1])
    n_rows = np.uint32(len(row_first) - 1)

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

    @cuda.jit(device=True, inline="always")
    def tile_weight(s_tile, length, k, j, u, me):
        # The weight of offset k (half-star index j) between tile nodes u and me: the CPU's
        # crossing table with steps in the tile's shape, the same sum in the same order
        # (raygrid.kernels.crossings).
        # Each product rounded on its own, as on the CPU: NVVM fused them into the sum, and
        # the weight into the time it was added to at batch 1 only (see product_rn).
        low = u if is_forward[k] else me
        total = 0.0
        e = cross_start[j]
        while e < cross_start[j + one]:
            total = total_rn(
                total, product_rn(s_tile[np.uint32(low + cross_step[e])], cross_fraction[e])
            )
            e = np.uint32(e + one)
        return product_rn(total, length[j])

    @cuda.jit(device=True, inline="always")
    def stored_weight(weights, k, j, z, y, x, py, px):
        # The same weight, precomputed: stored with the edge's lower node, for node (z, y,
        # x) of the padded grid (rows py, px).
        if is_forward[k]:
            z = z - offsets[k, 0]
            y = y - offsets[k, 1]
            x = x - offsets[k, 2]
        return weights[(z * py + y) * px + x, j]

    @cuda.jit(device=True, inline="always")
    def changed_row(row, my_row, since, row_changed):
        # The first of the star's rows from `row` on whose tile row changed since `since`
        # (walk="rows"), with its first offset; (n_rows, n_offsets) if none.
        while row < n_rows:
            if row_changed[np.uint32(my_row + row_step[row])] >= since:
                return row, row_first[row]
            row = np.uint32(row + one)
        return row, np.uint32(n_offsets)

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
            b, pass_id, slowness, reach, length,
            weights, times, predecessor, node_pass, tile_pass, worklist, relaxed,
            s_tile, t_tile, changed_at, row_changed, flag, floor, work, improved, side_min,
        ):  # fmt: skip
            # The queue travels as a tuple: CPython passes a call of 30 arguments or more as
            # *args, which Numba cannot inline.
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
            me = np.uint32((mz * ty + my) * tx + mx)
            _, py, px = slowness.shape
            gz, gy, gx = oz + mz, oy + my, ox + mx  # this node in the padded grid
            inner = 0
            again = 0
            evaluated = 0  # weights read or computed, for the statistics
            for inner in range(1, max_inner + 1):
                if tid == 0:
                    flag[0] = 0
                cuda.syncthreads()
                since = np.int32(inner - 1)
                near = False
                row, k = np.uint32(0), np.uint32(0)
                if by_rows:
                    row, k = changed_row(row, mz * ty + my, since, row_changed)
                    near = row < n_rows
                else:
                    for z in range(mz - rz, mz + rz + 1):
                        for y in range(my - ry, my + ry + 1):
                            if row_changed[z * ty + y] >= since:
                                near = True
                changed = False
                if near:
                    # Unsigned indices inside the tile: Numba wraps a signed index that might
                    # be negative, which cost every offset a 64-bit add and select.
                    if not by_rows:
                        k = np.uint32(0)
                    while k < n_offsets:
                        u = np.uint32(me - tile_step[k])
                        # Else u has not changed since this node last pulled from it.
                        if changed_at[u] >= since:
                            j = half[k]
                            bound = cast(tile_floor * reach[j])
                            w = -1.0  # read or computed at most once, used by every source
                            for s in range(batch):
                                tu = t_tile[s, u]
                                tv = t_tile[s, me]
                                if tu + bound < tv:
                                    if w < 0.0:
                                        evaluated += 1
                                        if precomputed:
                                            w = stored_weight(weights, k, j, gz, gy, gx, py, px)
                                        else:
                                            w = tile_weight(s_tile, length, k, j, u, me)
                                    candidate = tu + cast(w)  # rounded once, as on the CPU
                                    if candidate < tv:
                                        t_tile[s, me] = candidate
                                        improved[s] = k
                                        changed = True
                        k = np.uint32(k + one)  # (a sum of two uint32 is a uint64)
                        if by_rows and k == row_first[row + one]:
                            # The row's last offset: on to the next changed row.
                            row, k = changed_row(np.uint32(row + one), mz * ty + my, since,
                                                 row_changed)  # fmt: skip
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
                    times[s, gz, gy, gx] = t_tile[s, me]
                    predecessor[s, gz, gy, gx] = improved[s]
                    best = min(best, np.float64(t_tile[s, me]))
            if best < np.inf:
                if not concurrent:
                    node_pass[gz, gy, gx] = pass_id
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
            if concurrent and best < np.inf:
                # The times land before any neighbour is notified. Only a thread that wrote
                # has anything to publish, and a fence costs (it invalidates the SM's L1);
                # the notifying thread fences again itself (notify_phase).
                cuda.threadfence()
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
        length, weights,
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
                    length, weights,
                    times, predecessor, node_pass, tile_pass,
                    worklist, relaxed,
                    s_tile, t_tile, changed_at, row_changed, flag, floor, work, improved,
                    side_min,
                )  # fmt: skip

    def persistent(
        slowness, reach,
        length, weights,
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
                        length, weights, times, predecessor, node_pass, tile_pass,
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
        length, weights,
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
        rounds, stalled, seen = 0, 0, -1  # thread 0's poll counts (next_tile)
        while True:
            if cuda.threadIdx.x == 0:
                taken, rounds, stalled, seen = next_tile(
                    near, state, pending, control, rounds, stalled, seen
                )
                decision[0] = taken
            cuda.syncthreads()
            tile = decision[0]
            cuda.syncthreads()  # every thread has read the decision before the next one
            if tile == -2:
                break
            if tile >= 0:
                relax_in_phase(
                    tile, phase, slowness, reach,
                    length, weights,
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
    return cuda.jit(per_pass), cuda.jit(persistent), cuda.jit(phases)


#: Registers per thread that let two blocks of 256 threads share a multiprocessor.
PHASES_REGISTERS = 128


@cache
def register_capped(kernel):
    """``kernel`` compiled with at most :data:`PHASES_REGISTERS` registers per thread.

    ptxas 13.0 for sm_90 gives the ``phases`` kernel 125-128 registers per thread in 2D and
    151-165 in 3D at radius 2 (one block of 256 threads per SM where ``per_pass`` has two);
    capped at 128 the 3D kernel spills 76-88 bytes, and a cap on a kernel already within it
    spills 32-48 bytes for nothing. So the solver compiles uncapped and takes this only
    where the count is above the cap; whether spilling beats one block per SM is a guess
    from those counts, not a measurement.
    """
    return cuda.jit(kernel.py_func, max_registers=PHASES_REGISTERS)
