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
def _moving_min(values, axis, r, out):
    # Minimum over [i - r, i + r] along one axis, clipped at the array's ends. Written per
    # axis in place of moving the axis to the front, which cost two more copies of the grid.
    n0, n1, n2 = values.shape
    for i in numba.prange(n0):
        for j in range(n1):
            for k in range(n2):
                if axis == 0:
                    lo, hi = max(i - r, 0), min(i + r + 1, n0)
                    m = values[lo, j, k]
                    for a in range(lo + 1, hi):
                        m = min(m, values[a, j, k])
                elif axis == 1:
                    lo, hi = max(j - r, 0), min(j + r + 1, n1)
                    m = values[i, lo, k]
                    for a in range(lo + 1, hi):
                        m = min(m, values[i, a, k])
                else:
                    lo, hi = max(k - r, 0), min(k + r + 1, n2)
                    m = values[i, j, lo]
                    for a in range(lo + 1, hi):
                        m = min(m, values[i, j, a])
                out[i, j, k] = m


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
    # A box minimum is separable: one axis at a time, through two buffers (16 bytes a node
    # while it runs, 8 after).
    source = np.ascontiguousarray(slowness, dtype=np.float64)
    current, spare = source, None
    for axis, r in enumerate(radius):
        if r == 0:
            continue
        out = spare if spare is not None else np.empty_like(source)
        _moving_min(current, axis, int(r), out)
        spare = current if current is not source else None  # never write the input
        current = out
    return current if current is not source else source.copy()


def reach_lengths(lengths: np.ndarray) -> np.ndarray:
    """Edge lengths shrunk just enough that ``floor[u] * reach`` never exceeds a weight."""
    return np.asarray(lengths, dtype=np.float64) * _SHRINK
