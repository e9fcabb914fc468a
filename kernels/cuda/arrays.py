"""Padded grids built and read on the device: fills, padding and unpadding by kernels.

Padding a large grid on the host costs more than the solve (page faults on a fresh padded
copy, then a transfer of the padded size): for 256^3 it took about 0.2 s before the first
relaxation and 0.13 s after the last. Here only the real grid crosses the bus, once each
way, and the dummy border is written on the device.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import cuda

from ..layout import PaddedLayout

__all__ = ["fill", "device_full", "to_padded", "from_padded", "scatter"]

_THREADS = 256


def _grid(n: int) -> tuple[int, int]:
    return max(-(-n // _THREADS), 1), _THREADS


@cache
def _fill_kernel():
    def put_value(flat, value):
        i = cuda.grid(1)
        if i < flat.shape[0]:
            flat[i] = value

    return cuda.jit(put_value)


@cache
def _interior_kernel():
    # One thread per real node of every leading index: copy between the real grid and the
    # padded interior, into the padded array or out of it.
    def copy(real, padded, rz, ry, rx, into_padded):
        lead, nz, ny, nx = real.shape
        i = cuda.grid(1)
        if i >= lead * nz * ny * nx:
            return
        x = i % nx
        y = (i // nx) % ny
        z = (i // (nx * ny)) % nz
        s = i // (nx * ny * nz)
        if into_padded:
            padded[s, z + rz, y + ry, x + rx] = real[s, z, y, x]
        else:
            real[s, z, y, x] = padded[s, z + rz, y + ry, x + rx]

    return cuda.jit(copy)


@cache
def _scatter_kernel():
    def put(flat, index, values):
        i = cuda.grid(1)
        if i < index.shape[0]:
            flat[index[i]] = values[i]

    return cuda.jit(put)


def fill(array, value) -> None:
    """Set every element of the C-contiguous device array ``array`` to ``value``."""
    flat = array.reshape(-1)
    _fill_kernel()[_grid(flat.size)](flat, array.dtype.type(value))


def device_full(shape: tuple[int, ...], value, dtype) -> cuda.devicearray.DeviceNDArray:
    """A device array of ``shape`` filled with ``value`` on the device."""
    array = cuda.device_array(shape, dtype=dtype)
    fill(array, value)
    return array


def to_padded(layout: PaddedLayout, real: np.ndarray, value, lead: int | None = None, out=None):
    """Device copy of ``real`` (``(nz, ny, nx)`` or ``(lead, nz, ny, nx)``) padded by the
    layout's radius with ``value``; ``lead`` rows beyond those of ``real`` are all
    ``value``. ``out``: a device array ``(lead, *layout.padded)`` to write into instead of
    a new one (a solver's buffer, reused across calls)."""
    real = np.ascontiguousarray(real)
    stacked = real.reshape((-1, *layout.shape))
    rows = stacked.shape[0] if lead is None else lead
    if out is None:
        padded = device_full((rows, *layout.padded), value, real.dtype)
    else:
        padded = out
        fill(padded, value)
    if stacked.shape[0]:
        _interior_kernel()[_grid(stacked.size)](
            cuda.to_device(stacked), padded, *layout.radius, True
        )
    return padded if real.ndim == 4 or lead is not None else padded.reshape(layout.padded)


def from_padded(layout: PaddedLayout, padded, out: np.ndarray, real) -> np.ndarray:
    """Copy the real grid of the device array ``padded`` (``(lead, *layout.padded)``) into the
    host array ``out`` (``(rows, nz * ny * nx)`` with ``rows <= lead``, C-contiguous).

    The rows leave through the device array ``real`` (``(k, *layout.shape)``, same dtype),
    ``k`` rows at a time: a solver keeps one row, so its buffers hold one real grid, not a
    batch of them.
    """
    rows = out.shape[0]
    stacked = padded.reshape((-1, *layout.padded))
    step = real.shape[0]
    for first in range(0, rows, step):
        part = real[: min(step, rows - first)]
        last = first + part.shape[0]
        kernel = _interior_kernel()[_grid(part.size)]
        kernel(part, stacked[first:last], *layout.radius, False)
        part.reshape(out[first:last].shape).copy_to_host(out[first:last])
    return out


def scatter(flat, index: np.ndarray, values: np.ndarray) -> None:
    """``flat[index] = values`` on the device (``index`` without repeats)."""
    if len(index):
        _scatter_kernel()[_grid(len(index))](
            flat, cuda.to_device(np.asarray(index, np.int64)), cuda.to_device(values)
        )
