"""Lower bounds on edge weights, so a solver can skip an edge without computing its weight.

An edge ``u -> u + offset`` only crosses cells whose centres lie in the box spanned by its
two end nodes (cells are centred on nodes), so every one of them is within the star radius
of ``u``. Its weight is therefore at least ``length * floor[u]``, where ``floor[u]`` is the
smallest slowness in the ``(2r + 1)``-wide window around ``u``: a separable moving minimum.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["slowness_floor", "reach_lengths"]

# Edge weights are float sums of a few products, each within a few units in the last place
# of the exact value, so a bound shrunk by 2**-32 (relative) stays below the computed weight
# for any star (thousands of crossings would be needed to lose that much).
_SHRINK = 1.0 - 2.0**-32


@numba.njit(parallel=True, cache=True)
def _moving_min_z(values, r, out):
    n0, n1, n2 = values.shape
    for i in numba.prange(n0):
        lo, hi = max(i - r, 0), min(i + r + 1, n0)
        for j in range(n1):
            for k in range(n2):
                m = values[lo, j, k]
                for a in range(lo + 1, hi):
                    m = min(m, values[a, j, k])
                out[i, j, k] = m


def _moving_min(values: np.ndarray, radius: tuple[int, int, int]) -> np.ndarray:
    # One axis at a time (a box minimum is separable); the axis is moved to the front so a
    # single kernel serves all three.
    out = values
    for axis, r in enumerate(radius):
        if r == 0:
            continue
        front = np.ascontiguousarray(np.moveaxis(out, axis, 0))
        result = np.empty_like(front)
        _moving_min_z(front, r, result)
        out = np.moveaxis(result, 0, axis)
    return np.ascontiguousarray(out)


def slowness_floor(slowness: np.ndarray, radius: tuple[int, int, int]) -> np.ndarray:
    """Smallest slowness within ``radius`` (per axis) of every node.

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx), float64
        Slownesses; dummy nodes of a padded grid hold ``inf`` and never lower the floor.
    radius : tuple of int
        ``(rz, ry, rx)``: the forward-star radius.

    Returns
    -------
    numpy.ndarray, same shape
        ``floor[u] <= slowness[c]`` for every cell ``c`` that an edge of the star from ``u``
        crosses.
    """
    return _moving_min(np.asarray(slowness, dtype=np.float64), tuple(radius))


def reach_lengths(lengths: np.ndarray) -> np.ndarray:
    """Edge lengths shrunk just enough that ``floor[u] * reach`` never exceeds a weight."""
    return np.asarray(lengths, dtype=np.float64) * _SHRINK
