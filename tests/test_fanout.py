"""traveltimes(client=...): many sources solved on a Dask cluster's workers, bitwise those
solved in this process (pipeline/fanout.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest
import xarray as xr

import raygrid.pipeline as rg
from raygrid.pipeline import fanout

from clusters import adaptive_client, requeued, workers_gone


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


@contextmanager
def one_worker_process():
    """One single-thread worker in a process of its own (what a test changes there stays
    there)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                     dashboard_address=":0") as cluster,
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
        (100, 4, fanout.TASK_BYTES // 12, 8, 8),  # whole batches, down within the bytes
        (100, 4, fanout.TASK_BYTES // 2, 8, 8),  # a batch wins over the bytes
        (5, 64, 8, 8, 5),  # never more than the sources
    ],
)
def test_chunk_size(n_sources, threads, node_bytes, batch, size):
    assert fanout.chunk_size(n_sources, threads, node_bytes, batch) == size


def test_a_ctrl_c_stops_the_call_and_leaves_the_cluster_usable(model, monkeypatch, tmp_path):
    import os
    import signal

    from clusters import ctrl_c_taken

    real = fanout.solve_chunk
    started = tmp_path / "started"
    started.mkdir()

    def slow(task, share):  # (sent by value: it counts in files)
        (started / str(share[0])).touch()
        if share[0] == 0:  # Ctrl-C, as the first share runs
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
        return real(task, share)

    monkeypatch.setattr(fanout, "solve_chunk", slow)
    many = [{"z": 0.0, "x": 10.0 * i} for i in range(28)]  # 14 shares of 0.5 s
    with two_workers() as client:
        with ctrl_c_taken(), pytest.raises(KeyboardInterrupt):
            rg.traveltimes(model, many, radius=2, client=client)
        time.sleep(1.0)  # what was cancelled does not start
        assert len(list(started.iterdir())) < 14
        monkeypatch.setattr(fanout, "solve_chunk", real)
        again = rg.traveltimes(model, SOURCES, radius=2, client=client)
    xr.testing.assert_identical(again, rg.traveltimes(model, SOURCES, radius=2))


def test_a_cluster_still_starting_its_workers_is_waited_for(model, monkeypatch):
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        cluster.scale(1)  # asked for, not joined yet
        field = rg.traveltimes(model, SOURCES[:2], radius=2, client=client)
        np.testing.assert_array_equal(field, rg.traveltimes(model, SOURCES[:2], radius=2))
        # Checked once joined: asked at once, no worker answered, and the check passed.
        cluster.scale(0)
        workers_gone(client)
        cluster.scale(1)
        monkeypatch.setattr(fanout, "unusable_reason", lambda: "no NVIDIA driver found")
        with pytest.raises(rg.InputError, match=r"backend cuda, but 1 of the 1 Dask workers"):
            rg.traveltimes(model, SOURCES[:2], radius=2, backend="cuda", client=client)
        cluster.scale(0)
        workers_gone(client)
        # Scaled to none: said after a short wait (workers started by hand may come), not
        # after a minute.
        monkeypatch.setattr(fanout, "ASKED_NONE_WAIT_S", 0.5)
        start = time.monotonic()
        with pytest.raises(
            rg.RunFailed, match=r"\(LocalCluster\) has no workers and asks for none \(none "
            r"joined within 0.5 s\)"
        ):  # fmt: skip
            rg.traveltimes(model, SOURCES[:2], radius=2, client=client)
        assert time.monotonic() - start < 5
        assert not _held_tasks(client)  # the task left waiting for a worker: gone
        # A client without its cluster object (by address) cannot tell: waited for.
        monkeypatch.setattr(fanout, "WORKERS_WAIT_S", 0.5)
        with Client(cluster.scheduler_address) as by_address:
            with pytest.raises(rg.RunFailed, match=r"no Dask worker joined .* within 0.5 s"):
                rg.traveltimes(model, SOURCES[:2], radius=2, client=by_address)


def test_an_adaptive_cluster_gets_its_workers_asked_for(model):
    # cluster.adapt() (dask-jobqueue's usual way) starts workers for tasks that wait, and
    # the call waited for workers before it sent any: none came, RunFailed after 60 s.

    with adaptive_client(2) as (cluster, client):
        start = time.monotonic()
        field = rg.traveltimes(model, SOURCES[:3], radius=2, client=client)
        assert time.monotonic() - start < 30
        np.testing.assert_array_equal(field, rg.traveltimes(model, SOURCES[:3], radius=2))
        assert not _held_tasks(client) and not fanout._HELD.get(client)


