"""Kernel launches with their arguments marshalled once, for loops that launch one kernel
with the same arrays hundreds of times.

Numba marshals every argument of every launch in Python: the pull kernel's 19 arguments
become 153 kernel parameters, which took ~90 us a launch on a 2-core EPYC with the driver
call stubbed out, and the H100 host spent 120-200 us in each pass's launch
(``launch_s / passes`` in benchmarks/results/gpu_study_h100.md): about as long as a pass's
work on the GPU at 1601^2 (~240 us at base clock in Nsight Compute), so the host barely
kept ahead of the device, and fell behind on small grids and Near-Far's short steps. The
passes schedule and Near-Far launch the same kernel with the same arrays again and again;
only a counter changes.

:func:`prepared_launch` marshals the arguments once, with Numba's own ``_prepare_args``,
packs them as the driver wants them (what ``cuda.core``'s launcher does on every call) and
launches with one ``cuLaunchKernel``, rewriting the counter in place. Where that is not
possible (the simulator, a Numba whose internals differ) it falls back to Numba's launch.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence

import numpy as np

from .device import simulating

__all__ = ["prepared_launch", "pack_parameters", "PREPARED"]

logger = logging.getLogger("raygrid")

#: Launch through the driver with parameters packed once; ``False``: through Numba at every
#: launch (benchmarks/gpu_ab.py times both).
PREPARED = True


def pack_parameters(values: Sequence) -> tuple[list, ctypes.Array]:
    """Kernel parameters as the driver reads them: ``(holders, pointers)``.

    ``values`` is Numba's flat list of one launch's parameters: Python integers (array
    sizes, shapes, strides and data pointers, passed as ``intptr_t``), ctypes scalars and
    Python booleans, packed as ``cuda.core``'s ``ParamHolder`` packs them (tested against
    it). ``holders`` owns the values (a ctypes object each, which a caller may rewrite in
    place); ``pointers`` is the ``void *[]`` that ``cuLaunchKernel`` takes.
    """
    holders = []
    for value in values:
        if isinstance(value, ctypes._SimpleCData):
            holders.append(value)
        elif isinstance(value, (bool, np.bool_)):
            holders.append(ctypes.c_bool(bool(value)))
        elif isinstance(value, np.generic):
            holders.append(np.ctypeslib.as_ctypes_type(value.dtype)(value.item()))
        elif isinstance(value, int):
            holders.append(ctypes.c_ssize_t(value))
        else:
            raise TypeError(f"cannot pack a kernel parameter of type {type(value).__name__}")
    pointers = (ctypes.c_void_p * len(holders))(*(ctypes.addressof(h) for h in holders))
    return holders, pointers


def prepared_launch(
    kernel, griddim, blockdim, arguments: Sequence, variable: int
) -> Callable[[int], None]:
    """``launch(value)``: ``kernel[griddim, blockdim](*arguments)`` with argument
    ``variable`` (an integer scalar) replaced by ``value``, marshalled once.

    Parameters
    ----------
    kernel : numba.cuda dispatcher
        Specialized here for these arguments' types unless it already is, so that even
        Numba's launch skips typing every argument at every launch.
    griddim, blockdim : int or tuple of int
    arguments : sequence
        Device arrays and scalars. The arrays must stay alive, unmoved, as long as the
        returned callable is used (their addresses are packed once).
    variable : int
        Index of the integer argument each launch sets (a pass or step counter).

    Returns
    -------
    callable
        Launches on the default stream, as Numba's launch does; raises ``RuntimeError``
        naming the driver's error where the launch fails. In the simulator, or where
        Numba's internals are not as expected (logged once), Numba's own launch.
    """
    arguments = list(arguments)
    if not getattr(kernel, "specialized", False):  # (the simulator's kernels have no flag)
        kernel = kernel.specialize(*arguments)

    def numba_launch(value: int) -> None:
        arguments[variable] = value
        kernel[griddim, blockdim](*arguments)

    if simulating() or not PREPARED:
        return numba_launch
    try:
        launch = _driver_launch(kernel, griddim, blockdim, arguments, variable)
    except Exception as error:  # a Numba version whose internals differ
        if not _warned:
            _warned.append(True)
            logger.warning("launching through Numba (%s: %s)", type(error).__name__, error)
        return numba_launch
    return launch


_warned: list[bool] = []


def _driver_launch(kernel, griddim, blockdim, arguments, variable):
    from cuda.bindings import driver

    compiled = next(iter(kernel.overloads.values()))
    if len(kernel.overloads) != 1 or compiled.debug or compiled.cooperative:
        raise ValueError("needs one specialized, non-debug, non-cooperative kernel")
    values, written_back, where = [], [], None
    for index, (type_, value) in enumerate(zip(compiled.argument_types, arguments, strict=True)):
        first = len(values)
        compiled._prepare_args(type_, value, 0, written_back, values)
        if index == variable and len(values) == first + 1:
            where = first
    if written_back or where is None:
        # A host array would be copied at each launch, or the counter is not one scalar.
        raise ValueError("arguments must be device arrays, the counter one integer scalar")
    holders, pointers = pack_parameters(values)
    counter = holders[where]
    handle = int(compiled._codelibrary.get_cufunc().handle)  # also makes its context current
    grid = _dim3(griddim)
    block = _dim3(blockdim)
    success = driver.CUresult.CUDA_SUCCESS
    address = ctypes.addressof(pointers)

    def launch(value: int) -> None:
        counter.value = value
        (error,) = driver.cuLaunchKernel(handle, *grid, *block, 0, 0, address, 0)
        if error != success:
            raise RuntimeError(f"kernel launch failed: {error.name}")

    launch.parameters = (holders, pointers)  # keeps them alive with the callable
    return launch


def _dim3(dim) -> tuple[int, int, int]:
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
