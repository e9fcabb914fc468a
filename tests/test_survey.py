"""Surveys on a real 2-worker LocalCluster: fan-out, the store, resume, refusal, worker loss."""

from __future__ import annotations

import copy
import logging
import os
import re
import shutil
import signal
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
import zarr
from click.testing import CliRunner

import raygrid.pipeline as rg
from raygrid.pipeline.cli import main
from raygrid.pipeline.errors import InputError
from raygrid.pipeline.store import done_sources
from raygrid.pipeline.workflow import read_workflow, run_workflow

from clusters import in_process_client

SPEC = {
    "model": {"synthetic": "gradient", "shape": {"z": 31, "x": 41}, "spacing": 10.0},
    "grid": {"radius": 3},
    # On-node and off-node sources and receivers (off-node legs are part of the contract).
    "sources": [
        {"z": 0.0, "x": 0.0},
        {"z": 0.0, "x": 105.0},
        {"z": 33.3, "x": 88.7},  # 88.7 / 10 * 10 != 88.7: kept as given, not rebuilt
        {"z": 0.0, "x": 400.0},
        {"z": 150.0, "x": 251.7},
    ],
    "receivers": {
        "line": {"start": {"z": 300.0, "x": 0.0}, "stop": {"z": 255.0, "x": 400.0}, "count": 4}
    },  # fmt: skip
    "outputs": {"store": "out/survey.zarr"},
    "compute": {"batch": 2},
}
# Enough sources to tell "once a run" from "once a source", for the tiled tests whose point
# is not the sources (a tiled source takes a few Dask rounds: ~2 s each on two busy cores).
TWO_SOURCES = copy.deepcopy(SPEC["sources"][:2])


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # None still serves the scheduler's HTTP on 8787
            host="127.0.0.1",
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def workflow_file(directory: Path, spec: dict | None = None, **changes) -> Path:
    spec = yaml.safe_load(yaml.safe_dump(spec or SPEC))
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            spec.setdefault(section, {})[field] = value
        else:
            spec[section] = value
    spec["outputs"]["store"] = str(directory / Path(spec["outputs"]["store"]).name)
    if spec.get("compute", {}).get("tiles"):
        spec["compute"].pop("batch", None)  # a tiled solve does not read it (and warns)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "workflow.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def expected(spec: dict):
    """The API's answers for the same inputs: fields, and rays to every receiver."""
    prepared = rg.workflow.prepare_workflow(rg.workflow.Workflow.model_validate(spec))
    result = rg.traveltimes(
        prepared.velocity, prepared.sources, radius=spec["grid"]["radius"], predecessors=True
    )
    rays = [
        [rg.raypath(result.isel(source=i), r) for r in prepared.receivers]
        for i in range(len(prepared.sources))
    ]
    return result, rays


def test_survey_end_to_end_matches_the_api_exactly(tmp_path, client):
    path = workflow_file(tmp_path)
    dataset = run_workflow(read_workflow(path), client=client)
    result, rays = expected(SPEC)
    assert dataset.attrs["complete"] == 1
    assert dataset.attrs["raygrid_version"] == rg.__version__
    # What made it (every development build is 0.1.0): the commit where it runs from a
    # checkout, Python and the libraries; shown by raygrid info.
    import numpy
    import zarr

    software = dataset.attrs["software"]
    assert software.startswith(f"raygrid {rg.__version__}")
    assert f"numpy {numpy.__version__}" in software and f"zarr {zarr.__version__}" in software
    assert f"made with: {software}" in rg.inspect.describe(tmp_path / "survey.zarr")
    # Readable without raygrid's docs: the axes described as CF describes them, positions
    # named, and no fill value on coordinates (CF allows none there).
    assert dataset["z"].attrs | {"units": "m"} == {
        "axis": "Z", "positive": "down", "long_name": "depth", "units": "m"
    }  # fmt: skip
    assert dataset["x"].attrs["axis"] == "X"
    assert dataset["receiver_x"].attrs["long_name"] == "receiver x"
    import json

    for name in ("z", "x", "source_x", "receiver_z"):
        stored = json.loads((tmp_path / "survey.zarr" / name / "zarr.json").read_text())
        assert "_FillValue" not in stored.get("attributes", {}), name
    # The store exports to NetCDF as it is: its attributes hold no dict (the fingerprint's
    # parts were one) and no boolean (complete, rays_assembled), which NetCDF refuses.
    dataset.to_netcdf(tmp_path / "whole.nc")
    exported = xr.open_dataset(tmp_path / "whole.nc")
    assert exported.attrs["workflow_sha256_parts"] == dataset.attrs["workflow_sha256_parts"]
    exported.close()
    stored = yaml.safe_load(dataset.attrs["workflow"])
    assert stored["grid"]["radius"] == 3 and stored["compute"]["batch"] == 2
    # One chunk per source: concurrent writers never share one.
    assert dataset["traveltime"].encoding["chunks"] == (1, 31, 41)
    assert dataset["receiver_traveltime"].encoding["chunks"] == (1, 4)
    np.testing.assert_array_equal(dataset["traveltime"].values, result["traveltime"].values)
    np.testing.assert_array_equal(dataset["source_x"].values, result["source_x"].values)
    # Positions carry the model's length unit, in the store as from the API (they had none).
    for name in ("source_z", "source_x", "receiver_z", "receiver_x"):
        assert dataset[name].attrs["units"] == "m", name
    assert result["source_z"].attrs["units"] == "m"
    assert dataset["source_done"].values.tolist() == [1] * 5
    for i, per_source in enumerate(rays):
        for j, ray in enumerate(per_source):
            # The table holds the ray's own traveltime, bit for bit.
            assert dataset["receiver_traveltime"].values[i, j] == ray.attrs["traveltime"]
            start = int(dataset["ray_start"][i, j])
            count = int(dataset["ray_count"][i, j])
            assert count == ray.sizes["point"]
            for name in ("z", "x", "time"):
                np.testing.assert_array_equal(
                    dataset[f"ray_{name}"].values[start : start + count], ray[name].values
                )
    assert not (Path(dataset.encoding["source"]) / "ray_parts").exists()


def _count_task_arrivals():
    # Runs in each worker: count every SurveyTask unpickled there from now on.
    from raygrid.pipeline import survey

    survey.arrivals = 0

    def __setstate__(self, state):
        survey.arrivals += 1
        self.__dict__.update(state)

    survey.SurveyTask.__setstate__ = __setstate__


def _task_arrivals():
    from raygrid.pipeline import survey

    del survey.SurveyTask.__setstate__
    return survey.arrivals


@pytest.mark.parametrize("precompute", [False, True])
def test_model_and_weights_reach_each_worker_once(tmp_path, precompute):
    # The task (model, its prepared graph, precomputed weights) is scattered to every worker
    # once; the one-source tasks only name it. Counted where it lands: the unpickling. On a
    # cluster raygrid starts (the active memory manager off: it used to drop a replica and
    # the worker fetched the model a second time, 1 run in ~3 with cold Numba caches).
    from raygrid.pipeline.cluster import connect
    from raygrid.pipeline.clusterfile import LocalConfig

    config = LocalConfig(cluster="local", n_workers=2, dashboard_address=":0")
    with connect(config, echo=lambda line: None) as own:
        own.run(_count_task_arrivals)
        spec = yaml.safe_load(yaml.safe_dump(SPEC))
        spec["sources"] = {"line": {"start": {"z": 0.0, "x": 0.0},
                                    "stop": {"z": 0.0, "x": 400.0}, "count": 12}}  # fmt: skip
        spec["compute"] = {"batch": 1, "precompute": precompute}
        run_workflow(read_workflow(workflow_file(tmp_path, spec)), client=own)
        arrivals = own.run(_task_arrivals)
    assert list(arrivals.values()) == [1, 1], arrivals


def test_tiled_survey_equals_the_plain_survey(tmp_path, client):
    # Each source solved by domain decomposition over the workers: same store, bit for bit.
    plain = run_workflow(read_workflow(workflow_file(tmp_path / "plain")), client=client)
    tiled = run_workflow(
        read_workflow(workflow_file(tmp_path / "tiled", compute__tiles={"z": 16, "x": 14})),
        client=client,
    )
    for name in ("traveltime", "receiver_traveltime", "ray_x", "ray_z", "ray_time", "ray_count"):
        np.testing.assert_array_equal(tiled[name].values, plain[name].values)


def test_a_tiled_survey_warns_of_a_lopsided_star_and_small_tiles_once(tmp_path, client):
    # At the workflow's radius; each source's tiled solve repeated it, from survey.py. Small
    # tiles (16 x 14) at the tiles' line, once, not again for each source.
    path = workflow_file(
        tmp_path, grid={"radius": {"z": 1, "x": 3}}, compute={"tiles": {"z": 16, "x": 14}},
        sources=TWO_SOURCES,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        run_workflow(read_workflow(path), client=client)
    lopsided = [str(w.message) for w in said if "the forward star reaches" in str(w.message)]
    assert len(lopsided) == 1 and "grid.radius: the forward star" in lopsided[0], lopsided
    small = [str(w.message) for w in said if "nodes are small" in str(w.message)]
    assert len(small) == 1 and "compute.tiles: tiles of 16 x 14 nodes" in small[0], small


@pytest.mark.parametrize(
    "shape, chunk",
    [((201, 801), (201, 801)), ((2, 3000, 3000), (1, 1500, 3000)), ((8, 9000), (8, 9000))],
)
def test_field_chunks_hold_at_most_chunk_bytes(shape, chunk):
    # A depth's slab larger than CHUNK_BYTES was one chunk: halving stopped at z = 1.
    from raygrid.pipeline.store import CHUNK_BYTES, field_chunks

    dims = ("z", "y", "x")[-len(shape) :] if len(shape) == 3 else ("z", "x")
    assert field_chunks(shape, 8, None, dims) == (1, *chunk)
    assert np.prod(chunk) * 8 <= CHUNK_BYTES


@pytest.mark.parametrize("tiles", [None, {"z": 16, "x": 14}])
def test_receivers_near_an_off_node_source_are_reached_straight(tmp_path, client, tiles):
    # The survey's table and rays follow the API's rule for a receiver next to the source.
    source = {"z": 33.3, "x": 88.7}
    receivers = [dict(source), {"z": 34.3, "x": 89.7}, {"z": 300.0, "x": 7.5}]
    path = workflow_file(tmp_path, sources=[source], receivers=receivers, compute__tiles=tiles)
    dataset = run_workflow(read_workflow(path), client=client)
    prepared = rg.workflow.prepare_workflow(rg.workflow.Workflow.model_validate(SPEC))
    result = rg.traveltime(prepared.velocity, source, radius=3, predecessors=True)
    expected = rg.traveltime_at(result, receivers).values
    np.testing.assert_array_equal(dataset["receiver_traveltime"].values[0], expected)
    # (At the source itself, one point: as raypath gives it.)
    assert expected[0] == 0.0 and dataset["ray_count"].values[0].tolist()[:2] == [1, 2]


def test_a_tiled_survey_never_gathers_a_field_or_the_model(tmp_path, client, monkeypatch):
    # Tiles are for models too large for one machine: fields are written by the workers
    # that hold their tiles, and receivers and rays read only the chunks (of the field, the
    # predecessors, the model in the store) that hold their nodes. Everything that reaches
    # the client passes through Client.gather: nothing larger than one tile may (the solve's
    # rounds gather small summaries, a list per tile).
    from dask.sizeof import sizeof
    from distributed import Client

    gathered = []
    gather = Client.gather

    def recorded(self, *args, **kwargs):
        result = gather(self, *args, **kwargs)
        gathered.extend(map(sizeof, result if isinstance(result, list) else [result]))
        return result

    from raygrid.pipeline import nodevalues

    shape, tiles = {"z": 64, "x": 80}, {"z": 16, "x": 20}
    monkeypatch.setattr(nodevalues, "BLOCK", 8)  # blocks smaller than these tiles
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["model"]["shape"] = shape
    spec["sources"] = TWO_SOURCES
    spec["receivers"] = {
        "line": {"start": {"z": 630, "x": 5}, "stop": {"z": 555, "x": 790}, "count": 5}
    }
    plain = run_workflow(read_workflow(workflow_file(tmp_path / "plain", spec)), client=client)
    monkeypatch.setattr(Client, "gather", recorded)
    spec["compute"]["tiles"] = tiles
    tiled = run_workflow(read_workflow(workflow_file(tmp_path / "tiled", spec)), client=client)
    monkeypatch.setattr(Client, "gather", gather)
    for name in ("traveltime", "receiver_traveltime", "ray_x", "ray_z", "ray_time", "ray_count"):
        np.testing.assert_array_equal(tiled[name].values, plain[name].values)
    assert tiled["velocity"].encoding["chunks"] == (16, 20)  # the model's copy: by tiles
    # raygrid info says how a store was solved, its tiles included (it did not).
    from raygrid.pipeline.inspect import describe

    assert "backend cpu, tiles z=16, x=20\n" in describe(tmp_path / "tiled" / "survey.zarr")
    assert "backend cpu\n" in describe(tmp_path / "plain" / "survey.zarr")
    tile_bytes = 16 * 20 * 8
    assert gathered and max(gathered) < 2 * tile_bytes < 64 * 80 * 8 / 4, max(gathered)


@pytest.mark.parametrize("tiles", [None, {"z": 16, "x": 21}], ids=["plain", "tiled"])
def test_a_task_that_fails_on_a_worker_stops_the_run_with_its_sources_named(tmp_path, tiles):
    # A worker's error (a CUDA error, KilledWorker) in a plain survey was a RunFailed naming
    # the sources; in a tiled one it was the worker's own exception, a traceback.
    from raygrid.pipeline import decompose, survey

    def failing(*args, **kwargs):
        raise RuntimeError("out of device memory")

    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["compute"] = {"tiles": tiles} if tiles else {"batch": 1}
    path = workflow_file(tmp_path, spec)
    with in_process_client() as client, pytest.MonkeyPatch.context() as patch:
        patch.setattr(decompose, "solve_tile", failing)
        patch.setattr(survey, "solve_batch", failing)
        with pytest.raises(rg.RunFailed) as failed:
            run_workflow(read_workflow(path), client=client)
    message = str(failed.value)
    assert "the task solving source" in message
    assert message.endswith(
        "failed: RuntimeError: out of device memory; the finished sources are kept in the "
        "store: run the same command again to resume"
    )
    assert isinstance(failed.value.__cause__, RuntimeError)


def test_a_tiled_survey_writes_where_the_run_is_not_where_its_workers_started(
    tmp_path, monkeypatch
):
    # A relative store path reached the workers as it was: each wrote its chunks under its
    # own working directory (a scheduler file's workers started elsewhere), and the store
    # the run finished held NaN.
    from distributed import Client, LocalCluster

    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["compute"] = {"tiles": {"z": 16, "x": 21}}
    spec["sources"] = TWO_SOURCES
    path = workflow_file(tmp_path / "run", spec)
    spec["outputs"]["store"] = "survey.zarr"
    path.write_text(yaml.safe_dump(spec))  # relative to where the run is
    (tmp_path / "workers").mkdir()
    monkeypatch.chdir(tmp_path / "workers")
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                     host="127.0.0.1") as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        monkeypatch.chdir(tmp_path / "run")
        dataset = run_workflow(read_workflow(path), client=client).load()
    assert list((tmp_path / "workers").iterdir()) == []
    assert dataset["source_done"].values.all()
    result, _ = expected(spec)
    np.testing.assert_array_equal(dataset["traveltime"].values, result["traveltime"].values)


