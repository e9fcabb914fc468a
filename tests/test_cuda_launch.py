"""Prepared launches (raygrid.kernels.cuda.launch) pack what Numba's own launch packs.

No GPU is needed: the driver's launch is replaced by a recorder, in a subprocess with the
simulator off (the real dispatcher), and the parameters it would read are compared byte by
byte with those Numba hands to ``cuda.core``'s launcher for the same arguments. The real
launches run in the GPU tests of the solvers, which launch through this path.
"""

from __future__ import annotations

import ctypes
import textwrap

import numpy as np
import pytest
from ptx import compile_in_parts

from raygrid.kernels.cuda.launch import pack_parameters


def test_parameters_are_packed_as_cuda_core_packs_them():
    handler = pytest.importorskip("cuda.core._kernel_arg_handler")
    values = [0, 7, 2**40, -3, ctypes.c_double(0.25), ctypes.c_float(1.5), ctypes.c_int64(-9),
              ctypes.c_int32(4), True, np.int64(12), np.float64(2.5)]  # fmt: skip
    holders, pointers = pack_parameters(values)
    # Python integers are intptr_t (sizes, shapes, strides, pointers), as in cuda.core.
    assert [ctypes.sizeof(h) for h in holders] == [8, 8, 8, 8, 8, 4, 8, 4, 1, 8, 8]
    reference = handler.ParamHolder(values)
    theirs = (ctypes.c_void_p * len(values)).from_address(reference.ptr)
    for i, holder in enumerate(holders):
        size = ctypes.sizeof(holder)
        assert ctypes.string_at(pointers[i], size) == ctypes.string_at(theirs[i], size), i
    holders[1].value = 8  # a counter is rewritten in place
    assert ctypes.c_ssize_t.from_address(pointers[1]).value == 8
    with pytest.raises(TypeError, match="str"):
        pack_parameters(["no"])


DRIVER_STUB = textwrap.dedent(
    """
    import ctypes, types
    import numba, numpy as np
    from cuda.bindings import driver
    from cuda.core._kernel_arg_handler import ParamHolder
    from numba.cuda import dispatcher
    from numba.cuda.cudadrv import devicearray
    from raygrid.kernels.cuda import launch

    class Memory:  # device memory at a made-up address: nothing is dereferenced
        def __init__(self, address):
            self.device_ctypes_pointer = ctypes.c_void_p(address)

    def device_array(shape, dtype, address):
        dtype = np.dtype(dtype)
        strides = np.empty(shape, dtype).strides
        return devicearray.DeviceNDArray(shape, strides, dtype, gpu_data=Memory(address))

    f8, i8, i4 = numba.float64, numba.int64, numba.int32
    signature = (f8[:, :, ::1], i8, i4[:, ::1], f8, numba.float32, numba.int16[::1])
    arguments = [device_array((7, 1, 9), "f8", 0x1000), 5, device_array((2, 5), "i4", 0x3000),
                 0.25, np.float32(1.5), device_array((3,), "i2", 0x2000)]
    # A compiled kernel as Numba's launch sees it, with the launch itself recorded.
    compiled = types.SimpleNamespace(
        argument_types=signature, debug=False, extensions=[], cooperative=False,
        _codelibrary=types.SimpleNamespace(
            get_cufunc=lambda: types.SimpleNamespace(kernel=None, handle=1234)),
    )
    compiled._prepare_args = lambda *a: dispatcher._Kernel._prepare_args(compiled, *a)
    numba_parameters = []
    dispatcher.launch = lambda stream, config, kernel, *p: numba_parameters.append(p)
    recorded = []
    driver.cuLaunchKernel = lambda *a: (recorded.append(a), (driver.CUresult.CUDA_SUCCESS,))[1]

    prepared = launch._driver_launch(
        types.SimpleNamespace(overloads={signature: compiled}), 3, (64, 2), arguments, 1)
    for counter in (11, 12):  # compared launch by launch: the counter is rewritten in place
        dispatcher._Kernel.launch(
            compiled, [arguments[0], counter, *arguments[2:]], (3, 1, 1), (64, 2, 1), 0, 0)
        prepared(counter)
        numba_side = numba_parameters[-1]
        handle, gx, gy, gz, bx, by, bz, shared, stream, address, extra = recorded[-1]
        assert (handle, gx, gy, gz, bx, by, bz, shared, stream, extra) == (
            1234, 3, 1, 1, 64, 2, 1, 0, 0, 0)
        reference = ParamHolder(numba_side)
        n = len(numba_side)
        ours = (ctypes.c_void_p * n).from_address(address)
        theirs = (ctypes.c_void_p * n).from_address(reference.ptr)
        sizes = [ctypes.sizeof(h) for h in prepared.parameters[0]]
        assert len(sizes) == n
        for i in range(n):
            assert ctypes.string_at(ours[i], sizes[i]) == ctypes.string_at(theirs[i], sizes[i]), i
    print("same parameters", len(numba_parameters[0]), "launches", len(recorded))
    """
)


def test_prepared_launch_passes_numbas_parameters():
    pytest.importorskip("cuda.core._kernel_arg_handler")
    ((returncode, out, err),) = compile_in_parts(DRIVER_STUB, parts=1, timeout=300)
    assert returncode == 0, err[-3000:]
    assert "same parameters 30 launches 2" in out
