"""First and last legs: straight segments between an off-node point and the nodes near it."""

from __future__ import annotations

import numba
import numpy as np

from .cpu import mean_slowness_time_cpu, segment_time_cpu

__all__ = ["point_box", "point_leg_times", "legs_to_node", "node_leg_times", "best_last_legs"]


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
def _leg_times(slowness, spacing, starts, ends, out):
    # Each leg timed from its start (a point between nodes, where there is one).
    for i in range(out.shape[0]):
        out[i] = segment_time_cpu(
            slowness, starts[i, 0], starts[i, 1], starts[i, 2], ends[i, 0], ends[i, 1],
            ends[i, 2], spacing[0], spacing[1], spacing[2],
        )  # fmt: skip


def _legs(slowness, spacing, starts, ends) -> np.ndarray:
    """Straight legs ``starts[i] -> ends[i]`` (either side may be one row for all)."""
    starts = np.asarray(starts, dtype=np.float64).reshape(-1, 3)
    ends = np.asarray(ends, dtype=np.float64).reshape(-1, 3)
    starts, ends = np.broadcast_arrays(starts, ends)
    out = np.empty(len(starts), dtype=np.float64)
    _leg_times(
        np.ascontiguousarray(slowness, dtype=np.float64), np.asarray(spacing, dtype=np.float64),
        np.ascontiguousarray(starts), np.ascontiguousarray(ends), out,
    )  # fmt: skip
    return out


def point_leg_times(
    slowness: np.ndarray, spacing: np.ndarray, point: np.ndarray, nodes: np.ndarray
) -> np.ndarray:
    """Straight-segment traveltimes from a point to each of ``nodes`` (exact cell crossing).

    Uses the same :func:`raygrid.kernels.segment.segment_time` as the edge weights, so a leg
    between a point lying on a node and another node equals that edge's weight bitwise.

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx)
        Slowness at the nodes (s per length unit), read as float64.
    spacing : numpy.ndarray, shape (3,)
        ``(hz, hy, hx)``.
    point : numpy.ndarray, shape (3,)
        The start, in fractional node indices ``(iz, iy, ix)``.
    nodes : numpy.ndarray, shape (k, 3)
        The ends, node indices.

    Returns
    -------
    numpy.ndarray, shape (k,), float64
        The time of each leg.
    """
    return _legs(slowness, spacing, point, nodes)


def legs_to_node(
    slowness: np.ndarray, spacing: np.ndarray, points: np.ndarray, node: np.ndarray
) -> np.ndarray:
    """Straight-segment traveltimes from each of ``points`` to one node (exact cell
    crossing), each timed from its point as :func:`point_leg_times` times it: the
    straight legs from many points to a source on a node, in one call.

    Parameters
    ----------
    slowness, spacing
        As for :func:`point_leg_times`.
    points : numpy.ndarray, shape (k, 3)
        The starts, in fractional node indices.
    node : numpy.ndarray, shape (3,)
        The end, node indices.

    Returns
    -------
    numpy.ndarray, shape (k,), float64
        The time of each leg.
    """
    return _legs(slowness, spacing, points, node)


@numba.njit(cache=True)
def _node_legs(slowness, spacing, starts, ends, exact, out):
    hz, hy, hx = spacing[0], spacing[1], spacing[2]
    for i in range(starts.shape[0]):
        az, ay, ax = starts[i, 0], starts[i, 1], starts[i, 2]
        bz, by, bx = ends[i, 0], ends[i, 1], ends[i, 2]
        if exact:
            out[i] = segment_time_cpu(
                slowness, float(az), float(ay), float(ax), float(bz), float(by), float(bx),
                hz, hy, hx,
            )  # fmt: skip
        else:
            out[i] = mean_slowness_time_cpu(slowness, az, ay, ax, bz, by, bx, hz, hy, hx)


