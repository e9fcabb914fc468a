"""CPU tile solver: multi-seeded binary-heap Dijkstra on the Moser grid graph (Numba).

This is the sequential reference of DESIGN.md section 1 and the CPU "tile solver" of
section 2: given slownesses, seeded nodes with finite times and a forward star, return every
node's time and predecessor. Grids are 3D ``(nz, ny, nx)``; 2D models use ``ny == 1``.
"""

from __future__ import annotations

import numba
import numpy as np

from .heap import heap_new, heap_pop, heap_push
from .segment import mean_slowness_time, segment_time
from .star import Star

__all__ = [
    "EXACT",
    "MEAN",
    "WEIGHT_RULES",
    "segment_time_cpu",
    "mean_slowness_time_cpu",
    "precompute_weights",
    "dijkstra",
]

#: Weight rule codes shared by every backend.
EXACT = 0
MEAN = 1
WEIGHT_RULES = {"exact": EXACT, "mean": MEAN}

# The plain functions of .segment compiled for the CPU. fastmath stays off: the exact
# equality between solvers needs every backend to round the same way.
segment_time_cpu = numba.njit(cache=True)(segment_time)
mean_slowness_time_cpu = numba.njit(cache=True)(mean_slowness_time)


@numba.njit(cache=True)
def _edge_weight(slowness, rule, uz, uy, ux, vz, vy, vx, hz, hy, hx):
    if rule == EXACT:
        return segment_time_cpu(
            slowness, float(uz), float(uy), float(ux), float(vz), float(vy), float(vx), hz, hy, hx
        )
    return mean_slowness_time_cpu(slowness, uz, uy, ux, vz, vy, vx, hz, hy, hx)


