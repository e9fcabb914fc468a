"""An independent reference: the explicit Moser graph solved by scipy's Dijkstra.

The graph is enumerated here with NumPy (neighbours, bounds, flat indices), independently of
the solver's loops; only the edge weight function is shared, as the design asks: exact
equality tests compare solvers on the *same* graph.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra as scipy_dijkstra

from raygrid.kernels import EXACT, mean_slowness_time_cpu, segment_time_cpu


def explicit_graph(slowness, spacing, offsets, rule=EXACT) -> csr_matrix:
    """CSR matrix of every directed edge ``u -> u + o`` inside the grid."""
    shape = slowness.shape
    nodes = np.stack(np.unravel_index(np.arange(slowness.size), shape), axis=1)
    rows, cols, weights = [], [], []
    for offset in offsets:
        ends = nodes + offset
        inside = np.all((ends >= 0) & (ends < np.array(shape)), axis=1)
        for u, v in zip(nodes[inside], ends[inside]):
            if rule == EXACT:
                w = segment_time_cpu(slowness, *map(float, u), *map(float, v), *spacing)
            else:
                w = mean_slowness_time_cpu(slowness, *u, *v, *spacing)
            rows.append(np.ravel_multi_index(tuple(u), shape))
            cols.append(np.ravel_multi_index(tuple(v), shape))
            weights.append(w)
    return csr_matrix((weights, (rows, cols)), shape=(slowness.size, slowness.size))


def reference_times(graph: csr_matrix, seed_nodes, seed_times) -> np.ndarray:
    """Multi-seeded shortest paths: a virtual super-source joined to each seed by its time.

    ``0 + t_seed`` is exact in floating point, so this equals seeding the nodes directly. A
    node seeded twice keeps its smaller time (the sparse matrix would add the two).
    """
    n = graph.shape[0]
    seed_nodes, where = np.unique(np.asarray(seed_nodes), return_inverse=True)
    smallest = np.full(len(seed_nodes), np.inf)
    np.minimum.at(smallest, where.reshape(-1), np.asarray(seed_times, dtype=np.float64))
    seed_times = smallest
    if len(seed_nodes) == 1 and seed_times[0] == 0:
        return scipy_dijkstra(graph, indices=int(seed_nodes[0]))
    coo = graph.tocoo()
    rows = np.concatenate([coo.row, np.full(len(seed_nodes), n)])
    cols = np.concatenate([coo.col, seed_nodes])
    data = np.concatenate([coo.data, seed_times])
    extended = csr_matrix((data, (rows, cols)), shape=(n + 1, n + 1))
    return scipy_dijkstra(extended, indices=n)[:n]


def reference_times_float32(graph: csr_matrix, seed_nodes, seed_times) -> np.ndarray:
    """Dijkstra in float32 (weights rounded once from float64, every sum rounded), written
    plainly with :mod:`heapq`: scipy works in float64 only. Every correct solver returns the
    minimum over paths of the left-to-right float32 sums, so this is a reference too."""
    import heapq

    graph = graph.tocsr()
    weights = graph.data.astype(np.float32)
    times = np.full(graph.shape[0], np.inf, dtype=np.float32)
    heap = []
    for node, t in zip(seed_nodes, seed_times):
        t = np.float32(t)
        if t < times[node]:
            times[node] = t
            heapq.heappush(heap, (t, int(node)))
    done = np.zeros(graph.shape[0], dtype=bool)
    while heap:
        t, u = heapq.heappop(heap)
        if done[u]:
            continue
        done[u] = True
        for e in range(graph.indptr[u], graph.indptr[u + 1]):
            v = graph.indices[e]
            candidate = np.float32(t + weights[e])
            if candidate < times[v]:
                times[v] = candidate
                heapq.heappush(heap, (candidate, int(v)))
    return times
