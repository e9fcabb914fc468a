"""The device memory a GPU solver will hold, checked against the GPU's free memory before
anything is allocated.

A model too large for the GPU failed at some allocation in the middle of a solver's
construction, with the driver's words (``CudaAPIError: [2] Call to cuMemAlloc results in
CUDA_ERROR_OUT_OF_MEMORY``) and no hint of what would fit; on a Dask worker, after the
survey had started. Every array a solver keeps has a size known from the grid's shape, the
star, the precision and the batch, so each solver counts them first (its ``device_bytes``
function, next to its allocations) and calls :func:`check_device_memory`.
"""

from __future__ import annotations

from dask.utils import format_bytes
from numba import cuda

__all__ = ["DeviceMemoryError", "DEVICE_HEADROOM", "device_memory", "check_device_memory"]

#: Device memory left out of what a solver may take: the driver reserves local memory (each
#: resident thread's stack) when a kernel is first launched, and a solve makes a few small
#: allocations of its own (its seeds, the receivers it stops at, a phase's tile queue). A
#: margin, not a measurement: a solver that needs up to ``free - DEVICE_HEADROOM`` is built.
DEVICE_HEADROOM = 256 * 2**20


class DeviceMemoryError(MemoryError):
    """A GPU solver would need more device memory than the GPU has free.

    Attributes
    ----------
    needed, free, total : int
        Bytes the solver would hold, free on the device now, and the device's total.
    """

    def __init__(self, what: str, needed: int, free: int, total: int) -> None:
        self.needed, self.free, self.total = needed, free, total
        super().__init__(
            f"{what} needs about {format_bytes(needed)} of GPU memory and the GPU has "
            f"{format_bytes(free)} free (of {format_bytes(total)})"
        )


def device_memory() -> tuple[float, float]:
    """Free and total bytes of the current device's memory.

    Memory Numba holds for deferred release (arrays already dropped, such as a replaced
    solver's) is released first, so that it counts as free. The simulator reports infinite
    memory, and so does this where Numba's memory manager is a plugin that cannot say
    (an external memory manager may leave ``get_memory_info`` unimplemented): the solve
    is then not checked.
    """
    context = cuda.current_context()
    deallocations = getattr(context, "deallocations", None)  # none in the simulator
    if deallocations is not None:
        deallocations.clear()
    try:
        free, total = context.get_memory_info()
    except NotImplementedError:
        return float("inf"), float("inf")
    return free, total


def check_device_memory(needed: int, what: str) -> None:
    """Raise :class:`DeviceMemoryError` if ``needed`` bytes (and :data:`DEVICE_HEADROOM`)
    exceed the current device's free memory; ``what`` names what needs them."""
    free, total = device_memory()
    if needed + DEVICE_HEADROOM > free:
        raise DeviceMemoryError(what, needed, int(free), int(total))
