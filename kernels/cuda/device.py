"""Device functions compiled from the same plain functions as the CPU kernels.

``inline="always"``: a device function compiled on its own makes NVVM ask for a driver when
a kernel is compiled to PTX without a GPU; inlined ones compile anywhere.
"""

from __future__ import annotations

import math
from functools import cache

import numba
from numba import cuda, float64

from ..rules import EXACT
from ..segment import mean_slowness_time, segment_time, with_arithmetic

__all__ = [
    "product_rn",
    "total_rn",
    "segment_time_gpu",
    "mean_slowness_time_gpu",
    "edge_weight_gpu",
    "simulating",
    "cuda_usable",
    "gpu_present",
    "compiler_problem",
    "unusable_reason",
    "COMPILER_HINT",
]

if numba.config.ENABLE_CUDASIM:  # (simulating(), below) Python's floats round as the CPU's
    from ..segment import product as product_rn
    from ..segment import total as total_rn
else:
    from numba.cuda.libdevice import dadd_rn, dmul_rn

    # mul.rn.f64 and add.rn.f64: explicitly rounded, which NVVM and ptxas never contract
    # into a fused multiply-add (a plain a * b + c they do, by default).
    @cuda.jit(device=True, inline="always")
    def product_rn(a, b):
        """``a * b`` rounded on its own (:mod:`raygrid.kernels.segment`'s notes)."""
        return dmul_rn(a, b)

    @cuda.jit(device=True, inline="always")
    def total_rn(a, b):
        """``a + b`` rounded on its own, never fused with a product."""
        return dadd_rn(a, b)


segment_time_gpu = cuda.jit(device=True, inline="always")(
    with_arithmetic(segment_time, product_rn, total_rn)
)
mean_slowness_time_gpu = cuda.jit(device=True, inline="always")(
    with_arithmetic(mean_slowness_time, product_rn, total_rn)
)


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
    """True when a real CUDA device can run kernels (the simulator does not count): a GPU
    and its driver are found, and so is the compiler (:func:`compiler_problem`)."""
    return gpu_present() and compiler_problem() is None


def gpu_present() -> bool:
    """True when a real NVIDIA GPU and its driver are found (the simulator does not count)."""
    if simulating():
        return False
    try:
        return bool(cuda.is_available()) and len(cuda.gpus) > 0
    except Exception:  # a broken driver install is "not usable", never a crash
        return False


@cache
def compiler_problem() -> str | None:
    """Why Numba cannot compile a CUDA kernel here, or ``None`` when it can.

    A driver runs kernels, but compiling them takes NVVM, libdevice and NVRTC as well:
    ``pip install numba-cuda`` alone brings none of them (``numba-cuda[cu13]``, in
    raygrid's ``cuda`` extra, does; so does a CUDA toolkit). Without them a GPU machine
    failed at its first kernel with ``DynamicLibNotFoundError``, even under
    ``backend="auto"``. (NumPy 2.5 with numba-cuda 0.30 fails here too: ``np.row_stack``.)
    Compiles a one-line kernel to PTX (no GPU needed) once per process: about 0.8 s, paid
    only where :func:`gpu_present`. For real CUDA only: the simulator compiles nothing.

    Returns
    -------
    str or None
        The compiler's error as ``"Type: message"``, or ``None`` when it compiles.
    """
    try:
        cuda.compile_ptx(_probe, (numba.float64[::1],), cc=(7, 5))  # the oldest CUDA 13 has
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def _probe(values):
    values[0] = math.sqrt(values[0])  # libdevice, as the kernels' weights need


#: What to install when :func:`compiler_problem` finds the compiler missing.
COMPILER_HINT = (
    "pip install 'raygrid[cuda]' installs what Numba needs to compile them (numba-cuda[cu13]: "
    "NVVM, libdevice and NVRTC for CUDA 13, driver 580 or newer; a NumPy numba-cuda "
    "supports), or use a CUDA toolkit"
)


def unusable_reason() -> str | None:
    """Why CUDA kernels cannot run here, as a clause for an error message (after "but" or
    a colon); ``None`` when :func:`cuda_usable`."""
    if not gpu_present():
        return "no usable NVIDIA GPU and driver were found"
    problem = compiler_problem()
    if problem is None:
        return None
    # The first line: a missing library's error goes on to list every folder searched.
    first = problem.strip().splitlines()[0]
    return f"Numba cannot compile CUDA kernels here ({first}); {COMPILER_HINT}"