def test_a_tiled_survey_of_a_netcdf_model_equals_the_plain_survey(tmp_path, client):
    # A NetCDF model is read block by block (tiled.LAZY_BLOCK), into the store and solved.
    rg.gradient_model({"z": 31, "x": 41}, 10.0, 500.0, 4000.0).to_dataset(name="vp").to_netcdf(
        tmp_path / "m.nc"
    )
    plain = run_workflow(
        read_workflow(workflow_file(tmp_path / "plain", sources=TWO_SOURCES)), client=client
    )
    path = workflow_file(
        tmp_path / "tiled",
        model={"path": str(tmp_path / "m.nc")},
        compute__tiles={"z": 16, "x": 14},
        sources=TWO_SOURCES,
    )
    tiled = run_workflow(read_workflow(path), client=client)
    assert tiled["velocity"].chunks == ((16, 15), (14, 14, 13))  # copied tile by tile
    for name in ("traveltime", "receiver_traveltime", "ray_x", "ray_z", "ray_time", "ray_count"):
        np.testing.assert_array_equal(tiled[name].values, plain[name].values)


def test_a_lazily_indexed_model_keeps_its_fingerprint_under_other_tiles(tmp_path, client):
    # Without rays the tiles are not part of what a store holds; a NetCDF model was hashed
    # in blocks of the tiles, so other tiles were refused for "the model's values".
    rg.gradient_model({"z": 31, "x": 41}, 10.0, 500.0, 4000.0).to_dataset(name="vp").to_netcdf(
        tmp_path / "m.nc"
    )
    model, outputs = {"path": str(tmp_path / "m.nc")}, {"store": "s.zarr", "rays": False}
    first = workflow_file(
        tmp_path, model=model, outputs=outputs, compute={"tiles": {"z": 16, "x": 14}},
        sources=TWO_SOURCES,
    )  # fmt: skip
    done = run_workflow(read_workflow(first), client=client).load()
    other = workflow_file(
        tmp_path, model=model, outputs=outputs, compute={"tiles": {"z": 11, "x": 21}},
        sources=TWO_SOURCES,
    )  # fmt: skip
    xr.testing.assert_identical(run_workflow(read_workflow(other), client=client).load(), done)


def test_precomputed_weights_and_float32(tmp_path, client):
    plain = run_workflow(read_workflow(workflow_file(tmp_path / "a")), client=client)
    precomputed = run_workflow(
        read_workflow(workflow_file(tmp_path / "b", compute__precompute=True)), client=client
    )
    for name in ("traveltime", "receiver_traveltime", "ray_x", "ray_time"):
        np.testing.assert_array_equal(plain[name].values, precomputed[name].values)
    single = run_workflow(
        read_workflow(workflow_file(tmp_path / "c", grid={"radius": 3, "precision": "float32"})),
        client=client,
    )
    assert single["traveltime"].dtype == np.float32
    np.testing.assert_allclose(single["traveltime"], plain["traveltime"], rtol=1e-6)


def test_receiver_table_only(tmp_path, client):
    path = workflow_file(tmp_path, outputs={"store": "t.zarr", "fields": False, "rays": False})
    dataset = run_workflow(read_workflow(path), client=client)
    assert "traveltime" not in dataset and "ray_start" not in dataset
    result, rays = expected(SPEC)
    table = np.array([[ray.attrs["traveltime"] for ray in per_source] for per_source in rays])
    np.testing.assert_array_equal(dataset["receiver_traveltime"].values, table)


@pytest.mark.parametrize(
    "receivers, outputs, promised",
    [
        ([], {}, ""),
        (None, {"rays": False, "receiver_table": False}, ""),
        (None, {"receiver_table": False}, ": rays are drawn once the run has finished"),
        (None, {"rays": False}, ": the receiver gathers are drawn once the run has finished"),
    ],
    ids=["no-receivers", "fields-only", "rays", "table"],
)
def test_an_unfinished_store_promises_only_what_it_keeps(
    tmp_path, client, receivers, outputs, promised
):
    # Its note said "rays and the receiver gathers are drawn once the run has finished" of
    # stores that keep neither.
    from raygrid.pipeline.inspect import plot_directory

    changes = {"outputs": {"store": "f.zarr", **outputs}}
    if receivers is not None:
        changes["receivers"] = receivers
    run_workflow(read_workflow(workflow_file(tmp_path, **changes)), client=client)
    store = tmp_path / "f.zarr"
    zarr.open_array(store=str(store), path="source_done", mode="r+")[3] = 0
    zarr.open_group(store, mode="r+").attrs["complete"] = False
    if receivers is None and "rays" not in outputs:  # as before the end: parts, unassembled
        (store / "ray_parts").mkdir(exist_ok=True)
    lines = []
    plot_directory(store, tmp_path, [0], echo=lines.append)
    assert lines == [f"note: {store} is not complete (4 of 5 sources){promised}"]


def test_rays_without_fields_stop_early_and_equal_the_full_survey(tmp_path, monkeypatch):
    # Without fields a solve only needs the receivers' nodes: the CPU Dijkstra stops once
    # they are settled (nodes the search never reached keep inf), and the tables and rays
    # are the full survey's bit for bit. One in-process worker, so the solves are seen here.
    from raygrid.pipeline import survey

    solved = []

    def spied(*args, **kwargs):
        times, predecessor = solve_seeds(*args, **kwargs)
        solved.append((kwargs["targets"], np.isinf(times).sum(axis=1)))
        return times, predecessor

    solve_seeds = survey.solve_seeds
    monkeypatch.setattr(survey, "solve_seeds", spied)
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    # Receivers near the first source, on and off nodes: most of the model is not needed.
    spec["receivers"] = [{"z": 20.0, "x": 30.0}, {"z": 12.5, "x": 33.3}]
    with in_process_client() as own:
        full = run_workflow(read_workflow(workflow_file(tmp_path / "full", spec)), client=own)
        assert all(targets is None for targets, _ in solved)
        solved.clear()
        path = workflow_file(tmp_path / "rays", spec, outputs={"store": "r.zarr", "fields": False})
        rays = run_workflow(read_workflow(path), client=own)
    assert "traveltime" not in rays
    assert solved and all(targets is not None and len(targets) > 2 for targets, _ in solved)
    assert any((unreached > 0).any() for _, unreached in solved)  # stopped early
    for name in ("receiver_traveltime", "ray_start", "ray_count", "ray_x", "ray_z", "ray_time"):
        np.testing.assert_array_equal(rays[name].values, full[name].values)


def _chunk_files(store: Path) -> dict[str, float]:
    return {str(p.relative_to(store)): p.stat().st_mtime_ns for p in store.rglob("*") if
            p.is_file()}  # fmt: skip


def test_rerun_resumes_only_unfinished_sources(tmp_path, client):
    path = workflow_file(tmp_path)
    first = run_workflow(read_workflow(path), client=client).load()
    store = Path(first.encoding["source"]) if "source" in first.encoding else tmp_path / (
        "survey.zarr")  # fmt: skip
    # As if the run had died with sources 1 and 3 unfinished (their records never written).
    records = zarr.open_array(store=str(store), path="source_done", mode="r+")
    records[1] = 0
    records[3] = 0
    zarr.open_group(store, mode="r+").attrs["complete"] = False
    before = _chunk_files(store)
    time.sleep(0.01)
    again = run_workflow(read_workflow(path), client=client)
    after = _chunk_files(store)
    rewritten = {name for name in before if after.get(name) != before[name]}
    assert "traveltime/c/1/0/0" in rewritten and "traveltime/c/3/0/0" in rewritten
    assert not {"traveltime/c/0/0/0", "traveltime/c/2/0/0", "traveltime/c/4/0/0"} & rewritten
    xr.testing.assert_identical(again.load(), first)


