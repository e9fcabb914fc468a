"""raygrid.kernels.cuda: Numba CUDA shortest-path kernels.

Importing this package needs no GPU and no driver: kernels are compiled lazily on first
launch (no eager signatures), for the block shape, radius, batch and precision asked for.
Under ``NUMBA_ENABLE_CUDASIM=1`` they run in Numba's CUDA simulator.
"""

from ..layout import PaddedLayout
from .device import (
    COMPILER_HINT,
    compiler_problem,
    cuda_usable,
    gpu_present,
    simulating,
    unusable_reason,
)

__all__ = [
    "PaddedLayout", "cuda_usable", "gpu_present", "compiler_problem", "COMPILER_HINT",
    "unusable_reason", "simulating",
]  # fmt: skip
