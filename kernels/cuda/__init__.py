"""raygrid.kernels.cuda: Numba CUDA shortest-path kernels.

Importing this package needs no GPU and no driver: kernels are compiled lazily on first
launch (no eager signatures), for the block shape, radius, batch and precision asked for.
Under ``NUMBA_ENABLE_CUDASIM=1`` they run in Numba's CUDA simulator.
"""

from ..layout import PaddedLayout
from .device import cuda_usable, simulating

__all__ = ["PaddedLayout", "cuda_usable", "simulating"]
