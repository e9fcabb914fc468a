"""Seeds of a multi-seeded solve: checked, one time per node, in the solve's precision
(float32 or float64, checked here too)."""

from __future__ import annotations

import numpy as np

__all__ = ["checked_seeds", "checked_precision", "PRECISIONS"]

#: The precisions every solver computes times in.
PRECISIONS = (np.dtype(np.float32), np.dtype(np.float64))


def checked_precision(dtype, name: str = "dtype") -> np.dtype:
    """``dtype`` as a NumPy dtype, float32 or float64; ``ValueError`` naming ``name`` else
    (an integer dtype gave every time as its most negative value)."""
    try:
        checked = np.dtype(dtype)
    except TypeError:  # ("float23"; and None is float64 to np.dtype: refused below)
        checked = None
    if dtype is None or not isinstance(checked, np.dtype) or checked not in PRECISIONS:
        raise ValueError(f"{name} must be float32 or float64, got {dtype!r}")
    return checked


def checked_seeds(
    nodes: np.ndarray, times: np.ndarray, n_nodes: int, dtype: np.dtype | type
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct seed nodes with their smallest time, as every solver starts from them.

    Parameters
    ----------
    nodes : numpy.ndarray of int
        Flat node indices, each in ``[0, n_nodes)`` (a negative index would silently wrap
        to the far end of the grid).
    times : numpy.ndarray
        Their times (s): finite and ``>= 0``.
    n_nodes : int
        Nodes in the grid.
    dtype : numpy dtype
        The solve's precision: times are rounded to it before the smallest is kept, as the
        solve would compare them.

    Returns
    -------
    nodes, times : numpy.ndarray
        Sorted distinct nodes (int64) and the smallest time given for each (``dtype``).
        ``+ 0`` turns ``-0.0`` into ``+0.0``, whose bit pattern orders first in the GPU's
        packed float32 atomic min (docs/method.md section 1).

    Raises
    ------
    ValueError
        For mismatched lengths, nodes that are not integers or lie outside the grid, times
        not finite and >= 0, or a precision other than float32 and float64.
    """
    dtype = checked_precision(dtype)
    given = np.asarray(nodes)
    if given.size and given.dtype.kind not in "iu":
        # A float index was truncated (5.7 seeded node 5).
        raise ValueError(f"seed nodes must be integer flat indices, got {given.dtype} values")
    nodes = given.astype(np.int64).reshape(-1)
    times = np.asarray(times, dtype=np.float64).reshape(-1)
    if nodes.size != times.size:
        raise ValueError(f"{nodes.size} seed nodes but {times.size} seed times")
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n_nodes):
        raise ValueError(f"seed nodes must be in [0, {n_nodes})")
    if not np.all(np.isfinite(times) & (times >= 0)):
        raise ValueError("seed times must be finite and >= 0")
    times = times.astype(dtype) + dtype.type(0)
    distinct, first = np.unique(nodes, return_inverse=True)
    smallest = np.full(distinct.size, np.inf, dtype=dtype)
    np.minimum.at(smallest, first, times)
    return distinct, smallest
