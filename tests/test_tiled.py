"""Tiled solves on a real 2-worker LocalCluster equal the single-domain solve bitwise."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import raygrid.pipeline as rg
from raygrid.pipeline.tiled import LAZY_BLOCK

from clusters import adaptive_client, requeued


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
            host="127.0.0.1",
            # Its workers run simulated CUDA kernels: the simulator's mends go there too.
            preload=[str(Path(__file__).with_name("simulator.py"))],
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        yield client


@pytest.fixture(scope="module")
def model_2d():
    velocity = rg.gradient_model({"z": 25, "x": 31}, 10.0, 800.0, 3000.0)
    return rg.checkerboard(velocity, 60.0, 0.25)


@pytest.mark.parametrize(
    "tiles, source",
    [
        ({"z": 8, "x": 8}, {"z": 80.0, "x": 80.0}),  # on a tile corner
        ({"z": 7, "x": 11}, {"z": 73.3, "x": 106.1}),  # off-node, inside a halo
        ({"z": 25, "x": 9}, {"z": 0.0, "x": 300.0}),  # one row of tiles, source at an edge
        ({"z": 3, "x": 4}, {"z": 120.0, "x": 150.0}),  # tiles as small as the halo
    ],
)
def test_2d_equals_single_domain_bitwise(client, model_2d, tiles, source):
    expected = rg.traveltime(model_2d, source, radius=3)
    with pytest.warns(rg.InputWarning, match="nodes are small") as said:  # all are
        tiled = rg.traveltime(model_2d, source, radius=3, tiles=tiles, client=client)
    assert len(said) == 1, [str(w.message) for w in said]
    assert isinstance(tiled.data, da.Array)  # lazy, held by the workers
    np.testing.assert_array_equal(tiled.values, expected.values)
    assert tiled.attrs["rounds"] >= 1 and tiled.attrs["tiles_z"] == min(tiles["z"], 25)


def test_3d_equals_single_domain_bitwise(client):
    velocity = rg.checkerboard(
        rg.gradient_model({"z": 9, "y": 10, "x": 11}, 10.0, 900.0, 2500.0), 30.0, 0.3
    )
    for source in ({"z": 40.0, "y": 40.0, "x": 40.0}, {"z": 12.5, "y": 77.0, "x": 3.0}):
        expected = rg.traveltime(velocity, source, radius=2)
        tiled = rg.traveltime(
            velocity, source, radius=2, tiles={"z": 4, "y": 5, "x": 4}, client=client
        )
        np.testing.assert_array_equal(tiled.values, expected.values)


def test_predecessors_and_raypath(client, model_2d):
    source = {"z": 0.0, "x": 150.0}
    velocity = model_2d.copy(deep=True)  # edited in place below
    tiled = rg.traveltime(
        velocity, source, radius=3, tiles={"z": 8, "x": 8}, client=client, predecessors=True
    )
    # The caller's array edited in place (a tomography's next iteration): the result keeps
    # the model it was solved on (its lazy copy read the edited values, 3-5 % off, unchecked).
    velocity.values *= 1.1
    result = tiled.compute()
    for receiver in ({"z": 240.0, "x": 0.0}, {"z": 240.0, "x": 300.0}, {"z": 101.0, "x": 33.0}):
        ray = rg.raypath(result, receiver)
        # The ray's time is the field's: at a node, and through the same last leg off it.
        assert ray.attrs["traveltime"] == float(rg.traveltime_at(result, receiver))
        if receiver["z"] == 240.0:
            assert ray.attrs["traveltime"] == float(result["traveltime"].sel(receiver))
    np.testing.assert_array_equal(result["velocity"].values, model_2d.values)


def test_a_model_in_memory_is_checked_on_lookup(client, model_2d):
    # A tiled field recorded no model_check: traveltime_at(field, velocity=vs) of a Vs
    # model for this Vp field gave times late by their ratio, silently (untiled: refused).
    source, point = {"z": 0.0, "x": 151.7}, {"z": 200.1, "x": 55.5}
    wrong = (model_2d / 1.73).assign_attrs(model_2d.attrs)
    untiled = rg.traveltime(model_2d, source, radius=3)
    tiled = rg.traveltime(model_2d, source, radius=3, tiles={"z": 13, "x": 16}, client=client)
    tiled = tiled.compute()
    assert tiled.attrs["model_check"] == untiled.attrs["model_check"]
    assert float(rg.traveltime_at(tiled, point, velocity=model_2d)) == float(
        rg.traveltime_at(untiled, point, velocity=model_2d)
    )
    for lookup in (
        lambda: rg.traveltime_at(tiled, point, velocity=wrong),
        lambda: rg.TraveltimeTable(tiled, velocity=wrong).at(point),
    ):
        with pytest.raises(rg.InputError, match="velocity is not the model the field was"):
            lookup()
    # A lazy model is not read on the client for its check: the lookup says it cannot tell,
    # and the source's own check then finds the times earlier than the slower model's legs.
    lazy = model_2d.chunk({"z": 9})
    field = rg.traveltime(lazy, source, radius=3, tiles={"z": 13, "x": 16}, client=client)
    assert "model_check" not in field.attrs
    with pytest.warns(rg.InputWarning, match="records no check of the model it was solved on"):
        with pytest.raises(rg.InputError, match="earlier than its recorded source .*slower near"):
            rg.traveltime_at(field.compute(), point, velocity=wrong)


def _backend_reads(action: str):
    """In this process, ``"start"`` recording the size of every read from a file-backed array
    (NetCDF and Zarr backends read through ``explicit_indexing_adapter``), or ``"stop"`` and
    return the sizes. Run on workers with ``client.run``; nested imports so it pickles whole.
    """
    from xarray.core import indexing

    if action == "start":
        original, reads = indexing.explicit_indexing_adapter, []

        def recorded(*args, **kwargs):
            result = original(*args, **kwargs)
            reads.append(int(np.size(result)))
            return result

        recorded.original, recorded.reads = original, reads
        indexing.explicit_indexing_adapter = recorded
        return None
    current = indexing.explicit_indexing_adapter
    indexing.explicit_indexing_adapter = current.original
    return current.reads


@pytest.mark.parametrize("opened", ["zarr", "zarr-unchunked", "netcdf", "npy"])
def test_model_on_file_is_never_gathered(client, model_2d, tmp_path, monkeypatch, opened):
    # "zarr" is dask-backed; "zarr-unchunked" (open_zarr(chunks=None)), "netcdf" and "npy" (a
    # memory map) are lazily indexed arrays that .data would read whole on the client unless
    # chunked first (tiled.chunked_lazily).
    dataset = model_2d.to_dataset(name="vp")
    if opened == "netcdf":
        path = tmp_path / "model.nc"
        dataset.to_netcdf(path)
        lazy = rg.load_velocity(path)
    elif opened == "npy":
        path = tmp_path / "model.npy"
        np.save(path, model_2d.values)
        spacing = float(model_2d["x"][1] - model_2d["x"][0])
        lazy = rg.load_velocity(path, units="m/s", length_unit="m", spacing=spacing)
        xr.testing.assert_equal(lazy.reset_coords(drop=True), model_2d.reset_coords(drop=True))
    else:
        path = tmp_path / "model.zarr"
        dataset.chunk({"z": 8, "x": 8}).to_zarr(path, zarr_format=3, consolidated=False)
        if opened == "zarr":
            lazy = rg.load_velocity(path)
        else:
            lazy = xr.open_zarr(path, chunks=None, consolidated=False)["vp"]
    assert (lazy.chunks is not None) == (opened == "zarr")  # .data would load the others
    full = lazy.size
    original = da.Array.__array__

    def guarded(self, *args, **kwargs):
        assert self.size < full, "the whole model was gathered to the client"
        return original(self, *args, **kwargs)

    monkeypatch.setattr(da.Array, "__array__", guarded)
    # Blocks as small as the tiles (not a million nodes), so that reading a block whole (to
    # check its values) is within what a worker may read: each a piece of the model.
    monkeypatch.setitem(LAZY_BLOCK, 2, 8)
    tiles, source = {"z": 8, "x": 8}, {"z": 10.0, "x": 20.0}
    _backend_reads("start")
    client.run(_backend_reads, "start")
    try:
        tiled = rg.traveltime(lazy, source, radius=3, tiles=tiles, client=client)
        values = client.compute(tiled.data, sync=True)
    finally:
        on_client = _backend_reads("stop")
        on_workers = client.run(_backend_reads, "stop")
    monkeypatch.undo()
    assert not on_client, f"the client read {sum(on_client)} of the model's {full} values"
    # Each worker read its own tiles: pieces no larger than a tile with its halo.
    assert all(on_workers.values()), on_workers
    assert max(max(reads) for reads in on_workers.values()) <= (8 + 2 * 3) ** 2
    expected = rg.traveltime(model_2d, source, radius=3)
    np.testing.assert_array_equal(values, expected.values)


def test_tile_tasks_stay_on_their_owner(model_2d):
    """Every task of a tile runs on the worker that owns it; only strips travel.

    The cluster runs without work stealing, as the one raygrid starts does: distributed's
    stealing honours only strict restrictions (and no per-task annotation turns it off), and
    the loose ones raygrid needs, so that a lost worker's tiles can be recomputed elsewhere,
    let an idle worker steal a queued solve and pull its tile state over (measured: a few
    of 504 solves on a 301^2 model). That costs a move, never a float: merging is ``minimum``.
    The restrictions themselves are checked on every task, so a dropped one fails here even
    where data locality alone would have placed the task right.
    """
    import dask
    from distributed import Client, LocalCluster, get_task_stream
    from distributed.diagnostics.plugin import SchedulerPlugin

    from raygrid.pipeline.decompose import _owners
    from raygrid.pipeline.tiles import tile_grid

    class Restrictions(SchedulerPlugin):
        name = "raygrid-test-restrictions"

        def __init__(self):
            self.seen = {}

        def start(self, scheduler):
            self.scheduler = scheduler

        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "processing" and str(key).startswith("raygrid-"):
                task = self.scheduler.tasks[key]
                self.seen[key] = (set(task.worker_restrictions or ()), task.loose_restrictions)

    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
            host="127.0.0.1",
        )  # fmt: skip
    with cluster, Client(cluster, set_as_default=False) as own:
        assert "stealing" not in own.run_on_scheduler(
            lambda dask_scheduler: [*dask_scheduler.extensions]
        )
        recorder = Restrictions()
        own.register_plugin(recorder)
        tiles, source = {"z": 8, "x": 8}, {"z": 10.0, "x": 20.0}
        owner = _owners(
            tile_grid(tiles, ("z", "x"), (25, 1, 31), (3, 0, 3)),
            sorted(own.nthreads()),
        )
        with get_task_stream(own) as stream:
            tiled = rg.traveltime(model_2d, source, radius=3, tiles=tiles, client=own)
            values = own.compute(tiled.data, sync=True)
        restrictions = own.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.plugins[Restrictions.name].seen
        )
        moved = own.run(
            lambda dask_worker: [
                key for entry in dask_worker.transfer_incoming_log for key in entry["keys"]
            ]
        )

    def tile(key):
        pattern = r"raygrid-([a-z-]+)-r(\d+)-([\d.]+)-[0-9a-f]+"
        prefix, _, index = re.fullmatch(pattern, key).groups()
        return prefix, tuple(int(i) for i in index.split("."))

    every_kind = set("start-tile solve-tile summary strips times".split())
    assert {tile(key)[0] for key in restrictions} >= every_kind
    for key, (workers, loose) in restrictions.items():
        assert workers == {owner[tile(key)[1]]} and loose, (key, workers, loose)
    ran = [(r["key"], r["worker"]) for r in stream.data if str(r["key"]).startswith("raygrid-")]
    assert {tile(key)[0] for key, _ in ran} >= {"solve-tile", "summary", "strips"}
    for key, worker in ran:
        assert worker == owner[tile(key)[1]], (key, worker)
    travelled = {tile(key)[0] for keys in moved.values() for key in keys if "raygrid-" in str(key)}
    assert travelled == {"strips"}, travelled  # strips crossed between workers, nothing else
    np.testing.assert_array_equal(values, rg.traveltime(model_2d, source, radius=3).values)


def test_written_to_zarr_with_tile_aligned_chunks(client, model_2d, tmp_path):
    tiled = rg.traveltime(
        model_2d, {"z": 0.0, "x": 0.0}, radius=2, tiles={"z": 10, "x": 12}, client=client
    )
    store = tmp_path / "times.zarr"
    tiled.to_dataset().to_zarr(store, zarr_format=3, consolidated=False)
    written = xr.open_zarr(store, consolidated=False)["traveltime"]
    assert written.encoding["chunks"] == (10, 12)  # one tile interior per chunk: no sharing
    expected = rg.traveltime(model_2d, {"z": 0.0, "x": 0.0}, radius=2)
    np.testing.assert_array_equal(written.values, expected.values)


def test_round_log_lines(client, model_2d, caplog):
    with caplog.at_level(logging.INFO, logger="raygrid"):
        rg.traveltime(
            model_2d, {"z": 0.0, "x": 0.0}, radius=2, tiles={"z": 13, "x": 16}, client=client
        )
    records = [r for r in caplog.records if r.name == "raygrid"]
    lines = [r.getMessage() for r in records]
    assert lines[0].startswith("round 0: 1 active tiles")
    assert "strips changed" in lines[0] and "MB moved" in lines[0]
    assert "(tile tasks " in lines[0] and "solvers " in lines[0]
    assert lines[-2].split(",")[1].strip() == "0 strips changed"
    # And a closing line: the solve's rounds, tile solves and time in all.
    assert lines[-1].startswith(f"solved in {len(lines) - 1} rounds: ")
    assert " tile solves of 4 tiles, " in lines[-1] and lines[-1].endswith(" s")
    # Where the time went, for benchmarks/tiled_decomposition.py: the round's wall time
    # covers its tasks' (one worker here); the CPU solver has no model setup to count.
    seconds = records[0].tile_seconds
    assert set(seconds) == {"task", "solve", "model", "start", "relax", "copy", "round"}
    assert seconds["round"] >= seconds["task"] >= seconds["solve"] > 0
    assert seconds["model"] == seconds["start"] == seconds["relax"] == seconds["copy"] == 0


def test_rounds_stay_within_three_times_the_tiles_per_axis(client, model_2d):
    tiled = rg.traveltime(
        model_2d, {"z": 0.0, "x": 150.0}, radius=3, tiles={"z": 13, "x": 16}, client=client
    )
    assert tiled.attrs["rounds"] <= 3 * 2


def test_worker_killed_mid_solve(client, tmp_path):
    from distributed import WorkerPlugin

    class KillOnLateTileState(WorkerPlugin):
        # SIGKILL from inside the victim the moment a tile solve of round >= 2 (its state)
        # lands in its memory: the stage is certain, where polling from the client fired
        # before round 0 ended, when the victim held no solved state yet.
        name = "raygrid-test-kill"

        def __init__(self, victim, record):
            self.victim, self.record = victim, record

        def setup(self, worker):
            self.worker = worker

        def transition(self, key, start, finish, **kwargs):
            late = re.fullmatch(r"raygrid-solve-tile-r(\d+)-.*", str(key))
            if finish == "memory" and late and int(late[1]) >= 2:
                if self.worker.address == self.victim and not os.path.exists(self.record):
                    with open(self.record, "w") as file:
                        file.write(str(key))
                    os.kill(os.getpid(), signal.SIGKILL)

    velocity = rg.checkerboard(
        rg.gradient_model({"z": 81, "x": 91}, 10.0, 800.0, 3000.0), 60.0, 0.2
    )
    source = {"z": 0.0, "x": 450.0}
    expected = rg.traveltime(velocity, source, radius=3)
    victim = sorted(client.nthreads())[1]  # owns the tiles far from the source
    record = tmp_path / "killed"
    client.register_plugin(KillOnLateTileState(victim, str(record)))
    outcome = {}

    def solve():
        try:
            tiled = rg.traveltime(
                velocity, source, radius=3, tiles={"z": 14, "x": 14}, client=client
            )
            outcome.update(
                values=client.compute(tiled.data, sync=True), rounds=tiled.attrs["rounds"]
            )
        except BaseException as error:  # reported below, in the test's thread
            outcome["error"] = error

    try:
        # In a daemon thread with a deadline, so a hang fails the test instead of CI.
        thread = threading.Thread(target=solve, daemon=True)
        thread.start()
        thread.join(timeout=180)
        assert not thread.is_alive(), "the solve hung after a worker was killed"
        assert "error" not in outcome, outcome.get("error")
        client.wait_for_workers(2, timeout=60)  # the nanny brought the worker back
    finally:
        client.unregister_worker_plugin(KillOnLateTileState.name)
    assert record.exists(), "the victim never held a tile state from round 2 or later"
    killed_in = int(re.fullmatch(r"raygrid-solve-tile-r(\d+)-.*", record.read_text())[1])
    assert 2 <= killed_in < outcome["rounds"] - 1  # mid-solve: more rounds followed the kill
    assert victim not in client.nthreads()  # that process is gone
    np.testing.assert_array_equal(outcome["values"], expected.values)


def test_raygrid_starts_its_own_cluster_when_none_is_given(tmp_path):
    script = textwrap.dedent(
        """
        import distributed
        import numpy as np
        import raygrid.pipeline as rg

        class Spy(distributed.LocalCluster):
            stealing = []

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                Spy.stealing.append("stealing" in self.scheduler.extensions)

        computed = []
        compute = distributed.Client.compute

        def counted(self, collections, *args, **kwargs):
            computed.append(len(collections) if isinstance(collections, list) else 1)
            return compute(self, collections, *args, **kwargs)

        if __name__ == "__main__":
            distributed.LocalCluster = Spy
            distributed.Client.compute = counted
            v = rg.gradient_model({"z": 12, "x": 14}, 10.0, 1000.0, 2000.0)
            t = rg.traveltime(v, {"z": 0.0, "x": 50.0}, radius=2, tiles={"z": 6, "x": 7})
            assert isinstance(t.data, np.ndarray)
            assert Spy.stealing == [False], Spy.stealing  # tile tasks stay on their owners
            assert computed[-1] == 1, computed  # the field, not its predecessors as well
            single = rg.traveltime(v, {"z": 0.0, "x": 50.0}, radius=2)
            np.testing.assert_array_equal(t.values, single.values)
            print("ok")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "raygrid started a Dask cluster; dashboard: http://127.0.0.1:" in run.stderr
    assert run.stdout == "ok\n"  # a library's notes go to stderr