@numba.njit(parallel=True, cache=True)
def _precompute(slowness, spacing, forward, rule, weights):
    nz, ny, nx = slowness.shape
    hz, hy, hx = spacing[0], spacing[1], spacing[2]
    for u in numba.prange(nz * ny * nx):
        uz = u // (ny * nx)
        uy = (u // nx) % ny
        ux = u % nx
        for j in range(forward.shape[0]):
            vz = uz + forward[j, 0]
            vy = uy + forward[j, 1]
            vx = ux + forward[j, 2]
            if 0 <= vz < nz and 0 <= vy < ny and 0 <= vx < nx:
                weights[u, j] = _edge_weight(slowness, rule, uz, uy, ux, vz, vy, vx, hz, hy, hx)
            else:
                weights[u, j] = np.inf


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
    for many sources (DESIGN.md section 1, "Weights: precomputed or on the fly").
    """
    weights = np.empty((slowness.size, star.forward.shape[0]), dtype=dtype)
    _precompute(slowness, spacing, star.forward, rule, weights)
    return weights


# nogil: many-source runs solve sources on threads.
@numba.njit(cache=True, nogil=True)
def _dijkstra(
    slowness,
    spacing,
    offsets,
    half,
    is_forward,
    rule,
    weights,
    seed_nodes,
    seed_times,
    target_nodes,
    times,
    predecessor,
):
    nz, ny, nx = slowness.shape
    n_nodes = nz * ny * nx
    hz, hy, hx = spacing[0], spacing[1], spacing[2]
    n_offsets = offsets.shape[0]
    # Flat-index step of each offset; valid once the per-axis bounds check has passed.
    step = np.empty(n_offsets, dtype=np.int64)
    for k in range(n_offsets):
        step[k] = (offsets[k, 0] * ny + offsets[k, 1]) * nx + offsets[k, 2]
    precomputed = weights.shape[0] > 0
    # Weights are computed in float64 and rounded once to the solve's precision here.
    rounded = np.empty(1, dtype=times.dtype)

    settled = np.zeros(n_nodes, dtype=np.uint8)
    wanted = np.zeros(n_nodes if target_nodes.shape[0] > 0 else 0, dtype=np.uint8)
    remaining = 0
    for i in range(target_nodes.shape[0]):
        if wanted[target_nodes[i]] == 0:
            wanted[target_nodes[i]] = 1
            remaining += 1

    keys, nodes = heap_new(max(n_nodes // 8, 1024), times)
    size = 0
    for i in range(seed_nodes.shape[0]):
        s = seed_nodes[i]
        if seed_times[i] < times[s]:
            times[s] = seed_times[i]
            predecessor[s] = -1
            keys, nodes, size = heap_push(keys, nodes, size, times[s], s)

    while size > 0:
        tu, u, size = heap_pop(keys, nodes, size)
        if settled[u] or tu > times[u]:
            continue  # a stale entry left by lazy deletion
        settled[u] = 1
        if remaining > 0 and wanted[u]:
            remaining -= 1
            if remaining == 0:
                break  # every requested receiver is final
        uz = u // (ny * nx)
        uy = (u // nx) % ny
        ux = u % nx
        for k in range(n_offsets):
            vz = uz + offsets[k, 0]
            vy = uy + offsets[k, 1]
            vx = ux + offsets[k, 2]
            if vz < 0 or vz >= nz or vy < 0 or vy >= ny or vx < 0 or vx >= nx:
                continue
            v = u + step[k]
            if settled[v]:
                continue  # saves computing a weight that cannot help
            if precomputed:
                w = weights[u, half[k]] if is_forward[k] else weights[v, half[k]]
            else:
                rounded[0] = _edge_weight(slowness, rule, uz, uy, ux, vz, vy, vx, hz, hy, hx)
                w = rounded[0]
            t = tu + w
            if t < times[v]:
                times[v] = t
                predecessor[v] = k
                keys, nodes, size = heap_push(keys, nodes, size, t, v)


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
    """Multi-seeded shortest-path traveltimes with a binary heap and lazy deletion.

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
    rule : int
        :data:`EXACT` (cell-crossing) or :data:`MEAN` (Moser's mean slowness); ignored when
        ``weights`` is given.
    weights : numpy.ndarray, optional
        From :func:`precompute_weights`, in the solve's precision.
    target_nodes : numpy.ndarray of int64, optional
        Stop as soon as all of these are settled; other nodes may then hold upper bounds
        (or ``inf``).
    times, predecessor : numpy.ndarray, optional
        Flat output arrays to fill (``times`` starting at ``inf`` or at earlier upper
        bounds); allocated when omitted.
    dtype : numpy dtype
        Precision of the times when ``times`` is not given.

    Returns
    -------
    times : numpy.ndarray, shape (nz * ny * nx,)
    predecessor : numpy.ndarray, shape (nz * ny * nx,)
        Index into ``star.offsets`` of the last edge of each node's path: the previous node
        is ``v - star.offsets[predecessor[v]]``; ``-1`` for seeds and unreached nodes.

    Notes
    -----
    Dijkstra in floating point returns, for every node, the minimum over all paths of the
    left-to-right float sum of the edge weights from a seed; IEEE addition is monotone, so
    any other correct solver using the same weights returns the same floats
    (DESIGN.md section 1). Neighbours already settled are skipped before their weight is
    computed, so each undirected edge's weight is computed about once.
    """
    n_nodes = slowness.size
    if times is None:
        times = np.full(n_nodes, np.inf, dtype=dtype)
    if predecessor is None:
        predecessor = np.full(n_nodes, -1, dtype=star.predecessor_dtype)
    if weights is None:
        weights = np.empty((0, 0), dtype=times.dtype)
    if target_nodes is None:
        target_nodes = np.empty(0, dtype=np.int64)
    _dijkstra(
        np.ascontiguousarray(slowness, dtype=np.float64),
        np.asarray(spacing, dtype=np.float64),
        star.offsets,
        star.half,
        star.is_forward,
        int(rule),
        weights,
        np.asarray(seed_nodes, dtype=np.int64),
        np.asarray(seed_times, dtype=times.dtype),
        np.asarray(target_nodes, dtype=np.int64),
        times,
        predecessor,
    )
    return times, predecessor