def node_leg_times(
    slowness: np.ndarray, spacing: np.ndarray, starts: np.ndarray, ends: np.ndarray, exact: bool
) -> np.ndarray:
    """Times of straight legs between nodes (the inner legs of rays), each the weight the
    solver gave the edge ``starts[i] -> ends[i]``: exact cell crossing
    (:func:`~raygrid.kernels.segment.segment_time`) or, with ``exact=False``, the
    mean-slowness rule, in one compiled loop (docs/method.md section 4).

    Parameters
    ----------
    slowness : numpy.ndarray
        The model's slowness, 3D ``(nz, ny, nx)``, s/m.
    spacing : numpy.ndarray
        ``(hz, hy, hx)`` in metres.
    starts, ends : numpy.ndarray, shape (k, 3)
        Integer node indices of each leg's ends, in the order the solver relaxed it (from
        the predecessor).
    exact : bool
        The weight rule: exact crossing (True) or mean slowness.

    Returns
    -------
    numpy.ndarray, shape (k,), float64
    """
    out = np.empty(len(starts), dtype=np.float64)
    _node_legs(
        np.ascontiguousarray(slowness, dtype=np.float64), np.asarray(spacing, dtype=np.float64),
        np.ascontiguousarray(starts, dtype=np.int64).reshape(-1, 3),
        np.ascontiguousarray(ends, dtype=np.int64).reshape(-1, 3), bool(exact), out,
    )  # fmt: skip
    return out


#: Below every leg's rounding: a leg sums pieces of ``slowness * fraction`` (fractions
#: summing to 1 within a few units in the last place) and multiplies by its length.
_FLOOR_MARGIN = 1.0 - 1e-12


@numba.njit(cache=True)
def _box_leg(slowness, spacing, pz, py, px, z, y, x):
    # The leg from a point to node (z, y, x): the call point_leg_times makes, on the model.
    return segment_time_cpu(
        slowness, pz, py, px, float(z), float(y), float(x), spacing[0], spacing[1], spacing[2]
    )


# Serial: it runs inside Dask worker threads (a survey's receivers), and Numba's
# workqueue threading layer aborts the process on parallel launches from two threads.
# Without the GIL: a lookup spreads its sources over threads, each running this.
@numba.njit(cache=True, nogil=True)
def _best_last_legs(slowness, spacing, times, points, radius, node, value, leg):
    nz, ny, nx = slowness.shape
    hz, hy, hx = spacing[0], spacing[1], spacing[2]
    for k in range(points.shape[0]):
        pz, py, px = points[k, 0], points[k, 1], points[k, 2]
        cz = int(np.floor(pz + 0.5))
        cy = int(np.floor(py + 0.5))
        cx = int(np.floor(px + 0.5))
        z0, z1 = max(cz - radius[0], 0), min(cz + radius[0], nz - 1)
        y0, y1 = max(cy - radius[1], 0), min(cy + radius[1], ny - 1)
        x0, x1 = max(cx - radius[2], 0), min(cx + radius[2], nx - 1)
        # Every leg from the point to a node of the box stays in the box's cells (the
        # point lies in the centre node's cell): their slowness floor bounds each leg.
        # np.argmin picks the first NaN if there is one: so does this.
        floor = np.inf
        nan_z, nan_y, nan_x = -1, -1, -1
        for z in range(z0, z1 + 1):
            for y in range(y0, y1 + 1):
                for x in range(x0, x1 + 1):
                    floor = min(floor, slowness[z, y, x])
                    if nan_z < 0 and np.isnan(times[z, y, x]):
                        nan_z, nan_y, nan_x = z, y, x
        if nan_z >= 0:
            node[k, 0], node[k, 1], node[k, 2] = nan_z, nan_y, nan_x
            value[k] = times[nan_z, nan_y, nan_x]
            leg[k] = _box_leg(slowness, spacing, pz, py, px, nan_z, nan_y, nan_x)
            continue
        floor *= _FLOOR_MARGIN
        # Start from the node of the lowest bound, timed exactly; then only nodes whose
        # bound does not exceed the best so far can win (most of the box is behind the
        # point, seen from the source, and is never timed).
        lowest = np.inf
        sz, sy, sx = z0, y0, x0
        for z in range(z0, z1 + 1):
            for y in range(y0, y1 + 1):
                for x in range(x0, x1 + 1):
                    d = np.sqrt(((z - pz) * hz) ** 2 + ((y - py) * hy) ** 2 + ((x - px) * hx) ** 2)
                    bound = np.float64(times[z, y, x]) + d * floor
                    if bound < lowest:
                        lowest, sz, sy, sx = bound, z, y, x
        seed_leg = _box_leg(slowness, spacing, pz, py, px, sz, sy, sx)
        best_leg = seed_leg
        best = np.float64(times[sz, sy, sx]) + seed_leg
        bz, by, bx = sz, sy, sx
        for z in range(z0, z1 + 1):
            for y in range(y0, y1 + 1):
                for x in range(x0, x1 + 1):
                    d = np.sqrt(((z - pz) * hz) ** 2 + ((y - py) * hy) ** 2 + ((x - px) * hx) ** 2)
                    if np.float64(times[z, y, x]) + d * floor > best:
                        continue
                    if z == sz and y == sy and x == sx:
                        this_leg = seed_leg
                    else:
                        this_leg = _box_leg(slowness, spacing, pz, py, px, z, y, x)
                    total = np.float64(times[z, y, x]) + this_leg
                    # The first node in box order (C order) among equal totals, as np.argmin.
                    earlier = (z * ny + y) * nx + x < (bz * ny + by) * nx + bx
                    if total < best or (total == best and earlier):
                        best, best_leg, bz, by, bx = total, this_leg, z, y, x
        node[k, 0], node[k, 1], node[k, 2] = bz, by, bx
        value[k] = times[bz, by, bx]
        leg[k] = best_leg