def test_errors_in_a_solve_on_the_current_client_reach_the_caller(client):
    # A ValueError raised while the current client was in use was swallowed, and a second
    # cluster started on top: "generator didn't stop after throw()".
    from raygrid.pipeline.tiled import cluster_client

    with pytest.raises(ValueError, match="raised in the solve"):
        with cluster_client() as (active, owned):
            assert active is client and not owned
            raise ValueError("raised in the solve")


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="CUDA simulator")
def test_cuda_tile_solver_equals_single_domain(client, monkeypatch, caplog):
    # Workers inherit the simulator setting from this process's environment, and mend its
    # shared-array race (tests/simulator.py) before any task: without that a correct kernel
    # could give wrong times here now and then.
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    mended = client.run(lambda: FakeCUDAShared.array.__module__)
    assert set(mended.values()) == {"simulator"}, mended
    velocity = rg.checkerboard(rg.gradient_model({"z": 8, "x": 9}, 10.0, 900.0, 2500.0), 30.0)
    source = {"z": 0.0, "x": 40.0}
    expected = rg.traveltime(velocity, source, radius=2)
    with caplog.at_level(logging.INFO, logger="raygrid"):
        tiled = rg.traveltime(
            velocity, source, radius=2, tiles={"z": 4, "x": 5}, client=client, backend="cuda"
        )
    np.testing.assert_array_equal(tiled.values, expected.values)
    assert tiled.attrs["backend"] == "cuda"
    # The rounds count the CUDA tile solvers' model setup, starting times, relaxation and
    # copy back apart.
    first = next(r.tile_seconds for r in caplog.records if hasattr(r, "tile_seconds"))
    parts = ("model", "start", "relax", "copy")
    assert first["solve"] >= sum(first[part] for part in parts)
    assert all(first[part] > 0 for part in parts), first


