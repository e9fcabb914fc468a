"""CPU tile solver: multi-seeded Dijkstra (4-ary indexed heap) on the Moser grid graph (Numba).

This is the sequential reference of docs/method.md section 1 and the CPU "tile solver" of
section 2: given slownesses, seeded nodes with finite times and a forward star, return every
node's time and predecessor. Grids are 3D ``(nz, ny, nx)``; 2D models use ``ny == 1``.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import overload

from .graph import MoserGraph, moser_graph
from .heap import heap_capacity, heap_grow, heap_lower, heap_new, heap_pop
from .rules import EXACT, MEAN, WEIGHT_RULES
from .seeds import checked_precision, checked_seeds
from .segment import mean_slowness_time, segment_time
from .star import Star

__all__ = [
    "EXACT",
    "MEAN",
    "WEIGHT_RULES",
    "segment_time_cpu",
    "mean_slowness_time_cpu",
    "precompute_weights",
    "graph_weights",
    "dijkstra",
    "dijkstra_graph",
]

# The plain functions of .segment compiled for the CPU. fastmath stays off: the exact
# equality between solvers needs every backend to round the same way.
segment_time_cpu = numba.njit(cache=True)(segment_time)
mean_slowness_time_cpu = numba.njit(cache=True)(mean_slowness_time)


def round_like(value, times):
    """``value`` rounded to the dtype of ``times`` (resolved when Numba compiles)."""
    return times.dtype.type(value)


@overload(round_like, inline="always")
def _round_like(value, times):
    # Chosen per dtype at compile time: a no-op in float64, one rounding in float32, so the
    # hot loop pays nothing for supporting both precisions.
    if times.dtype == types.float32:
        return lambda value, times: np.float32(value)
    return lambda value, times: value


@numba.njit(cache=True, inline="always")
def _table_weight(slowness, low, j, cross_start, cross_step, cross_fraction, cross_length, times):
    """Weight of forward offset ``j`` from lower node ``low``, summed in the walk's order,
    computed in float64 and rounded once to the solve's precision."""
    total = 0.0
    for e in range(cross_start[j], cross_start[j + 1]):
        total += slowness[low + cross_step[e]] * cross_fraction[e]
    return round_like(total * cross_length[j], times)


@numba.njit(parallel=True, cache=True)
def _precompute(
    slowness, interior, dummy, forward_step, cross_start, cross_step, cross_fraction,
    cross_length, weights,
):  # fmt: skip
    # On the padded grid, like the solver: an edge to a dummy node has no weight (inf).
    for i in numba.prange(interior.shape[0]):
        u = interior[i]
        for j in range(forward_step.shape[0]):
            if dummy[u + forward_step[j]]:
                weights[i, j] = np.inf
                continue
            weights[i, j] = _table_weight(
                slowness, u, j, cross_start, cross_step, cross_fraction, cross_length, weights
            )


def precompute_weights(
    slowness: np.ndarray,
    spacing: np.ndarray,
    star: Star,
    rule: int = EXACT,
    dtype: np.dtype | type = np.float64,
) -> np.ndarray:
    """Weights of every undirected edge, stored once at the edge's lower node.

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx), float64
    spacing : numpy.ndarray, shape (3,), float64
        ``(hz, hy, hx)``.
    star : Star
    rule : int
        :data:`EXACT` or :data:`MEAN`.
    dtype : numpy dtype
        Storage type (the solve's precision).

    Returns
    -------
    numpy.ndarray, shape (nz * ny * nx, len(star.forward))
        ``weights[u, j]`` is the weight of ``u -> u + star.forward[j]`` (``inf`` where that
        node is outside the grid). Memory: ``N * n_offsets / 2`` values.

    Notes
    -----
    Storing half the star is enough because the weights are bitwise symmetric
    (:func:`raygrid.kernels.segment.segment_time`). Worth it when the same model is solved
    for many sources (docs/method.md section 1, "Weights: precomputed or on the fly").
    """
    return graph_weights(moser_graph(slowness, spacing, star, rule), dtype)


