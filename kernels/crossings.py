"""Crossing tables: each forward-star edge's cells, length fractions and length, once per star.

Between two nodes, the cells a segment crosses and the fraction of its length in each depend
only on the offset, not on where the segment sits: the face parameters are quotients of small
half-integers. So the weight of ``u -> u + o`` is ``length(o) * sum_e s[low + cell_e] *
fraction_e``, about ``|o_z| + |o_y| + |o_x|`` terms, where ``low`` is the edge's lower node.

The tables are not a second implementation of the walk: they are read off
:func:`raygrid.kernels.segment.segment_time` itself, run once per offset in plain Python with
probe objects standing in for the slowness array. Python floats are IEEE doubles, so the
fractions are the very values the compiled walk computes, and a weight summed from the table in
the same order equals ``segment_time`` bit for bit (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .layout import checked_spacing, flat_steps
from .rules import EXACT, checked_rule
from .segment import segment_time
from .star import Star

__all__ = ["Crossings", "star_crossings", "leg_crossings"]


class _Walk:
    """Records what ``segment_time`` does with the slowness it is given."""

    def __init__(self):
        self.cells: list[tuple[int, int, int]] = []
        self.fractions: list[float] = []
        self.length: float | None = None

    def __getitem__(self, cell):
        return _Cell(self, cell)

    # ``total`` becomes this object after the first piece: ``0.0 + piece``.
    def __radd__(self, other):
        return self

    def __add__(self, other):
        return self

    def __mul__(self, length):  # the final ``total * length``
        self.length = float(length)
        return 0.0


class _Cell:
    def __init__(self, walk: _Walk, cell):
        self.walk, self.cell = walk, tuple(int(c) for c in cell)

    def __mul__(self, fraction):  # ``slowness[cell] * fraction``
        self.walk.cells.append(self.cell)
        self.walk.fractions.append(float(fraction))
        return self.walk


@dataclass(frozen=True)
class Crossings:
    """Per forward offset ``j``: entries ``start[j]:start[j+1]`` of ``step`` and ``fraction``.

    Attributes
    ----------
    start : numpy.ndarray of int64, shape (n_forward + 1,)
    step : numpy.ndarray of int64
        Flat index step, in the grid the table was made for, from the edge's lower node to
        the cell of each piece.
    fraction : numpy.ndarray of float64
        Fraction of the segment's length in that cell.
    length : numpy.ndarray of float64, shape (n_forward,)
        Segment length (m).
    """

    start: np.ndarray
    step: np.ndarray
    fraction: np.ndarray
    length: np.ndarray


def star_crossings(
    star: Star, spacing: np.ndarray, rule: int, grid_shape: tuple[int, int, int]
) -> Crossings:
    """Crossing tables of a star's forward offsets, with flat steps for ``grid_shape``.

    ``rule=EXACT`` reads the cell-crossing walk; the mean rule (Moser's) weighs the two end
    cells by one half each, which rounds exactly like ``0.5 * (s_u + s_v)``: halving is
    exact, so ``0.5 s_u + 0.5 s_v`` and ``0.5 (s_u + s_v)`` round the same sum.

    The tables are cached (the last :data:`CACHED_TABLES` stars, spacings, rules and grids)
    and shared by every caller: their arrays are read-only.

    Every backend's weights come from here (the CPU graph, the GPU pull solver) or check
    their settings as it does (Near-Far), so a bad ``spacing`` or ``rule`` is refused in
    one way everywhere.

    Parameters
    ----------
    star : Star
        Its forward offsets are tabled.
    spacing : numpy.ndarray, shape (3,)
        ``(hz, hy, hx)``, in the model's length unit (metres in the pipeline).
    rule : int
        :data:`~raygrid.kernels.rules.EXACT` (Kanoksirirath, Appendix A) or
        :data:`~raygrid.kernels.rules.MEAN` (Moser 1991).
    grid_shape : tuple of int
        ``(nz, ny, nx)`` of the (padded) grid the flat steps index.

    Returns
    -------
    Crossings
        Per forward offset, the cells its segment crosses and their lengths, and the flat
        step to its end node.

    Raises
    ------
    ValueError
        For a spacing that is not three finite positive numbers
        (:func:`~raygrid.kernels.layout.checked_spacing`) or an unknown ``rule``
        (:func:`~raygrid.kernels.rules.checked_rule`).
    """
    forward = np.ascontiguousarray(star.forward, dtype=np.int64).tobytes()
    spacing = tuple(float(h) for h in checked_spacing(spacing))
    key = (forward, spacing, checked_rule(rule), tuple(map(int, grid_shape)))
    return _star_crossings(*key)


#: How many crossing tables :func:`star_crossings` keeps (tens of KB each at radius 5).
CACHED_TABLES = 64


@lru_cache(maxsize=CACHED_TABLES)
def _star_crossings(forward: bytes, spacing: tuple, rule: int, grid_shape: tuple) -> Crossings:
    # Tracing the walk in Python takes 1.4 ms at 2D radius 5, and a GPU solve asked for it
    # for the kernels' constants (unit spacing) and for the lengths (the model's), every
    # solve: now once per star, spacing, rule and grid.
    hz, hy, hx = spacing
    start, step, fraction, length = [0], [], [], []
    for offset in np.frombuffer(forward, dtype=np.int64).reshape(-1, 3).tolist():
        walk = _Walk()
        segment_time(walk, 0.0, 0.0, 0.0, *map(float, offset), hz, hy, hx)
        if rule == EXACT:
            cells, fractions = walk.cells, walk.fractions
        else:
            cells, fractions = [(0, 0, 0), tuple(offset)], [0.5, 0.5]
        step += flat_steps(np.reshape(cells, (-1, 3)), grid_shape).tolist()
        fraction += fractions
        start.append(len(step))
        length.append(walk.length)
    tables = [
        np.array(start, dtype=np.int64),
        np.array(step, dtype=np.int64),
        np.array(fraction, dtype=np.float64),
        np.array(length, dtype=np.float64),
    ]
    for table in tables:
        table.flags.writeable = False
    return Crossings(*tables)


def leg_crossings(
    a3: np.ndarray, b3: np.ndarray, spacing: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """The cells a straight leg between two points crosses, the fraction of its length in
    each and its length (m): read off :func:`~raygrid.kernels.segment.segment_time` itself,
    as the star's tables are, for a leg that is no star edge (a ray's first or last leg).

    Parameters
    ----------
    a3, b3 : numpy.ndarray, shape (3,)
        The ends in node-index units ``(z, y, x)``.
    spacing : numpy.ndarray, shape (3,)
        ``(hz, hy, hx)`` in metres.

    Returns
    -------
    cells : numpy.ndarray, shape (k, 3), int64
        Each piece's cell, in the order walked (from the lexicographically smaller end); on
        a cell face, the cell of higher index, as ``segment_time`` takes it.
    fractions : numpy.ndarray, shape (k,)
    length : float
    """
    walk = _Walk()
    hz, hy, hx = map(float, spacing)
    segment_time(walk, *map(float, a3), *map(float, b3), hz, hy, hx)
    cells = np.array(walk.cells, dtype=np.int64).reshape(-1, 3)
    return cells, np.array(walk.fractions, dtype=np.float64), walk.length
