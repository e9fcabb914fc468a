"""Device functions compiled from the same plain functions as the CPU kernels.

``inline="always"``: a device function compiled on its own makes NVVM ask for a driver when
a kernel is compiled to PTX without a GPU; inlined ones compile anywhere (STYLE.md).
"""

from __future__ import annotations

import numba
from numba import cuda

from ..segment import mean_slowness_time, segment_time

__all__ = ["segment_time_gpu", "mean_slowness_time_gpu", "simulating", "cuda_usable"]

segment_time_gpu = cuda.jit(device=True, inline="always")(segment_time)
mean_slowness_time_gpu = cuda.jit(device=True, inline="always")(mean_slowness_time)


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