def graph_weights(graph: MoserGraph, dtype: np.dtype | type = np.float64) -> np.ndarray:
    """:func:`precompute_weights` of a prepared graph (its padding and crossing tables).

    Parameters
    ----------
    graph : MoserGraph
        From :func:`~raygrid.kernels.moser_graph`.
    dtype : numpy dtype, default float64
        Storage type (the solve's precision).

    Returns
    -------
    numpy.ndarray, shape (graph.n_nodes, len(star.forward))
        As :func:`precompute_weights`, for :func:`~raygrid.kernels.with_weights`.
    """
    star = graph.star
    dummy = np.ones(graph.slowness.size, dtype=np.uint8)
    dummy[graph.interior] = 0
    forward = star.forward
    forward_step = graph.step[star.is_forward]  # the steps of star.forward
    crossings = graph.crossings
    weights = np.empty((graph.n_nodes, forward.shape[0]), dtype=dtype)
    _precompute(
        graph.slowness, graph.interior, dummy, forward_step, crossings.start, crossings.step,
        crossings.fraction, crossings.length, weights,
    )  # fmt: skip
    return weights


# Not inline="always": Numba's IR inliner miscompiled this helper (two returns, itself
# calling an inlined function) into a loop that relaxed nothing; LLVM inlines it anyway.
@numba.njit(cache=True)
def _relax(times, predecessor, keys, nodes, position, size, t, v, k):
    """Lower ``v`` to ``t`` through edge ``k`` if that is better; returns the heap size."""
    if t < times[v]:
        times[v] = t
        predecessor[v] = k
        return heap_lower(keys, nodes, position, size, t, v)
    return size


@numba.njit(cache=True, nogil=True)
def _settle(
    slowness, step, half, cross_start, cross_step, cross_fraction, cross_length,
    floor, reach, weights, unpadded, settled, wanted, remaining, times, predecessor, keys,
    nodes, position, size,
):  # fmt: skip
    """Settle nodes until the heap is empty (returns 0), might overflow before the next node
    is relaxed (returns the size: the caller grows the heap and calls again), or every wanted
    node is settled (returns -1).

    The heap arrays are never reassigned in here, so the compiled loop keeps them in
    registers; growing them inside the loop made it almost twice as slow.
    """
    # Everything is on the padded grid (flat): dummy nodes around the model are pre-settled,
    # so the loop over the star needs no bounds checks.
    n_offsets = step.shape[0]
    precomputed = weights.shape[0] > 0
    capacity = keys.shape[0]
    half_size = n_offsets // 2
    while size > 0:
        if size + n_offsets > capacity:
            return size  # a node adds at most one entry per offset
        tu, u, size = heap_pop(keys, nodes, position, size)
        settled[u] = 1
        if remaining[0] > 0 and wanted[u]:
            remaining[0] -= 1
            if remaining[0] == 0:
                return -1  # every requested receiver is final
        floor_u = floor[u]
        if precomputed:
            for k in range(n_offsets):
                v = u + step[k]
                if not settled[v]:
                    j = half[k]
                    if tu + round_like(floor_u * reach[j], times) >= times[v]:
                        continue  # see below: saves a read from a far row of weights
                    low = v if k < half_size else u
                    w = weights[unpadded[low], j]
                    size = _relax(times, predecessor, keys, nodes, position, size, tu + w, v, k)
            continue
        # The star is sorted, so its first half points backward (the edge's lower node, from
        # which its weight is computed, is v) and its second half forward (it is u): two
        # loops without a branch. Settled neighbours, dummies included, need no weight, nor
        # does a neighbour that even the edge's lower bound would not improve: most of them,
        # once the front has passed (raygrid.kernels.bounds). Rounding is monotone, so a
        # skipped edge is one whose computed time would not have been smaller either.
        for k in range(half_size):
            v = u + step[k]
            if not settled[v]:
                j = half[k]
                if tu + round_like(floor_u * reach[j], times) >= times[v]:
                    continue
                w = _table_weight(slowness, v, j, cross_start, cross_step,
                                  cross_fraction, cross_length, times)  # fmt: skip
                size = _relax(times, predecessor, keys, nodes, position, size, tu + w, v, k)
        for k in range(half_size, n_offsets):
            v = u + step[k]
            if not settled[v]:
                j = k - half_size
                if tu + round_like(floor_u * reach[j], times) >= times[v]:
                    continue
                w = _table_weight(slowness, u, j, cross_start, cross_step,
                                  cross_fraction, cross_length, times)  # fmt: skip
                size = _relax(times, predecessor, keys, nodes, position, size, tu + w, v, k)
    return 0


