"""Dask clusters for tests: one worker in the test's own process, and a cluster file; and
another run holding a store's lock."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def in_process_client(**options):
    """A one-worker cluster in this process, so a test sees (and can patch) what it runs;
    ``options`` go to ``LocalCluster`` (e.g. ``memory_limit``)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
            **options,
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        yield client


#: A cluster file's contents for CLI runs: two local worker processes on loopback, the
#: dashboard on a free port.
LOCAL_CLUSTER_FILE = {
    "cluster": "local",
    "n_workers": 2,
    "threads_per_worker": 1,
    "host": "127.0.0.1",
    "dashboard_address": ":0",
}


@contextmanager
def lock_held_elsewhere(store):
    """Another process holds the lock of ``store`` (as a run writing it does) for the block,
    then is killed (SIGKILL: no cleanup of its own, the kernel drops the lock)."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\n"
         "from raygrid.pipeline.lock import store_lock\n"
         f"with store_lock({str(store)!r}):\n"
         "    print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.kill()
        holder.wait()


def jobqueue_or_skip():
    """``pytest.importorskip("dask_jobqueue")``, keeping this process's SIGINT handler: the
    first import of dask-jobqueue sets it to ``sys.exit()`` (its ``runner`` module), which
    every later test in the process would have (raygrid's own import keeps it:
    ``cluster._import_jobqueue``)."""
    import signal

    import pytest

    handler = signal.getsignal(signal.SIGINT)
    try:
        return pytest.importorskip("dask_jobqueue")
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
