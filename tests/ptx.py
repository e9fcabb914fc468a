"""Compile-to-PTX checks in subprocesses with a real NVVM, the work split across processes.

The simulator runs Python, so the tests also compile every kernel to sm_90 PTX with the real
NVVM (from the numba-cuda[cu13] wheels; no GPU or driver needed), in a subprocess where the
simulator is off. Compiling is slow and single-threaded, and the test machine has two cores:
the script's part ``i`` of ``parts`` (its ``sys.argv[1]``) runs in a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys


def compile_in_parts(script: str, parts: int = 2, timeout: float = 600) -> list[tuple]:
    """Run ``script`` once per part, all at once; ``(returncode, stdout, stderr)`` each. No
    process outlives the call, even on a timeout."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    running = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(part)],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for part in range(parts)
    ]
    try:
        outputs = [process.communicate(timeout=timeout) for process in running]
    finally:
        for process in running:
            process.kill()
            process.wait()
    return [(p.returncode, out, err) for p, (out, err) in zip(running, outputs)]
