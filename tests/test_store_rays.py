"""Rays read from a survey store by ``raypath``: the Dataset a direct solve's ``raypath``
gives, the same floats, for a source and receiver chosen by name or number; and clear
refusals of stores that hold no such ray."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
import zarr

import raygrid.pipeline as rg
from raygrid.pipeline import InputError, raypath
from raygrid.pipeline.integrity import forget_sources
from raygrid.pipeline.storenames import RAY_PARTS, ray_part
from raygrid.pipeline.workflow import prepare_workflow, read_workflow, run_workflow

from clusters import in_process_client

# A source on a node and one between nodes; a receiver on a node and two between. The
# second receiver is named "2": its name wins over the number 2 (the third receiver).
SOURCES = "name,z,x\nEV01,0,0\nEV03,33.3,88.7\n"
RECEIVERS = "name,z,x\nSTA1,200,300\n2,150,41.7\nSTA3,87.5,250.3\n"
NAMES = {"source": ["EV01", "EV03"], "receiver": ["STA1", "2", "STA3"]}


def write_workflow(directory: Path, model: dict, grid: dict | None = None, **outputs) -> Path:
    """A workflow into ``directory``: named points from CSV files in 2D, a list in 3D."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = {
        "model": model,
        "grid": {"radius": 3 if len(model["shape"]) == 2 else 2, **(grid or {})},
        "outputs": {"store": str(directory / "s.zarr"), **outputs},
    }
    if len(model["shape"]) == 2:
        (directory / "sources.csv").write_text(SOURCES)
        (directory / "receivers.csv").write_text(RECEIVERS)
        spec["sources"] = {"csv": str(directory / "sources.csv")}
        spec["receivers"] = {"csv": str(directory / "receivers.csv")}
    else:
        spec["sources"] = [{"z": 10.0, "y": 25.0, "x": 42.5}]
        spec["receivers"] = [{"z": 80.0, "y": 60.0, "x": 10.0}, {"z": 55.5, "y": 5.0, "x": 70.0}]
    path = directory / "workflow.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


MODEL_2D = {"synthetic": "gradient", "shape": {"z": 21, "x": 31}, "spacing": 10.0}
MODEL_3D = {"synthetic": "gradient", "shape": {"z": 9, "y": 8, "x": 9}, "spacing": 10.0}


@pytest.fixture(scope="module")
def client():
    with in_process_client() as client:
        yield client


@pytest.fixture(scope="module")
def survey(tmp_path_factory, client):
    """The 2D store and the workflow it was run from."""
    path = write_workflow(tmp_path_factory.mktemp("survey"), MODEL_2D)
    store = run_workflow(read_workflow(path), client=client)
    return store, prepare_workflow(read_workflow(path))


def direct_rays(prepared, **options) -> list[list[xr.Dataset]]:
    """Each source solved on its own with predecessors, traced to every receiver."""
    radius = yaml.safe_load(prepared.workflow_json)["grid"]["radius"]
    rays = []
    for source in prepared.sources:
        result = rg.traveltime(
            prepared.velocity, source, radius=radius, predecessors=True, **options
        )
        rays.append([raypath(result, receiver) for receiver in prepared.receivers])
    return rays


def test_a_stored_ray_is_the_direct_solves_raypath(survey):
    store, prepared = survey
    expected = direct_rays(prepared)
    for s, source in enumerate(NAMES["source"]):
        for r, receiver in enumerate(NAMES["receiver"]):
            ray = raypath(store, receiver, source=source)
            # The same Dataset: points, times (bitwise), units, attributes; and the
            # receiver's name, as a list of rays of named receivers says it.
            xr.testing.assert_identical(ray, expected[s][r].assign_attrs(receiver=receiver))
            assert ray["time"].dtype == np.float64
            # By number, from a store selected to the source, by exact position: the same.
            xr.testing.assert_identical(raypath(store, r, source=s), ray)
            xr.testing.assert_identical(raypath(store.sel(source=source), receiver), ray)
            xr.testing.assert_identical(raypath(store.isel(source=s), r), ray)
            xr.testing.assert_identical(raypath(store, prepared.receivers[r], source=s), ray)
    # The time at the end is the receiver table's, bit for bit.
    table = store["receiver_traveltime"].sel(source="EV03", receiver="STA3")
    assert raypath(store, "STA3", source="EV03").attrs["traveltime"] == float(table)


