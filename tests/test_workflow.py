"""Workflow files: schema, positions, line numbers in errors, fingerprints (no cluster)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

import raygrid.pipeline as rg
from raygrid.pipeline.errors import InputError, InputWarning
from raygrid.pipeline.positions import resolve_points
from raygrid.pipeline.workflow import prepare_workflow, read_workflow

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "workflows").glob("*.yaml"))

SMALL = """\
model:
  synthetic: gradient
  shape: {z: 21, x: 31}
grid:
  radius: 2
sources:
  - {z: 0.0, x: 100.0}
  - {z: 0.0, x: 200.0}
receivers:
  line: {start: {z: 200.0, x: 0.0}, stop: {z: 200.0, x: 300.0}, count: 4}
outputs:
  store: out/small.zarr
"""


def write(tmp_path: Path, text: str, name: str = "wf.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_shipped_workflow_validates(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # their relative paths are relative to the repository root
    workflow = read_workflow(path)
    if workflow.compute.backend != "cuda" and workflow.compute.tiles is None:
        prepared = prepare_workflow(workflow)
        assert len(prepared.sources) >= 1


def test_survey_workflows_are_what_they_say():
    survey = read_workflow(ROOT / "workflows" / "survey-2d.yaml")
    assert len(resolve_points(survey.sources, "source")[0]) >= 100
    cube = read_workflow(ROOT / "workflows" / "survey-3d.yaml")
    assert cube.compute.tiles and cube.compute.backend == "cuda"
    assert set(cube.model.shape) == {"z", "y", "x"}


@pytest.mark.parametrize(
    "old, new, line, key, message",
    [
        ("  radius: 2", "  radious: 2", 5, "grid.radious", "Extra inputs are not permitted"),
        ("  radius: 2", "  radius: two", 5, "grid.radius", "valid integer"),
        ("  - {z: 0.0, x: 200.0}", "  - {z: 0.0, x: nope}", 8, "sources[1].x", "valid number"),
        ("  store: out/small.zarr", "  stor: out/small.zarr", 12, "outputs.stor", "unknown key"),
        ("  shape: {z: 21, x: 31}", "  shape: {z: 1, x: 31}", 3, "model.shape.z", "equal to 2"),
        ("count: 4}", "count: 0}", 10, "receivers.line.count", "than or equal to 1"),
        ("model:", "modle:", 1, "modle", "unknown key"),
        # A stray key spelled like a union tag does not take other keys' errors.
        (
            "  shape: {z: 21, x: 31}",
            "  shape: {z: 21, x: 31}\n  spacing: -10.0\n  model-synthetic: 3",
            4,
            "model.spacing",
            "greater than 0",
        ),
        (
            "  store: out/small.zarr",
            "  store: out/small.zarr\n  plot-source: 1",
            13,
            "outputs.plot-source",
            "unknown key; raygrid's keys use underscores",
        ),
        # Of their own type, not converted: a quoted number, a number for a yes/no, a
        # fraction for a count (they were taken as 50, True and 3).
        ("x: 200.0}", 'x: "200"}', 8, "sources[1].x", "valid number"),
        (
            "  store: out/small.zarr",
            "  store: out/small.zarr\n  fields: 1",
            13,
            "outputs.fields",
            "valid boolean",
        ),
        ("  radius: 2", "  radius: 3.0", 5, "grid.radius", "valid integer"),
        ("  - {z: 0.0, x: 100.0}", "  - {z: true, x: 100.0}", 7, "sources[0].z", "valid number"),
    ],
)
def test_errors_name_file_key_and_line(tmp_path, old, new, line, key, message):
    assert old in SMALL
    path = write(tmp_path, SMALL.replace(old, new, 1))
    with pytest.raises(InputError) as error:
        read_workflow(path)
    text = str(error.value)
    assert f"{path}:{line}: {key}: " in text, text
    assert message in text


def test_missing_section_is_named(tmp_path):
    path = write(tmp_path, SMALL.replace("outputs:\n  store: out/small.zarr\n", ""))
    with pytest.raises(InputError, match=r"outputs: Field required \(missing key\)"):
        read_workflow(path)


@pytest.mark.parametrize(
    "old, new, line, key, told",
    [
        ("receivers:", "recievers:", 9, "recievers", "did you mean 'receivers'?"),
        ("outputs:", "outptus:", 11, "outptus", "did you mean 'outputs'?"),
        (
            "outputs:",
            "compute: {tile: {z: 8}}\noutputs:",
            11,
            "compute.tile",
            "did you mean 'tiles'?",
        ),
        ("count: 4}", "cont: 4}", 10, "receivers.line.cont", "did you mean 'count'?"),
        ("  radius: 2", "  radious: 2", 5, "grid.radious", "did you mean 'radius'?"),
        (
            "  store: out/small.zarr",
            "  store: out/small.zarr\n  plot-source: 1",
            13,
            "outputs.plot-source",
            "raygrid's keys use underscores, not hyphens; did you mean 'plot_source'?",
        ),
        # Only the keys of that level: plot_source is an output, not a compute option.
        ("outputs:", "compute: {plot_source: 1}\noutputs:", 11, "compute.plot_source", None),
        ("outputs:", "zzz: 1\noutputs:", 11, "zzz", None),
    ],
)
def test_an_unknown_key_is_told_the_nearest_key_of_its_level(tmp_path, old, new, line, key, told):
    path = write(tmp_path, SMALL.replace(old, new, 1))
    with pytest.raises(InputError) as error:
        read_workflow(path)
    said = f"{path}:{line}: {key}: Extra inputs are not permitted (unknown key"
    said += f"; {told})" if told else ")"
    assert said in [row.strip() for row in str(error.value).splitlines()], str(error.value)


def test_a_cluster_file_key_is_told_the_nearest_of_its_kind(tmp_path):
    from raygrid.pipeline.clusterfile import read_cluster

    path = write(tmp_path, "cluster: local\nn_worker: 2\n", name="cluster.yaml")
    with pytest.raises(InputError, match=r"cluster.yaml:2: n_worker: .*did you mean 'n_workers'\?"):
        read_cluster(path)


def test_bad_yaml_names_the_line(tmp_path):
    path = write(tmp_path, SMALL + "  - [unclosed\n")
    with pytest.raises(InputError, match=rf"{path}:1[34]: not valid YAML"):
        read_workflow(path)


def test_sources_of_unknown_form(tmp_path):
    path = write(tmp_path, SMALL.replace("receivers:\n  line:", "receivers:\n  lines:"))
    with pytest.raises(InputError, match=r":9: receivers: expected a list of points"):
        read_workflow(path)


def test_point_outside_model_names_which_and_line(tmp_path):
    path = write(tmp_path, SMALL.replace("x: 200.0}", "x: 9000.0}"))
    with pytest.raises(InputError) as error:
        prepare_workflow(read_workflow(path))
    expected = f"{path}:8: sources[1]: source 1 (numbered from 0): source x=9000 is outside"
    assert expected in str(error.value)


def test_missing_model_file(tmp_path):
    path = write(tmp_path, SMALL.replace("  synthetic: gradient\n  shape: {z: 21, x: 31}",
                                         f"  path: {tmp_path / 'nope.zarr'}"))  # fmt: skip
    with pytest.raises(InputError, match=r":1: model: velocity model .*nope.zarr does not exist"):
        prepare_workflow(read_workflow(path))


def test_a_csv_entry_that_is_not_one_path_says_so(tmp_path):
    # pydantic said "Input is not a valid path for <class 'pathlib.Path'>".
    text = SMALL.replace(
        "  - {z: 0.0, x: 100.0}\n  - {z: 0.0, x: 200.0}\n", "  csv: [a.csv, b.csv]\n"
    )
    with pytest.raises(InputError, match=r"sources.csv: must be one file's path, got \['a.csv'"):
        read_workflow(write(tmp_path, text))


def test_generators_and_csv(tmp_path):
    csv = tmp_path / "shots.csv"
    csv.write_text("id,x,z\n1,10.0,0\n2,20.5,5\n")
    text = SMALL.replace(
        "  - {z: 0.0, x: 100.0}\n  - {z: 0.0, x: 200.0}\n", f"  csv: {csv}\n"
    ).replace(
        "  line: {start: {z: 200.0, x: 0.0}, stop: {z: 200.0, x: 300.0}, count: 4}",
        "  grid: {z: [100.0, 200.0], x: {start: 0.0, stop: 300.0, count: 3}}",
    )
    with pytest.warns(InputWarning, match="ignoring column\\(s\\) 'id'"):  # station ids
        prepared = prepare_workflow(read_workflow(write(tmp_path, text)))
    assert prepared.sources == [{"z": 0.0, "x": 10.0}, {"z": 5.0, "x": 20.5}]
    assert [(r["z"], r["x"]) for r in prepared.receivers] == [
        (100.0, 0.0), (100.0, 150.0), (100.0, 300.0),
        (200.0, 0.0), (200.0, 150.0), (200.0, 300.0),
    ]  # fmt: skip
    np.testing.assert_array_equal(prepared.source_index[1], [0.5, 0.0, 2.05])
    # A spreadsheet's byte-order mark and spaces after the commas of the header.
    csv.write_bytes("\ufeffz, x ,id\n0,10.0,1\n5, 20.5,2\n".encode())
    with pytest.warns(InputWarning):
        again = prepare_workflow(read_workflow(write(tmp_path, text)))
    assert again.sources == prepared.sources
    csv.write_text("id,x,z\n1,10.0,zero\n")
    with pytest.raises(InputError, match=r"shots.csv:2: not a number"), pytest.warns(InputWarning):
        prepare_workflow(read_workflow(write(tmp_path, text)))
    # Another tool's column names, read with rename (the shots' ids naming them).
    csv.write_text("id,easting,depth\n1,10.0,0\n2,20.5,5\n")
    renamed = text.replace(
        f"  csv: {csv}\n", f"  csv: {csv}\n  rename: {{easting: x, depth: z, id: name}}\n"
    )
    prepared = prepare_workflow(read_workflow(write(tmp_path, renamed)))
    assert prepared.sources == [{"z": 0.0, "x": 10.0}, {"z": 5.0, "x": 20.5}]
    assert prepared.names["source"] == ["1", "2"]


def test_line_generator_is_inclusive():
    from raygrid.pipeline.positions import LinePoints

    spec = LinePoints.model_validate(
        {"line": {"start": {"z": 0, "x": 0}, "stop": {"z": 0, "x": 300}, "count": 4}}
    )
    assert [p["x"] for p in resolve_points(spec, "source")[0]] == [0.0, 100.0, 200.0, 300.0]
    # Both ends exactly as written: 1000.1 came out 1000.0999999999999, and the store's
    # receiver was then not found by the position the workflow gave.
    for a, b, n in [(250.3, 1000.1, 4), (1234.5, 99.9, 7)]:
        spec = LinePoints.model_validate(
            {"line": {"start": {"z": 50.0, "x": a}, "stop": {"z": 50.0, "x": b}, "count": n}}
        )
        points = resolve_points(spec, "receiver")[0]
        assert (points[0]["x"], points[-1]["x"]) == (a, b)


def test_nothing_to_store_is_an_error(tmp_path):
    text = SMALL.split("receivers:")[0] + "outputs:\n  store: s.zarr\n  fields: false\n"
    with pytest.raises(InputError, match=r":11: outputs.fields: nothing to store"):
        read_workflow(write(tmp_path, text))


def test_nothing_to_store_with_receivers_is_an_error(tmp_path):
    text = SMALL + "  fields: false\n  receiver_table: false\n  rays: false\n"
    with pytest.raises(InputError, match=r"outputs.fields: nothing to store: fields, receiver_"):
        read_workflow(write(tmp_path, text))


@pytest.mark.parametrize("store", ["m.zarr", "./m.zarr"])  # "." is the working directory
def test_a_store_that_would_hold_the_model_file_is_refused(tmp_path, store, monkeypatch):
    # --overwrite replaces the store: the model file must not go with it.
    monkeypatch.chdir(tmp_path)
    text = SMALL.replace(
        "  synthetic: gradient\n  shape: {z: 21, x: 31}", "  path: m.zarr"
    ).replace("store: out/small.zarr", f"store: {store}")
    with pytest.raises(InputError, match=r"outputs.store: the store .* would hold the model file"):
        read_workflow(write(tmp_path, text))
    read_workflow(write(tmp_path, text.replace(f"store: {store}", "store: out/m.zarr")))


@pytest.mark.parametrize("what", ["sources", "receivers"])
def test_a_store_that_would_hold_a_points_file_is_refused(tmp_path, what, monkeypatch):
    # --overwrite deleted a CSV kept inside the store's folder (the model was refused).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / "small.zarr").mkdir(parents=True)
    (tmp_path / "out" / "small.zarr" / "points.csv").write_text("z,x\n0,100\n200,300\n")
    (tmp_path / "points.csv").write_text("z,x\n0,100\n200,300\n")
    old = {
        "sources": "sources:\n  - {z: 0.0, x: 100.0}\n  - {z: 0.0, x: 200.0}",
        "receivers": "receivers:\n  line: {start: {z: 200.0, x: 0.0}, stop: {z: 200.0, "
        "x: 300.0}, count: 4}",
    }[what]  # fmt: skip
    inside = SMALL.replace(old, f"{what}: {{csv: out/small.zarr/points.csv}}")
    assert inside != SMALL
    with pytest.raises(InputError, match=rf"the store .* would hold the {what}' CSV file"):
        read_workflow(write(tmp_path, inside))
    read_workflow(write(tmp_path, inside.replace("out/small.zarr/points.csv", "points.csv")))


def test_fingerprint_follows_what_the_store_holds(tmp_path):
    base = prepare_workflow(read_workflow(write(tmp_path, SMALL))).fingerprint
    same = SMALL + "compute:\n  batch: 7\n  cluster: configs/local.yaml\n"
    assert prepare_workflow(read_workflow(write(tmp_path, same))).fingerprint == base
    for old, new in [
        ("radius: 2", "radius: 3"),
        ("x: 200.0}", "x: 210.0}"),
        ("count: 4}", "count: 5}"),
        ("  synthetic: gradient", "  synthetic: constant"),
    ]:
        changed = prepare_workflow(read_workflow(write(tmp_path, SMALL.replace(old, new))))
        assert changed.fingerprint != base, (old, new)


def test_fingerprint_follows_the_rule_for_receivers_near_a_source(tmp_path, monkeypatch):
    # The reach of the straight leg from an off-node source decides receivers' times: a
    # store filled under another reach is refused (named), never finished under two.
    from raygrid.pipeline import fingerprint
    from raygrid.pipeline.store import _differences

    workflow = read_workflow(write(tmp_path, SMALL))
    now = prepare_workflow(workflow)
    monkeypatch.setattr(fingerprint, "DIRECT_REACH", 1)
    before = prepare_workflow(workflow)
    assert before.fingerprint != now.fingerprint
    assert _differences(before.fingerprint_parts, now.fingerprint_parts) == [
        "how far a receiver near a source is joined to it straight (a rule of raygrid's version)"
    ]


def test_options_a_run_will_not_use_are_warned_at_their_line(tmp_path):
    tiled = SMALL + "compute:\n  tiles: {z: 12, x: 12}\n  batch: 8\n  precompute: true\n"
    with pytest.warns(InputWarning) as record:
        prepare_workflow(read_workflow(write(tmp_path, tiled)))
    said = [str(r.message) for r in record]
    assert len(said) == 3, said
    assert said[0].endswith(
        "wf.yaml:15: compute.batch: compute.batch does not apply to a tiled solve "
        "(compute.tiles), which solves the sources one after another, each over every worker: "
        "it is not used"
    )
    assert "wf.yaml:16: compute.precompute: compute.precompute does not apply" in said[1]
    # 12 x 12 tiles on 21 x 31 nodes: small, said at the tiles' line (tests/test_tiles.py).
    assert "wf.yaml:14: compute.tiles: tiles of 12 x 12 nodes are small" in said[2]
    # Receivers' outputs asked for with no receivers; by default (not asked) nothing is said.
    none = SMALL.split("receivers:")[0] + "receivers: []\noutputs:\n  store: o.zarr\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_workflow(read_workflow(write(tmp_path, none)))
    asked = none + "  rays: true\n"
    with pytest.warns(InputWarning, match=r"receivers: no receivers: rays will hold nothing"):
        prepare_workflow(read_workflow(write(tmp_path, asked)))
    # A source chosen for a picture that is not asked for.
    chosen = none + "  plot_source: 1\n"
    with pytest.warns(InputWarning, match=r"wf.yaml:12: outputs.plot_source: plot_source .*"
                      "outputs.plot, which is not given: no picture is drawn"):  # fmt: skip
        prepare_workflow(read_workflow(write(tmp_path, chosen)))


def test_switching_rays_in_a_tiled_workflow_does_not_blame_the_tiles(tmp_path):
    # The tiles are part of the fingerprint only when rays are stored: switching rays off
    # used to name "the tiles" as changed too.
    from raygrid.pipeline.store import _differences

    tiled = SMALL + "compute:\n  tiles: {z: 12, x: 12}\n"
    with_rays = prepare_workflow(read_workflow(write(tmp_path, tiled)))
    assert "tiles" in with_rays.fingerprint_parts
    without = tiled.replace("outputs:\n", "outputs:\n  rays: false\n")
    no_rays = prepare_workflow(read_workflow(write(tmp_path, without)))
    assert _differences(with_rays.fingerprint_parts, no_rays.fingerprint_parts) == [
        "what is stored (fields, receiver_table, rays)"
    ]
    # A part one side lacks, and nothing else differing, is what changed (an older store).
    older = {k: v for k, v in no_rays.fingerprint_parts.items() if k != "direct_reach"}
    assert _differences(older, no_rays.fingerprint_parts) == [
        "how far a receiver near a source is joined to it straight (a rule of raygrid's version)"
    ]


def test_a_store_with_legs_in_a_cell_face_records_their_rule(tmp_path):
    # A source and receivers 5 m deep on a 10 m grid: straight legs between them lie in a
    # cell face, timed through the faster side since this version (the cell of higher
    # index before). Such a store records the rule, so one filled under the old rule is
    # refused, never finished under the new; other stores keep their fingerprints.
    plain = prepare_workflow(read_workflow(write(tmp_path, SMALL)))
    assert "face_legs" not in plain.fingerprint_parts
    in_face = SMALL.replace("{z: 0.0, x: 100.0}", "{z: 5.0, x: 103.0}").replace(
        "z: 200.0", "z: 5.0"
    )
    prepared = prepare_workflow(read_workflow(write(tmp_path, in_face)))
    assert "face_legs" in prepared.fingerprint_parts
    # Receivers in the face but sources on nodes: no leg lies in it.
    on_nodes = SMALL.replace("z: 200.0", "z: 5.0")
    prepared = prepare_workflow(read_workflow(write(tmp_path, on_nodes)))
    assert "face_legs" not in prepared.fingerprint_parts


def test_a_store_with_node_ends_joined_straight_records_the_rule(tmp_path):
    # Receivers on nodes 3 nodes under sources on nodes (radius 2): joined straight since
    # this version (only two off-node ends were before). Such a store records the rule;
    # other stores keep their fingerprints.
    plain = prepare_workflow(read_workflow(write(tmp_path, SMALL)))
    assert "node_ends" not in plain.fingerprint_parts
    near = prepare_workflow(read_workflow(write(tmp_path, SMALL.replace("z: 200.0", "z: 30.0"))))
    assert "node_ends" in near.fingerprint_parts
    # Within a radius (1 node) the straight leg is the star's edges already: not recorded.
    box = prepare_workflow(read_workflow(write(tmp_path, SMALL.replace("z: 200.0", "z: 10.0"))))
    assert "node_ends" not in box.fingerprint_parts


def test_a_store_with_a_point_placed_otherwise_records_the_rule(tmp_path):
    # A source 0.9 m from a node of float32 northings (0.25 m apart at 4e6 m): put on the
    # node before 2026-11-27 (within four units in the last place, 1.9 m), left where it
    # is since. Its store's fingerprint says so, so an older store is refused, never
    # finished under the new rule; other stores keep their fingerprints.
    north = (4_000_000.0 + 100.0 * np.arange(21)).astype(np.float32)
    model = xr.DataArray(
        np.full((11, 21), 3000.0), dims=("z", "x"), attrs={"units": "m/s"}, name="vp",
        coords={"z": ("z", 100.0 * np.arange(11), {"units": "m"}),
                "x": ("x", north, {"units": "m"})},
    )  # fmt: skip
    model.to_dataset().to_netcdf(tmp_path / "m.nc")

    def parts(x: float) -> dict:
        text = (
            f"model:\n  path: {tmp_path / 'm.nc'}\ngrid:\n  radius: 3\nsources:\n"
            f"  - {{z: 250.0, x: {x}}}\noutputs:\n  store: {tmp_path / 'o.zarr'}\n"
        )
        return prepare_workflow(read_workflow(write(tmp_path, text))).fingerprint_parts

    assert "node_snap" in parts(float(north[5]) + 0.9)
    assert "node_snap" not in parts(float(north[5]) + 3.0)  # off a node either way
    assert "node_snap" not in parts(float(north[5]))  # on it either way


def test_fingerprint_of_a_lazy_model_follows_its_values(tmp_path, monkeypatch):
    # A tiled workflow reads its model lazily (never loaded whole); an edit of one value
    # of the file in place, in any chunk, must still change the fingerprint.
    import zarr

    from raygrid.pipeline.models import gradient_model

    velocity = gradient_model({"z": 21, "x": 31}, 10.0, 500.0, 4000.0)
    velocity.to_dataset(name="vp").to_zarr(
        tmp_path / "m.zarr", zarr_format=3, consolidated=False, encoding={"vp": {"chunks": (8, 8)}}
    )
    model = "model:\n  path: m.zarr\n"
    text = model + "grid:" + SMALL.split("grid:")[1] + "compute:\n  tiles: {z: 8, x: 8}\n"
    path = write(tmp_path, text)
    monkeypatch.chdir(tmp_path)  # the model path is relative to where raygrid runs

    def fingerprint():
        prepared = prepare_workflow(read_workflow(path))
        assert prepared.grid.slowness is None  # lazy: hashed block by block
        assert prepared.grid.velocity.data.numblocks == (3, 4)
        return prepared.fingerprint

    base = fingerprint()
    assert fingerprint() == base  # the same file, the same workflow
    vp = zarr.open_array(tmp_path / "m.zarr", path="vp", mode="r+")
    for where in [(0, 0), (20, 30), (9, 17)]:
        old = float(vp[where])
        vp[where] = old + 1.0
        assert fingerprint() != base, where
        vp[where] = old
    assert fingerprint() == base


def test_a_netcdf_model_of_a_tiled_workflow_is_read_tile_by_tile(tmp_path, monkeypatch):
    # A NetCDF file opens lazily indexed, not dask-backed: hashing it (and copying it into
    # the store) through `.data` read it whole on the client. Chunked in blocks (here of
    # 8 nodes a side, not the tiles), the fingerprint is taken block by block and follows
    # its values.
    from raygrid.pipeline.models import gradient_model
    from raygrid.pipeline.tiled import LAZY_BLOCK

    monkeypatch.setitem(LAZY_BLOCK, 2, 8)

    velocity = gradient_model({"z": 21, "x": 31}, 10.0, 500.0, 4000.0)
    velocity.to_dataset(name="vp").to_netcdf(tmp_path / "m.nc")
    text = "model:\n  path: m.nc\ngrid:" + SMALL.split("grid:")[1]
    path = write(tmp_path, text + "compute:\n  tiles: {z: 8, x: 16}\n")
    monkeypatch.chdir(tmp_path)
    prepared = prepare_workflow(read_workflow(path))
    assert prepared.grid.velocity.data.numblocks == (3, 4)
    assert not prepared.velocity.variable._in_memory  # nothing was read whole
    edited = velocity.copy()
    edited[20, 30] = 4100.0
    edited.to_dataset(name="vp").to_netcdf(tmp_path / "m2.nc")  # (the path is not hashed)
    other = write(tmp_path, path.read_text().replace("m.nc", "m2.nc"), "other.yaml")
    assert prepare_workflow(read_workflow(other)).fingerprint != prepared.fingerprint


def test_tiles_are_validated(tmp_path):
    with pytest.raises(InputError, match=r"compute.tiles.z: Input should be greater than"):
        read_workflow(write(tmp_path, SMALL + "compute:\n  tiles: {z: 0, x: 8}\n"))
    with pytest.raises(InputError, match=r"compute.tiles: tiles names unknown dims \['y'\]"):
        prepare_workflow(read_workflow(write(tmp_path, SMALL + "compute:\n  tiles: {y: 8}\n")))
    # What only the tiled solve used to find, after the cluster started and the store was
    # made: a tile smaller than the halo, Near-Far; refused by validate (here=False, no
    # values) with the line of compute.tiles.
    small = write(tmp_path, SMALL + "compute:\n  tiles: {z: 1, x: 8}\n")
    with pytest.raises(InputError, match=r"wf.yaml:14: compute.tiles: .*smaller than the halo"):
        prepare_workflow(read_workflow(small), here=False, values=False)
    near_far = SMALL + "compute:\n  backend: cuda\n  algorithm: near-far\n  tiles: {z: 8, x: 8}\n"
    with pytest.raises(
        InputError, match=r"compute.tiles: .*compute.algorithm: near-far runs single"
    ):
        prepare_workflow(read_workflow(write(tmp_path, near_far)), here=False, values=False)


def test_a_backend_refusal_is_said_in_the_files_words(tmp_path, monkeypatch):
    # Said at compute.backend's line as the file spells it, not as the Python call does
    # ("backend='auto' cannot use a GPU here ... And algorithm='near-far' runs only on one").
    import raygrid.kernels.cuda as cuda_kernels

    monkeypatch.setattr(cuda_kernels, "cuda_usable", lambda: False)  # (GPU hosts too)
    auto = SMALL + "compute:\n  backend: auto\n  algorithm: near-far\n"
    said = r"compute.backend: auto cannot use a GPU here: .* And compute.algorithm: near-far runs"
    with pytest.raises(InputError, match=said):
        prepare_workflow(read_workflow(write(tmp_path, auto)))


@pytest.mark.filterwarnings("ignore:.*does not apply to a tiled solve")  # batch + tiles
def test_a_cuda_configuration_no_gpu_can_launch_is_refused_at_its_line(tmp_path):
    # Found on a worker, once the survey was under way, as a traceback (ValueError). Tiles
    # shrink to fit a batch (down to a warp of threads); 64 float64 time tiles fit none. A
    # GPU batch counts only up to the sources of a task.
    many = SMALL.replace(
        "  - {z: 0.0, x: 100.0}\n  - {z: 0.0, x: 200.0}\n",
        "  line: {start: {z: 0.0, x: 0.0}, stop: {z: 0.0, x: 200.0}, count: 64}\n",
    )
    batched = many + "compute:\n  backend: cuda\n  batch: 64\n  cuda_batch: 64\n"
    prepare_workflow(  # two sources: a batch of 2
        read_workflow(write(tmp_path, SMALL + batched[len(many) :])), here=False, values=False
    )
    prepare_workflow(  # tasks of 8 sources
        read_workflow(write(tmp_path, batched.replace("batch: 64\n  cuda", "batch: 8\n  cuda"))),
        here=False, values=False,
    )  # fmt: skip
    with pytest.raises(
        InputError,
        match=r"wf.yaml:15: compute.cuda_batch: the CUDA pull solver cannot run radius "
        r"\(2, 0, 2\) with batch 64 in float64: .*use a smaller compute.cuda_batch or a "
        r"smaller radius or grid.precision: float32$",
    ):
        prepare_workflow(read_workflow(write(tmp_path, batched)), here=False, values=False)
    fits = batched.replace("cuda_batch: 64", "cuda_batch: 16")  # on smaller tiles
    prepare_workflow(read_workflow(write(tmp_path, fits)), here=False, values=False)
    # A tiled solve relaxes one source at a time: its batch does not count, its radius does.
    tiled = batched + "  tiles: {z: 8, y: 8, x: 8}\n"
    cube = tiled.replace("shape: {z: 21, x: 31}", "shape: {z: 21, y: 21, x: 21}")
    cube = cube.replace("{z: 0.0, x: 0.0}", "{z: 0.0, y: 0.0, x: 0.0}")
    cube = cube.replace("{z: 0.0, x: 200.0}", "{z: 0.0, y: 0.0, x: 200.0}")
    cube = cube.replace("{z: 200.0, x: 0.0}", "{z: 200.0, y: 0.0, x: 0.0}")
    cube = cube.replace("{z: 200.0, x: 300.0}", "{z: 200.0, y: 0.0, x: 200.0}")
    prepare_workflow(read_workflow(write(tmp_path, cube)), here=False, values=False)
    # Radius 4 in 3D runs on 4 x 4 x 8 tiles (the default 4 x 8 x 8 needs 61 KB).
    prepare_workflow(
        read_workflow(write(tmp_path, cube.replace("radius: 2", "radius: 4"))),
        here=False, values=False,
    )  # fmt: skip
    wide = cube.replace("radius: 2", "radius: 5")
    with pytest.raises(InputError, match=r"compute.tiles: .*radius \(5, 5, 5\) with batch 1 "):
        prepare_workflow(read_workflow(write(tmp_path, wide)), here=False, values=False)
    # No batch would fix it: named at the radius, not at a cuda_batch the file never set.
    untiled = wide.replace("  tiles: {z: 8, y: 8, x: 8}\n", "").replace("  cuda_batch: 64\n", "")
    with pytest.raises(InputError, match=r"wf.yaml:5: grid.radius: the CUDA pull solver cannot"):
        prepare_workflow(read_workflow(write(tmp_path, untiled)), here=False, values=False)


def test_fingerprint_follows_the_tiles_only_when_rays_are_stored(tmp_path):
    # Tied paths may be broken differently under other tiles: other rays, same times.
    def fingerprint(text: str) -> str:
        return prepare_workflow(read_workflow(write(tmp_path, text))).fingerprint

    tiled = SMALL + "compute:\n  tiles: {z: 8, x: 8}\n"
    retiled = tiled.replace("{z: 8, x: 8}", "{z: 8, x: 16}")
    assert fingerprint(tiled) != fingerprint(retiled)
    no_rays = "  rays: false\n"
    assert fingerprint(tiled.replace("outputs:\n", "outputs:\n" + no_rays)) == fingerprint(
        retiled.replace("outputs:\n", "outputs:\n" + no_rays)
    )


def test_workflow_dump_round_trips(tmp_path):
    workflow = read_workflow(write(tmp_path, SMALL))
    again = yaml.safe_load(workflow.model_dump_json())
    assert again["grid"]["radius"] == 2 and again["outputs"]["rays"] is True


def test_a_key_given_twice_is_an_error(tmp_path):
    path = write(tmp_path, SMALL.replace("  radius: 2", "  radius: 2\n  radius: 5"))
    with pytest.raises(InputError, match=rf"{path}:6: not valid YAML: key 'radius' is given"):
        read_workflow(path)


def test_the_plotted_source_must_exist(tmp_path):
    path = write(tmp_path, SMALL + "  plot: out/small.png\n  plot_source: 2\n")
    with pytest.raises(InputError) as error:
        prepare_workflow(read_workflow(path))
    assert (
        f"{path}:14: outputs.plot_source: source number 2 is out of range: the workflow has 2"
        in str(error.value)
    )


def test_the_plotted_source_may_be_named(tmp_path):
    # As `raygrid plot --source` takes: a name (a CSV file's name column), winning over the
    # same digits; the workflow key took numbers only ("Input should be a valid integer").
    from raygrid.pipeline.workflow import plot_source_number

    (tmp_path / "sources.csv").write_text("name,z,x\n2,0,100\nEV03,0,200\n")
    named = SMALL.replace(
        "sources:\n  - {z: 0.0, x: 100.0}\n  - {z: 0.0, x: 200.0}\n",
        f"sources:\n  csv: {tmp_path / 'sources.csv'}\n",
    )
    for chosen, number in (("EV03", 1), ("'2'", 0), ("1", 1), ("' 1'", 1)):
        path = write(tmp_path, named + f"  plot: out/small.png\n  plot_source: {chosen}\n")
        prepared = prepare_workflow(read_workflow(path))
        outputs = prepared.workflow.outputs
        assert plot_source_number(outputs, 2, prepared.names["source"]) == number, chosen
    path = write(tmp_path, named + "  plot: out/small.png\n  plot_source: EV04\n")
    with pytest.raises(InputError, match=r":13: outputs.plot_source: source 'EV04' is neither "
                       r"a source number nor a source's name in the workflow \(its names: '2' "
                       r"... 'EV03'\)"):  # fmt: skip
        prepare_workflow(read_workflow(path))
    path = write(tmp_path, SMALL + "  plot: out/small.png\n  plot_source: -1\n")
    with pytest.raises(InputError, match=r"outputs.plot_source"):
        prepare_workflow(read_workflow(path))


def test_the_picture_type_is_checked_before_anything_runs(tmp_path):
    path = write(tmp_path, SMALL + "  plot: out/small.jpgg\n")
    with pytest.raises(InputError, match=r":13: outputs.plot: .*cannot write '.jpgg'.*png"):
        read_workflow(path)
    # A name without a type is a PNG, and named so.
    path = write(tmp_path, SMALL + "  plot: out/small\n")
    assert read_workflow(path).outputs.plot == Path("out/small.png")
    path = write(tmp_path, SMALL + "  plot: out/small.PDF\n")
    assert read_workflow(path).outputs.plot == Path("out/small.PDF")


def test_npy_model_with_its_grid(tmp_path):
    values = np.linspace(1500.0, 3000.0, 21 * 31).reshape(21, 31)
    np.save(tmp_path / "v.npy", values)
    model = (
        f"  path: {tmp_path / 'v.npy'}\n  spacing: {{z: 10.0, x: 12.5}}\n  units: m/s\n"
        "  length_unit: m"
    )
    text = SMALL.replace("  synthetic: gradient\n  shape: {z: 21, x: 31}", model)
    prepared = prepare_workflow(read_workflow(write(tmp_path, text)))
    assert prepared.grid.shape == (21, 31) and tuple(prepared.grid.spacing3) == (10.0, 1.0, 12.5)
    np.testing.assert_array_equal(prepared.velocity.values, values)
    no_grid = text.replace("\n  spacing: {z: 10.0, x: 12.5}", "")
    with pytest.raises(InputError, match="model or array has no coordinates: give its spacing"):
        prepare_workflow(read_workflow(write(tmp_path, no_grid)))
    import raygrid.pipeline as rg

    rg.constant_model({"z": 21, "x": 31}, 10.0, 2000.0).to_dataset(name="vp").to_zarr(
        tmp_path / "v.zarr", zarr_format=3, consolidated=False
    )
    on_zarr = text.replace("v.npy", "v.zarr")
    with pytest.raises(InputError, match="spacing is for .npy models"):
        prepare_workflow(read_workflow(write(tmp_path, on_zarr)))


def test_a_file_that_is_not_netcdf_is_an_input_error(tmp_path):
    import raygrid.pipeline as rg

    (tmp_path / "v.nc").write_text("not netcdf")
    with pytest.raises(InputError, match="cannot open it as NetCDF"):
        rg.load_velocity(tmp_path / "v.nc")


@pytest.mark.parametrize(
    "name, said",
    [("empty.npy", "cannot read it as a NumPy array (No data left"),
     ("bad.zarr", "cannot open it as Zarr (JSONDecodeError"),
     ("empty.zarr", "cannot open it as Zarr (no Zarr group metadata")],
)  # fmt: skip
def test_a_model_file_that_does_not_read_is_an_input_error(tmp_path, name, said):
    # An empty .npy raised EOFError (the CLI printed only "Aborted!"); a Zarr folder with
    # broken or no metadata, a raw traceback.
    from click.testing import CliRunner

    import raygrid.pipeline as rg
    from raygrid.pipeline.cli import main

    path = tmp_path / name
    if name.endswith(".npy"):
        path.touch()
    else:
        path.mkdir()
        if name == "bad.zarr":
            (path / "zarr.json").write_text("{not json")
    grid = {"spacing": 10.0, "length_unit": "m", "units": "m/s"} if name.endswith(".npy") else {}
    with pytest.raises(InputError, match=re.escape(f"{path}: {said}")):
        rg.load_velocity(path, **grid)
    model = f"  path: {path}\n" + "".join(f"  {k}: {v}\n" for k, v in grid.items())
    text = SMALL.replace("  synthetic: gradient\n  shape: {z: 21, x: 31}\n", model)
    validated = CliRunner().invoke(main, ["validate", str(write(tmp_path, text))])
    assert validated.exit_code == 2 and said in validated.output, validated.output


def test_a_path_that_is_not_text_is_an_input_error(tmp_path):
    # None, numbers and bytes were TypeErrors from pathlib; dims "xz" was read as two names.
    import raygrid.pipeline as rg

    for given in (None, 3, b"m.zarr"):
        with pytest.raises(InputError, match="the velocity model must be a path"):
            rg.load_velocity(given)
        with pytest.raises(InputError, match="a survey store must be a path"):
            rg.open_survey(given)
    np.save(tmp_path / "m.npy", np.full((4, 5), 2000.0))
    with pytest.raises(InputError, match="dims must be a list of dim names, e.g."):
        rg.load_velocity(tmp_path / "m.npy", spacing=10.0, length_unit="m", units="m/s", dims="xz")


def test_the_option_vocabulary_is_one():
    # The workflow schema's choices are the Python API's: no option accepted by one alone.
    from typing import get_args

    from raygrid.kernels import WEIGHT_RULES
    from raygrid.pipeline import options as solve

    assert set(get_args(solve.Weights)) == set(WEIGHT_RULES)
    assert sorted(get_args(solve.Algorithm)) == sorted(sum(solve.ALGORITHMS.values(), ()))
    assert set(solve.ALGORITHMS) < set(solve.BACKENDS) == {"cpu", "cuda", "auto"}
    assert set(solve.PRECISIONS) == {"float64", "float32"}


def test_a_model_too_large_to_read_whole_is_refused_before_it_is_read(tmp_path, monkeypatch):
    # Found only after minutes and gigabytes of reading a lazily opened model file.
    import raygrid.pipeline.workflow as workflow_module
    from raygrid.pipeline.grid import grid_from_velocity

    read = []
    monkeypatch.setattr(workflow_module, "available_memory", lambda: 16 * 21 * 31 - 1)
    monkeypatch.setattr(
        workflow_module, "grid_from_velocity",
        lambda velocity, **kwargs: read.append(kwargs) or grid_from_velocity(velocity, **kwargs),
    )  # fmt: skip
    path = write(tmp_path, SMALL)
    with pytest.raises(InputError, match=r"wf.yaml:1: model: the model of 21 x 31 nodes .*"
                       r"use compute.tiles"):  # fmt: skip
        prepare_workflow(read_workflow(path))
    assert read == []
    # Read tile by tile, or not read at all, it is not held whole: not refused.
    prepare_workflow(read_workflow(path), values=False)
    tiled = write(tmp_path, SMALL + "compute:\n  tiles: {z: 8, x: 8}\n", "tiled.yaml")
    prepare_workflow(read_workflow(tiled))
    # With the CPU graph a survey builds beside it (an 801^3 model was read, 8.3 GB in 25 s,
    # before its graph was refused): 24416 bytes at radius 2, as the survey counts them.
    needed = 16 * 21 * 31 + 24416
    monkeypatch.setattr(workflow_module, "available_memory", lambda: needed - 1)
    read.clear()
    with pytest.raises(InputError, match=r"model: the model of 21 x 31 nodes and its CPU graph"):
        prepare_workflow(read_workflow(path))
    assert read == []
    monkeypatch.setattr(workflow_module, "available_memory", lambda: needed)
    prepare_workflow(read_workflow(path))
    # backend auto resolved to the CPU (no real GPU here) counts the graph as cpu does.
    auto = write(tmp_path, SMALL + "compute:\n  backend: auto\n", "auto.yaml")
    monkeypatch.setattr(workflow_module, "available_memory", lambda: needed - 1)
    with pytest.raises(InputError, match=r"model: the model of 21 x 31 nodes and its CPU graph"):
        prepare_workflow(read_workflow(auto))
    # On a GPU there is no CPU graph; nor here, for a run on another machine (a resumed
    # `raygrid submit` reads the model on the login node: its job builds the graph).
    gpu = write(tmp_path, SMALL + "compute:\n  backend: cuda\n", "gpu.yaml")
    monkeypatch.setattr(workflow_module, "available_memory", lambda: 16 * 21 * 31)
    prepare_workflow(read_workflow(gpu))
    prepare_workflow(read_workflow(path), here=False)
    # A synthetic model is built whole under tiles too: its velocity is checked.
    monkeypatch.setattr(workflow_module, "available_memory", lambda: 8 * 21 * 31 - 1)
    with pytest.raises(InputError) as refused:
        prepare_workflow(read_workflow(tiled))
    assert "model: the synthetic model of 21 x 31 nodes (its velocity in float64, built " in str(
        refused.value
    ) and str(refused.value).endswith("use a smaller model or a coarser spacing (a model file "
                                      "is read tile by tile with compute.tiles)")  # fmt: skip
    # Dims that are not raygrid's are named as such, not refused for their memory.
    wrong = write(tmp_path, SMALL.replace("{z: 21, x: 31}", "{Z: 21, X: 31}"), "wrong.yaml")
    monkeypatch.setattr(workflow_module, "available_memory", lambda: 1)
    with pytest.raises(InputError, match="shape must be keyed by"):
        prepare_workflow(read_workflow(wrong))


@pytest.mark.parametrize("precompute", [False, True])
def test_a_cpu_graph_too_large_names_only_what_would_lower_it(tmp_path, monkeypatch, precompute):
    # "use a smaller model, precompute: false, or compute.tiles" was said with precompute
    # false already.
    import raygrid.pipeline.survey as survey
    import raygrid.pipeline.surveymemory as surveymemory

    monkeypatch.setattr(surveymemory, "available_memory", lambda: 1)
    text = SMALL + f"compute:\n  precompute: {str(precompute).lower()}\n"
    prepared = prepare_workflow(read_workflow(write(tmp_path, text)))
    with pytest.raises(InputError) as refused:
        survey.check_survey_memory(None, prepared, survey.store_spec(prepared))
    said = str(refused.value)
    assert said.startswith("the CPU graph of 21 x 31 nodes (beside the model, loaded already)")
    lower = "a smaller model, compute.precompute: false" if precompute else "a smaller model"
    tiles = "compute.tiles (one source at a time, over the cluster)"
    assert said.endswith(f"is available; use {lower} or {tiles}")


@pytest.mark.parametrize(
    ("store", "plot", "here", "said"),
    [
        ("out/small.png", "out/small.png", False, "it is the store's own path (out/small.png)"),
        ("out/small.zarr", "out/small.zarr/x.png", False, "it is inside the store (out/smal"),
        ("out/small.zarr", "afile/small.png", True, "afile is a file, not a folder"),
        ("out/small.zarr", "folder.png", True, "it is a folder; name a file"),
        # A folder without a type was drawn beside it, as folder.png (adversarial review).
        ("out/small.zarr", "folder", True, "it is a folder; name a file"),
    ],
)
def test_a_picture_that_cannot_be_written_is_refused_before_the_run(
    tmp_path, monkeypatch, store, plot, here, said
):
    # Found out once every source was solved, as a bare "[Errno 17] File exists".
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "folder").mkdir()
    text = SMALL.replace("out/small.zarr", store) + f"  plot: {plot}\n"
    path = write(tmp_path, text)
    with pytest.raises(InputError) as error:
        prepare_workflow(read_workflow(path), here=here)
    assert f"{path}:13: outputs.plot: cannot create picture {plot}: {said}" in str(error.value)


@pytest.mark.parametrize(("store", "named"), [("''", r"\. \(or an empty path\)"), ("..", "..")])
def test_a_store_that_is_the_working_directory_is_refused_when_read(
    tmp_path, monkeypatch, store, named
):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SMALL.replace("out/small.zarr", store))
    with pytest.raises(InputError, match=f"outputs.store: {named} is the working directory or "
                       "holds it: name a folder for the store"):  # fmt: skip
        read_workflow(path)


@pytest.mark.parametrize(
    ("radius", "said"),
    [
        ("0", "grid.radius: Input should be greater than or equal to 1"),
        ("{z: 0, x: 2}", "grid.radius.z: Input should be greater than or equal to 1"),
        ("abc", "grid.radius: Input should be a valid integer; or Input should be a valid "
         "dictionary"),
    ],
)  # fmt: skip
def test_a_union_names_only_the_alternative_the_value_was_meant_for(tmp_path, radius, said):
    # radius: 0 said "... greater than or equal to 1; or Input should be a valid dictionary".
    path = write(tmp_path, SMALL.replace("radius: 2", f"radius: {radius}"))
    with pytest.raises(InputError) as error:
        read_workflow(path)
    assert str(error.value).splitlines()[1:] == [f"  {path}:5: {said}"]


def test_a_batch_holding_every_source_is_warned_about(tmp_path):
    # batch: 5000 for 400 shots ran as one task on one worker, the others idle, its
    # progress at 0 until the end. The default batch (4) for 2 sources is no news, nor a
    # batch a task's threads solve side by side.
    said = r"wf.yaml:\d+: compute.batch: compute.batch 8 holds all 2 sources: one task"
    with pytest.warns(InputWarning, match=said):
        prepare_workflow(read_workflow(write(tmp_path, SMALL + "compute:\n  batch: 8\n")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_workflow(read_workflow(write(tmp_path, SMALL)))
        prepare_workflow(read_workflow(write(tmp_path, SMALL + "compute:\n  batch: 1\n")))
        threads = SMALL + "compute:\n  batch: 8\n  threads: 2\n"  # solved side by side
        prepare_workflow(read_workflow(write(tmp_path, threads)))


def test_a_star_many_times_radius_3s_is_warned_about_at_the_radius(tmp_path):
    # 3D radius 30 ran 185 s a source (0.5 s at radius 3) with no word, validate included.
    text = SMALL.replace("  radius: 2", "  radius: 12")
    said = (r"wf.yaml:\d+: grid.radius: radius z=12, x=12 gives 368 star offsets a node, 12 "
            r"times radius 3's 32: a solve takes at least that many times as long")  # fmt: skip
    with pytest.warns(InputWarning, match=said):
        prepare_workflow(read_workflow(write(tmp_path, text)), here=False, values=False)
    model = rg.constant_model({"z": 21, "y": 21, "x": 21}, 10.0, 2000.0)
    with pytest.warns(InputWarning, match="radius z=8, y=8, x=8 gives 4,034 star offsets"):
        rg.traveltime(model, {"z": 0.0, "y": 100.0, "x": 100.0}, radius=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 2D radius 10, 3D radius 7: below
        rg.traveltime(model, {"z": 0.0, "y": 100.0, "x": 100.0}, radius=7)
        prepare_workflow(
            read_workflow(write(tmp_path, SMALL.replace("  radius: 2", "  radius: 10"))),
            here=False, values=False,
        )  # fmt: skip


def test_a_star_lopsided_for_the_spacing_is_warned_about_at_the_radius(tmp_path):
    # dz = 2 m, dx = 10 m at one radius: times along z came out 10 % late, silently.
    text = SMALL.replace(
        "  shape: {z: 21, x: 31}", "  shape: {z: 101, x: 31}\n  spacing: {z: 2.0, x: 10.0}"
    )
    with pytest.warns(InputWarning, match=r"wf.yaml:\d+: grid.radius: the forward star reaches "
                      r"20 m along x but only 4 m along z .* radius: \{z: 10, x: 2\}"):  # fmt: skip
        prepare_workflow(read_workflow(write(tmp_path, text)), here=False, values=False)
    # With the default radius (no grid section), at the model and its spacing, not line 1.
    default = text.replace("grid:\n  radius: 2\n", "")
    with pytest.warns(InputWarning, match=r"wf.yaml:1: model: the forward star reaches "):
        prepare_workflow(read_workflow(write(tmp_path, default)), here=False, values=False)
    even = text.replace("  radius: 2", "  radius: {z: 10, x: 2}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_workflow(
            read_workflow(write(tmp_path, even, "even.yaml")), here=False, values=False
        )


def _documented_keys() -> dict[str, str]:
    """The README's table of workflow keys: each ``section.key`` and its default cell."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Workflow keys", 1)[1]
    table = [line for line in section.split("\n\n")[2].splitlines() if line.startswith("|")]
    rows = {}
    for line in table[2:]:
        keys, default, _ = (cell.strip() for cell in line.strip("|").split("|"))
        for key in re.findall(r"`([a-z_.]+)`", keys):
            rows[key] = default if keys.count("`") == 2 else ""
    return rows


