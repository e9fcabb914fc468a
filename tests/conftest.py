"""Shared test settings: dask's config out of the home directory, files headless, the CUDA
simulator on (and mended: tests/simulator.py), and how many xdist workers `-n auto` starts."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import simulator

# Before anything imports dask (and dask-jobqueue, which writes a config file on import).
# The folders are made only when none is given, and removed at exit: nothing is left behind
# (workers' scratch space, its lock files included, would otherwise stay in the system's
# temporary directory).
for _variable, _prefix in [
    ("DASK_CONFIG", "raygrid-dask-config-"),
    ("DASK_TEMPORARY_DIRECTORY", "raygrid-dask-scratch-"),
]:
    if _variable not in os.environ:
        os.environ[_variable] = tempfile.mkdtemp(prefix=_prefix)
        atexit.register(shutil.rmtree, os.environ[_variable], ignore_errors=True)
os.environ.setdefault("MPLBACKEND", "Agg")
# CUDA kernels run in Numba's simulator unless a real GPU run is asked for with
# NUMBA_ENABLE_CUDASIM=0 (then tests marked `gpu` run and simulator-only tests skip).
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


@pytest.hookimpl(optionalhook=True)  # xdist's hook: the GPU machine runs without xdist
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker per physical core, at most 4.

    Many tests start Dask clusters of their own (two worker processes, a few hundred MB
    each) or run the CLI in a subprocess, so a worker per core of a big machine would
    start dozens of clusters at once for little gain. On the 2-core CI machine the suite
    took 863 s serially and 519 s on two workers (user time 1.8 cores) when it was smaller;
    now about 700 s on two workers (1.9 cores busy).
    """
    import psutil  # a dependency of distributed

    return max(1, min(4, psutil.cpu_count(logical=False) or os.cpu_count() or 1))


# tests/simulator.py (tests/ is on the path: pyproject's pythonpath); it mends the simulator
# only where it is on.
simulator.mend()


@pytest.fixture(autouse=True)
def _signal_handling_kept():
    """Each test leaves the process's SIGINT and SIGTERM handlers, and the signals blocked
    in its main thread, as it found them.

    Either left changed (a CLI's ``SIG_IGN`` after an interrupted run in this process,
    dask-jobqueue's ``sys.exit`` handler set on its first import, SIGINT left blocked)
    changes every later test in the same xdist worker: a Ctrl-C test then saw no
    ``KeyboardInterrupt``, in an order-dependent failure. They are put back and the test
    that changed them fails, so the failure is where the change is.
    """
    import signal
    import threading

    # (SIGHUP: POSIX only)
    watched = tuple(
        getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
    )
    main = threading.current_thread() is threading.main_thread()
    masks = hasattr(signal, "pthread_sigmask") and main

    def blocked() -> set:
        return set(signal.pthread_sigmask(signal.SIG_BLOCK, set())) if masks else set()

    before = {sig: signal.getsignal(sig) for sig in watched}
    blocked_before = blocked()
    yield
    changed = [signal.Signals(s).name for s in watched if signal.getsignal(s) != before[s]]
    for sig in watched:
        if before[sig] is not None and main:
            signal.signal(sig, before[sig])
    blocked_after = blocked()
    if masks:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked_before)
    assert not changed, f"the test left the handlers of {', '.join(changed)} changed"
    assert blocked_after == blocked_before, (
        f"the test left the main thread blocking {sorted(blocked_after - blocked_before)} "
        f"and not {sorted(blocked_before - blocked_after)}"
    )