# nogil: many-source runs solve sources on threads.
@numba.njit(cache=True, nogil=True)
def _dijkstra(
    slowness,
    step,
    half,
    cross_start,
    cross_step,
    cross_fraction,
    cross_length,
    floor,
    reach,
    weights,
    unpadded,
    settled,
    position,
    seed_nodes,
    seed_times,
    target_nodes,
    times,
    predecessor,
):
    wanted = np.zeros(times.shape[0] if target_nodes.shape[0] > 0 else 0, dtype=np.uint8)
    remaining = np.zeros(1, dtype=np.int64)
    for i in range(target_nodes.shape[0]):
        if wanted[target_nodes[i]] == 0:
            wanted[target_nodes[i]] = 1
            remaining[0] += 1

    keys, nodes = heap_new(heap_capacity(times.shape[0], step.shape[0]), times)
    size = 0
    for i in range(seed_nodes.shape[0]):
        s = seed_nodes[i]
        if seed_times[i] < times[s]:
            times[s] = seed_times[i]
            predecessor[s] = -1
            if size == keys.shape[0]:
                keys, nodes = heap_grow(keys, nodes)
            size = heap_lower(keys, nodes, position, size, times[s], s)
    while size > 0:
        size = _settle(
            slowness, step, half, cross_start, cross_step, cross_fraction,
            cross_length, floor, reach, weights, unpadded, settled, wanted, remaining, times,
            predecessor, keys, nodes, position, size,
        )  # fmt: skip
        if size > 0:
            keys, nodes = heap_grow(keys, nodes)