def _held_tasks(client) -> list[str]:
    """The scheduler's tasks holding a worker for a call (:func:`fanout.joined_threads`)."""
    return client.run_on_scheduler(
        lambda dask_scheduler: [
            str(key) for key in dask_scheduler.tasks if str(key).startswith("raygrid-hold")
        ]
    )


def test_an_adaptive_clusters_first_worker_is_held_until_the_calls_tasks_wait(model):
    # Idle while the call checked it and scattered the model, it was retired by the
    # cluster's adaptive scaling (a second queue wait on dask-jobqueue).
    import cloudpickle

    with adaptive_client(2, wait_count=1) as (cluster, client):
        submitted = []
        submit = client.submit
        client.submit = lambda function, *args, **kwargs: (
            submitted.append(function) or submit(function, *args, **kwargs)
        )
        assert fanout.joined_threads(client) == 1
        del client.submit
        # Sent by value: a worker without raygrid unpickles it (by reference, the worker
        # died of a ModuleNotFoundError, and its clear refusal never came).
        blocked = (
            "import sys, cloudpickle; sys.modules['raygrid'] = None; "
            "cloudpickle.loads(sys.stdin.buffer.read()); print('unpickled')"
        )
        loaded = subprocess.run([sys.executable, "-c", blocked], capture_output=True,
                                input=cloudpickle.dumps(submitted[0]), timeout=60)  # fmt: skip
        assert loaded.stdout.strip() == b"unpickled", loaded.stderr.decode()
        time.sleep(0.5)  # ten of adaptive's intervals: an idle worker would have gone
        assert len(client.nthreads()) == 1 and _held_tasks(client)
        fanout.release_held(client)
        deadline = time.monotonic() + 10
        while _held_tasks(client) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _held_tasks(client)
        # Sized for what it may grow to (2 workers of one thread), not the one there.
        assert fanout.sizing_threads(client, 1) == 2


def test_a_long_wait_for_an_adaptive_clusters_first_worker_is_said_and_goes_on(model, monkeypatch):
    # Its jobs queued for longer than a minute: the call failed, and cancelling the task
    # that waited withdrew the job the cluster had asked for.
    import threading

    monkeypatch.setattr(fanout, "WORKERS_WAIT_S", 0.0)
    with adaptive_client(0) as (cluster, client):
        later = threading.Timer(2.0, lambda: cluster.adapt(minimum=0, maximum=1, interval="50ms"))
        later.start()
        with pytest.warns(rg.InputWarning, match=r"adaptive cluster within 0 s \(its jobs queued"):
            field = rg.traveltimes(model, SOURCES[:2], radius=2, client=client)
        later.join()
        np.testing.assert_array_equal(field, rg.traveltimes(model, SOURCES[:2], radius=2))


def test_a_closed_client_and_a_typo_are_refused_before_the_workers_are_asked(model, monkeypatch):
    from distributed import Client

    def asked(client):
        raise AssertionError("the workers were asked")

    monkeypatch.setattr(fanout, "workers_gpu", asked)
    monkeypatch.setattr(fanout, "check_workers_gpu", asked)
    with two_workers() as client:
        with pytest.raises(rg.InputError, match=r"backend must be one of"):
            rg.traveltimes(model, SOURCES, backend="gpu", client=client)
        with pytest.raises(rg.InputError, match=r"weights must be one of"):
            rg.traveltimes(model, SOURCES, backend="cuda", weights="bogus", client=client)
        closed = Client(client.scheduler.address)
        closed.close()
        with pytest.raises(rg.InputError, match=r"the Dask client given is closed"):
            rg.traveltimes(model, SOURCES, client=closed)


def test_auto_with_a_gpu_algorithm_on_workers_without_one_says_so(model):
    with two_workers() as client, pytest.raises(
        rg.InputError, match=r"backend='auto' found no usable GPU on the Dask workers, and "
        r"algorithm='pull' runs only on one"
    ):  # fmt: skip
        rg.traveltimes(model, SOURCES, backend="auto", algorithm="pull", client=client)


def test_a_share_that_kills_its_workers_is_named():
    from distributed import KilledWorker

    class Open:
        status = "running"

    class Worker:
        address = "tcp://10.0.0.5:4321"

    said = str(fanout._lost(KilledWorker("k", Worker(), 3), 4, 2, Open()))
    assert "solving sources 4-5 died each time it was tried (4 workers, the last tcp://10.0" in said
    assert "killed for memory" in said
    said = str(fanout._lost(fanout.CancelledError(), 7, 1, Open()))
    assert "every worker holding the model died while source 7 was being solved" in said


