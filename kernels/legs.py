"""First and last legs: straight segments between an off-node point and the nodes near it."""

from __future__ import annotations

import numba
import numpy as np

from .cpu import segment_time_cpu

__all__ = ["point_box", "point_leg_times"]


def point_box(
    point: np.ndarray, radius: tuple[int, int, int], shape: tuple[int, ...]
) -> np.ndarray:
    """Nodes of the forward-star box around the cell holding a point.

    Parameters
    ----------
    point : numpy.ndarray, shape (3,)
        Position in fractional node-index units ``(iz, iy, ix)``.
    radius : tuple of int
        ``(rz, ry, rx)``.
    shape : tuple of int
        Grid shape ``(nz, ny, nx)``.

    Returns
    -------
    numpy.ndarray, shape (k, 3), int64
        Every node ``n`` inside the grid with ``|n_k - c_k| <= r_k``, where ``c`` is the node
        whose cell holds ``point``: the nodes the point would be joined to if it were a node.
    """
    centre = np.floor(np.asarray(point, dtype=np.float64) + 0.5).astype(np.int64)
    ranges = [
        np.arange(max(c - r, 0), min(c + r, n - 1) + 1) for c, r, n in zip(centre, radius, shape)
    ]
    mesh = np.meshgrid(*ranges, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.int64)


@numba.njit(cache=True)
def _leg_times(slowness, spacing, point, nodes, out):
    for i in range(nodes.shape[0]):
        out[i] = segment_time_cpu(
            slowness,
            point[0],
            point[1],
            point[2],
            float(nodes[i, 0]),
            float(nodes[i, 1]),
            float(nodes[i, 2]),
            spacing[0],
            spacing[1],
            spacing[2],
        )


def point_leg_times(
    slowness: np.ndarray, spacing: np.ndarray, point: np.ndarray, nodes: np.ndarray
) -> np.ndarray:
    """Straight-segment traveltimes from a point to each of ``nodes`` (exact cell crossing).

    Uses the same :func:`raygrid.kernels.segment.segment_time` as the edge weights, so a leg
    between a point lying on a node and another node equals that edge's weight bitwise.
    """
    out = np.empty(nodes.shape[0], dtype=np.float64)
    _leg_times(
        np.ascontiguousarray(slowness, dtype=np.float64),
        np.asarray(spacing, dtype=np.float64),
        np.asarray(point, dtype=np.float64),
        np.ascontiguousarray(nodes, dtype=np.int64),
        out,
    )
    return out
