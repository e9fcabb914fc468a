"""Precomputed edge weights on the GPU, for solvers that reuse them across sources."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from numba import cuda

from .device import edge_weight_gpu

__all__ = ["precompute_weights_gpu", "weight_kernel"]


@cache
def weight_kernel(rule: int):
    """The kernel filling ``weights[u, j]`` for one weight rule (compiled on first launch;
    ``.py_func`` is the plain function, for ``cuda.compile_ptx``).

    One thread per padded node ``u``; ``weights[u, j]`` is the weight of
    ``u -> u + forward[j]`` in float64, rounded once to the weights' dtype (the CPU's
    rule), ``inf`` where either end is a dummy node or outside the padded grid.
    """

    def fill(slowness, spacing, forward, weights):
        pz, py, px = slowness.shape
        u = cuda.grid(1)
        if u >= pz * py * px:
            return
        uz = u // (py * px)
        uy = (u // px) % py
        ux = u % px
        for j in range(forward.shape[0]):
            vz = uz + forward[j, 0]
            vy = uy + forward[j, 1]
            vx = ux + forward[j, 2]
            w = np.inf
            if 0 <= vz < pz and 0 <= vy < py and 0 <= vx < px:
                if slowness[uz, uy, ux] < np.inf and slowness[vz, vy, vx] < np.inf:
                    w = edge_weight_gpu(
                        slowness, rule, uz, uy, ux, vz, vy, vx, spacing[0], spacing[1], spacing[2]
                    )
            weights[u, j] = w

    return cuda.jit(fill)


def precompute_weights_gpu(
    slowness_padded: Any, spacing: np.ndarray, forward: np.ndarray, rule: int, dtype: Any
) -> Any:
    """Device array ``(Pz * Py * Px, n_forward)`` of edge weights on the padded grid.

    Parameters
    ----------
    slowness_padded : device or host array, shape (Pz, Py, Px), float64
        Padded slowness (dummies ``inf``), see :class:`raygrid.kernels.cuda.PaddedLayout`.
    spacing : array, shape (3,), float64
    forward : array, shape (n_forward, 3), int64
        The forward half of the star (:class:`raygrid.kernels.Star`).
    rule : int
        :data:`raygrid.kernels.EXACT` or :data:`raygrid.kernels.MEAN`.
    dtype : numpy dtype
        Storage precision.
    """
    n_nodes = int(np.prod(slowness_padded.shape))
    weights = cuda.device_array((n_nodes, forward.shape[0]), dtype=dtype)
    threads = 128
    weight_kernel(rule)[-(-n_nodes // threads), threads](
        cuda.to_device(slowness_padded)
        if isinstance(slowness_padded, np.ndarray)
        else slowness_padded,
        cuda.to_device(np.asarray(spacing, dtype=np.float64)),
        cuda.to_device(np.asarray(forward, dtype=np.int64)),
        weights,
    )
    return weights
