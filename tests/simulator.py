"""Mends to numba-cuda's CUDA simulator (0.30) for the tests, wherever its kernels run.

``tests/conftest.py`` applies them in the test process; a Dask cluster whose worker
processes run simulated kernels loads this file as a worker ``preload`` (``dask_setup``).
"""

from __future__ import annotations

_mended = False


def mend() -> None:
    """Apply both mends once per process (only while the simulator is on)."""
    global _mended
    import os

    if _mended or os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return
    _one_shared_array_per_block()
    _quick_simulator_blocks()
    _mended = True


def dask_setup(worker) -> None:
    """Dask's preload hook: a worker process mends its simulator before any task runs.

    There a Worker lives in the process, so only the shared-array mend takes effect (the
    short switch interval is skipped beside a Dask worker: see ``_quick_simulator_blocks``).
    """
    mend()


def _quick_simulator_blocks() -> None:
    """Run the CUDA simulator's thread blocks with a short GIL switch interval.

    The simulator runs each thread of a block as a Python thread, and its manager polls them
    in a busy loop to release a ``syncthreads``. A waiting thread gets the GIL only when the
    busy one gives it up, every ``sys.getswitchinterval()`` (5 ms by default): a kernel with
    a few syncthreads per in-block iteration spent most of its time waiting for the hand-over.
    10 us made the pull solver's simulator tests 5 to 7 times faster (44 s -> 6 s for
    ``test_pull_mean_rule_float32_and_batch_of_one``; 1 us was slower again). Only while a
    block runs: other threads (Dask's) keep the default between launches, and a test that
    asks for more interleaving (a shorter interval) keeps it.

    Not while a Dask worker lives in this process (an in-process cluster): its profiler
    calls ``sys._current_frames()`` every 10 ms, which holds the interpreter's lock on its
    thread list while a garbage collection may run Python code (hypothesis installs a gc
    callback). Where that code gives up the GIL, the simulator starting a thread takes the
    GIL and waits for the lock, and both wait for ever: CPython gh-106883, unfixed in this
    machine's 3.11.7. Seen here: a survey on an in-process worker hung at its first launch;
    a short interval makes that hand-over likely.
    """
    import sys
    import threading

    from numba.cuda.simulator.kernel import BlockManager

    run = BlockManager.run
    lock = threading.Lock()
    running = [0, sys.getswitchinterval()]  # blocks running now, the interval to restore

    def profiled() -> bool:
        # Whether a Dask worker, whose profiler samples every thread's frames, runs here
        # (closed ones stay in the set while anything still refers to them).
        worker = sys.modules.get("distributed.worker")
        return worker is not None and any(
            w.status.name not in ("closed", "failed") for w in list(worker.Worker._instances)
        )

    def quick_run(self, *args):
        if profiled():
            return run(self, *args)
        with lock:
            if running[0] == 0:
                running[1] = sys.getswitchinterval()
                sys.setswitchinterval(min(running[1], 1e-5))
            running[0] += 1
        try:
            return run(self, *args)
        finally:
            with lock:
                running[0] -= 1
                if running[0] == 0:
                    sys.setswitchinterval(running[1])

    BlockManager.run = quick_run


def _one_shared_array_per_block() -> None:
    """Give every thread of a simulated block the same ``cuda.shared.array``.

    numba-cuda's simulator (0.30) finds a block's shared array by the line that declares it,
    creating it on the first thread's call: ``get``, then ``np.empty``, then store. A thread
    switched out between the two (frequent at the short interval above, rare at 5 ms) makes
    the block's threads hold different arrays, and a correct kernel gives wrong times
    (seen: times below the true shortest path in 4 of 15 runs of two tests). Here the
    look-up and the creation are one step under a lock. It also reads only the calling
    frame, where the simulator extracted the whole stack on every call.
    """
    import sys
    import threading

    import numpy as np
    from numba.core import types
    from numba.cuda.simulator.kernelapi import FakeCUDAShared
    from numba.np import numpy_support

    dynamic = FakeCUDAShared.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return dynamic(self, shape, dtype, alignment)  # no look-up by line there
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        line = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            found = self._allocations.get(line)
            if found is None:
                found = self._allocations[line] = np.empty(shape, dtype)
        return found

    FakeCUDAShared.array = array