def dijkstra(
    slowness: np.ndarray,
    spacing: np.ndarray,
    star: Star,
    seed_nodes: np.ndarray,
    seed_times: np.ndarray,
    *,
    rule: int = EXACT,
    weights: np.ndarray | None = None,
    target_nodes: np.ndarray | None = None,
    times: np.ndarray | None = None,
    predecessor: np.ndarray | None = None,
    dtype: np.dtype | type = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-seeded shortest-path traveltimes with an indexed 4-ary heap (decrease-key).

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx), float64
        Cell slownesses (s/m), all finite and positive.
    spacing : numpy.ndarray, shape (3,), float64
        Node spacing ``(hz, hy, hx)`` (m).
    star : Star
        Forward star (:func:`raygrid.kernels.forward_star`).
    seed_nodes : numpy.ndarray of int64
        Flat indices of the nodes that start with a finite time (a source node, the nodes
        around an off-node source, or a tile's halo).
    seed_times : numpy.ndarray
        Their times (s).
    rule : int or str
        :data:`EXACT` (cell-crossing) or :data:`MEAN` (Moser's mean slowness), or their
        names (``"exact"``, ``"mean"``); unused when ``weights`` is given (still checked).
    weights : numpy.ndarray, optional
        From :func:`precompute_weights`, in the solve's precision.
    target_nodes : numpy.ndarray of int64, optional
        Stop as soon as all of these are settled; other nodes may then hold upper bounds
        (or ``inf``).
    times, predecessor : numpy.ndarray, optional
        Flat output arrays to fill; allocated when omitted. ``times`` may hold earlier
        times (a tile's previous round): a node keeps its time unless the search reaches it
        with a smaller one, and a seed is taken only where its time is below the node's
        (clear a seed's node to ``inf`` to restart from it). Finite times of nodes that are
        not seeds are bounds the search respects, not sources it spreads from.
    dtype : numpy dtype
        Precision of the times when ``times`` is not given.

    Returns
    -------
    times : numpy.ndarray, shape (nz * ny * nx,)
    predecessor : numpy.ndarray, shape (nz * ny * nx,)
        Index into ``star.offsets`` of the last edge of each node's path: the previous node
        is ``v - star.offsets[predecessor[v]]``; ``-1`` for seeds and unreached nodes.

    Raises
    ------
    ValueError
        For a slowness, spacing, rule, seed, precision or output array the solve cannot
        use, naming it (nothing is solved).

    Notes
    -----
    Dijkstra in floating point returns, for every node, the minimum over all paths of the
    left-to-right float sum of the edge weights from a seed; IEEE addition is monotone, so
    any other correct solver using the same weights returns the same floats
    (docs/method.md section 1). Neighbours already settled are skipped before their weight is
    computed, and so are neighbours that the edge's lower bound (length times the smallest
    slowness within the radius, :mod:`raygrid.kernels.bounds`) would not improve; the rest
    get their weight from the crossing table of the offset
    (:mod:`raygrid.kernels.crossings`), which sums the same floats as
    :func:`raygrid.kernels.segment.segment_time`. Skipping changes no float: rounding is
    monotone, so the skipped candidate time could not have been smaller. The grid is padded
    by the radius with settled dummy nodes so the inner loop has no bounds checks.
    """
    graph = moser_graph(slowness, spacing, star, rule, weights)
    return dijkstra_graph(
        graph, seed_nodes, seed_times, target_nodes=target_nodes, times=times,
        predecessor=predecessor, dtype=dtype,
    )  # fmt: skip


def _outputs(times, predecessor, n_nodes: int, star: Star, dtype) -> tuple:
    """The arrays a solve fills: given ones checked (the Dijkstra writes them in compiled
    code, which would cast or wrap what does not fit), missing ones allocated."""
    if times is None:
        times = np.full(n_nodes, np.inf, dtype=checked_precision(dtype))
    elif not isinstance(times, np.ndarray) or times.shape != (n_nodes,):
        raise ValueError(
            f"times must be a flat array of the grid's {n_nodes} nodes, got "
            f"{getattr(times, 'shape', type(times).__name__)}"
        )
    else:
        checked_precision(times.dtype, "times")
    if predecessor is None:
        return times, np.full(n_nodes, -1, dtype=star.predecessor_dtype)
    if not isinstance(predecessor, np.ndarray) or predecessor.shape != (n_nodes,):
        raise ValueError(
            f"predecessor must be a flat array of the grid's {n_nodes} nodes, got "
            f"{getattr(predecessor, 'shape', type(predecessor).__name__)}"
        )
    kind = predecessor.dtype
    if kind.kind != "i" or np.iinfo(kind).max < star.size - 1:
        # An int8 array wrapped the offsets of a 256-offset star to negative numbers.
        raise ValueError(
            f"predecessor must be a signed integer array that holds {star.size - 1} (this "
            f"star's last offset index), e.g. {star.predecessor_dtype}; got {kind}"
        )
    return times, predecessor


def dijkstra_graph(
    graph: MoserGraph,
    seed_nodes: np.ndarray,
    seed_times: np.ndarray,
    *,
    target_nodes: np.ndarray | None = None,
    times: np.ndarray | None = None,
    predecessor: np.ndarray | None = None,
    dtype: np.dtype | type = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dijkstra` on a prepared graph: what many sources on one model share is built
    once (:func:`raygrid.kernels.moser_graph`), so a source costs only its own solve.

    Parameters and results are those of :func:`dijkstra`; the weights (on the fly or
    precomputed) are the graph's. Safe to call from several threads on one graph: the
    graph is only read.
    """
    n_nodes = graph.n_nodes
    star = graph.star
    times, predecessor = _outputs(times, predecessor, n_nodes, star, dtype)
    interior = graph.interior
    size = graph.slowness.size
    times_padded = np.full(size, np.inf, dtype=times.dtype)
    times_padded[interior] = times
    predecessor_padded = np.full(size, -1, dtype=predecessor.dtype)
    predecessor_padded[interior] = predecessor
    settled = np.ones(size, dtype=np.uint8)
    settled[interior] = 0
    weights = graph.weights
    if weights is None:
        weights = np.empty((0, 0), dtype=times.dtype)
    elif weights.dtype != times.dtype:
        raise ValueError(f"precomputed weights are {weights.dtype}, the times {times.dtype}")
    seed_nodes, seed_times = checked_seeds(seed_nodes, seed_times, n_nodes, times.dtype)
    targets = np.empty(0, dtype=np.int64)
    if target_nodes is not None:
        target_nodes = np.asarray(target_nodes, dtype=np.int64)
        if target_nodes.size and (target_nodes.min() < 0 or target_nodes.max() >= n_nodes):
            raise ValueError(f"target nodes must be in [0, {n_nodes})")
        targets = interior[target_nodes]
    crossings = graph.crossings
    _dijkstra(
        graph.slowness,
        graph.step,
        star.half,
        crossings.start,
        crossings.step,
        crossings.fraction,
        crossings.length,
        graph.floor,
        graph.reach,
        weights,
        graph.unpadded,
        settled,
        # The heap's index of each node (4 bytes a node while the padded grid allows).
        np.full(size, -1, np.int32 if size < 2**31 else np.int64),
        interior[seed_nodes],
        seed_times,
        targets,
        times_padded,
        predecessor_padded,
    )
    # Gathered straight into the results, no field-sized temporary: mode="clip" because
    # "raise" (the default) buffers ``out``, and the interior indices are in range.
    np.take(times_padded, interior, out=times, mode="clip")
    np.take(predecessor_padded, interior, out=predecessor, mode="clip")
    return times, predecessor
