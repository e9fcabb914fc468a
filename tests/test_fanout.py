"""traveltimes(client=...): many sources solved on a Dask cluster's workers, bitwise those
solved in this process (pipeline/fanout.py)."""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import pytest
import xarray as xr

import raygrid.pipeline as rg
from raygrid.pipeline import fanout


@contextmanager
def two_workers(**options):
    """Two single-thread workers in this process (the simulator's mends apply to them)."""
    from distributed import Client, LocalCluster

    options = {"n_workers": 2, "threads_per_worker": 1, **options}
    with (
        LocalCluster(processes=False, dashboard_address=":0", **options) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        yield client


@pytest.fixture
def model():
    return rg.gradient_model({"z": 21, "x": 31}, 10.0)


SOURCES = [{"name": f"S{i}", "z": 0.0 if i % 2 else 35.0, "x": 13.0 * i} for i in range(7)]


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_sources_on_the_workers_equal_those_solved_here(model, precision):
    here = rg.traveltimes(model, SOURCES, radius=2, precision=precision, predecessors=True)
    with two_workers() as client:
        assert fanout.chunk_size(len(SOURCES), 2, 8, 1) == 2  # several tasks: 2, 2, 2, 1
        from distributed import get_task_stream

        with get_task_stream(client) as stream:
            there = rg.traveltimes(
                model, SOURCES, radius=2, precision=precision, predecessors=True, client=client
            )
        solved = [t for t in stream.data if str(t["key"]).startswith("raygrid-traveltimes-")]
        assert len(solved) == 4 and {t["worker"] for t in solved} <= set(client.nthreads())
        # Nothing is left on the workers: neither the model nor a field (released
        # asynchronously, through the scheduler).
        held = lambda: sum(client.run(lambda dask_worker: len(dask_worker.data)).values())  # noqa: E731
        deadline = time.monotonic() + 10
        while held() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert held() == 0
    xr.testing.assert_identical(there, here)  # every float, predecessor and coordinate
    assert list(there["source"].values) == [s["name"] for s in SOURCES]


def test_a_threaded_task_and_a_one_source_call(model):
    here = rg.traveltimes(model, SOURCES[:3], radius=3)
    with two_workers(n_workers=1) as client:
        xr.testing.assert_identical(
            rg.traveltimes(model, SOURCES[:3], radius=3, client=client, threads=2), here
        )
        one = rg.traveltimes(model, SOURCES[:1], radius=3, client=client)
    xr.testing.assert_identical(one, here.isel(source=[0]))


def test_cuda_on_the_workers_equals_the_cpu(model):
    # Simulated kernels: a small grid (the kernels' own tests cover tiles and halos).
    small = model.isel(z=slice(0, 9), x=slice(0, 13))
    sources = [{"z": 0.0, "x": 30.0}, {"z": 40.0, "x": 110.0}, {"z": 80.0, "x": 0.0}]
    cpu = rg.traveltimes(small, sources, radius=2)
    with two_workers() as client:
        gpu = rg.traveltimes(small, sources, radius=2, backend="cuda", batch=2, client=client)
    np.testing.assert_array_equal(gpu.values, cpu.values)
    assert gpu.attrs["backend"] == "cuda"


def test_auto_looks_at_the_workers_and_never_picks_the_simulator(model):
    with two_workers() as client:
        assert fanout.workers_gpu(client) is False
        field = rg.traveltimes(model, SOURCES[:2], radius=2, backend="auto", client=client)
    assert field.attrs["backend"] == "cpu"


def test_cuda_is_refused_on_workers_without_a_gpu(model, monkeypatch):
    monkeypatch.setattr(fanout, "unusable_reason", lambda: "no NVIDIA driver found")
    with two_workers() as client, pytest.raises(
        rg.InputError, match=r"backend cuda, but 2 of the 2 Dask workers cannot run CUDA kernels"
    ):  # fmt: skip
        rg.traveltimes(model, SOURCES, backend="cuda", client=client)


def test_a_cluster_or_an_address_is_not_a_client(model):
    with pytest.raises(rg.InputError, match=r"client must be a distributed.Client, got str"):
        rg.traveltimes(model, SOURCES, client="tcp://127.0.0.1:8786")


def test_a_client_without_workers_is_said(model):
    with two_workers(n_workers=0) as client, pytest.raises(rg.RunFailed, match="has no workers"):
        rg.traveltimes(model, SOURCES, radius=2, client=client)


def test_a_failing_task_stops_the_call_with_its_error(model, monkeypatch):
    def failing(task, share):  # (sent to the workers by value: a closure)
        raise MemoryError(f"worker out of memory solving {len(share[1])} sources")

    monkeypatch.setattr(fanout, "solve_chunk", failing)
    with two_workers() as client, pytest.raises(MemoryError, match="solving 2 sources"):
        rg.traveltimes(model, SOURCES, radius=2, client=client)


@pytest.mark.parametrize(
    ("n_sources", "threads", "node_bytes", "batch", "size"),
    [
        (100, 4, 8, 1, 13),  # about two tasks a worker thread
        (100, 4, fanout.TASK_BYTES // 3, 1, 3),  # at most TASK_BYTES of fields a task
        (100, 4, fanout.TASK_BYTES * 2, 1, 1),  # a field larger still: one a task
        (100, 4, 8, 8, 16),  # whole GPU batches
        (5, 64, 8, 8, 5),  # never more than the sources
    ],
)
def test_chunk_size(n_sources, threads, node_bytes, batch, size):
    assert fanout.chunk_size(n_sources, threads, node_bytes, batch) == size