def test_workers_without_this_raygrid_are_refused_before_anything_is_sent(model, tmp_path):
    # Workers started from another environment: each task failed with a 30-line traceback
    # ending in "No module named 'raygrid'" (and a survey had made its store first).

    def hide_raygrid():  # in the worker's own process: its imports of raygrid fail
        import sys

        sys.modules["raygrid.pipeline.version"] = None

    with one_worker_process() as client:
        client.run(hide_raygrid)
        said = r"1 of the 1 Dask workers do not run this raygrid, .*: worker tcp://.*ModuleNotFound"
        with pytest.raises(rg.InputError, match=said):
            rg.traveltimes(model, SOURCES, radius=2, client=client)
        from raygrid.pipeline.workflow import read_workflow, run_workflow

        workflow = tmp_path / "w.yaml"
        workflow.write_text(
            "model: {synthetic: gradient, shape: {z: 21, x: 31}}\n"
            "sources: [{z: 0.0, x: 100.0}]\n"
            f"outputs: {{store: {tmp_path / 's.zarr'}}}\n"
        )
        with pytest.raises(rg.InputError, match=said):
            run_workflow(read_workflow(workflow), client=client)
        assert not (tmp_path / "s.zarr").exists()


def test_workers_running_other_code_of_the_same_version_are_refused(model):
    # Every development build is 0.1.0: workers of another checkout, or started before an
    # edit, passed the version check and solved with other code than the store records.

    def other_code():  # in the worker's own process
        import raygrid.pipeline.version as version

        version.code_digest = lambda: "0123456789ab"

    with one_worker_process() as client:
        assert rg.traveltimes(model, SOURCES[:1], radius=2, client=client).shape[0] == 1
        client.run(other_code)
        with pytest.raises(
            rg.InputError,
            match=r"do not run this raygrid, raygrid \S+ \(code [0-9a-f]{12}\): worker "
            r"tcp://\S+: raygrid \S+ \(code 0123456789ab\); .*\(client.restart\(\); and "
            r"this Python",
        ):
            rg.traveltimes(model, SOURCES[:1], radius=2, client=client)


def test_a_lost_share_names_its_own_sources(model, monkeypatch):
    # The count came from the share's second seed (always 2), an IndexError for a share of
    # one source.
    class Lost:
        def result(self):
            raise fanout.CancelledError()

    def finished(client, tasks):
        shares = [share for _, share in tasks.values()]
        client.cancel([future for future, _ in tasks.values()])
        yield Lost(), shares[1]

    monkeypatch.setattr(fanout, "finished_in_turn", finished)
    with two_workers() as client:
        with pytest.raises(rg.RunFailed, match=r"while sources 2-3 were being solved"):
            rg.traveltimes(model, SOURCES, radius=2, client=client)
        with pytest.raises(rg.RunFailed, match=r"while source 1 was being solved"):
            rg.traveltimes(model, SOURCES[:3], radius=2, client=client, batch=1)


def test_a_cluster_whose_workers_dask_paused_is_said_at_once(model):
    # Paused workers (memory past the pause fraction) take no scattered data: the call
    # ended after Dask's 30 s with "the workers left as the call started (TimeoutError:
    # No valid workers found)".
    from clusters import paused_workers

    with paused_workers() as (_, client):
        started = time.monotonic()
        with pytest.raises(rg.RunFailed, match=r"workers run nothing: Dask has paused them"):
            rg.traveltimes(model, SOURCES, radius=2, client=client)
        assert time.monotonic() - started < 10


def test_the_workers_are_checked_once_one_has_joined(model, monkeypatch):
    # Checked at once after scale(), the checks asked no worker and passed.
    from distributed import Client, LocalCluster

    seen = []
    check = fanout.check_workers_raygrid

    def counted(client):
        seen.append(len(client.nthreads()))
        return check(client)

    monkeypatch.setattr(fanout, "check_workers_raygrid", counted)
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        cluster.scale(1)
        rg.traveltimes(model, SOURCES[:2], radius=2, client=client)
    assert seen and seen[0] >= 1


