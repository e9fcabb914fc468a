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

from numba import cuda

__all__ = ["DeviceMemoryError", "DEVICE_HEADROOM", "device_memory", "check_device_memory"]

#: Device memory left out of what a solver may take: the driver reserves local memory (each
#: resident thread's stack) when a kernel is first launched, and a solve makes a few small
#: allocations of its own (its seeds, the receivers it stops at, a phase's tile queue). A
#: margin, not a measurement: a solver that needs up to ``free - DEVICE_HEADROOM`` is built.
DEVICE_HEADROOM = 256 * 2**20


class DeviceMemoryError(MemoryError):
    """A GPU solver would need more device memory than the GPU has free.

    Parameters
    ----------
    what : str
        What needs the memory (``"the CUDA pull solver of 2,563,201 nodes"``).
    needed, free, total : int
        Bytes it would hold, free on the device now, and the device's total.
    """

    def __init__(self, what: str, needed: int, free: int, total: int) -> None:
        super().__init__(what, needed, free, total)  # all four: it pickles (Dask tasks)
        self.what, self.needed, self.free, self.total = what, needed, free, total

    def __str__(self) -> str:
        return (
            f"{self.what} needs about {_bytes(self.needed)} of GPU memory and the GPU has "
            f"{_bytes(self.free)} free (of {_bytes(self.total)})"
        )


def _bytes(n: float) -> str:
    """``n`` bytes in binary units, as Dask's ``format_bytes`` writes them (the kernels do
    not import Dask)."""
    for prefix, k in (("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("ki", 1)):
        if n >= 0.9 * 1024**k:
            return f"{n / 1024**k:.2f} {prefix}B"
    return f"{int(n)} B"


def device_memory() -> tuple[float, float]:
    """Free and total bytes of the current device's memory.

    Memory Numba holds for deferred release (arrays already dropped, such as a replaced
    solver's) is released first, so that it counts as free. The simulator reports infinite
    memory, and so does this where Numba's memory manager is a plugin that cannot say
    (an external memory manager may leave ``get_memory_info`` unimplemented): the solve
    is then not checked.
    """
    context = cuda.current_context()
    # Numba queues a dropped device array's free on its memory manager's list (the
    # context's own list holds streams and events): both are flushed. None in the
    # simulator, nor for an external memory manager that keeps no such list.
    for owner in (context, getattr(context, "memory_manager", None)):
        deallocations = getattr(owner, "deallocations", None)
        if deallocations is not None:
            deallocations.clear()
    try:
        free, total = context.get_memory_info()
    except NotImplementedError:
        return float("inf"), float("inf")
    return free, total


def check_device_memory(needed: int, what: str) -> None:
    """Refuse an allocation of ``needed`` bytes the current device cannot hold.

    Parameters
    ----------
    needed : int
        Bytes about to be allocated.
    what : str
        What needs them, for the message.

    Raises
    ------
    DeviceMemoryError
        If ``needed`` and :data:`DEVICE_HEADROOM` exceed the device's free memory
        (:func:`device_memory`).
    """
    free, total = device_memory()
    if needed + DEVICE_HEADROOM > free:
        raise DeviceMemoryError(what, needed, int(free), int(total))