def test_chunks_lost_after_a_run_are_named_and_solved_again(tmp_path, client, monkeypatch):
    # A complete store whose chunk files were deleted (a copy cut short, by hand): info said
    # "complete", the field read NaN, and a rerun found nothing to do.
    from raygrid.pipeline.inspect import describe

    path = workflow_file(tmp_path)
    first = run_workflow(read_workflow(path), client=client).load()
    store = tmp_path / "survey.zarr"
    (store / "traveltime/c/3/0/0").unlink()
    (store / "receiver_traveltime/c/1/0").unlink()
    said = describe(store)
    assert (
        "status: damaged: 2 source(s) marked done have chunks missing or cut short on disk "
        "(1, 3), read as NaN: rerun the workflow to solve them again"
    ) in said
    assert "sources done: 3 / 5" in said
    # The Python API says so too (a lookup read NaN and called the sources unsolved).
    with pytest.raises(InputError, match=r"is damaged: 2 source\(s\) marked done have chunks"):
        rg.open_survey(store)
    from raygrid.pipeline.inspect import plot_directory

    with pytest.raises(InputError, match=r"sources \[1\] have chunks missing on disk in .*"
                       "rerun the workflow to solve them again"):  # fmt: skip
        plot_directory(store, tmp_path / "pictures", [0, 1])  # (nowhere to note it)
    with pytest.raises(InputError, match=r"sources \[1, 3\] have chunks missing on disk"):
        plot_directory(store, tmp_path / "pictures", [1, 3], echo=print)  # none to draw
    # As a source not done yet: the damaged one is left out with a note, the others drawn
    # (the whole command was refused).
    notes = []
    drawn = plot_directory(store, tmp_path / "pictures", [0, 1], echo=notes.append)
    assert [p.name for p in drawn] == ["survey-source0.png"]
    assert notes and "source(s) 1, 3 marked done have chunks missing" in notes[-1]
    notes = []
    drawn = plot_directory(store, tmp_path / "pictures", [], echo=notes.append)  # 0, 2, 4
    assert [p.name for p in drawn] == [f"survey-source{i}.png" for i in (0, 2, 4)]
    # Said as info says it: damaged, not "not complete ... drawn once the run has finished".
    assert notes == [
        f"note: {store} is damaged: source(s) 1, 3 marked done have chunks missing on disk "
        "and are not drawn, nor the receiver gathers: rerun the workflow to solve them again"
    ]
    (tmp_path / "afile").write_text("")  # --out under a file: said before drawing
    with pytest.raises(InputError, match="cannot create picture .*: .*afile is a file, not a"):
        plot_directory(store, tmp_path / "afile" / "sub", [0])
    before = _chunk_files(store)
    lines = []
    time.sleep(0.01)
    from raygrid.pipeline import store as stores

    listings, original = [], stores.lost_sources
    monkeypatch.setattr(stores, "lost_sources", lambda *a: listings.append(a) or original(*a))
    again = run_workflow(read_workflow(path), client=client, echo=lines.append)
    assert any("2 source(s) marked done have chunks missing on disk (1, 3): solving" in line
               for line in lines)  # fmt: skip
    # The store's chunk files are listed once a run (slow on a shared file system), not
    # again when the store is opened for the solve under the same lock.
    assert len(listings) == 1
    after = _chunk_files(store)
    rewritten = {name for name in after if after[name] != before.get(name)}
    assert {"traveltime/c/3/0/0", "receiver_traveltime/c/1/0"} <= rewritten
    assert not {"traveltime/c/0/0/0", "traveltime/c/2/0/0", "traveltime/c/4/0/0"} & rewritten
    xr.testing.assert_identical(again.load(), first)
    assert "status: complete" in describe(store)


def test_info_reads_a_store_again_that_a_run_changes_under_it(tmp_path, client, monkeypatch):
    # raygrid info during a run's ray assembly failed with a bare "[Errno 2] No such file
    # or directory: '.../ray_parts/0000104'": the run had just removed the parts.
    from raygrid.pipeline import inspect

    run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
    store = tmp_path / "survey.zarr"
    reads, original = [], inspect._describe

    def changing(path, workflow, verify=False):
        reads.append(path)
        if len(reads) < changes:
            raise FileNotFoundError(2, "No such file or directory", str(path / "ray_parts/0"))
        return original(path, workflow, verify)

    monkeypatch.setattr(inspect, "_describe", changing)
    changes = 2
    assert "status: complete" in inspect.describe(store) and len(reads) == 2
    reads.clear()
    changes = inspect.READS + 1
    with pytest.raises(InputError, match=r"survey.zarr changed while it was read, 3 times: a run"):
        inspect.describe(store)
    # A store removed while it was read is gone, not changing: not read again.
    reads.clear()
    changes = 2
    monkeypatch.setattr(inspect.Path, "exists", lambda self: False)
    with pytest.raises(FileNotFoundError):
        inspect.describe(store)
    assert len(reads) == 1