def test_raypaths_trace_a_table_of_receivers_as_raypath_does_each(survey):
    # A tomography's rays: raypath checked the model and the source once a ray (~3 ms a
    # ray on a 401^2 model); a table of receivers went to raypath as "not a number".
    store, prepared = survey
    names = [{"name": n, **p} for n, p in zip(NAMES["source"], prepared.sources)]
    result = rg.traveltimes(prepared.velocity, names, radius=3, predecessors=True)
    expected = [raypath(result, receiver, source="EV03") for receiver in prepared.receivers]
    columns = {d: [r[d] for r in prepared.receivers] for d in ("z", "x")}
    for given in (prepared.receivers, columns):
        rays = rg.raypaths(result, given, source="EV03")
        assert len(rays) == len(expected)
        for ray, one in zip(rays, expected):
            xr.testing.assert_identical(ray, one)
    # Of a store: by name, number or position, as raypath reads them, each named.
    for receivers in (["STA1", 1, "STA3"], columns):
        rays = rg.raypaths(store, receivers, source="EV03")
        for ray, one, name in zip(rays, expected, NAMES["receiver"], strict=True):
            xr.testing.assert_identical(ray, one.assign_attrs(receiver=name))
    # Named positions: each ray says whose it is (a plain list of rays did not).
    stations = {**columns, "name": ["A", "B", "C"]}
    rays = rg.raypaths(result, stations, source="EV03")
    assert [ray.attrs["receiver"] for ray in rays] == ["A", "B", "C"]
    xr.testing.assert_identical(rays[1].drop_attrs(), expected[1].drop_attrs())
    with pytest.raises(InputError, match=r"raypath traces one receiver: raypaths\(result, "):
        raypath(result, columns, source="EV03")
    # Names or numbers: a store's, in a list, an array or a Series; a result's are refused.
    named = rg.raypaths(store, np.array(["STA1", "2", "STA3"]), source="EV03")
    assert [ray.attrs["receiver_x"] for ray in named] == [300.0, 41.7, 250.3]
    # Read together (one read a ray, with the source's checks, was ~50 ms a ray): any
    # order, a receiver twice, none at all.
    order = [2, 0, 2, 1]
    for ray, r in zip(rg.raypaths(store, order, source="EV03"), order, strict=True):
        xr.testing.assert_identical(ray, expected[r].assign_attrs(receiver=NAMES["receiver"][r]))
    assert rg.raypaths(store, [], source="EV03") == []
    with pytest.raises(InputError, match="receivers by name or number are a survey store's"):
        rg.raypaths(result, ["STA1", 2], source="EV03")
    # Every receiver outside the model named by its number, not "receiver x=999 is outside".
    outside = [prepared.receivers[0], {"z": 10.0, "x": 999.0}]
    with pytest.raises(InputError, match=r"^receiver 1 \(numbered from 0\): receiver x=999"):
        rg.raypaths(result, outside, source="EV03")


@pytest.mark.parametrize("weights", ["exact", "mean"])
@pytest.mark.parametrize("ndim", [2, 3])
def test_inner_legs_timed_at_once_are_the_legs_timed_one_by_one(weights, ndim):
    # raypaths times a ray's legs between nodes in one compiled call on the model in memory
    # (node_leg_times); one by one (_leg, on each leg's box of cells: a lazy model's way)
    # must give the same floats, or "raypath time = traveltime" breaks for one of them.
    from raygrid.kernels import node_leg_times
    from raygrid.pipeline.grid import solved_grid
    from raygrid.pipeline.rays import _leg, ray_field

    shape = {"z": 9, "y": 7, "x": 11} if ndim == 3 else {"z": 21, "x": 31}
    velocity = rg.checkerboard(rg.gradient_model(shape, 10.0, 1000.0, 3000.0), 30.0, 0.2)
    source = dict.fromkeys(velocity.dims, 0.0)
    result = rg.traveltime(velocity, source, radius=2, weights=weights, predecessors=True)
    grid = solved_grid(result["velocity"])
    field = ray_field(result, grid)
    rng = np.random.default_rng(ndim)
    nodes3 = np.array(grid.shape3)
    starts = rng.integers(0, nodes3, size=(200, 3))
    ends = np.clip(starts + rng.integers(-2, 3, size=(200, 3)), 0, nodes3 - 1)
    at_once = node_leg_times(field.slowness.values, grid.spacing3, starts, ends, weights == "exact")
    one_by_one = [
        _leg(grid, field, a.astype(float), b.astype(float), True) for a, b in zip(starts, ends)
    ]
    np.testing.assert_array_equal(at_once, one_by_one)


def test_a_predecessors_result_keeps_its_model_when_the_callers_array_is_edited(survey):
    # A tomography's next iteration edits its model in place: the last result's rays and
    # lookups read the edited values (3-5 % off), unchecked.
    _, prepared = survey
    velocity = prepared.velocity.copy(deep=True)
    result = rg.traveltime(velocity, prepared.sources[1], radius=3, predecessors=True)
    receiver = prepared.receivers[2]
    ray, at = raypath(result, receiver), float(rg.traveltime_at(result, receiver))
    velocity.values *= 1.1
    xr.testing.assert_identical(raypath(result, receiver), ray)
    assert float(rg.traveltime_at(result, receiver)) == at == ray.attrs["traveltime"]


