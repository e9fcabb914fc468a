"""Edge weights: traveltime along a straight segment through the slowness cells.

The functions here are plain Python on purpose: :mod:`.cpu` compiles them with
``numba.njit`` and the CUDA module compiles the same source with
``numba.cuda.jit(device=True, inline="always")``, so both targets sum the same floats in the
same order (docs/method.md section 1, "One algorithm, thin backends"). They therefore use only
scalar arithmetic, ``math`` and array indexing, and call no other Python function but
:func:`product` and :func:`total`.

**Each product rounded on its own.** Every product that a sum takes is written
``product(a, b)`` and that sum ``total(a, b)``: plain ``a * b`` and ``a + b`` on the CPU
(which never fuses them) and in plain Python, but on a GPU NVVM contracts ``a * b + c``
into one fused multiply-add, rounded once: the weights came out a few units in the last
place off the CPU's, and a weight fused into the time it is added to at one batch size and
not at another gave times that depended on the batch (CUDA review, sm_90 PTX). The CUDA
module binds the two names to libdevice's explicitly rounded operations
(:func:`with_arithmetic`), which the compiler never contracts, so every backend rounds the
same way.

Coordinates are in node-index units on a 3D grid ``(nz, ny, nx)``: node ``(i, j, k)`` sits
at the centre of the cell ``[i - 1/2, i + 1/2] x [j - 1/2, j + 1/2] x [k - 1/2, k + 1/2]``
whose slowness is ``slowness[i, j, k]``; ``hz, hy, hx`` are the node spacings.
"""

from __future__ import annotations

import math
import types

from numba.extending import register_jitable

__all__ = ["segment_time", "mean_slowness_time", "product", "total", "with_arithmetic"]


@register_jitable
def product(a, b):
    """``a * b``, rounded on its own (see the module's notes)."""
    return a * b


@register_jitable
def total(a, b):
    """``a + b`` of a product, rounded on its own (see the module's notes)."""
    return a + b


def with_arithmetic(function: types.FunctionType, product, total) -> types.FunctionType:
    """``function``, one of this module's, with its ``product`` and ``total`` bound to
    another backend's (the GPU's explicitly rounded operations): the same source, the same
    order of operations, compiled for that backend."""
    bound = dict(function.__globals__, product=product, total=total)
    return types.FunctionType(
        function.__code__, bound, function.__name__, function.__defaults__, function.__closure__
    )


def segment_time(slowness, pz, py, px, qz, qy, qx, hz, hy, hx):
    """Traveltime along the straight segment from point ``p`` to point ``q``.

    The segment is cut at every cell face it crosses; each piece contributes
    ``slowness(cell) * piece length``.

    Parameters
    ----------
    slowness : array, shape (nz, ny, nx)
        Slowness of each cell (s/m). Any array that indexes like a 3D array works: a NumPy
        array on the CPU, a global or shared-memory array on the GPU.
    pz, py, px, qz, qy, qx : float
        End points in node-index units, inside the grid.
    hz, hy, hx : float
        Node spacing along each axis (m).

    Returns
    -------
    float
        The traveltime (s).

    Notes
    -----
    Kanoksirirath, Appendix A: the crossings of the segment with the cell faces are visited
    in order of the length ratio ``lambda`` in ``[0, 1]``; between two crossings the segment
    lies in one cell. Here the cell is tracked by stepping one index per crossing (a 3D
    digital differential analyser), and simultaneous crossings (through an edge or corner of
    a cell) step every axis at once, so no zero-length piece is ever added.

    **Bitwise symmetry.** The walk always starts from the lexicographically smaller end point
    in ``(z, y, x)``; for two nodes that is the one with the lower flat index. So
    ``segment_time(p, q)`` and ``segment_time(q, p)`` run the same float operations in the
    same order and are equal bit for bit, which every solver's exact-equality promise relies
    on (docs/method.md section 1, "Why bitwise matters").

    Between nodes the face parameters ``(c +- 1/2 - p_k) / d_k`` are quotients of exact
    small half-integers, so equal ratios round to equal floats and ties are detected exactly.
    """
    # Canonical direction: from the lexicographically smaller end.
    if qz < pz or (qz == pz and (qy < py or (qy == py and qx < px))):
        pz, py, px, qz, qy, qx = qz, qy, qx, pz, py, px
    dz = qz - pz
    dy = qy - py
    dx = qx - px
    length = math.sqrt(
        total(
            total(product(dz * hz, dz * hz), product(dy * hy, dy * hy)), product(dx * hx, dx * hx)
        )
    )

    # Cell holding the start point. On a face, take the cell the segment enters.
    sz = 1 if dz > 0 else -1
    sy = 1 if dy > 0 else -1
    sx = 1 if dx > 0 else -1
    cz = int(math.floor(pz + 0.5)) if dz >= 0 else int(math.ceil(pz - 0.5))
    cy = int(math.floor(py + 0.5)) if dy >= 0 else int(math.ceil(py - 0.5))
    cx = int(math.floor(px + 0.5)) if dx >= 0 else int(math.ceil(px - 0.5))

    # Length ratio of the next face crossing along each axis; 2.0 means "never".
    lz = (cz + 0.5 * sz - pz) / dz if dz != 0 else 2.0
    ly = (cy + 0.5 * sy - py) / dy if dy != 0 else 2.0
    lx = (cx + 0.5 * sx - px) / dx if dx != 0 else 2.0

    ratio = 0.0
    time = 0.0  # in units of length: the sum of slowness times length fraction
    nxt = min(lz, min(ly, lx))
    while nxt < 1.0:
        time = total(time, product(slowness[cz, cy, cx], nxt - ratio))
        ratio = nxt
        if lz == nxt:
            cz += sz
            lz = (cz + 0.5 * sz - pz) / dz
        if ly == nxt:
            cy += sy
            ly = (cy + 0.5 * sy - py) / dy
        if lx == nxt:
            cx += sx
            lx = (cx + 0.5 * sx - px) / dx
        nxt = min(lz, min(ly, lx))
    time = total(time, product(slowness[cz, cy, cx], 1.0 - ratio))
    return product(time, length)  # (a caller adds it to a time: never fused into that)


def mean_slowness_time(slowness, uz, uy, ux, vz, vy, vx, hz, hy, hx):
    """Moser's cheap weight between two nodes: mean end-point slowness times length.

    Parameters
    ----------
    slowness : array, shape (nz, ny, nx)
    uz, uy, ux, vz, vy, vx : int
        The two nodes.
    hz, hy, hx : float
        Node spacing.

    Notes
    -----
    Moser (1991), equation (2). IEEE addition and multiplication are commutative, so the
    weight is bitwise symmetric without reordering.
    """
    dz = (vz - uz) * hz
    dy = (vy - uy) * hy
    dx = (vx - ux) * hx
    length = math.sqrt(total(total(product(dz, dz), product(dy, dy)), product(dx, dx)))
    return product(0.5 * (slowness[uz, uy, ux] + slowness[vz, vy, vx]), length)