def test_chunk_files_cut_short_count_as_lost(tmp_path, client):
    # What an interrupted `cp -r` leaves: its last file cut short. info said complete, a
    # rerun found nothing to do, and reading the field failed in Blosc's decompression.
    from raygrid.pipeline.inspect import describe

    path = workflow_file(tmp_path)
    first = run_workflow(read_workflow(path), client=client).load()
    store = tmp_path / "survey.zarr"
    chunk = store / "traveltime/c/3/0/0"
    with open(chunk, "r+b") as handle:
        handle.truncate(chunk.stat().st_size // 2)
    (store / "receiver_traveltime/c/1/0").write_bytes(b"")
    assert "2 source(s) marked done have chunks missing or cut short on disk (1, 3)" in (
        describe(store)
    )
    # A lookup through the Python API ended in blosc's "error during decompression: -1".
    with pytest.raises(InputError, match=r"marked done have chunks missing or cut short"):
        rg.open_survey(store)
    again = run_workflow(read_workflow(path), client=client).load()
    xr.testing.assert_identical(again, first)
    velocity = store / "velocity/c/0/0"  # written once: no rerun mends it
    velocity.write_bytes(velocity.read_bytes()[:100])
    assert "status: damaged: chunks of velocity are missing on disk" in describe(store)


def test_a_chunk_changed_on_disk_fails_its_checksum_rather_than_reading_wrong(tmp_path, client):
    # 16 bytes flipped in a finished field's chunk: info said complete and the lookups read
    # times off by up to 3.6 ms without a word (an operations review).
    path = workflow_file(tmp_path)
    run_workflow(read_workflow(path), client=client)
    store = tmp_path / "survey.zarr"
    points = [{"z": 123.4, "x": 267.8}]
    before = rg.traveltime_at(rg.open_survey(store), points).values
    chunk = store / "traveltime/c/3/0/0"
    flipped = bytearray(chunk.read_bytes())
    # The chunk file: a Blosc frame (whose length its header gives), then a CRC-32C.
    assert len(flipped) == int.from_bytes(flipped[12:16], "little") + 4
    flipped[len(flipped) // 2 : len(flipped) // 2 + 16] = bytes(
        b ^ 0xFF for b in flipped[len(flipped) // 2 : len(flipped) // 2 + 16]
    )
    chunk.write_bytes(flipped)
    with pytest.raises(ValueError, match="Stored and computed checksum do not match"):
        rg.traveltime_at(rg.open_survey(store), points)
    # Its checksum cut off (a copy short by 4 bytes) fails too; whole again, it reads as
    # before.
    whole = bytes(flipped[: len(flipped) // 2]) + bytes(
        b ^ 0xFF for b in flipped[len(flipped) // 2 : len(flipped) // 2 + 16]
    ) + bytes(flipped[len(flipped) // 2 + 16 :])  # fmt: skip
    chunk.write_bytes(whole[:-4])
    with pytest.raises(ValueError, match="checksum"):
        rg.traveltime_at(rg.open_survey(store), points)
    chunk.write_bytes(whole)
    np.testing.assert_array_equal(rg.traveltime_at(rg.open_survey(store), points).values, before)
    # `raygrid info --verify` reads every chunk and names those that do not read; deleted,
    # a source's chunks are solved again by a rerun, as any lost chunk is.
    from raygrid.pipeline.inspect import describe

    assert "verified: every chunk written reads whole" in describe(store, verify=True)
    chunk.write_bytes(flipped)
    assert "status: complete" in describe(store)  # (only reading every chunk finds it)
    checked = CliRunner().invoke(main, ["info", str(store), "--verify"])
    assert checked.exit_code == 1
    assert (
        "status: damaged: 1 chunk file(s) do not read (changed on disk since they were "
        "written, or cut short): traveltime/c/3/0/0; delete those files and rerun the "
        "workflow: the sources they hold are solved again"
    ) in checked.output
    chunk.unlink()
    again = run_workflow(read_workflow(path), client=client)
    np.testing.assert_array_equal(rg.traveltime_at(again, points).values, before)
    assert "verified" in describe(store, verify=True)
    # A completion record changed: named (it was read first: a traceback), and a rerun
    # solves its source again (it died on the record's checksum).
    record = store / "source_done/c/1"
    record.write_bytes(record.read_bytes()[:-1] + bytes([record.read_bytes()[-1] ^ 0xFF]))
    said = describe(store, verify=True)
    assert "status: damaged: 1 chunk file(s) do not read" in said
    assert "source_done/c/1; delete those files and rerun the workflow" in said
    again = run_workflow(read_workflow(path), client=client)
    np.testing.assert_array_equal(rg.traveltime_at(again, points).values, before)
    assert "verified" in describe(store, verify=True)
    # An array without checksums (a store made before them) is said to be unverifiable.
    older = zarr.create_array(
        store=str(store), name="older", shape=(2,), dtype="f8", dimension_names=["older"]
    )
    older[:] = 1.0
    assert "1 array(s) have no checksums (made before 2026-12-05): a change on disk is not " \
        "seen there (older)" in describe(store, verify=True)  # fmt: skip
    model = store / "velocity/c/0/0"  # written once: made again with --overwrite
    model.write_bytes(model.read_bytes()[:-5] + b"\0" * 5)
    said = describe(store, verify=True)
    assert "velocity/c/0/0; rerun its workflow with --overwrite to make it again" in said


@pytest.mark.parametrize(
    "lost",
    ["ray_x/c/0", "ray_count/c/0/0", "ray_start/c/0/0", "velocity/c/0/0", "x/c/0", "partial"],
)
def test_arrays_written_once_and_lost_since_make_the_store_damaged(tmp_path, client, lost):
    # The model, its coordinates and the assembled rays have no completion records: a copy
    # of the store cut short read as NaN there (ray_count and ray_start as 0: every ray
    # read the first ray's points) and was called complete.
    from raygrid.pipeline.inspect import describe

    path = workflow_file(tmp_path)
    first = run_workflow(read_workflow(path), client=client).load()
    store = tmp_path / "survey.zarr"
    if lost == "partial":  # a stray file beside the chunks does not stand for the lost one
        lost = "velocity/c/0/0"
        (store / lost).rename(store / "velocity/c/0/0.3f2a9c.partial")
    else:
        (store / lost).unlink()
    name = lost.split("/")[0]
    said = describe(store)
    assert f"status: damaged: chunks of {name} are missing on disk" in said
    from raygrid.pipeline.inspect import plot_directory

    with pytest.raises(InputError, match=f"is damaged: chunks of {name} are missing"):
        plot_directory(store, tmp_path / "pictures", [])
    with pytest.raises(InputError, match=f"is damaged: chunks of {name} are missing on disk "
                       r".* rerun its workflow with --overwrite to make it again"):  # fmt: skip
        run_workflow(read_workflow(path), client=client)
    again = run_workflow(read_workflow(path), client=client, overwrite=True).load()
    xr.testing.assert_identical(again, first)
    assert "status: complete" in describe(store)


@pytest.mark.parametrize("old", [None, "list", "none"], ids=["listed", "as-a-list", "older-store"])
@pytest.mark.parametrize("lost", ["traveltime", "traveltime/zarr.json", "ray_x"])
def test_an_array_lost_whole_makes_the_store_damaged_not_a_rerun_loop(tmp_path, client, lost, old):
    # A partial store without its traveltime array: info said "partial: rerun", and every
    # rerun failed on a worker (ArrayNotFoundError) with "run again to resume".
    from raygrid.pipeline.inspect import describe, plot_directory

    path = workflow_file(tmp_path)
    first = run_workflow(read_workflow(path), client=client).load()
    store = tmp_path / "survey.zarr"
    zarr.open_array(store=str(store), path="source_done", mode="r+")[2] = 0
    group = zarr.open_group(store, mode="r+")
    group.attrs["complete"] = False
    if old == "none":  # made before stores listed their arrays: found from the workflow
        del group.attrs["store_arrays"]
    elif old == "list":  # made before they listed them in one string
        group.attrs["store_arrays"] = group.attrs["store_arrays"].split()
    target = store / lost
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    name = lost.split("/")[0]  # the assembled rays' arrays too: a rerun said complete
    damaged = rf"is damaged: it has no {name} \(lost whole.*--overwrite to make it again"
    assert f"status: damaged: it has no {name} (lost whole" in describe(store)
    checked = CliRunner().invoke(main, ["info", str(store)])
    assert checked.exit_code == 1 and f"status: damaged: it has no {name}" in checked.output
    with pytest.raises(InputError, match=damaged):
        run_workflow(read_workflow(path), client=client)
    with pytest.raises(InputError, match=damaged):
        plot_directory(store, tmp_path / "pictures", [])
    again = run_workflow(read_workflow(path), client=client, overwrite=True).load()
    xr.testing.assert_identical(again, first)


@pytest.mark.parametrize(
    "damage",
    ["traveltime/zarr.json cut", "source_done/zarr.json lost", "source_done/zarr.json cut"],
)
def test_metadata_cut_short_or_lost_is_damage_that_overwrite_replaces(tmp_path, client, damage):
    # An array's zarr.json cut short (an interrupted copy) gave a JSONDecodeError traceback
    # in run, info and plot; a store without source_done was "not a raygrid survey store",
    # which --overwrite refused to replace: the user had to delete it by hand.
    from raygrid.pipeline.inspect import describe, plot_directory

    path = workflow_file(tmp_path)
    first = run_workflow(read_workflow(path), client=client).load()
    store = tmp_path / "survey.zarr"
    name, what = damage.split()[0].split("/")[0], damage.split()[-1]
    if what == "cut":
        (store / damage.split()[0]).write_bytes(b"")
        said = rf"is damaged: the metadata \(zarr.json\) of {name} does not read"
    else:
        (store / damage.split()[0]).unlink()
        said = rf"is damaged: it has no {name} \(lost whole"
    said += r".*--overwrite to make it again"
    for read in (describe, lambda s: plot_directory(s, tmp_path / "pictures", [])):
        with pytest.raises(InputError, match=said):
            read(store)
    # `raygrid info`: status 1, as for every damaged store (it was 2 for these alone, 0 for
    # the others: an operations review checking stores by exit status).
    checked = CliRunner().invoke(main, ["info", str(store)])
    assert checked.exit_code == 1 and re.search("error: .*" + said, checked.output)
    with pytest.raises(InputError, match=said):
        run_workflow(read_workflow(path), client=client)
    again = run_workflow(read_workflow(path), client=client, overwrite=True).load()
    assert CliRunner().invoke(main, ["info", str(store)]).exit_code == 0
    xr.testing.assert_identical(again, first)
    # A Zarr store raygrid did not make is still never replaced, even one written from a
    # survey's dataset (xarray copies its attributes, the fingerprint among them).
    foreign = zarr.open_group(tmp_path / "foreign.zarr", mode="w")
    foreign.create_array("a", shape=(2,), dtype="f8")
    foreign.attrs.update(zarr.open_group(store, mode="r").attrs.asdict())
    spec = yaml.safe_load(path.read_text())
    spec["outputs"]["store"] = str(tmp_path / "foreign.zarr")
    path.write_text(yaml.safe_dump(spec))
    # Said as what it may be: a survey store that lost its records must be deleted by hand.
    with pytest.raises(
        InputError,
        match=r"not a raygrid survey store \(it has a survey's attributes but no completion "
        r"records, source_done: .*delete it and run again\); it is left untouched",
    ):
        run_workflow(read_workflow(path), client=client, overwrite=True)
    # The other way round, a survey store whose root metadata lost its attributes: info
    # said "all sources done, not finalised: rerun", and the rerun "a different workflow
    # (stored fingerprint None, ...)" (adversarial review). Said alike, left alone.
    (tmp_path / "foreign.zarr" / "a").rename(tmp_path / "foreign.zarr" / "source_done")
    zarr.open_group(tmp_path / "foreign.zarr", mode="r+").attrs.clear()
    said = r"has completion records \(source_done\) but none of a survey store's attributes"
    with pytest.raises(InputError, match=said):
        describe(tmp_path / "foreign.zarr")
    with pytest.raises(InputError, match=said + r".*; it is left untouched"):
        run_workflow(read_workflow(path), client=client, overwrite=True)


@pytest.mark.parametrize("engine", ["netcdf4", "scipy"])
def test_a_store_opened_saves_to_netcdf_and_reads_back(tmp_path, client, engine):
    # NetCDF-3 (engine="scipy") failed on the store's list of array names, an attribute.
    run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
    store = rg.open_survey(tmp_path / "survey.zarr")
    # (Loaded first: xarray's scipy engine does not write through a distributed Client.)
    store.load().to_netcdf(tmp_path / "survey.nc", engine=engine)
    with xr.open_dataset(tmp_path / "survey.nc", engine=engine) as copy:
        points = [{"z": 123.4, "x": 267.8}, {"z": 0.0, "x": 40.0}]
        assert copy.attrs["store_arrays"] == store.attrs["store_arrays"]
        np.testing.assert_array_equal(
            rg.traveltime_at(copy, points).values, rg.traveltime_at(store, points).values
        )


def test_a_store_under_home_opens_and_is_described_through_a_tilde(tmp_path, client, monkeypatch):
    # Workflows read ~ as the home folder; open_survey and info took it literally ("does
    # not exist"), and once the check expanded it, the dataset was still opened unexpanded.
    from raygrid.pipeline.inspect import describe

    run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
    monkeypatch.setenv("HOME", str(tmp_path))
    store = rg.open_survey("~/survey.zarr")
    assert store.identical(rg.open_survey(tmp_path / "survey.zarr"))
    assert describe("~/survey.zarr").startswith(f"store: {tmp_path / 'survey.zarr'} (")


def test_an_interrupt_after_the_store_is_complete_says_so(tmp_path, client):
    # Stopped while the pictures were drawn, a run said "the 4 of 4 sources finished so far
    # are in ...; run the same command again to resume": only the pictures were missing.
    from raygrid.pipeline.cli import _kept

    run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
    store = tmp_path / "survey.zarr"
    n = int(zarr.open_array(store=str(store), path="source_done", mode="r").shape[0])
    assert _kept(store) == (
        f"{store} is complete ({n} sources); only its pictures may be missing: run the same "
        "command again (without --overwrite) to draw them"
    )
    said = f"{store} is complete ({n} sources): nothing is left to do"
    assert _kept(store, pictures=False) == said  # a workflow that draws none
    zarr.open_array(store=str(store), path="source_done", mode="r+")[0] = 0
    zarr.open_group(store, mode="r+").attrs["complete"] = False
    assert _kept(store).startswith(f"the {n - 1} of {n} sources finished so far are in {store}")
    # None done: "the 0 of 4 sources finished so far are in ..." read oddly.
    zarr.open_array(store=str(store), path="source_done", mode="r+")[:] = 0
    assert _kept(store) == (
        f"no source had finished yet ({store} holds none): run the same command again "
        "(without --overwrite) to resume"
    )


@pytest.mark.parametrize("how", ["lost", "cut-short"])
def test_a_lost_completion_record_is_not_called_complete(tmp_path, client, how):
    # A record's file cut short stopped every run and info in Blosc's decompression.
    from raygrid.pipeline.inspect import describe

    path = workflow_file(tmp_path)
    first = run_workflow(read_workflow(path), client=client).load()
    store = tmp_path / "survey.zarr"
    record = store / "source_done" / "c" / "3"
    if how == "lost":
        record.unlink()  # a copy cut short: the record reads 0
    else:
        record.write_bytes(record.read_bytes()[:10])
    said = describe(store)
    assert "status: damaged: finished, but 1 source(s) have lost their completion record " in (said)
    assert "sources done: 4 / 5" in said
    again = run_workflow(read_workflow(path), client=client).load()  # solves it again
    xr.testing.assert_identical(again, first)
    assert "status: complete" in describe(store)


def _stopped_before_the_end(path: Path, client) -> None:
    """Run a workflow until every source is done, and stop it before its last step (the
    rays not yet assembled), as a Ctrl-C there would."""
    from raygrid.pipeline import survey

    def stopped(spec):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(survey, "finish_store", stopped)
        with pytest.raises(KeyboardInterrupt):
            run_workflow(read_workflow(path), client=client)


def test_a_stopped_store_whose_rays_are_all_fill_value_opens(tmp_path, client):
    # A source's one receiver on it at the model's origin: rays of one point (0, 0) at time
    # 0, all fill value, whose chunk zarr did not write; the store, stopped before its last
    # step, was "damaged" to open_survey (diff review).
    origin = [{"z": 0.0, "x": 0.0}]
    path = workflow_file(tmp_path, sources=[*origin, {"z": 0.0, "x": 100.0}], receivers=origin)
    _stopped_before_the_end(path, client)
    store = rg.open_survey(tmp_path / "survey.zarr")
    assert store["source_done"].values.tolist() == [1, 1]
    assert (tmp_path / "survey.zarr" / "ray_parts" / "0000000" / "c").is_dir()


def test_a_store_finished_while_open_survey_checks_it_opens(tmp_path, client, monkeypatch):
    # The run's last step assembles the rays and deletes their parts: done between the
    # check's listing of the fields and of the parts, every done source looked lost, and
    # the healthy store "damaged" (diff review: seen in 2 runs of 400 and 1500 sources).
    from raygrid.pipeline import integrity, survey

    path = workflow_file(tmp_path)
    held = {}
    finish = survey.finish_store
    monkeypatch.setattr(survey, "finish_store", lambda spec: held.setdefault("spec", spec))
    run_workflow(read_workflow(path), client=client)  # stopped just before its last step
    listing = integrity._lost_chunks

    def finished_meanwhile(group, path, done):
        lost = listing(group, path, done)
        finish(held["spec"])  # the run's last step, while the check runs
        return lost

    monkeypatch.setattr(integrity, "_lost_chunks", finished_meanwhile)
    rg.open_survey(tmp_path / "survey.zarr")  # not "damaged"
    monkeypatch.setattr(integrity, "_lost_chunks", listing)
    assert rg.open_survey(tmp_path / "survey.zarr").attrs["complete"]  # finished, indeed


def test_a_ray_part_cut_short_before_the_end_is_written_again(tmp_path, client):
    # Its source was found lost and solved again, but the part, present, was kept as it
    # was: every rerun's last step then failed in Blosc's decompression.
    path = workflow_file(tmp_path)
    store = tmp_path / "survey.zarr"
    _stopped_before_the_end(path, client)
    part = store / "ray_parts" / "0000001" / "c" / "0" / "0"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    lines = []
    again = run_workflow(read_workflow(path), client=client, echo=lines.append).load()
    assert any("1 source(s) marked done have chunks missing on disk" in line for line in lines)
    uninterrupted = run_workflow(read_workflow(workflow_file(tmp_path / "again")), client=client)
    xr.testing.assert_equal(again, uninterrupted.load())


def test_a_ray_parts_folder_lost_whole_before_the_end_is_solved_again(tmp_path, client):
    # Every source done, the run stopped before its last step, and the folder of ray parts
    # gone (a copy cut short): no part was found missing, and the rerun's last step stopped
    # with a KeyError, for ever.
    from raygrid.pipeline.inspect import describe

    path = workflow_file(tmp_path)
    store = tmp_path / "survey.zarr"
    _stopped_before_the_end(path, client)
    shutil.rmtree(store / "ray_parts")
    assert "status: damaged: 5 source(s) marked done have chunks missing" in describe(store)
    lines = []
    again = run_workflow(read_workflow(path), client=client, echo=lines.append).load()
    assert any("5 source(s) marked done have chunks missing on disk" in line for line in lines)
    uninterrupted = run_workflow(read_workflow(workflow_file(tmp_path / "again")), client=client)
    xr.testing.assert_equal(again, uninterrupted.load())
    assert "status: complete" in describe(store)


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_interruption_while_the_rays_are_assembled_loses_nothing(
    tmp_path, client, monkeypatch, when
):
    # The last step of a run writes the ray arrays; stopped there (Ctrl-C, a crash, a full
    # disk), the store must keep what says which workflow it holds, and a rerun finish it.
    # Stopped once they were written (before the mark that says so), the rerun could not
    # write them again: xarray refuses an existing array given an encoding.
    import xarray.backends.zarr as xarray_zarr

    from raygrid.pipeline import storewrite as store_module

    path = workflow_file(tmp_path)
    store = tmp_path / "survey.zarr"
    write_variables = xarray_zarr.ZarrStore.set_variables
    assemble = store_module._assemble_rays

    def interrupted(self, variables, *args, **kwargs):
        if "ray_time" in variables:
            raise KeyboardInterrupt
        return write_variables(self, variables, *args, **kwargs)

    def assembled_then_interrupted(*args):
        assemble(*args)
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        if when == "before":
            patch.setattr(xarray_zarr.ZarrStore, "set_variables", interrupted)
        else:
            patch.setattr(store_module, "_assemble_rays", assembled_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_workflow(read_workflow(path), client=client)
    attrs = zarr.open_group(store, mode="r").attrs
    assert attrs["workflow_sha256"] and not attrs.get("complete") and "workflow" in attrs
    assert ("ray_time" in zarr.open_group(store, mode="r")) == (when == "after")
    # Streamed through chunks smaller than one source's rays, on the rerun only.
    monkeypatch.setattr(store_module, "RAY_CHUNK", 7)
    finished = run_workflow(read_workflow(path), client=client).load()
    monkeypatch.undo()
    uninterrupted = run_workflow(read_workflow(workflow_file(tmp_path / "again")), client=client)
    assert finished.attrs["complete"] == 1
    assert finished["ray_x"].encoding["chunks"] == (7,)
    assert finished["ray_x"].size > 4 * 7
    xr.testing.assert_equal(finished, uninterrupted.load())  # attrs: the store paths differ


def test_a_different_workflow_never_overwrites(tmp_path, client):
    path = workflow_file(tmp_path)
    run_workflow(read_workflow(path), client=client)
    store = tmp_path / "survey.zarr"
    before = _chunk_files(store)
    other = workflow_file(tmp_path, grid={"radius": 2})
    with pytest.raises(InputError) as refused:
        run_workflow(read_workflow(other), client=client)
    # Named, not only refused: the parts of the fingerprints are kept in the store.
    message = str(refused.value)
    assert "another workflow: what differs is the graph options (radius, " in message
    assert "precision) (stored fingerprint" in str(refused.value)
    assert _chunk_files(store) == before
    replaced = run_workflow(read_workflow(other), client=client, overwrite=True)
    assert replaced.attrs["radius_x"] == 2


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt])
def test_an_overwrite_whose_new_store_cannot_be_made_leaves_the_old_one(tmp_path, client, failure):
    # The old store was deleted before the new one was made: a creation that failed (a
    # full disk, Ctrl-C while the model was copied) lost the old survey as well.
    from raygrid.pipeline import survey

    run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
    store = tmp_path / "survey.zarr"
    before = _chunk_files(store)
    other = read_workflow(workflow_file(tmp_path, grid={"radius": 2}))

    def made_in_part(spec, *args, **kwargs):
        (tmp_path / ".survey.zarr.partial-made-in-part").mkdir()  # what zarr had written
        raise failure

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(survey, "create_store", made_in_part)
        with pytest.raises(type(failure) if isinstance(failure, OSError) else failure):
            run_workflow(other, client=client, overwrite=True)
    assert _chunk_files(store) == before
    assert sorted(p.name for p in tmp_path.iterdir() if ".survey.zarr." in p.name) == [
        ".survey.zarr.lock",
        ".survey.zarr.partial-made-in-part",
    ]
    assert run_workflow(other, client=client, overwrite=True).attrs["radius_x"] == 2
    assert not any(".replaced-" in p.name for p in tmp_path.iterdir())


def test_an_old_store_a_killed_overwrite_moved_aside_is_put_back_by_the_next_run(tmp_path, client):
    # Killed outright (SIGKILL) after the old store was moved aside and before the new one
    # took its name: the next run on this host finds the old store in its place.
    import socket

    path = workflow_file(tmp_path)
    run_workflow(read_workflow(path), client=client)
    store = tmp_path / "survey.zarr"

    def chunks():  # the metadata is written again by a rerun, the chunks not
        return {name: t for name, t in _chunk_files(store).items() if "/c/" in name}

    before = chunks()
    host = socket.gethostname().replace("-", "_")
    # A dead process; this very one (a container restarted with the same host name gives
    # the new run the killed one's PID); another host (a batch job resubmitted elsewhere).
    for killed in (f"{host}-{2**22 + 1}", f"{host}-{os.getpid()}", "othernode-17"):
        aside = tmp_path / f".survey.zarr.replaced-{killed}-0a1b2c3d"
        os.replace(store, aside)
        # raygrid info and plot said "does not exist", as if the results were gone (another
        # host's run may be alive: it is not said to have stopped).
        said = "a run stopped while it replaced it" if "othernode" not in killed else "a run"
        with pytest.raises(InputError, match=f"{said} .*old store aside as {aside}"):
            rg.open_survey(store)
        resumed = run_workflow(read_workflow(path), client=client)  # resumed, not made again
        assert resumed.attrs["complete"] == 1, killed
        assert chunks() == before and not aside.exists()
    # An empty folder in its place (a job script's mkdir -p) is as none: the old store is
    # put back onto it, not deleted for a fresh run.
    os.replace(store, aside := tmp_path / f".survey.zarr.replaced-{host}-{2**22 + 1}-0a1b2c3d")
    store.mkdir()
    assert run_workflow(read_workflow(path), client=client).attrs["complete"] == 1
    assert chunks() == before and not aside.exists()
    dead = f"{host}-{2**22 + 1}"
    aside = tmp_path / f".survey.zarr.replaced-{dead}-0a1b2c3d"
    # Where the new store did take the name, the old one moved aside is deleted.
    (aside / "c").mkdir(parents=True)
    run_workflow(read_workflow(path), client=client)
    assert chunks() == before and not aside.exists()
    # One of another host, with a store in its place: left alone (it may be that host's,
    # alive); nothing anywhere is deleted but what this host's dead runs left.
    foreign = tmp_path / ".survey.zarr.replaced-othernode-17-0a1b2c3d"
    (foreign / "c").mkdir(parents=True)
    run_workflow(read_workflow(path), client=client)
    assert foreign.exists()


def test_a_store_named_by_a_link_is_replaced_and_drawn_through_it(tmp_path, client):
    # --overwrite moved the link aside, made a real folder in its place and never deleted
    # the old store (rmtree refuses links, silently); the lock then followed the new folder.
    # Pictures of the link went beside the store it names, named after that store.
    from raygrid.pipeline.inspect import plot_directory

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    path = workflow_file(tmp_path)
    store = tmp_path / "survey.zarr"
    store.symlink_to(scratch / "real.zarr", target_is_directory=True)
    run_workflow(read_workflow(path), client=client)
    assert (scratch / "real.zarr" / "zarr.json").exists()
    other = workflow_file(tmp_path, grid={"radius": 2})
    assert run_workflow(read_workflow(other), client=client, overwrite=True).attrs["radius_x"] == 2
    assert store.is_symlink() and store.resolve() == scratch / "real.zarr"
    assert sorted(p.name for p in scratch.iterdir()) == [".real.zarr.lock", "real.zarr"]
    assert not any(".survey.zarr." in p.name for p in tmp_path.iterdir())
    drawn = plot_directory(store, None, [0])
    assert drawn == [tmp_path / "survey-source0.png", tmp_path / "survey-gathers.png"]
    # A killed --overwrite moved the store aside beside the link's target: found there.
    import socket

    dead = f"{socket.gethostname().replace('-', '_')}-{2**22 + 1}"
    aside = scratch / f".real.zarr.replaced-{dead}-0a1b2c3d"
    os.replace(scratch / "real.zarr", aside)
    with pytest.raises(InputError, match=f"stopped while it replaced it .* aside as {aside}"):
        rg.open_survey(store)


def test_an_empty_folder_made_for_the_store_is_filled(tmp_path, client, monkeypatch):
    # A folder made ahead for the store (mkdir on scratch, then a link to it) was refused
    # as "not a Zarr store (a folder without Zarr's group metadata)".
    reference = run_workflow(read_workflow(workflow_file(tmp_path / "reference")), client=client)
    made = tmp_path / "made" / "survey.zarr"
    made.mkdir(parents=True)
    filled = run_workflow(read_workflow(workflow_file(made.parent)), client=client)
    xr.testing.assert_equal(filled.load(), reference.load())  # (attrs: the store path)
    scratch = tmp_path / "scratch" / "real.zarr"
    scratch.mkdir(parents=True)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "survey.zarr").symlink_to(scratch, target_is_directory=True)
    run_workflow(read_workflow(workflow_file(tmp_path / "linked")), client=client)
    assert (tmp_path / "linked" / "survey.zarr").is_symlink()
    assert (scratch / "zarr.json").exists()  # on scratch, through the link
    # (A folder with anything in it is still left alone: the test after the next.) Nor is
    # an empty working directory taken: the store would be renamed onto it.
    here = tmp_path / "here" / "survey.zarr"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    with pytest.raises(InputError, match="is the working directory or holds it"):
        run_workflow(read_workflow(workflow_file(here.parent)), client=client)
    from raygrid.pipeline.store import StoreSpec, check_store

    spec = StoreSpec(
        path=here.resolve(), n_sources=1, n_receivers=0, dims=("z", "x"), fields=True,
        receiver_table=False, rays=False, dtype="float64",
    )  # fmt: skip
    with pytest.raises(InputError, match="holds the working directory"):  # (the API's way)
        check_store(spec, None, overwrite=False)
    assert not any(here.iterdir())


def test_what_a_run_cut_short_left_beside_its_store_is_removed_by_the_next(tmp_path, client):
    # Ctrl-C while a store was made (zarr still writing in its own thread) or while
    # --overwrite deleted the old one left a hidden folder beside the store, the size of
    # the whole old survey, that no run removed.
    import socket

    host = socket.gethostname().replace("-", "_")
    dead = f"{host}-{2**22 + 1}"  # above Linux's largest pid_max: no process has it
    left = {
        "dead": tmp_path / f".survey.zarr.partial-{dead}-0a1b2c3d",
        "alive": tmp_path / f".survey.zarr.partial-{host}-{os.getppid()}-0a1b2c3d",
        "elsewhere": tmp_path / ".survey.zarr.partial-otherhost-1-0a1b2c3d",
        "another store": tmp_path / f".other.zarr.partial-{dead}-0a1b2c3d",
    }
    for folder in left.values():
        (folder / "c").mkdir(parents=True)
    run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
    assert {name for name, folder in left.items() if folder.exists()} == {
        "alive",
        "elsewhere",
        "another store",
    }


def test_a_run_on_a_store_another_run_is_writing_is_refused_until_that_run_ends(tmp_path, client):
    # Two runs on one store both solved the pending sources, and one of them failed with a
    # bare "[Errno 39] Directory not empty" as the other removed the raypath parts.
    path = workflow_file(tmp_path)
    store = tmp_path / "survey.zarr"
    from clusters import lock_held_elsewhere

    with lock_held_elsewhere(store):
        # Refused at once: before any cluster (this one is unreachable) or store.
        with pytest.raises(InputError) as refused:
            run_workflow(read_workflow(path), cluster=unreachable_cluster(tmp_path))
        assert str(refused.value) == (
            f"{store} is being written by another raygrid run (it holds the lock "
            f"{tmp_path / '.survey.zarr.lock'}); wait for that run to finish and rerun this "
            "one to find its results, or choose another outputs.store"
        )
        assert not store.exists()
    assert run_workflow(read_workflow(path), client=client).attrs["complete"] == 1


def test_every_name_of_a_store_shares_its_lock(tmp_path, monkeypatch):
    from raygrid.pipeline.lock import lock_path

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    lock = tmp_path / "real" / ".survey.zarr.lock"
    assert lock_path(tmp_path / "link" / "survey.zarr") == lock
    monkeypatch.chdir(tmp_path / "link")
    assert lock_path(Path("survey.zarr")) == lock
    (tmp_path / "real" / "survey.zarr").mkdir()
    monkeypatch.chdir(tmp_path / "real" / "survey.zarr")
    assert lock_path(Path(".")) == lock  # "." has no name of its own


def test_is_locked_reads_only(tmp_path):
    from raygrid.pipeline.lock import is_locked, lock_path, store_lock

    store = tmp_path / "survey.zarr"
    store.mkdir()
    assert not is_locked(store) and not lock_path(store).exists()  # none made
    with store_lock(store):
        assert lock_path(store).exists()
    assert not is_locked(store)


def test_a_run_that_fails_before_it_makes_its_store_leaves_no_lock(tmp_path):
    # A SLURM cluster that refused its worker jobs failed in dask's own close (an
    # AssertionError, not an InputError), and the run left .survey.zarr.lock beside a store
    # it never made.
    from raygrid.pipeline.lock import store_lock

    with pytest.raises(AssertionError):
        with store_lock(tmp_path / "survey.zarr"):
            raise AssertionError("a cluster's own failure")
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_store_and_a_file_for_pictures_are_clear_errors(tmp_path, client):
    # Both were tracebacks from `raygrid info` / `raygrid plot` (KeyError, [Errno 17]).
    import shutil

    from raygrid.pipeline.inspect import describe, plot_directory

    run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
    store = tmp_path / "survey.zarr"
    (tmp_path / "picture.png").write_text("not a folder")
    with pytest.raises(InputError, match=r"into .*picture.png: it is a file, not a folder"):
        plot_directory(store, tmp_path / "picture.png", [0])
    # Drawn from inside the store (`raygrid plot .`), the pictures went into the store,
    # named "-source0.png"; and so did any --out inside it.
    before = _chunk_files(store)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(store)
        drawn = plot_directory(".", None, [0])
        assert drawn == [tmp_path / "survey-source0.png", tmp_path / "survey-gathers.png"]
        for out in (".", "traveltime"):
            with pytest.raises(InputError, match=rf"into {out}: it is inside the store \.; "):
                plot_directory(".", out, [0])
    assert _chunk_files(store) == before
    shutil.rmtree(store / "velocity")
    for read in (describe, lambda path: plot_directory(path, tmp_path, [0])):
        with pytest.raises(InputError, match=r"survey.zarr is damaged: it has no velocity; "):
            read(store)


def test_a_store_made_untiled_is_refused_tiled_for_what_it_is(tmp_path, client):
    # Without rays the tiles do not count, but a tiled run hashes the model by blocks: the
    # refusal said only "the model's values", of a model nobody changed.
    outputs = {"store": "survey.zarr", "rays": False, "plot": None}
    run_workflow(read_workflow(workflow_file(tmp_path, outputs=outputs)), client=client)
    tiled = workflow_file(tmp_path, outputs=outputs, compute__tiles={"z": 16, "x": 16})
    with pytest.raises(InputError, match=r"what differs is the model's values, or only how "):
        run_workflow(read_workflow(tiled), client=client)


def test_a_model_file_edited_in_place_is_a_different_workflow(tmp_path, client):
    # A tiled workflow reads its model lazily; the fingerprint still covers its values, so a
    # rerun after editing one value of the file is refused, not resumed into a mixed store.
    model = tmp_path / "model.zarr"
    velocity = rg.gradient_model({"z": 31, "x": 41}, 10.0, 500.0, 4000.0)
    velocity.to_dataset(name="vp").to_zarr(
        model, zarr_format=3, consolidated=False, encoding={"vp": {"chunks": (16, 16)}}
    )
    path = workflow_file(
        tmp_path / "run", model={"path": str(model)}, compute__tiles={"z": 16, "x": 14}
    )
    first = run_workflow(read_workflow(path), client=client)
    assert first["velocity"].chunks is not None  # the model went in lazily
    store = tmp_path / "run" / "survey.zarr"
    before = _chunk_files(store)
    vp = zarr.open_array(model, path="vp", mode="r+")
    vp[20, 30] = float(vp[20, 30]) * 1.5
    with pytest.raises(InputError, match="another workflow: what differs is the model's values "):
        run_workflow(read_workflow(path), client=client)
    assert _chunk_files(store) == before
    # A store written before the parts were kept: told by the workflow it holds.
    zarr.open_group(store, mode="r+").attrs.pop("workflow_sha256_parts")
    changed = "holds the results of this same workflow file, but not of what it reads now"
    with pytest.raises(InputError, match=changed + r" \(.*\): the model's values"):
        run_workflow(read_workflow(path), client=client)
    vp[20, 30] = float(velocity[20, 30])  # the same model again: the store resumes
    again = run_workflow(read_workflow(path), client=client)
    assert again.attrs["workflow_sha256"] == first.attrs["workflow_sha256"]


def test_a_model_file_edited_during_a_tiled_run_does_not_reach_the_store(
    tmp_path, client, monkeypatch
):
    # Tiled sources are solved one after another; each reads the model the store was made
    # with, not the file, so editing the file mid-run cannot mix two models in one store.
    from raygrid.pipeline import survey

    model = tmp_path / "model.zarr"
    velocity = rg.gradient_model({"z": 31, "x": 41}, 10.0, 500.0, 4000.0)
    velocity.to_dataset(name="vp").to_zarr(
        model, zarr_format=3, consolidated=False, encoding={"vp": {"chunks": (16, 16)}}
    )
    tiles = {"z": 16, "x": 14}
    clean = run_workflow(
        read_workflow(workflow_file(tmp_path / "clean", compute__tiles=tiles, sources=TWO_SOURCES)),
        client=client,
    )
    solve_tiled = survey._solve_tiled

    def edited_first(*args, **kwargs):
        vp = zarr.open_array(model, path="vp", mode="r+")
        vp[...] = np.asarray(vp[...]) * 2.0  # a run editing the file once the store exists
        return solve_tiled(*args, **kwargs)

    monkeypatch.setattr(survey, "_solve_tiled", edited_first)
    path = workflow_file(
        tmp_path / "run", model={"path": str(model)}, compute__tiles=tiles, sources=TWO_SOURCES
    )
    edited = run_workflow(read_workflow(path), client=client)
    for name in ("traveltime", "receiver_traveltime", "ray_time"):
        np.testing.assert_array_equal(edited[name].values, clean[name].values)

    # Edited between its check and the store's copy (while the cluster starts): the copy is
    # not the model that was fingerprinted, so no store is made, whether the edit is a bad
    # value or a valid one (which a later run, comparing fingerprints with the file, could
    # not tell from the model it had checked).
    monkeypatch.setattr(survey, "_solve_tiled", solve_tiled)
    check_memory = survey.check_survey_memory
    vp = zarr.open_array(model, path="vp", mode="r+")
    kept = float(vp[3, 5])
    model_file = {"path": str(model)}
    late = workflow_file(
        tmp_path / "late", model=model_file, compute__tiles=tiles, sources=TWO_SOURCES
    )
    untiled = workflow_file(tmp_path / "untiled", model=model_file, sources=TWO_SOURCES)
    for value, path in ((np.nan, late), (kept * 1.25, late), (kept * 1.25, untiled)):

        def edited_while_starting(*args, value=value, **kwargs):
            vp[3, 5] = value
            return check_memory(*args, **kwargs)

        monkeypatch.setattr(survey, "check_survey_memory", edited_while_starting)
        with pytest.raises(InputError, match="changed while the run was starting"):
            run_workflow(read_workflow(path), client=client)
        assert not (path.parent / "survey.zarr").exists()
        assert not list(path.parent.glob("*partial*"))
        vp[3, 5] = kept
    # The copy of a file left alone passes, tiled or not (an untiled run loads the model,
    # and its fingerprint hashes the values loaded).
    monkeypatch.setattr(survey, "check_survey_memory", check_memory)
    tiled = run_workflow(read_workflow(late), client=client)
    plain = run_workflow(read_workflow(untiled), client=client)
    assert tiled.attrs["complete"] and plain.attrs["complete"]
    for name in ("traveltime", "receiver_traveltime", "ray_time"):
        np.testing.assert_array_equal(plain[name].values, tiled[name].values)


def test_a_tiled_survey_checks_its_model_once_per_run(tmp_path, client, monkeypatch):
    # Checking a lazy model for bad values reads all of it: the tiled solves and rays of the
    # sources reuse the checked grid instead of checking again.
    from raygrid.pipeline import modelcheck

    checks = []
    check = modelcheck.check_values
    monkeypatch.setattr(
        modelcheck, "check_values", lambda *a, **k: checks.append(1) or check(*a, **k)
    )
    three = SPEC["sources"][:3]  # (of two sources, a check each would also make 2)
    path = workflow_file(tmp_path, compute__tiles={"z": 16, "x": 14}, sources=three)
    done = run_workflow(read_workflow(path), client=client)  # (with rays)
    # Once as the workflow is prepared, once on the store's copy: not per source (3).
    assert done["source_done"].values.all() and len(checks) == 2


def tile_reads(monkeypatch) -> list:
    """The tiles (indices) whose slowness a tiled survey reads from its store, in order."""
    from raygrid.pipeline import tiled

    reads = []
    solve = tiled.solve_tiled

    def counted(active, geometry, slowness_tiles, *args, **kwargs):
        def read(index):
            reads.append(index)
            return slowness_tiles(index)

        return solve(active, geometry, read, *args, **kwargs)

    monkeypatch.setattr(tiled, "solve_tiled", counted)
    return reads


def test_a_tiled_survey_reads_each_tiles_slowness_once(tmp_path, client, monkeypatch):
    # Each source's tiled solve read its tiles' slowness from the store again (the whole
    # model a source: 2 GB of a float32 801^3 cube); the owners keep it across sources now.
    reads = tile_reads(monkeypatch)
    three = SPEC["sources"][:3]
    path = workflow_file(tmp_path, compute__tiles={"z": 16, "x": 14}, sources=three)
    done = run_workflow(read_workflow(path), client=client)
    assert done["source_done"].values.all()
    assert reads and len(reads) == len(set(reads))  # once a tile, not once a tile a source
    # Nothing kept once the survey is over.
    held = lambda: sum(client.run(lambda dask_worker: len(dask_worker.data)).values())  # noqa: E731
    deadline = time.monotonic() + 10
    while held() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held() == 0


def test_a_tiled_survey_reads_a_tile_again_where_its_owner_changed(tmp_path, client, monkeypatch):
    # Owners dealt out again (a worker lost, one joined) took a copy of each kept tile from
    # its old owner, both then kept for the rest of the run: a tile is read again instead.
    from raygrid.pipeline import decompose

    reads = tile_reads(monkeypatch)
    dealt, calls = decompose._owners, []

    def turning(geometry, workers):  # each source's owners the other way round
        calls.append(1)
        return dealt(geometry, workers if len(calls) % 2 else workers[::-1])

    monkeypatch.setattr(decompose, "_owners", turning)
    two = SPEC["sources"][:2]
    path = workflow_file(tmp_path, compute__tiles={"z": 16, "x": 14}, sources=two)
    done = run_workflow(read_workflow(path), client=client)
    assert done["source_done"].values.all()
    tiles = len(set(reads))
    assert len(reads) == 2 * tiles  # every tile changed owner: each read again, once
    plain = run_workflow(read_workflow(workflow_file(tmp_path / "plain", sources=two)))
    np.testing.assert_array_equal(done["traveltime"].values, plain["traveltime"].values)


def unreachable_cluster(directory: Path) -> Path:
    """A cluster file naming a scheduler nobody runs (a port bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = directory / "unreachable.yaml"
    path.write_text(
        yaml.safe_dump({"cluster": "scheduler", "address": f"tcp://127.0.0.1:{port}", "timeout": 1})
    )
    return path


def test_a_cluster_that_cannot_start_creates_or_touches_no_store(tmp_path, client):
    cluster = unreachable_cluster(tmp_path)
    path = workflow_file(tmp_path / "new")
    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        run_workflow(read_workflow(path), cluster=cluster)
    assert not (tmp_path / "new" / "survey.zarr").exists()
    # An unfinished store is left as it was, and so is one that --overwrite would replace.
    path = workflow_file(tmp_path / "old")
    store = tmp_path / "old" / "survey.zarr"
    run_workflow(read_workflow(path), client=client)
    zarr.open_array(store=str(store), path="source_done", mode="r+")[2] = 0
    zarr.open_group(store, mode="r+").attrs["complete"] = False
    before = _chunk_files(store)
    for overwrite in (False, True):
        with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
            run_workflow(read_workflow(path), cluster=cluster, overwrite=overwrite)
        assert _chunk_files(store) == before
    # A finished store needs no cluster: the rerun reopens it without starting one.
    run_workflow(read_workflow(path), client=client)
    lines = []
    done = run_workflow(read_workflow(path), cluster=cluster, echo=lines.append)
    assert done.attrs["complete"] == 1 and lines[0] == (
        f"{store} is complete already: its 5 source(s) are done"
    )
    assert [line.split(":")[0] for line in lines[1:]] == ["done", "store"]  # no dashboard


def test_something_else_at_the_store_path_is_left_alone(tmp_path, client, monkeypatch):
    # --overwrite replaces a raygrid store only: not a folder of the user's, not the model
    # store (a mistyped outputs.store), not the working directory.
    (tmp_path / "survey.zarr").mkdir()
    (tmp_path / "survey.zarr" / "precious.txt").write_text("keep me")
    for overwrite in (False, True):
        with pytest.raises(InputError, match="left untouched, with or without --overwrite"):
            run_workflow(read_workflow(workflow_file(tmp_path)), client=client, overwrite=overwrite)
    assert (tmp_path / "survey.zarr" / "precious.txt").read_text() == "keep me"
    # Nothing of the refused runs beside it either: their lock file was left there.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["survey.zarr", "workflow.yaml"]
    model = tmp_path / "model.zarr"
    rg.constant_model({"z": 31, "x": 41}, 10.0, 2000.0).to_dataset(name="vp").to_zarr(
        model, zarr_format=3, consolidated=False
    )
    before = _chunk_files(model)
    path = workflow_file(tmp_path / "m", model={"path": str(model)}, outputs={"store": str(model)})
    spec = yaml.safe_load(path.read_text())
    spec["outputs"]["store"] = str(model)
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match="would hold the model file .*--overwrite would delete"):
        run_workflow(read_workflow(path), client=client, overwrite=True)
    assert _chunk_files(model) == before
    monkeypatch.chdir(tmp_path / "survey.zarr")
    spec["outputs"]["store"] = "."
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match=r"store: \. \(or an empty path\) is the working dir"):
        run_workflow(read_workflow(path), client=client, overwrite=True)
    assert (tmp_path / "survey.zarr" / "precious.txt").read_text() == "keep me"


def test_a_store_that_cannot_be_created_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "afile").write_text("a file, not a folder")
    path = workflow_file(tmp_path, outputs={"store": "x.zarr"})
    spec = yaml.safe_load(path.read_text())
    spec["outputs"]["store"] = str(tmp_path / "afile" / "sub" / "survey.zarr")
    path.write_text(yaml.safe_dump(spec))
    # No client and an unreachable cluster: the refusal comes before any cluster is asked for.
    with pytest.raises(InputError, match="afile is a file, not a folder"):
        run_workflow(read_workflow(path), cluster=unreachable_cluster(tmp_path))


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc")
def test_a_place_no_folder_can_be_made_in_is_refused_though_permissions_allow_it():
    # /proc passes the permission check as root, yet nothing can be made there: the
    # refusal came only after the cluster had started.
    from raygrid.pipeline.storepaths import check_writable

    with pytest.raises(InputError, match="cannot create store /proc/survey.zarr: /proc is not"):
        check_writable(Path("/proc/survey.zarr"))


def test_bad_inputs_touch_no_store(tmp_path, client):
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["sources"].append({"z": 0.0, "x": 99999.0})
    path = workflow_file(tmp_path, spec)
    with pytest.raises(
        InputError, match=r"source 5 \(numbered from 0\): source x=99999 is outside"
    ):
        run_workflow(read_workflow(path), client=client)
    assert not (tmp_path / "survey.zarr").exists()
    assert list(tmp_path.iterdir()) == [path]


def _long_survey(count: int) -> dict:
    """A survey of ``count`` sources, one per task, slow enough to kill a worker mid-run."""
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["model"]["shape"] = {"z": 121, "x": 161}
    spec["sources"] = {"line": {"start": {"z": 0.0, "x": 0.0}, "stop": {"z": 0.0, "x": 1600.0},
                                "count": count}}  # fmt: skip
    spec["grid"]["radius"] = 4
    spec["compute"]["batch"] = 1
    return spec


def test_a_result_lost_with_its_worker_is_not_logged_as_an_error():
    # Dask solves it again elsewhere, as its kept "Removing worker ... will be recomputed
    # elsewhere" says; its "ERROR - Couldn't gather keys" read as the run failing.
    from raygrid.pipeline.survey import _not_a_result_lost_with_its_worker as kept

    def record(name, message, *args):
        return logging.LogRecord(name, logging.ERROR, __file__, 1, message, args, None)

    key = "raygrid-sources-12-12-9bab0e38"
    assert not kept(record("distributed.scheduler", "Couldn't gather keys: %s", {key: "queued"}))
    said = "Couldn't gather %s keys, rescheduling %s"
    assert not kept(record("distributed.client", said, 1, (key,)))
    assert kept(record("distributed.client", said, 1, ("someone-elses-key",)))
    assert kept(record("distributed.scheduler", f"Removing worker ... {key}"))


class _Said(logging.Handler):
    """The messages of the log records it handles: put on ``distributed``, which does not
    propagate to caplog's handler."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


def test_a_survey_quiets_dasks_lost_result_lines_while_it_collects(tmp_path, client):
    # (Said by Dask only when a worker dies with a result unread, which a test cannot time:
    # said here from the progress bar's update, as the run collects its tasks.)
    from raygrid.pipeline import survey

    class Saying(survey.Progress):
        def update(self, count: int) -> None:
            key = "{'raygrid-sources-0-0-0a1b2c3d': 'queued'}"
            logging.getLogger("distributed.scheduler").error(f"Couldn't gather keys: {key}")
            logging.getLogger("distributed.client").warning("Couldn't gather 1 keys, "
                                                            f"rescheduling ({key!r},)")  # fmt: skip
            logging.getLogger("distributed.scheduler").warning("Removing worker (kept)")
            super().update(count)

    seen = _Said()
    logging.getLogger("distributed").addHandler(seen)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(survey, "Progress", Saying)
            run_workflow(read_workflow(workflow_file(tmp_path)), client=client)
        logging.getLogger("distributed.client").warning("Couldn't gather 'raygrid-sources-1'")
    finally:
        logging.getLogger("distributed").removeHandler(seen)
    said = [line for line in seen.said if "Couldn't gather" in line or "(kept)" in line]
    assert set(said[:-1]) == {"Removing worker (kept)"}, said  # the run's, each update's
    assert said[-1] == "Couldn't gather 'raygrid-sources-1'"  # after the run: said again


def test_a_worker_killed_mid_run_loses_nothing(tmp_path, client):
    spec = _long_survey(16)
    path = workflow_file(tmp_path, spec)
    store = tmp_path / "survey.zarr"
    pids = list(client.run(os.getpid).values())
    killed = []

    def kill_one_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if store.exists() and 1 <= done_sources(store).sum() < 12:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(int(done_sources(store).sum()))
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_one_worker)
    killer.start()
    seen = _Said()
    logging.getLogger("distributed").addHandler(seen)
    try:
        dataset = run_workflow(read_workflow(path), client=client)
    finally:
        logging.getLogger("distributed").removeHandler(seen)
    killer.join()
    assert killed, "the run finished before a worker could be killed"
    said = seen.said
    assert any("Restarting worker" in line for line in said), said  # the log was seen
    assert not [line for line in said if "Couldn't gather" in line], said
    assert dataset["source_done"].values.all()
    result, rays = expected(spec)
    np.testing.assert_array_equal(dataset["traveltime"].values, result["traveltime"].values)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts the worker for later tests


def test_a_finished_task_is_let_go_once_its_sources_are_counted(tmp_path, client, monkeypatch):
    # A future the client still holds is recomputed when the worker holding its result dies:
    # with every future held to the end, a lost worker made the survey solve again each
    # finished source it had run. The client now holds only the tasks not yet read.
    from raygrid.pipeline import survey

    held = []

    class Counting(survey.Progress):
        def update(self, count: int) -> None:
            held.append(sum(key.startswith("raygrid-sources") for key in client.futures))
            super().update(count)

    monkeypatch.setattr(survey, "Progress", Counting)
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["compute"]["batch"] = 1
    dataset = run_workflow(read_workflow(workflow_file(tmp_path, spec)), client=client)
    assert dataset["source_done"].values.all()
    assert len(held) == 5
    # The n-th count is read with its own task still in hand: the n - 1 before it are gone.
    assert all(count <= 6 - n for n, count in enumerate(held, start=1)), held
    assert not any(key.startswith("raygrid-sources") for key in client.futures)


@contextmanager
def _one_worker_killed_after_a_source(store: Path):
    """A one-worker cluster (a client to it) whose worker is killed (SIGKILL) once ``store``
    holds a finished source; its nanny then starts a new one, at another address. A run
    that hangs is stopped after 180 s (the client closed), so the test fails instead."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                     host="127.0.0.1") as cluster,
        Client(cluster) as one,
    ):  # fmt: skip
        pid = next(iter(one.run(os.getpid).values()))
        killed = []

        def kill_the_worker():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if store.exists() and done_sources(store).sum() >= 1:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(True)
                    return
                time.sleep(0.02)

        killer = threading.Thread(target=kill_the_worker)
        killer.start()
        hung = threading.Timer(180, one.close)
        hung.start()
        try:
            yield one
        finally:
            hung.cancel()
            killer.join()
        assert killed, "the run finished before its worker could be killed"


@pytest.mark.parametrize("tiles", [None, {"z": 61, "x": 81}], ids=["plain", "tiled"])
def test_a_survey_goes_on_when_its_only_worker_dies_and_another_joins(
    tmp_path, client, capsys, tiles
):
    # Plain: the model was scattered to that worker alone; the scheduler cannot recover it
    # and cancels the tasks ("already forgotten"). That ended the run, though the nanny
    # had started a new worker: on a batch cluster whose first jobs reach their time
    # limit, every long survey stopped so. Now the model is sent again.
    # Tiled: the tasks are restricted (loosely) to the tiles' owners; with no worker left
    # they wait ("no-worker"), and distributed woke them only on a worker they allowed:
    # the new worker (another address) sat idle, and the run waited forever.
    spec = _long_survey(12 if tiles is None else 6)
    if tiles is not None:
        spec["compute"] = {"tiles": tiles}
    path = workflow_file(tmp_path, spec)
    with _one_worker_killed_after_a_source(tmp_path / "survey.zarr") as one:
        dataset = run_workflow(read_workflow(path), client=one)
    assert dataset["source_done"].values.all()
    result, _ = expected(spec)
    np.testing.assert_array_equal(dataset["traveltime"].values, result["traveltime"].values)
    if tiles is None:
        said = capsys.readouterr().err
        assert re.search(r"the workers that held the model died( \(.*\))?; sending it again "
                         r"for the \d+ source\(s\) left", said), said  # fmt: skip


def test_a_survey_with_no_worker_left_waits_for_one_then_stops_clearly(monkeypatch):
    # Every worker dead: the model was scattered again to none, and Dask's "No valid workers
    # found" stopped the run as bad input (exit status 2, no word on resuming).
    from raygrid.pipeline import survey
    from raygrid.pipeline.progress import Progress

    class NoWorkers:
        def __init__(self, joins):
            self.joins, self.waited = joins, []

        def nthreads(self):
            return {}

        def wait_for_workers(self, n, timeout):
            self.waited.append((n, timeout))
            if not self.joins:
                raise TimeoutError

    bar = Progress(3, 0, enabled=False)
    survey._await_workers(NoWorkers(joins=True), bar)  # one joined: the run goes on
    monkeypatch.setattr(survey, "WORKERS_BACK_S", 0.5)
    client = NoWorkers(joins=False)
    with pytest.raises(rg.RunFailed) as stopped:
        survey._await_workers(client, bar)
    assert client.waited and all(n == 1 and 0 < t <= 0.5 for n, t in client.waited)
    assert str(stopped.value) == (
        "every worker died and none joined within 0.5 s (killed for memory, or their batch "
        "jobs' walltime? see the workers' logs); the finished sources are kept in the store: "
        "run the same command again to resume once workers can start"
    )
    with pytest.raises(rg.RunFailed, match="none joined within 0.2 s"):
        survey._await_workers(NoWorkers(joins=False), bar, 0.2)  # the cluster file's wait
    # Worker jobs that ended (their walltime) bring none back: said at once, not after the
    # whole wait, nor blamed on memory.
    monkeypatch.setattr(survey, "WORKERS_BACK_S", 600)
    ended = "the worker job 12 ended (TIMEOUT): see jobs/raygrid-12.err"
    monkeypatch.setattr(survey, "workers_gone", lambda client: ended)
    with pytest.raises(rg.RunFailed) as stopped:
        survey._await_workers(NoWorkers(joins=False), bar)
    assert str(stopped.value) == (
        f"every worker died, and {ended}; the finished sources are kept in the store: run "
        "the same command again to resume"
    )


def test_a_survey_waits_for_workers_as_long_as_its_cluster_file_says(tmp_path, client, monkeypatch):
    # A batch job's new worker waits in the queue as the first ones did: a survey whose every
    # worker died waited a fixed 120 s whatever the cluster file's wait_timeout / timeout.
    from raygrid.pipeline import survey

    waits = []
    monkeypatch.setattr(survey, "_solve_pending", lambda *a, workers_back, **k: waits.append(
        workers_back
    ))  # fmt: skip

    class Solved(Exception):
        pass

    def finish_store(spec):
        raise Solved  # the step after the solve: no store to finish

    monkeypatch.setattr(survey, "finish_store", finish_store)
    scheduler = tmp_path / "scheduler.yaml"
    address = client.scheduler.address
    scheduler.write_text(f"cluster: scheduler\naddress: {address}\ntimeout: 37\n")
    with pytest.raises(Solved):
        run_workflow(read_workflow(workflow_file(tmp_path / "a")), cluster=scheduler)
    with pytest.raises(Solved):
        run_workflow(read_workflow(workflow_file(tmp_path / "b")), client=client)
    assert waits == [37.0, None]  # a caller's client: the default
    from raygrid.pipeline import clusterfile

    jobs = clusterfile.JobQueueConfig(cluster="slurm", wait_timeout=900)
    assert clusterfile.workers_back_s(jobs) == 900.0
    assert clusterfile.workers_back_s(clusterfile.LocalConfig(cluster="local")) is None


def test_a_model_lost_again_and_again_stops_the_run_and_a_rerun_resumes(
    tmp_path, client, monkeypatch
):
    # Workers that die as soon as they hold the model (killed for memory) are not sent it
    # forever: after RESENDS times in a row with nothing finished, the run stops.
    from raygrid.pipeline import survey

    sent = []

    def lost_every_time(client, tasks, bar, finished=None):
        sent.append(len(tasks))
        client.cancel([future for future, _ in tasks.values()])
        raise survey.SharedDataLost(rg.RunFailed("the cluster lost the task solving ..."))

    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    path = workflow_file(tmp_path, spec)
    monkeypatch.setattr(survey, "_collect", lost_every_time)
    with pytest.raises(rg.RunFailed, match="the cluster lost the task solving"):
        run_workflow(read_workflow(path), client=client)
    assert len(sent) == survey.RESENDS + 1
    monkeypatch.undo()
    dataset = run_workflow(read_workflow(path), client=client)
    assert dataset["source_done"].values.all()


def test_the_schedulers_error_on_a_lost_model_is_left_to_the_surveys_own_note(monkeypatch):
    # Every local worker killed: the run sent its model again and said so, but the
    # scheduler's "ERROR ... lose scattered data, which can't be recovered" above it read
    # as the run failing. Only while a survey runs, and only for its model.
    import logging

    from raygrid.pipeline import survey

    def record(keys):
        message = (
            "Removing worker 'tcp://127.0.0.1:1' caused the cluster to lose scattered data, "
            f"which can't be recovered: {keys} (stimulus_id='handle-worker-cleanup-1')"
        )
        return logging.LogRecord("distributed.scheduler", 40, "", 0, message, (), None)

    scheduler = logging.getLogger("distributed.scheduler")
    model, other = record({"SurveyTask-0123abcd"}), record({"ndarray-0123abcd"})
    assert scheduler.filter(model) and scheduler.filter(other)
    from raygrid.pipeline.interrupts import log_filtered

    with log_filtered("distributed.scheduler", survey._not_the_lost_model):
        assert not scheduler.filter(model) and scheduler.filter(other)
    assert scheduler.filter(model)


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="runs in the CUDA simulator"
)
def test_gpu_survey_keeps_one_model_per_worker(tmp_path, monkeypatch):
    # On the GPU a worker keeps the model on the device from one batch to the next (its
    # task arrives once; raygrid.pipeline.solve.resident_solver): one PullSolver for
    # three batches, and the store holds the CPU's floats. One in-process worker, so the
    # count is seen here.
    from raygrid.kernels.cuda import pull_solver

    built = []

    class Counted(pull_solver.PullSolver):
        def __init__(self, *args, **kwargs):
            built.append(args[0].shape)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(pull_solver, "PullSolver", Counted)
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["model"]["shape"] = {"z": 6, "x": 9}
    spec["grid"] = {"radius": 2}
    spec["sources"] = [{"z": 0.0, "x": 10.0 * k} for k in (0, 4, 8)]
    spec["receivers"] = [{"z": 50.0, "x": 40.0}]
    spec["compute"] = {"backend": "cuda", "batch": 1}
    with in_process_client() as own:
        dataset = run_workflow(read_workflow(workflow_file(tmp_path, spec)), client=own)
    assert built == [(6, 1, 9)]
    prepared = rg.workflow.prepare_workflow(rg.workflow.Workflow.model_validate(spec))
    cpu = rg.traveltimes(prepared.velocity, prepared.sources, radius=2)
    np.testing.assert_array_equal(dataset["traveltime"].values, cpu.values)
    assert dataset.attrs["backend"] == "cuda"


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="CUDA simulator")
def test_a_gpu_survey_whose_model_does_not_fit_the_gpu_says_what_would(tmp_path, monkeypatch):
    # On a worker the driver's out-of-memory error came from the middle of the first task;
    # now the solver refuses before it allocates, and the run says so in a line.
    from raygrid.kernels.cuda import memory

    monkeypatch.setattr(memory, "device_memory", lambda: (memory.DEVICE_HEADROOM + 10, 2**34))
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec["model"]["shape"] = {"z": 6, "x": 9}
    spec["grid"] = {"radius": 2}
    spec["sources"] = [{"z": 0.0, "x": 10.0}]
    spec["receivers"] = [{"z": 50.0, "x": 40.0}]
    spec["compute"] = {"backend": "cuda", "batch": 1}
    with in_process_client() as own, pytest.raises(InputError) as refused:
        run_workflow(read_workflow(workflow_file(tmp_path, spec)), client=own)
    said = str(refused.value)
    assert said.startswith("the model (6 x 9 nodes, 16 star offsets) does not fit on this GPU: ")
    assert said.endswith(
        "free (of 16.00 GiB); try grid.precision: float32, or compute.tiles (one source at "
        "a time, over the cluster)"
    ), said
    assert "Traceback" not in said and "CUDA_ERROR" not in said
    # A tiled run's tile, refused on the worker, is told in the file's words too.
    spec["compute"]["tiles"] = {"z": 4, "x": 5}
    with in_process_client() as own, pytest.raises(InputError) as refused:
        run_workflow(read_workflow(workflow_file(tmp_path / "tiled", spec)), client=own)
    said = str(refused.value)
    assert said.startswith("a tile (") and "does not fit on this GPU" in said, said
    assert said.endswith("; try smaller compute.tiles, or grid.precision: float32"), said


@pytest.mark.parametrize("tiles", [None, {"z": 16, "x": 14}])
def test_a_zarr_v2_model_file_gives_the_synthetic_models_store(tmp_path, client, tiles):
    # The file's own encodings (v2 compressors on the model and its coordinates) used to be
    # carried into the v3 store, which refused them (Expected a BytesBytesCodec).
    model = tmp_path / "v2.zarr"
    rg.gradient_model({"z": 31, "x": 41}, 10.0, 500.0, 4000.0).to_dataset(name="vp").to_zarr(
        model, zarr_format=2, consolidated=False
    )
    plain = run_workflow(read_workflow(workflow_file(tmp_path / "plain")), client=client)
    path = workflow_file(tmp_path / "v2", model={"path": str(model)}, compute__tiles=tiles)
    stored = run_workflow(read_workflow(path), client=client)
    for name in ("traveltime", "receiver_traveltime", "ray_time"):
        np.testing.assert_array_equal(stored[name].values, plain[name].values)


def test_what_a_killed_writer_left_is_swept_before_the_rays_are_assembled(
    tmp_path, client, monkeypatch
):
    # A worker killed during the run while it rewrote the store's metadata leaves
    # "zarr.<id>.partial" in its root: appending the assembled rays listed it, and zarr
    # warned that it "is not recognized as a component of a Zarr hierarchy" (seen in CI).
    import warnings

    from raygrid.pipeline import survey

    path = workflow_file(tmp_path)
    store = tmp_path / "survey.zarr"
    finish = survey.finish_store

    def killed_then_finished(spec):
        (store / "zarr.d861ccfb8cc44aee8ac273b39aeb07a9.partial").write_text("{")
        finish(spec)

    monkeypatch.setattr(survey, "finish_store", killed_then_finished)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dataset = run_workflow(read_workflow(path), client=client)
    assert not list(store.rglob("*.partial"))
    assert dataset.attrs["complete"] == 1 and "ray_start" in dataset


def test_a_stores_workflow_written_out_resumes_or_remakes_it(tmp_path, client):
    # A reviewer could extract the stored workflow only from `raygrid info --workflow`'s
    # mixed output, and its normalised form warned of plot_source without a plot.
    path = workflow_file(tmp_path)
    made = run_workflow(read_workflow(path), client=client)
    store = tmp_path / "survey.zarr"
    written = rg.inspect.write_workflow(store, tmp_path / "again" / "workflow.yaml")
    text = written.read_text()
    assert text.startswith("# The workflow survey.zarr was made with") and "null" not in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no plot_source warning)
        as_is = read_workflow(written)
    # As it is: the store's own workflow, so it resumes (nothing left to do).
    assert rg.workflow.prepare_workflow(as_is).fingerprint == made.attrs["workflow_sha256"]
    # Elsewhere: the same study again, the same floats and fingerprint.
    spec = yaml.safe_load(text)
    spec["outputs"]["store"] = str(tmp_path / "remade.zarr")
    (tmp_path / "remade.yaml").write_text(yaml.safe_dump(spec))
    remade = run_workflow(read_workflow(tmp_path / "remade.yaml"), client=client)
    assert remade.attrs["workflow_sha256"] == made.attrs["workflow_sha256"]
    for name in ("traveltime", "receiver_traveltime", "ray_x", "ray_z", "ray_time"):
        np.testing.assert_array_equal(remade[name].values, made[name].values)
    with pytest.raises(InputError, match="workflow.yaml exists: choose another name"):
        rg.inspect.write_workflow(store, written)
    from test_cli import raygrid_here

    shown = raygrid_here("info", store, "--workflow-file", "cli.yaml", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("wrote cli.yaml\nstore: ")
    assert (tmp_path / "cli.yaml").read_text() == text