def best_last_legs(
    slowness: np.ndarray,
    spacing: np.ndarray,
    times: np.ndarray,
    points: np.ndarray,
    radius: tuple[int, int, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each point between nodes, the node ``n`` of the forward-star box around its
    cell (:func:`point_box`) minimising ``t(n) + leg(n, point)``: ``(nodes, t(nodes),
    legs)``.

    The same choice and floats as timing every leg of the box with
    :func:`point_leg_times` and taking ``np.argmin`` (the first node in box order among
    equal totals; the first NaN time if any): legs are timed on the whole model, which
    equals the shifted sub-block bit for bit (an integer shift of a point is exact), and
    only where a lower bound, ``t(n)`` plus the distance times the box's lowest slowness
    (its fastest cell), does not exceed the best total found. The slowness must be
    checked (finite, positive), as every grid's is: a NaN in it would void the bound.

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx), float64
    spacing : numpy.ndarray, shape (3,)
    times : numpy.ndarray, shape (nz, ny, nx)
        A solved field (any float type).
    points : numpy.ndarray, shape (k, 3)
        Positions in fractional node-index units, none on a node.
    radius : tuple of int
        ``(rz, ry, rx)``.

    Returns
    -------
    nodes : numpy.ndarray, shape (k, 3), int64
        The chosen node of each point.
    times : numpy.ndarray, shape (k,)
        Its time, in the field's type.
    legs : numpy.ndarray, shape (k,), float64
        The leg from it to the point.
    """
    points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, 3)
    # Native byte order: Numba has no type for a big-endian array (np.fromfile(">f4")).
    times = times.astype(times.dtype.newbyteorder("="), copy=False)
    node = np.empty((len(points), 3), dtype=np.int64)
    value = np.empty(len(points), dtype=times.dtype)
    leg = np.empty(len(points), dtype=np.float64)
    _best_last_legs(
        np.ascontiguousarray(slowness, dtype=np.float64),
        np.asarray(spacing, dtype=np.float64),
        np.ascontiguousarray(times),
        points,
        np.asarray(radius, dtype=np.int64),
        node,
        value,
        leg,
    )
    return node, value, leg