def test_a_name_wins_over_the_same_digits_as_a_number(survey):
    store, _ = survey
    by_name = raypath(store, "2", source="EV01")  # the receiver named "2": the second
    assert by_name.attrs["receiver_x"] == 41.7
    assert raypath(store, 2, source="EV01").attrs["receiver_x"] == 250.3  # number 2: the third
    # Digits that name nothing are a number, as `raygrid plot --source 1` reads them.
    xr.testing.assert_identical(raypath(store, "STA1", source="1"), raypath(store, 0, source=1))


def test_ray_outputs_carry_units(survey):
    store, prepared = survey
    result = rg.traveltime(prepared.velocity, prepared.sources[1], radius=3, predecessors=True)
    for ray in (raypath(result, prepared.receivers[2]), raypath(store, "STA3", source=1)):
        assert {d: ray[d].attrs["units"] for d in ("z", "x")} == {"z": "m", "x": "m"}
        assert ray["time"].attrs["units"] == "s" and ray.attrs["units"] == "s"


def test_a_results_source_is_chosen_like_a_stores(survey):
    store, prepared = survey
    names = [{"name": n, **p} for n, p in zip(NAMES["source"], prepared.sources)]
    result = rg.traveltimes(prepared.velocity, names, radius=3, predecessors=True)
    receiver = prepared.receivers[1]
    ray = raypath(result, receiver, source="EV03")
    xr.testing.assert_identical(ray, raypath(result.isel(source=1), receiver))
    xr.testing.assert_identical(ray.assign_attrs(receiver="2"), raypath(store, "2", source="EV03"))
    with pytest.raises(InputError, match=r"raypath takes one source: pass source="):
        raypath(result, receiver)
    with pytest.raises(InputError, match=r"^raypaths takes one source: pass source="):
        rg.raypaths(result, [receiver])  # (it said "raypath")
    with pytest.raises(InputError, match="holds one source already: leave source= out"):
        raypath(result.isel(source=0), receiver, source=0)
    with pytest.raises(InputError, match="receivers by name or number are a survey store's"):
        raypath(result.isel(source=0), "STA1")


def test_the_3d_store_in_float32(tmp_path, client):
    path = write_workflow(tmp_path, MODEL_3D, {"precision": "float32"}, fields=False)
    workflow = read_workflow(path)
    store = run_workflow(workflow, client=client)
    prepared = prepare_workflow(workflow)
    expected = direct_rays(prepared, precision="float32")
    for r in range(2):
        ray = raypath(store, r, source=0)
        assert ray["time"].dtype == np.float32 and ray.sizes["point"] > 2
        xr.testing.assert_identical(ray, expected[0][r])
        assert ray.attrs["receiver_y"] == prepared.receivers[r]["y"]
    # An unnamed store: its points have numbers only.
    with pytest.raises(InputError, match=r"receiver 'STA1' is neither a receiver number .*\("
                       "it does not name its receivers: give a number"):  # fmt: skip
        raypath(store, "STA1", source=0)


def test_unknown_and_out_of_range_points_are_refused(survey):
    store, _ = survey
    with pytest.raises(InputError, match=r"holds 2 sources \(named 'EV01' ... 'EV03'\): pass so"):
        raypath(store, "STA1")
    with pytest.raises(
        InputError, match=r"source 'EV99' is neither a source number nor a source's name in th"
    ):
        raypath(store, "STA1", source="EV99")
    with pytest.raises(InputError, match=r"receiver 'STA9' is neither .* \(its names: 'STA1' ."):
        raypath(store, "STA9", source="EV01")
    with pytest.raises(InputError, match=r"source number 2 is out of range: the store has 2 sou"):
        raypath(store, "STA1", source=2)
    with pytest.raises(InputError, match=r"receiver number -1 is out of range: .* \(0..2\)"):
        raypath(store, -1, source=0)
    with pytest.raises(InputError, match=r"receiver must be a receiver's name or number, got 1.0"):
        raypath(store, 1.0, source=0)
    with pytest.raises(InputError, match=r"holds one source already \(named 'EV03'\): leave so"):
        raypath(store.sel(source="EV03"), "STA1", source="EV03")
    with pytest.raises(InputError, match="is none of the store's receivers: a store keeps the"):
        raypath(store, {"z": 200.0, "x": 301.0}, source=0)
    with pytest.raises(InputError, match=r"exactly the dims \('z', 'x'\), got \['x'\]"):
        raypath(store, {"x": 300.0}, source=0)
    # A subset of its variables has no model to say the dims (was a bare KeyError).
    rays = ["ray_start", "ray_count", "ray_time", "ray_z", "ray_x", "source_done"]
    with pytest.raises(InputError, match=r"has no 'velocity' \(the model\).*not a subset"):
        raypath(store[rays], "STA1", source=0)


