"""Device functions compiled from the same plain functions as the CPU kernels.

``inline="always"``: a device function compiled on its own makes NVVM ask for a driver when
a kernel is compiled to PTX without a GPU; inlined ones compile anywhere.
"""

from __future__ import annotations

import numba
from numba import cuda, float64

from ..rules import EXACT
from ..segment import mean_slowness_time, segment_time

__all__ = [
    "segment_time_gpu",
    "mean_slowness_time_gpu",
    "edge_weight_gpu",
    "simulating",
    "cuda_usable",
]

segment_time_gpu = cuda.jit(device=True, inline="always")(segment_time)
mean_slowness_time_gpu = cuda.jit(device=True, inline="always")(mean_slowness_time)


@cuda.jit(device=True, inline="always")
def edge_weight_gpu(slowness, rule, uz, uy, ux, vz, vy, vx, hz, hy, hx):
    """Weight (float64) of the edge between nodes ``u`` and ``v`` of ``slowness`` by the rule.

    Kernels pass ``rule`` as a compile-time constant, so the branch folds away.
    """
    if rule == EXACT:
        return segment_time_gpu(
            slowness, float64(uz), float64(uy), float64(ux),
            float64(vz), float64(vy), float64(vx), hz, hy, hx,
        )  # fmt: skip
    return mean_slowness_time_gpu(slowness, uz, uy, ux, vz, vy, vx, hz, hy, hx)


def simulating() -> bool:
    """True when Numba's CUDA simulator stands in for a GPU (``NUMBA_ENABLE_CUDASIM=1``)."""
    return bool(numba.config.ENABLE_CUDASIM)


def cuda_usable() -> bool:
    """True when a real CUDA device can run kernels (the simulator does not count)."""
    if simulating():
        return False
    try:
        return bool(cuda.is_available()) and len(cuda.gpus) > 0
    except Exception:  # a broken driver install is "not usable", never a crash
        return False
