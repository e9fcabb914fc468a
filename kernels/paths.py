"""Node paths walked back through a solve's predecessors (the rays' nodes)."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["walk_paths"]


def walk_paths(
    predecessor: np.ndarray, offsets: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of each path from the seed where it starts to its end, in order.

    Parameters
    ----------
    predecessor : numpy.ndarray, shape (nz, ny, nx), integer
        Per node, the index into ``offsets`` of the edge its time came through; negative
        for a seed (the path's start).
    offsets : numpy.ndarray, shape (k, 3), int64
        The forward star's offsets: a node's predecessor is the node minus its offset.
    ends : numpy.ndarray, shape (m, 3), int64
        The nodes the paths end at.

    Returns
    -------
    nodes : numpy.ndarray, shape (n, 3), int64
        Every path's nodes, seed first, the paths one after the other in the order of
        ``ends``.
    counts : numpy.ndarray, shape (m,), int64
        Nodes per path.

    Raises
    ------
    ValueError
        Where the predecessors form a cycle (a path longer than the grid has nodes), name
        no edge of the star or lead outside the grid: a corrupted result.
    """
    ends = np.ascontiguousarray(ends, dtype=np.int64).reshape(-1, 3)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, 3)
    counts = np.empty(len(ends), dtype=np.int64)
    if _count(predecessor, offsets, ends, counts) < 0:
        raise ValueError(
            "predecessors form a cycle, name no edge or leave the grid: the result is corrupted"
        )
    nodes = np.empty((int(counts.sum()), 3), dtype=np.int64)
    _fill(predecessor, offsets, ends, counts, nodes)
    return nodes, counts


@numba.njit(cache=True)
def _count(predecessor, offsets, ends, counts):
    # Walked twice (count, then fill) rather than grown: two reads of a few hundred
    # predecessors a path cost less than a list of nodes per path.
    nz, ny, nx = predecessor.shape
    most = nz * ny * nx  # no path has more nodes
    for i in range(ends.shape[0]):
        z, y, x = ends[i, 0], ends[i, 1], ends[i, 2]
        n = 1
        while True:
            k = predecessor[z, y, x]
            if k < 0:
                break
            if k >= offsets.shape[0]:  # no such edge (no bounds check in compiled code)
                return -1
            z, y, x = z - offsets[k, 0], y - offsets[k, 1], x - offsets[k, 2]
            n += 1
            if n > most or not (0 <= z < nz and 0 <= y < ny and 0 <= x < nx):
                return -1
        counts[i] = n
    return 0


@numba.njit(cache=True)
def _fill(predecessor, offsets, ends, counts, nodes):
    start = 0
    for i in range(ends.shape[0]):
        z, y, x = ends[i, 0], ends[i, 1], ends[i, 2]
        j = start + counts[i] - 1  # the end last, the seed first
        while True:
            nodes[j, 0], nodes[j, 1], nodes[j, 2] = z, y, x
            k = predecessor[z, y, x]
            if k < 0:
                break
            z, y, x = z - offsets[k, 0], y - offsets[k, 1], x - offsets[k, 2]
            j -= 1
        start += counts[i]
