"""Node-index positions of coordinates along one axis, snapped onto nodes and cell faces
within rounding: where every source, receiver and lookup point lands on the grid.

Compiled, one element at a time, so that one point (a source) and a grid search's 1e5
trial hypocentres are placed by the same code and the same floats, each in microseconds.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["place_along", "half_ulp", "SNAP_TOL"]

#: Relative tolerance (of the index, at least 1) within which a position is on a node or a
#: cell face whatever the coordinates' type: the rounding of ``(x - origin) / h`` itself.
SNAP_TOL = 1e-9


@numba.njit(cache=True)
def half_ulp(value, eps):
    # Half a unit in the last place of value in a float type of machine epsilon eps (0 for
    # exact types): the most that storing it in that type moved it. Its binary exponent
    # read exactly (|v| = m 2^e, m in [0.5, 1): floor(log2 |v|) = e - 1).
    if value == 0.0 or eps == 0.0:
        return 0.0
    exponent = math.frexp(value)[1]
    return 0.5 * eps * math.ldexp(1.0, exponent - 1)


@numba.njit(cache=True)
def _place_one(value, origin, h, nodes, stored, off):
    n = nodes.shape[0]
    i = (value - origin) / h
    nearest = np.rint(i)  # half to even, as Python's round
    tolerance = SNAP_TOL * max(1.0, abs(i))
    on_node = abs(i - nearest) <= tolerance
    if not on_node and (stored != 0.0 or off != 0.0):
        node = nodes[int(min(max(nearest, 0.0), n - 1.0))]
        on_node = abs(value - node) <= half_ulp(node, stored) + 2.0 * off
    face = math.floor(i) + 0.5
    on_face = not on_node and abs(i - face) <= tolerance
    if not (on_node or on_face) and (stored != 0.0 or off != 0.0) and 0.0 <= face < n - 1.0:
        below = int(face)
        middle = (nodes[below] + nodes[below + 1]) / 2.0  # as the stored nodes place it
        on_face = abs(value - middle) <= half_ulp(middle, stored) + 2.0 * off
    index = nearest if on_node else face if on_face else i
    return min(max(index, 0.0), n - 1.0) + 0.0  # + 0.0: -0.0 (z = -0.0) is 0.0


@numba.njit(cache=True)
def _place(values, origin, h, nodes, stored, off, out):
    for k in range(values.shape[0]):
        out[k] = _place_one(values[k], origin, h, nodes, stored, off)


def place_along(
    values: np.ndarray, origin: float, h: float, nodes: np.ndarray, stored: float, off: float
) -> np.ndarray:
    """Fractional node indices of coordinates along one axis.

    Parameters
    ----------
    values : numpy.ndarray
        Coordinates, finite, inside ``[nodes[0], nodes[-1]]`` or on its edges to rounding
        (the caller refuses the others).
    origin, h : float
        The axis's first coordinate and its spacing.
    nodes : numpy.ndarray
        The nodes' coordinates as stored (float64 of their values).
    stored : float
        Machine epsilon of the stored coordinates' float type (0 for float64 and exact
        types): a value within half a unit in the last place of a node is on it.
    off : float
        The stored coordinates' deviation from the uniform ``origin + k h`` (their own
        rounding, counted twice).

    Returns
    -------
    numpy.ndarray of float64
        ``(x - origin) / h``, put on the nearest node within :data:`SNAP_TOL` of the index
        (or within the stored type's rounding of the node), else on the cell face half-way
        between two nodes likewise, clipped to ``[0, n - 1]``. On a node, a face's leg
        takes the faster cell beside it (docs/method.md section 3): a face written as
        2.705 km came out 0.4999999999999912 nodes, its legs timed through the slow cell
        alone (15 % late against the same model in m). Only half a unit in the last place
        counts as the stored type's rounding: four units (1.9 m at a float32 UTM northing of
        4e6 m) moved a source 1.8 m east of a node onto it, its times 1.8 % late 98 m away.
    """
    values = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    out = np.empty(len(values))
    _place(
        values, float(origin), float(h), np.ascontiguousarray(nodes, dtype=np.float64),
        float(stored), float(off), out,
    )  # fmt: skip
    return out
