"""Dask clusters for tests: one worker in the test's own process, and a cluster file."""

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
