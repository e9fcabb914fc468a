"""Tiled solves on a real 2-worker LocalCluster equal the single-domain solve bitwise."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import raygrid.pipeline as rg


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            host="127.0.0.1",
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
    tiled = rg.traveltime(model_2d, source, radius=3, tiles=tiles, client=client)
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
    tiled = rg.traveltime(
        model_2d, source, radius=3, tiles={"z": 8, "x": 8}, client=client, predecessors=True
    )
    result = tiled.compute()
    for receiver in ({"z": 240.0, "x": 0.0}, {"z": 240.0, "x": 300.0}, {"z": 101.0, "x": 33.0}):
        ray = rg.raypath(result, receiver)
        assert float(ray["time"][-1]) == pytest.approx(ray.attrs["traveltime"], rel=1e-15)
        if receiver["z"] == 240.0:
            assert ray.attrs["traveltime"] == float(result["traveltime"].sel(receiver))


def test_lazy_zarr_model_is_never_gathered(client, model_2d, tmp_path, monkeypatch):
    store = tmp_path / "model.zarr"
    model_2d.chunk({"z": 8, "x": 8}).to_dataset(name="vp").to_zarr(
        store, zarr_format=3, consolidated=False
    )
    lazy = rg.load_velocity(store)
    assert isinstance(lazy.data, da.Array)
    full = lazy.size
    original = da.Array.__array__

    def guarded(self, *args, **kwargs):
        assert self.size < full, "the whole model was gathered to the client"
        return original(self, *args, **kwargs)

    monkeypatch.setattr(da.Array, "__array__", guarded)
    tiled = rg.traveltime(
        lazy, {"z": 10.0, "x": 20.0}, radius=3, tiles={"z": 8, "x": 8}, client=client
    )
    values = tiled.data.compute()
    monkeypatch.undo()
    expected = rg.traveltime(model_2d, {"z": 10.0, "x": 20.0}, radius=3)
    np.testing.assert_array_equal(values, expected.values)


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
    lines = [r.getMessage() for r in caplog.records if r.name == "raygrid"]
    assert lines[0].startswith("round 0: 1 active tiles")
    assert "strips changed" in lines[0] and "MB moved" in lines[0]
    assert lines[-1].split(",")[1].strip() == "0 strips changed"


def test_rounds_stay_within_three_times_the_tiles_per_axis(client, model_2d):
    tiled = rg.traveltime(
        model_2d, {"z": 0.0, "x": 150.0}, radius=3, tiles={"z": 13, "x": 16}, client=client
    )
    assert tiled.attrs["rounds"] <= 3 * 2


def test_worker_killed_mid_solve(client):
    velocity = rg.checkerboard(
        rg.gradient_model({"z": 81, "x": 91}, 10.0, 800.0, 3000.0), 60.0, 0.2
    )
    source = {"z": 0.0, "x": 450.0}
    expected = rg.traveltime(velocity, source, radius=3)
    victim = sorted(client.scheduler_info()["workers"])[1]
    pid = client.run(os.getpid, workers=[victim])[victim]
    killed = threading.Event()

    def kill_when_busy():
        # Kill once the solve is under way and the victim holds tile state.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            held = client.run(lambda dask_worker: len(dask_worker.data), workers=[victim])
            if held.get(victim, 0) > 10:
                os.kill(pid, 9)
                killed.set()
                return
            time.sleep(0.05)

    threading.Thread(target=kill_when_busy, daemon=True).start()
    tiled = rg.traveltime(velocity, source, radius=3, tiles={"z": 14, "x": 14}, client=client)
    values = tiled.values
    assert killed.is_set()
    np.testing.assert_array_equal(values, expected.values)
    client.wait_for_workers(2, timeout=60)  # the nanny brought the worker back


def test_raygrid_starts_its_own_cluster_when_none_is_given(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np
        import raygrid.pipeline as rg
        if __name__ == "__main__":
            v = rg.gradient_model({"z": 12, "x": 14}, 10.0, 1000.0, 2000.0)
            t = rg.traveltime(v, {"z": 0.0, "x": 50.0}, radius=2, tiles={"z": 6, "x": 7})
            assert isinstance(t.data, np.ndarray)
            single = rg.traveltime(v, {"z": 0.0, "x": 50.0}, radius=2)
            np.testing.assert_array_equal(t.values, single.values)
            print("ok")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "dashboard: http://" in run.stdout and "ok" in run.stdout


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="CUDA simulator")
def test_cuda_tile_solver_equals_single_domain(client, monkeypatch):
    # Workers inherit the simulator setting from this process's environment.
    velocity = rg.checkerboard(rg.gradient_model({"z": 8, "x": 9}, 10.0, 900.0, 2500.0), 30.0)
    source = {"z": 0.0, "x": 40.0}
    expected = rg.traveltime(velocity, source, radius=2)
    tiled = rg.traveltime(
        velocity, source, radius=2, tiles={"z": 4, "x": 5}, client=client, backend="cuda"
    )
    np.testing.assert_array_equal(tiled.values, expected.values)
    assert tiled.attrs["backend"] == "cuda"


def test_near_far_with_tiles_is_a_clear_error(client, model_2d):
    with pytest.raises(rg.InputError, match="algorithm='near-far' runs single-domain only"):
        rg.traveltime(
            model_2d, {"z": 0.0, "x": 0.0}, radius=2, tiles={"z": 8}, client=client,
            backend="cuda", algorithm="near-far",
        )  # fmt: skip
