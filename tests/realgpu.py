"""The mark of tests that need a real GPU: skipped, saying which of the two reasons holds
(the simulator is on, or this machine has no usable device, and why)."""

from __future__ import annotations

import os

import pytest

from raygrid.kernels.cuda import cuda_usable, unusable_reason


def _why_not() -> str | None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "0":
        return "runs on a real GPU only: NUMBA_ENABLE_CUDASIM=0 asks for one (the suite sets 1)"
    if not cuda_usable():
        return f"needs a real CUDA GPU: {unusable_reason()}"
    return None


#: Why this process cannot run the real-GPU tests, or ``None``.
WHY_NOT = _why_not()
real_gpu = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
