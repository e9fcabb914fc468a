"""Padded grids built and read on the device: fills, padding and unpadding by kernels, and
the small per-batch state a solver stages through one pinned buffer.

Padding a large grid on the host costs more than the solve (page faults on a fresh padded
copy, then a transfer of the padded size): for 256^3 it took about 0.2 s before the first
relaxation and 0.13 s after the last. Here only the real grid crosses the bus, once each
way, and the dummy border is written on the device.

A solver resets its state for every batch of sources. Done with a fresh ``cuda.to_device``
per small array and a kernel launched through Numba's dispatcher per fill, that reset took
about 3.5 ms at 1601^2 on an H200 (0.26 ms per small upload, ~0.3 ms per launch:
benchmarks/results/gpu_study_h200.md), a tenth of the solve. :class:`Staging` puts the
small arrays in one pinned buffer copied in one call, and the ``prepared_*`` helpers launch
their kernels with arguments marshalled once (:func:`~raygrid.kernels.cuda.launch.prepared_launch`):
a resident batch's reset then took 0.6-1.0 ms instead of 2.4-4.5 ms on an H100
(benchmarks/results/gpu_targets_h100.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from numba import cuda

from ..layout import BAD_SLOWNESS, PaddedLayout
from .launch import prepared_launch

__all__ = [
    "fill", "device_full", "to_padded", "padded_slowness", "from_padded", "prepared_fills",
    "prepared_scatter", "prepared_from_padded", "Staging",
]  # fmt: skip

_THREADS = 256
#: Byte alignment of each array in a :class:`Staging` buffer (a global-memory transaction's
#: worth, so every array starts as a fresh allocation would).
_ALIGN = 256


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
def _fill_four_kernel():
    # Four fills in one launch (a batch's reset): one thread per element of the largest.
    def put_values(a, va, b, vb, c, vc, d, vd, n):
        i = cuda.grid(1)
        if i < a.shape[0]:
            a[i] = va
        if i < b.shape[0]:
            b[i] = vb
        if i < c.shape[0]:
            c[i] = vc
        if i < d.shape[0]:
            d[i] = vd

    return cuda.jit(put_values)


@cache
def _interior_kernel():
    # One thread per real node of every leading index: copy between the real grid and the
    # padded interior (rows ``row, row + 1, ...`` of the padded stack), into the padded
    # array or out of it.
    def copy(real, padded, rz, ry, rx, into_padded, row):
        lead, nz, ny, nx = real.shape
        i = cuda.grid(1)
        if i >= lead * nz * ny * nx:
            return
        x = i % nx
        y = (i // nx) % ny
        z = (i // (nx * ny)) % nz
        s = i // (nx * ny * nz)
        if s + row >= padded.shape[0]:
            return  # a last group of rows shorter than ``real``'s
        if into_padded:
            padded[s + row, z + rz, y + ry, x + rx] = real[s, z, y, x]
        else:
            real[s, z, y, x] = padded[s + row, z + rz, y + ry, x + rx]

    return cuda.jit(copy)


@cache
def _slowness_kernel():
    # The interior copy of a slowness model, checking each value on its way: the model is
    # read here anyway, so the check costs no pass of its own (on the host it took 2.3 ms
    # at 1601^2, two reductions: benchmarks/results/gpu_study_h200.md).
    def copy_checked(real, padded, rz, ry, rx, bad):
        nz, ny, nx = real.shape
        i = cuda.grid(1)
        if i >= nz * ny * nx:
            return
        x = i % nx
        y = (i // nx) % ny
        z = i // (nx * ny)
        value = real[z, y, x]
        # NaN fails both comparisons; infinite slowness is what marks the dummy nodes.
        if not (value > 0.0 and value < np.inf):
            bad[0] = 1  # every writer writes the same value: no atomic needed
        padded[z + rz, y + ry, x + rx] = value

    return cuda.jit(copy_checked)


@cache
def _scatter_pair_kernel():
    # Seeds: a time and a predecessor at the same index, in one launch.
    def put_pair(a, b, index, va, vb, n):
        i = cuda.grid(1)
        if i < n:
            a[index[i]] = va[i]
            b[index[i]] = vb[i]

    return cuda.jit(put_pair)


def fill(array, value) -> None:
    """Set every element of the C-contiguous device array ``array`` to ``value``."""
    flat = array.reshape(-1)
    _fill_kernel()[_grid(flat.size)](flat, array.dtype.type(value))


def prepared_fills(fills: list[tuple]) -> Callable[[], None]:
    """Up to four ``fill(array, value)`` as one callable, one launch marshalled once, for
    buffers filled again and again (a batch's reset: marshalling a launch costs ~0.2 ms of
    host time, once; each launch ~10 us). The arrays must stay alive and unmoved while it
    is used."""
    if not 1 <= len(fills) <= 4:
        raise ValueError(f"one to four fills, got {len(fills)}")
    fills = list(fills) + [fills[0]] * (4 - len(fills))  # a fill done twice is the same
    arguments, largest = [], 0
    for array, value in fills:
        flat = array.reshape(-1)
        arguments += [flat, array.dtype.type(value)]
        largest = max(largest, flat.size)
    launch = prepared_launch(_fill_four_kernel(), *_grid(largest), (*arguments, 0), 8)
    return lambda: launch(0)


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
            cuda.to_device(stacked), padded, *layout.radius, True, 0
        )
    return padded if real.ndim == 4 or lead is not None else padded.reshape(layout.padded)


def padded_slowness(layout: PaddedLayout, slowness: np.ndarray):
    """The device copy of a float64 ``(nz, ny, nx)`` slowness model padded with infinite
    slowness (the dummy nodes), its values checked on the device on their way in.

    Raises
    ------
    ValueError
        If a value is not finite and positive, as
        :func:`~raygrid.kernels.layout.checked_slowness` would (which the GPU solvers call
        with ``values=False``: one check, here).
    """
    padded = device_full(layout.padded, np.inf, np.float64)
    bad = cuda.mapped_array(1, dtype=np.int32)  # read by the host with no copy
    bad[0] = 0
    _slowness_kernel()[_grid(slowness.size)](cuda.to_device(slowness), padded, *layout.radius, bad)
    cuda.synchronize()
    if bad[0]:
        raise ValueError(BAD_SLOWNESS)
    return padded


def from_padded(layout: PaddedLayout, padded, out: np.ndarray, real) -> np.ndarray:
    """Copy the real grid of the device array ``padded`` (``(lead, *layout.padded)``) into the
    host array ``out`` (``(rows, nz * ny * nx)`` with ``rows <= lead``, C-contiguous).

    The rows leave through the device array ``real`` (``(k, *layout.shape)``, same dtype),
    ``k`` rows at a time: a solver keeps one row, so its buffers hold one real grid, not a
    batch of them.
    """
    prepared_from_padded(layout, padded, real, prepared=False)(out)
    return out


def prepared_from_padded(
    layout: PaddedLayout, padded, real, prepared: bool = True
) -> Callable[[np.ndarray], None]:
    """:func:`from_padded` for these device arrays as a callable ``copy(out)`` whose kernel is
    marshalled once (``prepared=False``: launched through Numba, for a copy made once)."""
    stacked = padded.reshape((-1, *layout.padded))
    step = real.shape[0]
    arguments = (real, stacked, *layout.radius, False, 0)
    grid = _grid(real.size)
    if prepared:
        launch = prepared_launch(_interior_kernel(), *grid, arguments, variable=6)
    else:
        kernel = _interior_kernel()[grid]

        def launch(row: int) -> None:
            kernel(*arguments[:-1], row)

    def copy(out: np.ndarray) -> None:
        rows = out.shape[0]
        for first in range(0, rows, step):
            # Rows past the last leave the buffer's tail unused (never read back).
            count = min(step, rows - first)
            launch(first)
            last = first + count
            real[:count].reshape(out[first:last].shape).copy_to_host(out[first:last])

    return copy


def prepared_scatter(flats: tuple, index, values: tuple) -> Callable[[int], None]:
    """``put(n)``: ``a[index[:n]] = va[:n]`` and ``b[index[:n]] = vb[:n]`` for ``flats = (a,
    b)`` and ``values = (va, vb)`` on the device, in one launch marshalled once; ``index``
    and the values are device arrays (a :class:`Staging`'s), ``n`` at most their length."""
    launch = prepared_launch(
        _scatter_pair_kernel(), *_grid(len(index)), (*flats, index, *values, 0), 5
    )

    def put(n: int) -> None:
        if n:
            launch(n)

    return put


class Staging:
    """Small arrays set on the host and copied to the device together: one pinned buffer,
    one device buffer, one copy.

    Parameters
    ----------
    arrays : dict
        ``name: (shape, dtype)`` of each array.

    Attributes
    ----------
    host, device : dict
        ``name``: the array's NumPy view of the pinned buffer, and its device array (a view
        of the device buffer, fit to pass to a kernel).

    Notes
    -----
    :meth:`upload` copies asynchronously on the default stream, so the kernels launched
    after it see the values. The host views must not be written again before that copy has
    finished: :meth:`wait` waits for it (at once where it is done, as it is once a solver
    has read the last batch's results back).
    """

    def __init__(self, arrays: dict[str, tuple[tuple[int, ...], type]]) -> None:
        offsets, end = self._offsets(arrays)
        self._host = cuda.pinned_array(end, dtype=np.uint8)
        self._device = cuda.device_array(end, dtype=np.uint8)
        self._sent = cuda.event()  # recorded after each upload (the simulator takes no flag)
        self.host, self.device = {}, {}
        for name, (shape, dtype) in arrays.items():
            start = offsets[name]
            stop = start + int(np.prod(shape)) * np.dtype(dtype).itemsize
            self.host[name] = self._host[start:stop].view(dtype).reshape(shape)
            self.device[name] = self._device[start:stop].view(dtype).reshape(shape)

    @staticmethod
    def _offsets(arrays: dict[str, tuple[tuple[int, ...], type]]) -> tuple[dict, int]:
        offsets, end = {}, 0
        for name, (shape, dtype) in arrays.items():
            offsets[name] = end
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            end += -(-max(size, 1) // _ALIGN) * _ALIGN
        return offsets, end

    @classmethod
    def nbytes(cls, arrays: dict[str, tuple[tuple[int, ...], type]]) -> int:
        """Bytes of the device buffer (and of the pinned one) for ``arrays``."""
        return cls._offsets(arrays)[1]

    def upload(self) -> None:
        """Copy every array to the device (asynchronously, in stream order)."""
        stream = cuda.default_stream()
        self._device.copy_to_device(self._host, stream=stream)
        self._sent.record(stream)

    def wait(self) -> None:
        """Wait until the last upload has read the host views, before they are rewritten."""
        self._sent.synchronize()
