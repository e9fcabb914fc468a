"""Mends to numba-cuda's CUDA simulator (0.30) for the tests, wherever its kernels run.

``tests/conftest.py`` applies them in the test process; a Dask cluster whose worker
processes run simulated kernels loads this file as a worker ``preload`` (``dask_setup``).
"""

from __future__ import annotations

_mended = False

#: The GIL switch interval while a simulated block runs (None: the default, 5 ms).
SWITCH_INTERVAL = 1e-4


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

    There a Worker lives in the process, so its blocks keep the default switch interval
    (see ``_quick_simulator_blocks``).
    """
    mend()


def _quick_simulator_blocks() -> None:
    """Run the CUDA simulator's thread blocks on reused threads, released by a barrier.

    The simulator (0.30) runs each thread of a block as a new Python thread, and its manager
    polls them in a busy loop to release a ``syncthreads``: the poller held the GIL that the
    threads it waited for needed, and each block started its threads anew (~0.3 ms a thread).
    Here a ``syncthreads`` is a condition-variable barrier over the block's live threads (a
    thread that returns stops counting, as in the simulator), the host thread sleeps until the
    block's threads are done, and the threads are kept for the next block. The pull solver's
    simulator solves ran about 3 times faster than with the busy loop at a 10 us switch
    interval (the earlier mend), kernels with short bodies 3 to 8 times.

    A switch interval of :data:`SWITCH_INTERVAL` while a block runs keeps the threads of a
    block interleaving (a race between them shows as a wrong time), where the default 5 ms
    would run each thread's stretch between barriers in one piece; a test that asks for more
    interleaving (a shorter interval) keeps it. Not while a Dask worker lives in this
    process (an in-process cluster): its profiler calls ``sys._current_frames()`` every
    10 ms, which holds the interpreter's lock on its thread list while a garbage collection
    may run Python code (hypothesis installs a gc callback). Where that code gives up the
    GIL, a thread starting takes the GIL and waits for the lock, and both wait for ever:
    CPython gh-106883, unfixed in this machine's 3.11.7 (seen: a survey on an in-process
    worker hung at its first launch; a short interval makes that hand-over likely).

    A block whose kernel raises leaves its threads to finish or fail at their next barrier
    (as the simulator does: the first error is raised at once); they then end, and the next
    block gets new ones. Blocks launched from several host threads at once (which the
    simulator does not support) and debug kernels get fresh threads.
    """
    import sys
    import threading

    import numpy as np
    from numba.cuda.simulator.kernel import BlockManager, BlockThread
    from numba.cuda.simulator.kernelapi import Dim3

    thread_run = BlockThread.run  # runs the kernel, keeping its exception in .exception

    class Barrier:
        """A block's live threads, those waiting at a ``syncthreads``, and its first error."""

        def __init__(self, count: int):
            self.condition = threading.Condition()
            self.alive = count
            self.arrived = 0
            self.generation = 0  # barriers passed: a waiter leaves when it moves on
            self.error = None

        def release(self) -> None:
            self.arrived = 0
            self.generation += 1
            self.condition.notify_all()

        def finished(self, thread) -> None:
            with self.condition:
                self.alive -= 1
                if thread.exception is not None and self.error is None:
                    self.error = thread.exception
                if self.arrived and self.arrived == self.alive:
                    self.release()  # the others wait for no one else
                self.condition.notify_all()

    def syncthreads(self):
        barrier = self._manager.barrier
        with barrier.condition:
            if barrier.error is not None:
                raise RuntimeError("abort flag set on syncthreads call")
            barrier.arrived += 1
            if barrier.arrived == barrier.alive:
                barrier.release()
            else:
                passed = barrier.generation
                while barrier.generation == passed and barrier.error is None:
                    barrier.condition.wait()
            if barrier.error is not None:
                raise RuntimeError("abort flag set on syncthreads clear")

    def run_once(self):
        # One block's kernel on this thread; the barrier then counts it out.
        barrier = self._manager.barrier
        try:
            thread_run(self)  # (keeps an Exception, as the simulator does)
        except BaseException as error:  # pytest.fail in a kernel: a kept thread lives on
            self.exception = (error, error.__traceback__)
        finally:
            barrier.finished(self)

    class Kept(BlockThread):
        """A simulated CUDA thread that runs one block's kernel after another."""

        def __init__(self):
            threading.Thread.__init__(self, daemon=True)
            self.given = threading.Event()
            self.dropped = False  # set with `given`: the thread ends instead

        def give(self, target, manager, block_point, thread_point) -> None:
            # What BlockThread.__init__ sets, for this block.
            self._target, self._args, self._kwargs = target, (), {}
            self._manager = manager
            self.blockIdx, self.threadIdx = Dim3(*block_point), Dim3(*thread_point)
            x, y, _ = manager._block_dim
            self.thread_id = thread_point[0] + x * (thread_point[1] + y * thread_point[2])
            self.exception, self.abort, self.debug = None, False, False
            self.syncthreads_blocked = False
            self.given.set()

        def run(self):
            while True:
                self.given.wait()
                self.given.clear()
                if self.dropped:
                    return
                run_once(self)

    def drop_kept() -> None:
        # Some may still run the failed block: none is given another, each ends when done.
        for thread in kept:
            thread.dropped = True
            thread.given.set()
        kept.clear()

    kept: list[Kept] = []
    kept_lock = threading.Lock()  # one block at a time uses the kept threads
    interval_lock = threading.Lock()
    running = [0, sys.getswitchinterval()]  # blocks running now, the interval to restore

    def profiled() -> bool:
        # Whether a Dask worker, whose profiler samples every thread's frames, runs here
        # (closed ones stay in the set while anything still refers to them).
        worker = sys.modules.get("distributed.worker")
        return worker is not None and any(
            w.status.name not in ("closed", "failed") for w in list(worker.Worker._instances)
        )

    def run_block(self, grid_point, *args):
        points = list(np.ndindex(*self._block_dim))
        barrier = self.barrier = Barrier(len(points))

        def target():
            self._f(*args)

        reuse = not self._debug and kept_lock.acquire(blocking=False)
        try:
            if reuse:
                while len(kept) < len(points):
                    kept.append(Kept())
                    kept[-1].start()
                for thread, point in zip(kept, points):
                    thread.give(target, self, grid_point, point)
            else:
                for point in points:
                    BlockThread(target, self, grid_point, point, self._debug).start()
            with barrier.condition:
                barrier.condition.wait_for(lambda: barrier.alive == 0 or barrier.error)
            if barrier.error is not None:
                raise barrier.error[0].with_traceback(barrier.error[1])
        except BaseException:  # the kernel's error, or the host's (Ctrl-C while waiting)
            if reuse:
                drop_kept()
            raise
        finally:
            if reuse:
                kept_lock.release()

    def interleaved_run(self, *args):
        if SWITCH_INTERVAL is None or profiled():
            return run_block(self, *args)
        with interval_lock:
            if running[0] == 0:
                running[1] = sys.getswitchinterval()
                sys.setswitchinterval(min(running[1], SWITCH_INTERVAL))
            running[0] += 1
        try:
            return run_block(self, *args)
        finally:
            with interval_lock:
                running[0] -= 1
                if running[0] == 0:
                    sys.setswitchinterval(running[1])

    BlockThread.syncthreads = syncthreads
    BlockThread.run = run_once
    BlockManager.run = interleaved_run


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