def test_the_readme_documents_every_workflow_key_with_its_default():
    # A key added to the schema and not to the table (compute.cuda_batch, outputs.plot_source
    # were so) is one users cannot find; a key the schema lost is one they are refused.
    from raygrid.pipeline.workflow import Compute, FileModel, GridOptions, Outputs, SyntheticModel

    sections = {
        "model": [SyntheticModel, FileModel], "grid": [GridOptions], "outputs": [Outputs],
        "compute": [Compute],
    }  # fmt: skip
    schema = {"sources", "receivers"}
    defaults = {}
    for section, models in sections.items():
        for model in models:
            for name, field in model.model_fields.items():
                schema.add(f"{section}.{name}")
                if model is not FileModel:  # a file's keys default to what the file says
                    defaults[f"{section}.{name}"] = field.default
    documented = _documented_keys()
    assert set(documented) == schema
    for key, cell in documented.items():
        if cell.startswith("`") and cell.count("`") == 2 and key in defaults:
            assert yaml.safe_load(cell.strip("`")) == defaults[key], key


def test_a_workers_model_at_rest_is_checked_against_dasks_pause_fraction(tmp_path, monkeypatch):
    # Its peak (the model and its tasks) is held to terminate (past it the nanny kills the
    # worker); the model alone, kept between tasks, to pause (past it Dask gives the worker
    # no task again: the survey stalls). Checking the peak against pause refused surveys
    # that ran (a task's peak past pause only holds the next tasks back).
    import raygrid.pipeline.survey as survey
    import raygrid.pipeline.surveymemory as surveymemory

    prepared = prepare_workflow(read_workflow(write(tmp_path, SMALL)))
    spec = survey.store_spec(prepared)
    workers = {"tcp://w:1": {"memory_limit": 2 * 2**30, "nthreads": 1}}
    survey.check_survey_memory(None, prepared, spec, workers=workers)  # fits at rest and peak
    monkeypatch.setattr(surveymemory, "worker_fractions", lambda: (0.1, 0.95))
    with pytest.raises(InputError) as refused:
        survey.check_survey_memory(None, prepared, spec, workers=workers)
    said = str(refused.value)
    assert said.startswith("each worker (the model and its CPU graph ") and "kept between" in said
    assert "Dask pauses it at 10% of that" in said