def test_a_bad_source_is_said_before_the_workers_are_waited_for(model):
    # On a cluster still scaling up (its workers queued), a source outside the model was
    # said only once a worker had joined, or not at all ("no Dask worker joined").
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
        Client(cluster.scheduler_address) as client,  # (no cluster object: waits)
    ):  # fmt: skip
        start = time.monotonic()
        with pytest.raises(rg.InputError, match="source"):
            rg.traveltimes(model, [{"z": 0.0, "x": 1e6}], radius=2, client=client)
        with pytest.raises(rg.InputError, match="no sources given"):
            rg.traveltimes(model, [], radius=2, client=client)
        assert time.monotonic() - start < 10


def test_a_held_worker_runs_the_calls_own_reads_and_two_calls_hold_their_own(
    model, monkeypatch, tmp_path
):
    # The held task filled the worker's one thread: a lazy model's reads (tasks, through
    # this client) waited out the whole hold; two calls at once lost one's holder, which
    # kept its thread to the end of the hold.
    import threading

    from raygrid.pipeline.workflow import read_workflow, run_workflow

    monkeypatch.setattr(fanout, "HOLD_S", 60.0)
    with adaptive_client(1) as (cluster, client):
        lazy = model.chunk({"z": 10})
        start = time.monotonic()
        field = rg.traveltimes(lazy, SOURCES[:2], radius=2, predecessors=True, client=client)
        assert time.monotonic() - start < 30
        expected = rg.traveltimes(model, SOURCES[:2], radius=2)
        np.testing.assert_array_equal(field["traveltime"], expected)
        requeued(cluster, client, 1)
        took, fields = {}, {}

        def call(which: str) -> None:
            begun = time.monotonic()
            fields[which] = rg.traveltimes(model, SOURCES[:2], radius=2, client=client)
            took[which] = time.monotonic() - begun

        threads = [threading.Thread(target=call, args=(which,)) for which in "AB"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert set(took) == {"A", "B"} and max(took.values()) < 30, took
        for which in "AB":
            np.testing.assert_array_equal(fields[which], expected)
        assert not _held_tasks(client) and not fanout._HELD.get(client)
        # A survey on this client: its first worker waited for too (Dask's "No valid
        # workers found" after 30 s, a TimeoutError traceback).
        requeued(cluster, client, 1)
        workflow = tmp_path / "w.yaml"
        workflow.write_text(
            "model: {synthetic: gradient, shape: {z: 21, x: 31}}\n"
            "sources: [{z: 0.0, x: 100.0}, {z: 0.0, x: 200.0}]\n"
            f"outputs: {{store: {tmp_path / 's.zarr'}}}\n"
        )
        run_workflow(read_workflow(workflow), client=client)
        assert (tmp_path / "s.zarr").exists() and not _held_tasks(client)


def test_the_code_digest_is_of_modules_only(tmp_path):
    # An Emacs lock file (.#solve.py, a dangling link) crashed it, said as "the workers
    # left as the call started".
    from raygrid.pipeline import version

    package = tmp_path / "pipeline"
    (package / "sub").mkdir(parents=True)
    (package / "solve.py").write_text("x = 1\n")
    (package / "sub" / "more.py").write_text("y = 2\n")
    before = version._code_digest({"raygrid.pipeline": [package]})
    (package / ".#solve.py").symlink_to(tmp_path / "nowhere")
    (package / "not-a-module.py").write_text("scratch\n")
    assert version._code_digest({"raygrid.pipeline": [package]}) == before
    (package / "sub" / "more.py").write_text("y = 3\n")  # a module's edit counts
    assert version._code_digest({"raygrid.pipeline": [package]}) != before
    assert re.fullmatch(r"[0-9a-f]{12}", version.code_digest())


def test_sizing_for_an_adaptive_cluster_without_a_maximum():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                     dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        assert fanout.sizing_threads(client, 2) == 2  # not adaptive: those joined
        cluster.adapt(minimum=1)  # no maximum
        assert fanout.sizing_threads(client, 2) == 2 * fanout.ADAPTIVE_GROWTH
        cluster.adapt(minimum=1, maximum=3)
        assert fanout.sizing_threads(client, 2) == 6


def test_a_ctrl_c_while_waiting_for_an_adaptive_clusters_first_worker(model):
    import os
    import signal
    import threading

    from clusters import ctrl_c_taken

    with adaptive_client(0) as (cluster, client):
        stop = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        start = time.monotonic()
        stop.start()
        with ctrl_c_taken(), pytest.raises(KeyboardInterrupt):
            rg.traveltimes(model, SOURCES[:2], radius=2, client=client)
        assert time.monotonic() - start < 10
        assert not _held_tasks(client) and not fanout._HELD.get(client)