def test_near_far_with_tiles_is_a_clear_error(client, model_2d):
    with pytest.raises(rg.InputError, match="algorithm='near-far' runs single-domain only"):
        rg.traveltime(
            model_2d, {"z": 0.0, "x": 0.0}, radius=2, tiles={"z": 8}, client=client,
            backend="cuda", algorithm="near-far",
        )  # fmt: skip


def test_an_unguarded_script_is_told_to_guard_its_tiled_solve(tmp_path):
    # Its cluster's worker processes import the script first: each ran the tiled solve
    # again and started a cluster of its own, 600 lines and 15 tracebacks ending in "the
    # local cluster did not start: ... is the port free?" (adversarial review).
    script = tmp_path / "survey.py"
    script.write_text(
        "import raygrid.pipeline as rg\n"
        "v = rg.gradient_model({'z': 21, 'x': 31}, spacing=10.0)\n"
        "rg.traveltime(v, {'z': 0.0, 'x': 100.0}, radius=2, tiles={'z': 12, 'x': 16})\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("raygrid.pipeline.errors.InputError: a script that calls raygrid ")
    assert 'under `if __name__ == "__main__":`' in last
    # Each worker process stopped at the call, in a line of its own, not a traceback.
    assert "raygrid: a script that calls raygrid with tiles=" in done.stderr
    assert done.stderr.count("Traceback") <= 4


def test_a_tiled_solve_on_an_adaptive_cluster_gets_its_workers_asked_for(model_2d, tmp_path):
    # cluster.adapt() starts workers for tasks that wait: a tiled solve on one with none
    # yet was refused at once ("the cluster has no workers").

    source = {"z": 0.0, "x": 150.0}
    with adaptive_client(2) as (cluster, client):
        # Its tiles go to the workers there as it starts (one): said.
        with pytest.warns(rg.InputWarning, match=r"adaptive and has 1 worker\(s\) as this tiled"):
            tiled = rg.traveltime(
                model_2d, source, radius=3, tiles={"z": 13, "x": 16}, client=client
            )
        np.testing.assert_array_equal(
            tiled.values, rg.traveltime(model_2d, source, radius=3).values
        )
        # A tiled survey says it once, not once a source.
        from raygrid.pipeline.workflow import read_workflow, run_workflow

        workflow = tmp_path / "w.yaml"
        workflow.write_text(
            "model: {synthetic: gradient, shape: {z: 25, x: 31}}\n"
            "sources: [{z: 0.0, x: 100.0}, {z: 0.0, x: 200.0}, {z: 0.0, x: 250.0}]\n"
            "compute: {tiles: {z: 13, x: 16}}\n"
            f"outputs: {{store: {tmp_path / 's.zarr'}}}\n"
        )
        requeued(cluster, client, 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_workflow(read_workflow(workflow), client=client)
        said = [w for w in caught if "is adaptive and has 1 worker" in str(w.message)]
        assert len(said) == 1, [str(w.message) for w in caught]
