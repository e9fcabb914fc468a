"""Predecessors recovered from converged traveltimes by one pull pass (any solver's times).

A push solver that atomic-mins a float64 time cannot update the predecessor in the same
atomic operation, so it keeps times only and recovers predecessors afterwards: at the fixed
point every node that is not a seed has an in-edge that reproduces its time exactly,
``t(v) == t(u) + w(u, v)``, because the solver summed the very same floats (docs/method.md
section 1, "Why bitwise matters"). The pass reads only, so it needs no atomics.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from numba import cuda, float32, float64

from ..layout import PaddedLayout, checked_spacing, flat_steps
from ..rules import EXACT, checked_rule
from ..seeds import checked_precision
from ..star import Star
from .device import edge_weight_gpu

__all__ = ["recover_predecessors", "predecessor_kernel", "star_tables"]


@cache
def predecessor_kernel(rule: int, precomputed: bool, dtype_name: str):
    """The pull kernel for one weight rule, weight source and precision (compiled lazily on
    first launch; ``.py_func`` is the plain function, for ``cuda.compile_ptx``).

    Parameters
    ----------
    rule : int
        :data:`raygrid.kernels.EXACT` or :data:`raygrid.kernels.MEAN` (on-the-fly weights).
    precomputed : bool
        Read weights from the half-star table of
        :func:`raygrid.kernels.cuda.weights.precompute_weights_gpu` instead of computing them.
    dtype_name : str
        ``"float32"`` or ``"float64"``, the precision of the times.
    """
    # Weights are computed in float64 and rounded once to the times' precision, as every
    # solver does, so t(u) + w(u, v) is the same float sum the solver made.
    to_time = float32 if dtype_name == "float32" else float64

    def pull(times, slowness, spacing, offsets, steps, half, is_forward, weights, predecessor):
        pz, py, px = slowness.shape
        v = cuda.grid(1)
        if v >= pz * py * px:
            return
        predecessor[v] = -1
        vz = v // (py * px)
        vy = (v // px) % py
        vx = v % px
        # Dummy nodes (infinite slowness) have no predecessor; checking v first also keeps
        # v - o_k inside the padded grid, whose border is exactly one radius wide.
        if not slowness[vz, vy, vx] < np.inf:
            return
        tv = times[v]
        if not tv < np.inf:
            return
        for k in range(offsets.shape[0]):
            uz = vz - offsets[k, 0]
            uy = vy - offsets[k, 1]
            ux = vx - offsets[k, 2]
            if not slowness[uz, uy, ux] < np.inf:
                continue
            u = v - steps[k]
            tu = times[u]
            # Strictly earlier neighbours only: a predecessor chain then has strictly
            # decreasing times, so it can never loop, even if some weight is so small
            # that t(u) + w == t(u) in floating point.
            if not tu < tv:
                continue
            if precomputed:
                # The edge u -> v has offset o_k: its weight lives at the lower node.
                w = weights[u, half[k]] if is_forward[k] else weights[v, half[k]]
            else:
                w = to_time(
                    edge_weight_gpu(
                        slowness, rule, uz, uy, ux, vz, vy, vx, spacing[0], spacing[1], spacing[2]
                    )
                )
            if tu + w == tv:
                predecessor[v] = k
                return

    return cuda.jit(pull)


def star_tables(star: Star, layout: PaddedLayout):
    """Device copies of the star tables the GPU solvers read, with each offset's step in
    padded flat indices: ``offsets, steps, half, is_forward`` (the last as uint8)."""
    offsets = np.ascontiguousarray(star.offsets, dtype=np.int64)
    steps = flat_steps(offsets, layout.padded)
    return (
        cuda.to_device(offsets),
        cuda.to_device(np.ascontiguousarray(steps, dtype=np.int64)),
        cuda.to_device(np.ascontiguousarray(star.half, dtype=np.int64)),
        cuda.to_device(np.ascontiguousarray(star.is_forward, dtype=np.uint8)),
    )


def recover_predecessors(
    layout: PaddedLayout,
    slowness_padded: Any,
    spacing: np.ndarray,
    star: Star,
    times_padded: Any,
    rule: int = EXACT,
    weights: Any = None,
    *,
    threads: int = 128,
) -> Any:
    """Predecessors of converged traveltimes, by one pull pass over the padded grid.

    Parameters
    ----------
    layout : PaddedLayout
        Geometry of the padded grid (its border must be at least the star's radius).
    slowness_padded : device or host array, shape ``layout.padded``, float64
        Padded slowness, dummy nodes ``inf`` (:meth:`PaddedLayout.pad`).
    spacing : array, shape (3,)
        Node spacing ``(hz, hy, hx)``.
    star : Star
    times_padded : device or host array, shape ``layout.padded`` or flat, float32 or float64
        Traveltimes of any solver on the padded grid (dummies ``inf``), e.g. the CPU
        :func:`raygrid.kernels.dijkstra` times padded with ``layout.pad(times, np.inf)``.
    rule : int
        :data:`raygrid.kernels.EXACT` or :data:`raygrid.kernels.MEAN`; ignored when
        ``weights`` is given.
    weights : device array, optional
        Precomputed half-star weights on the padded grid in the times' precision
        (:func:`raygrid.kernels.cuda.weights.precompute_weights_gpu`).
    threads : int
        Threads per block (one thread per padded node).

    Returns
    -------
    numba.cuda device array, shape ``layout.padded``, ``star.predecessor_dtype``
        ``k`` where the previous node is ``v - star.offsets[k]`` and
        ``t(v) == t(v - o_k) + w(v - o_k, v)`` exactly; ``-1`` where no in-edge from a
        strictly earlier node reproduces ``t(v)`` (seeds, unreached and dummy nodes).
        Take ``layout.unpad(result.copy_to_host())`` for the real grid.

    Notes
    -----
    docs/method.md section 1, "Near-Far / delta-stepping": in float64 the push solver atomic-mins
    the time alone and recovers ``pred(v) = argmin_u t(u) + w(u, v)`` with this pass. At the
    fixed point ``t(v) = min(seed(v), min_u t(u) + w(u, v))``, so the minimum *is* ``t(v)``
    and an exact equality test finds it; the first such ``k`` is taken. Times that are only
    upper bounds (nodes left unsettled by an early exit) may get ``-1``.

    See Also
    --------
    raygrid.kernels.cuda.nearfar.solve_near_far : the push solver that uses it.
    raygrid.kernels.dijkstra : the CPU solver, which records predecessors as it goes.
    """
    rule, spacing = checked_rule(rule), checked_spacing(spacing)  # as every solver's
    times_padded = _device(times_padded)
    dtype = checked_precision(times_padded.dtype, "times")
    n_nodes = int(np.prod(layout.padded))
    if times_padded.size != n_nodes:
        raise ValueError(f"times have {times_padded.size} values, the padded grid {n_nodes}")
    if weights is None:
        weights_arg = cuda.device_array((1, 1), dtype=dtype)
    else:
        if np.dtype(weights.dtype) != dtype:
            raise ValueError(f"weights are {weights.dtype}, times {dtype}: use one precision")
        weights_arg = _device(weights)
    if isinstance(slowness_padded, np.ndarray):
        slowness_padded = np.ascontiguousarray(slowness_padded, dtype=np.float64)
    offsets, steps, half, is_forward = star_tables(star, layout)
    predecessor = cuda.device_array(n_nodes, dtype=star.predecessor_dtype)
    kernel = predecessor_kernel(rule, weights is not None, dtype.name)
    kernel[-(-n_nodes // threads), threads](
        times_padded.reshape(n_nodes),
        _device(slowness_padded),
        cuda.to_device(spacing),
        offsets,
        steps,
        half,
        is_forward,
        weights_arg,
        predecessor,
    )
    return predecessor.reshape(layout.padded)


def _device(array):
    """A device array of ``array`` (copied when it is a host array)."""
    return cuda.to_device(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) else array
