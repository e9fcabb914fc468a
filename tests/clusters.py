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


@contextmanager
def adaptive_client(maximum: int, **adapt):
    """``(cluster, client)`` of a cluster in this process that has no worker and scales
    itself (``cluster.adapt()``, dask-jobqueue's usual way) to ``maximum`` workers of one
    thread, asked every 50 ms; ``adapt``: more of ``adapt()``'s settings."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=0, threads_per_worker=1, processes=False,
                     dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        cluster.adapt(minimum=0, maximum=maximum, interval="50ms", **adapt)
        yield cluster, client


def workers_gone(client, timeout: float = 20.0) -> None:
    """Wait (up to ``timeout`` s) until ``client``'s cluster has no worker left."""
    import time

    deadline = time.monotonic() + timeout
    while client.nthreads() and time.monotonic() < deadline:
        time.sleep(0.05)


def requeued(cluster, client, maximum: int) -> None:
    """An adaptive cluster back to no worker, then asked to scale to ``maximum`` again (as
    if its jobs had ended and new ones queued)."""
    cluster.adapt(minimum=0, maximum=0, interval="50ms")
    workers_gone(client)
    cluster.adapt(minimum=0, maximum=maximum, interval="50ms")


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
    """dask-jobqueue, imported as raygrid imports it (``cluster._import_jobqueue``: this
    process's SIGINT handler kept, which its first import sets to ``sys.exit()``), or the
    test skipped where it is not installed."""
    import pytest

    from raygrid.pipeline.cluster import _import_jobqueue
    from raygrid.pipeline.clusterfile import JobQueueConfig
    from raygrid.pipeline.errors import InputError

    try:
        return _import_jobqueue(JobQueueConfig(cluster="slurm"))
    except InputError:
        pytest.skip("dask-jobqueue is not installed")


@contextmanager
def ctrl_c_taken():
    """SIGINT handled as in a run started from a terminal, for the block: in this process
    (Python's ``KeyboardInterrupt``) and so in the processes started in the block (a
    handled signal is reset to its default as a process starts a program; an ignored one
    stays ignored). The tests started in a script's background inherit SIGINT ignored, as
    shells set it, and raygrid leaves an ignored SIGINT ignored (``interrupts._taken``).
    Off the main thread (where no handler can be set) it does nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)


@contextmanager
def paused_workers(**options):
    """``(cluster, client)``: a one-worker cluster in this process whose worker Dask has
    paused (a pause fraction of 0.1 %: its memory is past it at once), as a worker whose
    memory is past its pause fraction is; ``options`` go to ``LocalCluster``."""
    import time

    import dask.config
    from distributed import Client, LocalCluster

    from raygrid.pipeline.cluster import worker_info

    options = {"n_workers": 1, "processes": False, "dashboard_address": ":0", **options}
    with (
        dask.config.set({"distributed.worker.memory.pause": 0.001}),
        LocalCluster(memory_limit="2GB", **options) as cluster,
        Client(cluster) as client,
    ):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            info["status"] != "paused" for info in worker_info(client).values()
        ):
            time.sleep(0.05)
        yield cluster, client
