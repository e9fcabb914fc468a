"""Forward star of the Moser grid model: which neighbours a node is joined to.

All kernels work on 3D grids ``(nz, ny, nx)``; a 2D model is the same grid with ``ny == 1``
and a zero radius along ``y``, so one solver serves both.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from math import gcd

import numpy as np

__all__ = ["Star", "star_offsets", "forward_star", "checked_radius"]


def star_offsets(radius: tuple[int, int, int], reduce: bool = True) -> np.ndarray:
    """Offsets of the forward star with a per-axis radius.

    Parameters
    ----------
    radius : tuple of int
        ``(rz, ry, rx)``, each ``>= 0``; node ``u`` is joined to ``u + o`` for every offset
        ``o`` with ``|o_k| <= r_k`` and ``o != 0``.
    reduce : bool, default True
        Drop redundant offsets, those whose components share a divisor
        (``gcd(|o_z|, |o_y|, |o_x|) > 1``): their straight segment passes through the node
        ``u + o / gcd``, so the same path already exists as a chain of shorter edges with the
        same total weight ("edge reduction").

    Returns
    -------
    numpy.ndarray of int64, shape (n_offsets, 3)
        Offsets sorted lexicographically in ``(z, y, x)``; the list is symmetric
        (``o`` is in it iff ``-o`` is).

    Notes
    -----
    Moser, T. J. (1991), Shortest path calculation of seismic rays, Geophysics 56(1), 59-67,
    section "Network geometry": the forward star connects a node to the nodes of a box around
    it; edge reduction removes the collinear duplicates.
    """
    rz, ry, rx = checked_radius(radius)
    if min(rz, ry, rx) < 0:
        raise ValueError(f"radius components must be >= 0, got {radius}")
    if max(rz, ry, rx) < 1:
        raise ValueError(f"radius must be >= 1 along at least one axis, got {radius}")
    offsets = [
        (oz, oy, ox)
        for oz in range(-rz, rz + 1)
        for oy in range(-ry, ry + 1)
        for ox in range(-rx, rx + 1)
        if (oz, oy, ox) != (0, 0, 0) and (not reduce or gcd(gcd(oz, oy), ox) == 1)
    ]
    return np.array(offsets, dtype=np.int64).reshape(-1, 3)


def checked_radius(radius) -> tuple[int, int, int]:
    """``radius`` as three Python ints ``(rz, ry, rx)``; ``ValueError`` for anything else.

    ``int()`` would take ``(3.9, 0, 3)`` for radius 3 and a bare ``3`` would fail to
    unpack with a ``TypeError``: a star other than the one asked for, or no word of how to
    ask. (2D is ``(r, 0, r)``: a bare integer does not say which axes.)
    """
    try:
        values = tuple(radius)
    except TypeError:
        values = ()
    try:
        if len(values) != 3 or any(isinstance(r, bool | np.bool_) for r in values):
            raise TypeError
        return tuple(operator.index(r) for r in values)
    except TypeError:
        raise ValueError(
            f"radius must be three integers (rz, ry, rx), e.g. (4, 0, 4) for a 2D model, got "
            f"{radius!r}"
        ) from None


def _is_forward(offset: np.ndarray) -> np.ndarray:
    """True where an offset points to a node of larger flat index (lexicographically > 0)."""
    oz, oy, ox = offset[..., 0], offset[..., 1], offset[..., 2]
    return (oz > 0) | ((oz == 0) & ((oy > 0) | ((oy == 0) & (ox > 0))))


@dataclass(frozen=True)
class Star:
    """A forward star and the index tables the solvers need.

    Attributes
    ----------
    radius : tuple of int
        ``(rz, ry, rx)``.
    offsets : numpy.ndarray, shape (n, 3), int64
        All offsets (see :func:`star_offsets`).
    half : numpy.ndarray, shape (n,), int64
        For offset ``k``, the index into ``forward`` of ``+offsets[k]`` or ``-offsets[k]``,
        whichever points forward. Precomputed weights are stored once per undirected edge, at
        the edge's lower node, so ``w(u, u + o_k)`` lives at ``[u, half[k]]`` when ``o_k``
        points forward and at ``[u + o_k, half[k]]`` otherwise.
    forward : numpy.ndarray, shape (n // 2, 3), int64
        The forward half of the star.
    is_forward : numpy.ndarray, shape (n,), bool
    """

    radius: tuple[int, int, int]
    offsets: np.ndarray
    half: np.ndarray
    forward: np.ndarray
    is_forward: np.ndarray

    @property
    def size(self) -> int:
        """Number of offsets (edges leaving an interior node)."""
        return int(self.offsets.shape[0])

    @property
    def predecessor_dtype(self) -> np.dtype:
        """Smallest signed integer type that holds every offset index and -1."""
        return np.dtype(np.int16 if self.size < np.iinfo(np.int16).max else np.int32)


def forward_star(radius: tuple[int, int, int], reduce: bool = True) -> Star:
    """Build a :class:`Star` for a per-axis radius (Moser 1991; docs/method.md section 1).

    Parameters
    ----------
    radius : tuple of int
        ``(rz, ry, rx)``, each ``>= 0`` (0 on ``y`` for a 2D model).
    reduce : bool, default True
        Drop the offsets whose components share a divisor (:func:`star_offsets`).

    Returns
    -------
    Star
        The offsets and the index tables of their forward half.

    Raises
    ------
    ValueError
        For a radius that is not three non-negative integers, or all zero.
    """
    offsets = star_offsets(radius, reduce=reduce)
    is_forward = _is_forward(offsets)
    forward = offsets[is_forward]
    lookup = {tuple(o): j for j, o in enumerate(forward.tolist())}
    half = np.array(
        [lookup[tuple(o if f else [-c for c in o])] for o, f in zip(offsets.tolist(), is_forward)],
        dtype=np.int64,
    )
    return Star(
        radius=checked_radius(radius),
        offsets=offsets,
        half=half,
        forward=forward,
        is_forward=is_forward,
    )