def test_a_dataset_that_holds_no_ray_says_what_raypath_reads(survey):
    store, prepared = survey
    either = r"traveltime\(\.\.\., predecessors=True\), or a survey store opened with open_s"
    with pytest.raises(InputError, match=rf"{either}.*; got a DataArray \('traveltime'\)"):
        raypath(store["traveltime"], "STA1", source=0)
    without = rg.traveltime(prepared.velocity, prepared.sources[0], radius=3)
    with pytest.raises(InputError, match=r"has no predecessors to follow \(solve with predecess"):
        raypath(without, prepared.receivers[0])
    with pytest.raises(InputError, match=rf"{either}.*no predecessors: solve it again with pr"):
        raypath(without.to_dataset().assign(velocity=prepared.velocity), prepared.receivers[0])
    with pytest.raises(InputError, match=rf"{either}.*; got dict"):
        raypath({"traveltime": without}, prepared.receivers[0])
    with pytest.raises(InputError, match=rf"{either}.*has no 'traveltime', 'predecessor', 'st"):
        raypath(xr.Dataset({"velocity": prepared.velocity}), prepared.receivers[0])


def copy_store(store: xr.Dataset, directory: Path) -> Path:
    copy = directory / "copy.zarr"
    shutil.copytree(store.encoding["source"], copy)
    return copy


def test_stores_without_the_ray_are_refused(survey, tmp_path, client):
    store, _ = survey
    # Written without rays.
    path = write_workflow(tmp_path / "norays", MODEL_2D, rays=False)
    norays = run_workflow(read_workflow(path), client=client)
    with pytest.raises(InputError, match="holds no rays: its workflow has outputs.rays: false"):
        raypath(norays, "STA1", source="EV01")
    # A source forgotten since the rays were assembled (its chunks were lost): not done.
    forgotten = copy_store(store, tmp_path / "forgotten")
    forget_sources(forgotten, np.array([1]))
    with pytest.raises(InputError, match=r"source 'EV03' is not done in the store \(its comp"):
        raypath(rg.open_survey(forgotten), "STA1", source="EV03")
    raypath(rg.open_survey(forgotten), "STA1", source="EV01")  # the other one is
    # Not finished: the rays are assembled once every source is done.
    partial = copy_store(store, tmp_path / "partial")
    group = zarr.open_group(partial, mode="r+")
    for name in ("ray_start", "ray_count", "ray_time", "ray_z", "ray_x"):
        del group[name]
    group.attrs.update({"complete": False, "rays_assembled": False})
    group["source_done"][1] = 0
    # Its done source's rays wait in their part, as a run leaves them (without it the
    # store is damaged: open_survey says so).
    part = f"{RAY_PARTS}/{ray_part(0)}"
    zarr.create_array(partial, name=part, data=np.ones((2, 3)), attributes={"counts": [1, 1]})
    unfinished = rg.open_survey(partial)
    with pytest.raises(InputError, match=r"not finished: .* \(source 'EV03' is not done yet\)"):
        raypath(unfinished, "STA1", source="EV03")
    with pytest.raises(InputError, match=r"\(source 'EV01' is done\); rerun its workflow to fi"):
        raypath(unfinished.sel(source="EV01"), "STA1")
    # Assembled, then lost: a damaged store.
    group.attrs["rays_assembled"] = True
    with pytest.raises(InputError, match="is damaged: it has no ray_count, ray_start, ray_time"):
        rg.open_survey(partial)  # as raygrid info says
    with pytest.raises(InputError, match="the store's rays are lost"):
        raypath(xr.open_zarr(partial, consolidated=False), "STA1", source="EV01")
    # A chunk of the points lost on disk reads as NaN: said, not returned.
    damaged = copy_store(store, tmp_path / "damaged")
    for chunk in (damaged / "ray_x" / "c").iterdir():
        chunk.unlink()
    with pytest.raises(InputError, match=r"is damaged: chunks of ray_x are missing on disk"):
        rg.open_survey(damaged)  # as raygrid info says
    with pytest.raises(InputError, match=r"ray from source 'EV01' to receiver 0 is damaged"):
        raypath(xr.open_zarr(damaged, consolidated=False), "STA1", source="EV01")
