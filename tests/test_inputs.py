"""Inputs that used to crash or be read silently wrong: CSV comments, ragged rows, extra
columns and dims in upper case, synthetic-model keys of another kind, a layered model
without its velocities, a z axis given as elevation, keys of points that are not dims,
repeated sources, tables of sources with other columns, and units given for a file that
has others."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from raygrid.pipeline import (
    constant_model,
    grid_from_velocity,
    layered_model,
    load_velocity,
    traveltime,
    traveltime_at,
    traveltimes,
)
from raygrid.pipeline.errors import Z_IS_DEPTH, InputError, InputWarning
from raygrid.pipeline.positions import CsvPoints, _read_csv, resolve_points
from raygrid.pipeline.workflow import Workflow, prepare_workflow, read_workflow

ROOT = Path(__file__).resolve().parents[1]
# The keys each kind of synthetic model reads.
MODEL_KEYS = {
    "constant": {"synthetic", "shape", "spacing", "velocity"},
    "gradient": {"synthetic", "shape", "spacing", "top", "bottom"},
    "layered": {"synthetic", "shape", "spacing", "interfaces", "velocities"},
}

SMALL = """\
model:
  synthetic: gradient
  shape: {z: 21, x: 31}
grid:
  radius: 2
sources:
  - {z: 0.0, x: 100.0}
outputs:
  store: out/small.zarr
"""


def receivers(tmp_path: Path, text: str) -> list[dict[str, float]]:
    """The points of a receiver CSV file holding ``text``."""
    path = tmp_path / "receivers.csv"
    path.write_text(text)
    points, _ = resolve_points(CsvPoints(csv=path), "receiver")
    return points


def quietly(function, *args):
    """Call ``function``, failing on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return function(*args)


def test_csv_comments_before_and_after_the_header_are_skipped(tmp_path):
    text = "# receivers\n  # line 2: an indented comment\nz,x\n# surface\n0,10\n\n5,20.5\n"
    points = quietly(receivers, tmp_path, text)
    assert points == [{"z": 0.0, "x": 10.0}, {"z": 5.0, "x": 20.5}]
    # Line numbers count the comments and the blank line: the bad value is on line 9.
    with pytest.raises(InputError, match=r"receivers.csv:9: not a number in \['7', 'far'\]"):
        receivers(tmp_path, text + "# deeper\n7,far\n")
    # float() reads "1_0" as 10: more likely a typo in a table than a number.
    with pytest.raises(InputError, match=r"receivers.csv:9: not a number in \['7', '1_0'\]"):
        receivers(tmp_path, text + "# deeper\n7,1_0\n")


@pytest.mark.parametrize(
    "row, fields",
    [("0,10,3", 3), ("0", 1)],
    ids=["more", "fewer"],
)
def test_a_ragged_row_is_an_input_error_with_its_line(tmp_path, row, fields):
    text = f"# receivers\nz,x\n0,10\n# next\n{row}\n"
    with pytest.raises(InputError) as error:
        receivers(tmp_path, text)
    assert f"receivers.csv:5: {fields} field(s) where the header (line 2) has 2" in str(error.value)


def test_a_header_written_as_a_comment_is_explained(tmp_path):
    # np.savetxt(..., header="z,x") writes the header as a comment.
    with pytest.raises(InputError, match=r":2: the header names no model dim.*line 1 \('# z,x'\)"):
        receivers(tmp_path, "# z,x\n0,10\n")


@pytest.mark.parametrize(
    "header, hint",
    [
        ("name;z;x", r"its fields are separated by ';': separate them by commas"),
        ("name\tz\tx", r"its fields are separated by '\\t'"),
        (
            "name,latitude,longitude,depth",
            r"latitude -> y, longitude -> x, depth -> z, projected .* with "
            r"rename: \{latitude: y, longitude: x, depth: z\}",
        ),
        ("station,Northing,Easting", r"Northing -> y, Easting -> x"),
    ],
)
def test_a_header_of_another_tool_is_told_what_raygrid_reads(tmp_path, header, hint):
    # A semicolon-separated export, or columns named as other tools name them, were only
    # "the header names no model dim".
    with pytest.raises(InputError, match=r":1: the header names no model dim.*" + hint):
        receivers(tmp_path, f"{header}\nS1,1,2,3\n")


def test_a_csv_entry_renames_another_tools_columns(tmp_path):
    # A station list from another tool (depth, northing, easting, sta), already in the
    # model's coordinates: read as it is, not edited by hand.
    path = tmp_path / "stations.csv"
    path.write_text("sta,northing,easting,depth,elevation\nA1,200,300,5,120\nB2,400,100,0,80\n")
    rename = {"depth": "z", "northing": "y", "easting": "x", "sta": "name"}
    # The warning names the header's line, as the errors do.
    with pytest.warns(InputWarning, match=r"stations\.csv:1: ignoring column\(s\) 'elevation'"):
        points, names = resolve_points(CsvPoints(csv=path, rename=rename), "receiver")
    assert points == [{"z": 5.0, "y": 200.0, "x": 300.0}, {"z": 0.0, "y": 400.0, "x": 100.0}]
    assert names == ["A1", "B2"]
    with pytest.raises(InputError, match=r"stations.csv:1: rename names \['dpth'\], not columns"):
        resolve_points(CsvPoints(csv=path, rename={"dpth": "z"}), "receiver")
    with pytest.raises(
        InputError, match=r"stations.csv:1: rename .* gives two columns the name 'z'"
    ):
        resolve_points(CsvPoints(csv=path, rename={"depth": "z", "elevation": "z"}), "receiver")
    path.write_text("Z,x\n5,100\n")  # an upper-case Z read as the depth it is, once renamed
    assert resolve_points(CsvPoints(csv=path, rename={"Z": "z"}), "receiver")[0] == [
        {"z": 5.0, "x": 100.0}
    ]
    with pytest.raises(ValueError, match="rename"):  # only to dims or the names' column
        CsvPoints(csv=path, rename={"Z": "depth"})
    path.write_text("station_id,x\nA1,100\n")
    assert resolve_points(CsvPoints(csv=path, rename={"station_id": "station"}), "receiver")[1] == [
        "A1"
    ]


def test_a_column_of_another_tool_beside_the_dims_is_named_in_the_warning(tmp_path):
    # "name,depth,x": x is read, depth ignored, and the points then lacked z with no word
    # about the column holding it.
    path = tmp_path / "events.csv"
    path.write_text("name,depth,x\nEV1,500,100\n")
    hint = (
        r"ignoring column\(s\) 'depth'.*'depth' may be z .*rename: \{depth: z\}; a "
        r"DataFrame: \.rename\(columns=\{'depth': 'z'\}\)"
    )
    with pytest.warns(InputWarning, match=hint):
        resolve_points(CsvPoints(csv=path), "receiver")
    path.write_text("name,depth,z,x\nEV1,500,500,100\n")  # z given: depth is only ignored
    with pytest.warns(InputWarning) as said:
        resolve_points(CsvPoints(csv=path), "receiver")
    assert "may be" not in str(said[0].message)


@pytest.mark.parametrize(
    "text, message",
    [
        ("# receivers\n\n", r"receivers.csv has no header line .* only comments and blank"),
        ("# receivers\nz,x,z\n0,1,2\n", r"receivers.csv:2: the header names 'z' twice"),
    ],
    ids=["only-comments", "dim-twice"],
)
def test_a_header_that_cannot_be_read(tmp_path, text, message):
    with pytest.raises(InputError, match=message):
        receivers(tmp_path, text)


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "receivers.csv"
    path.write_bytes("station,z,x\nA,0,10\n\u00e9t\u00e9,0,20\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"receivers.csv:3: not UTF-8 text"):
        resolve_points(CsvPoints(csv=path), "receiver")


def test_extra_columns_are_read_with_a_warning(tmp_path):
    with pytest.warns(InputWarning, match=r"ignoring column\(s\) 'comment'; .* from z, x$"):
        points = receivers(tmp_path, "comment,x,z\nA1,10,0\n")
    assert points == [{"z": 0.0, "x": 10.0}]
    # A mistyped names' column left the points unnamed, with no word on the spelling.
    for column, meant in (("nmae", "name"), ("Stations", "station")):
        with pytest.warns(InputWarning, match=rf"'{column}'; .*; did you mean '{meant}'\?"):
            receivers(tmp_path, f"{column},x,z\nA1,10,0\n")


@pytest.mark.parametrize("name", ["elevation", "Elev_m", "ALTITUDE", "depth (m)", "height"])
def test_an_elevation_column_gets_a_note_on_z(tmp_path, name):
    with pytest.warns(InputWarning) as record:
        receivers(tmp_path, f"station,x,z,{name}\nA1,10,0,250\nA2,20,0,260\n")
    assert len(record) == 1  # once per file, not per row
    message = str(record[0].message)
    assert f"ignoring column(s) '{name}'" in message  # not the station's name: it is used
    assert f"{Z_IS_DEPTH}; '{name}' is not used" in message


@pytest.mark.parametrize(
    "text, message",
    [
        ("Z,X\n0,10\n", "columns 'Z', 'X' are not model dims; did you mean 'z', 'x'?"),
        ("station,z,X\nA1,0,10\n", "column 'X' is not a model dim; did you mean 'x'?"),
    ],
    ids=["both", "one"],
)
def test_a_dim_in_upper_case_is_refused_with_the_name_meant(tmp_path, text, message):
    # Refused, not read: another tool's "Z" is as likely an elevation as a depth.
    with pytest.raises(InputError) as error:
        receivers(tmp_path, "# stations\n" + text)
    refused = str(error.value)
    assert f"receivers.csv:2: {message} (dim names are lower case)" in refused
    on_z = f"{Z_IS_DEPTH}: rename 'Z' to 'z' if it is a depth"
    assert (on_z in refused) == text.startswith("Z")


def test_a_dim_given_in_both_cases_is_not_told_to_rename_into_a_duplicate(tmp_path):
    with pytest.raises(InputError) as error:
        receivers(tmp_path, "z,x,Z\n0,10,-250\n")
    assert (
        "receivers.csv:1: column 'Z' and the dim 'z' differ only by case; drop or rename 'Z'"
    ) in str(error.value)


@pytest.mark.parametrize(
    "sources",
    [
        [{"Z": 0.0, "x": 100.0}],
        {"Z": [0.0], "x": [100.0]},
        pd.DataFrame({"Z": [0.0], "x": [100.0]}),
        xr.Dataset({"Z": ("p", [0.0]), "x": ("p", [100.0])}),
    ],
    ids=["mappings", "dict", "dataframe", "dataset"],
)
def test_python_sources_with_a_dim_in_upper_case_name_the_dim_meant(sources):
    # As a CSV header is told: in Python the message named only the missing dim.
    velocity = constant_model({"z": 5, "x": 11}, spacing=10.0, velocity=2000.0)
    with pytest.raises(InputError, match=r"did you mean 'z' for 'Z'\? \(dim names are lower"):
        traveltimes(velocity, sources)


def test_a_missing_dim_not_given_in_another_case_gets_no_hint():
    velocity = constant_model({"z": 5, "x": 11}, spacing=10.0, velocity=2000.0)
    with pytest.raises(InputError) as error:
        traveltimes(velocity, {"y": [0.0], "x": [100.0]})
    assert str(error.value) == "the sources table has no column for ['z']"


def test_a_column_of_codes_gets_no_note_on_z(tmp_path):
    with pytest.warns(InputWarning) as record:
        receivers(tmp_path, "code,x,z\nA1,10,0\n")
    assert "positive down" not in str(record[0].message)


def model_error(tmp_path: Path, model: str) -> str:
    path = tmp_path / "wf.yaml"
    path.write_text(SMALL.replace("  synthetic: gradient\n  shape: {z: 21, x: 31}\n", model))
    with pytest.raises(InputError) as error:
        read_workflow(path)
    return str(error.value)


def test_a_constant_model_refuses_the_keys_of_other_kinds(tmp_path):
    model = "  synthetic: constant\n  shape: {z: 21, x: 31}\n  top: 3000.0\n  interfaces: [100]\n"
    text = model_error(tmp_path, model)
    assert (
        "wf.yaml:4: model.top: top does not apply to a constant model (top is for gradient "
        "models); a constant model takes shape, spacing and velocity"
    ) in text
    assert "wf.yaml:5: model.interfaces: interfaces does not apply to a constant model" in text


def test_a_gradient_model_refuses_velocities(tmp_path):
    model = "  synthetic: gradient\n  shape: {z: 21, x: 31}\n  velocities: [1500.0, 3000.0]\n"
    text = model_error(tmp_path, model)
    assert (
        "wf.yaml:4: model.velocities: velocities does not apply to a gradient model "
        "(velocities is for layered models); a gradient model takes shape, spacing, top and "
        "bottom"
    ) in text


def test_a_key_of_another_kind_is_refused_whatever_its_value(tmp_path):
    # The value is not checked first: the key itself is the mistake.
    model = "  synthetic: layered\n  shape: {z: 21, x: 31}\n  velocity: -1\n"
    assert "model.velocity: velocity does not apply to a layered model" in model_error(
        tmp_path, model
    )


LAYERED = "  synthetic: layered\n  shape: {z: 21, x: 31}\n"


@pytest.mark.parametrize(
    "keys, message",
    [
        ("", "velocities has 0 value(s), interfaces 0"),
        ("  interfaces: [100.0]\n", "velocities has 0 value(s), interfaces 1"),
        ("  interfaces: [100.0]\n  velocities: [1500.0]\n", "velocities has 1 value(s)"),
    ],
    ids=["neither", "no-velocities", "one-short"],
)
def test_a_layered_model_needs_one_velocity_more_than_interfaces(tmp_path, keys, message):
    # Refused by the schema, at the model's line (it failed only once the model was built).
    text = model_error(tmp_path, LAYERED + keys)
    assert (
        "wf.yaml:1: model: a layered model needs velocities, one more than interfaces (one for "
        "the top layer and one below each interface); " + message
    ) in text


def test_layer_interfaces_must_increase(tmp_path):
    keys = "  interfaces: [100.0, 50.0]\n  velocities: [1500.0, 2500.0, 4000.0]\n"
    text = model_error(tmp_path, LAYERED + keys)
    said = "wf.yaml:1: model: layer interfaces must increase strictly with depth, got [100.0, "
    assert said in text
    # Two equal depths: the layer between them was dropped, unseen.
    with pytest.raises(InputError, match=r"increase strictly with depth, got \[30.0, 30.0\]"):
        layered_model({"z": 11, "x": 3}, 10.0, [30.0, 30.0], [1000.0, 2000.0, 3000.0])
    # A good layered model passes, and builds the layers it names.
    path = tmp_path / "wf.yaml"
    path.write_text(path.read_text().replace("[100.0, 50.0]", "[50.0, 100.0]"))
    velocity = prepare_workflow(read_workflow(path)).velocity
    assert np.unique(velocity.values).tolist() == [1500.0, 2500.0, 4000.0]
    # NaN compares false both ways: it passed the order check and dropped a layer.
    for interfaces in ([30.0, np.nan, 60.0], [np.nan, 30.0], [30.0, np.inf]):
        with pytest.raises(InputError, match="layer interfaces must be finite depths"):
            layered_model({"z": 11, "x": 3}, 10.0, interfaces, [1e3] * (len(interfaces) + 1))
    nan = "  interfaces: [30.0, .nan]\n  velocities: [1500.0, 2500.0, 4000.0]\n"
    assert "wf.yaml:1: model: layer interfaces must be finite depths, got [30.0, nan]" in (
        model_error(tmp_path, LAYERED + nan)
    )


def test_an_interface_that_leaves_a_layer_no_node_is_warned_about_as_such():
    # At the top node (0 m) the warning said "outside the model's depths (0 to 100 m)": 0 is
    # a depth of the model, but its node lies in the layer below, so the top layer is empty.
    with pytest.warns(InputWarning, match=r"at \[0.0\] m leave a layer no node .* layer below"):
        layered_model({"z": 11, "x": 3}, 10.0, [0.0], [1000.0, 2000.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the bottom node lies in the layer below: no warning
        bottom = layered_model({"z": 11, "x": 3}, 10.0, [100.0], [1000.0, 2000.0])
    assert bottom.values[-1, 0] == 2000.0 and bottom.values[-2, 0] == 1000.0


def test_a_float16_model_is_checked_without_overflow():
    # Its largest speed times the extreme speeds' bound overflowed float16: a RuntimeWarning.
    velocity = constant_model({"z": 5, "x": 6}, 10.0, 2000.0).astype(np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid_from_velocity(velocity.assign_attrs(units="m/s"))


def test_a_workflow_is_checked_without_its_model_values(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(SMALL.replace("{z: 21, x: 31}", "{z: 2001, x: 30001}"))  # 480 MB
    prepared = prepare_workflow(read_workflow(path), values=False)
    assert prepared.grid.shape == (2001, 30001) and prepared.grid.spacing == (10.0, 10.0)
    # Nothing held or hashed: the values are a view of the depth profile, not an array.
    assert prepared.grid.slowness is None and prepared.fingerprint is None
    assert prepared.velocity.data.strides[1] == 0 and not prepared.velocity.data.flags.writeable
    # Checked all the same, on one column: the warning names the model's speeds.
    path.write_text(SMALL.replace("gradient\n", "gradient\n  top: 0.5\n  bottom: 4.0\n"))
    with pytest.warns(InputWarning, match="velocities from 0.5 to 4 m/s: no rock is that slow"):
        prepare_workflow(read_workflow(path), values=False)


@pytest.mark.parametrize("path", sorted((ROOT / "workflows").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_workflows_validate_and_their_dumps_validate_again(path):
    workflow = read_workflow(path)
    # The workflow kept in a store is this dump: it holds only the keys its model reads,
    # so that it validates again.
    dumped = json.loads(workflow.model_dump_json())
    assert set(dumped["model"]) == MODEL_KEYS[workflow.model.synthetic]
    assert Workflow.model_validate(dumped).model_dump() == workflow.model_dump()


def test_the_workflow_kept_in_a_store_validates_again(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(SMALL.replace("gradient", "constant"))
    prepared = prepare_workflow(read_workflow(path))
    kept = json.loads(prepared.workflow_json)
    assert set(kept["model"]) == MODEL_KEYS["constant"]
    assert Workflow.model_validate(kept).model_dump() == prepared.workflow.model_dump()


def test_a_decreasing_z_says_to_negate_an_elevation():
    velocity = constant_model({"z": 5, "x": 6}, 10.0)
    elevation = velocity.assign_coords(z=("z", -np.arange(5) * 10.0, {"units": "m"}))
    with pytest.raises(InputError) as error:
        grid_from_velocity(elevation)
    text = str(error.value)
    assert "coordinate 'z' decreases (from 0 to -40 m)" in text
    assert Z_IS_DEPTH in text
    advice = 'model.assign_coords(z=(-model.z).assign_attrs(positive="down")).sortby("z")'
    assert f"negated (depth = -elevation), e.g. {advice}" in text
    # The advice given works: the negated model is valid and the right way up.
    fixed = grid_from_velocity(eval(advice, {"model": elevation}))
    assert fixed.origin[0] == 0.0 and fixed.spacing[0] == 10.0


def test_a_z_marked_positive_up_is_an_elevation_refused():
    # An increasing elevation (-40 to 0 m, CF positive: "up") was read as depth: the model
    # upside down, without a word.
    velocity = constant_model({"z": 5, "x": 6}, 10.0)
    up = {"units": "m", "positive": "up"}
    elevation = velocity.assign_coords(z=("z", np.arange(-4, 1) * 10.0, up))
    with pytest.raises(InputError) as error:
        grid_from_velocity(elevation)
    advice = 'model.assign_coords(z=(-model.z).assign_attrs(positive="down")).sortby("z")'
    assert str(error.value) == (
        "coordinate 'z' is an elevation (its attribute positive: 'up'): raygrid's "
        f"{Z_IS_DEPTH}; negate it, e.g. {advice}; if it holds depths already (negated, the "
        'attribute left behind), set its attribute: model.z.attrs["positive"] = "down"'
    )
    fixed = grid_from_velocity(eval(advice, {"model": elevation}))
    assert fixed.origin[0] == 0.0 and fixed.spacing[0] == 10.0
    # CF's "down" (a depth) and the attribute on another axis are as before.
    grid_from_velocity(velocity.assign_coords(z=velocity.z.assign_attrs(positive="Down")))
    grid_from_velocity(velocity.assign_coords(x=velocity.x.assign_attrs(positive="up")))


def test_an_elevation_renamed_z_is_refused(tmp_path):
    # Renamed z, an axis named height (or one CF calls altitude) was read as depth: the
    # model upside down, "valid workflow" (adversarial review).
    velocity = constant_model({"z": 5, "x": 6}, 10.0)
    heights = {"units": "m", "standard_name": "altitude"}
    up = velocity.rename(z="height").assign_coords(height=("height", np.arange(5) * 10.0, heights))
    up.to_dataset(name="vp").to_netcdf(tmp_path / "up.nc")
    with pytest.raises(InputError, match=r"up.nc: rename \{'height': 'z'\}: 'height' measures up"):
        load_velocity(tmp_path / "up.nc", rename={"height": "z"})
    # Named z already, CF's standard name says it measures up: refused as positive: up is.
    with pytest.raises(InputError, match=r"'z' is an elevation \(its attribute standard_name:"):
        grid_from_velocity(up.rename(height="z"))
    # Marked positive: down, it holds depths: read as they are, renamed or named z.
    down = up.assign_coords(height=up.height.assign_attrs(positive="down"))
    down.to_dataset(name="vp").to_netcdf(tmp_path / "down.nc")
    assert load_velocity(tmp_path / "down.nc", rename={"height": "z"}).dims == ("z", "x")
    grid_from_velocity(down.rename(height="z"))
    # CF's positive holds up or down; anything else is not a depth said.
    sideways = velocity.assign_coords(z=velocity.z.assign_attrs(positive="sideways"))
    with pytest.raises(InputError, match="positive: 'sideways', neither 'down'"):
        grid_from_velocity(sideways)


def test_an_elevation_column_renamed_z_is_warned_about(tmp_path):
    # A column has no attribute to say it holds depths: a warning, the points still read.
    path = tmp_path / "stations.csv"
    path.write_text("name,x,elevation\nA1,10,250\n")
    with pytest.warns(InputWarning, match=r"rename \{'elevation': z\}: 'elevation' is the name"):
        points = _read_csv(path, "receiver", {"elevation": "z"})
    assert points[0][0] == {"z": 250.0, "x": 10.0}


def test_a_z_all_at_or_above_sea_level_is_warned_about_as_a_likely_elevation():
    # The same elevation axis without `positive` increases like a depth: it ran with the
    # model upside down and a "surface" source at z = 0 on its deepest plane.
    velocity = constant_model({"z": 5, "x": 6}, 10.0)
    elevation = velocity.assign_coords(z=("z", np.arange(-4, 1) * 10.0, {"units": "m"}))
    with pytest.warns(InputWarning) as caught:
        grid_from_velocity(elevation)
    assert str(caught[0].message) == (
        f"coordinate 'z' runs from -40 to 0 m, all at or above z = 0: raygrid's {Z_IS_DEPTH}; "
        "if this axis is an elevation, negate it: model.assign_coords(z=(-model.z)"
        '.assign_attrs(positive="down")).sortby("z") (a depth axis marked positive: "down" '
        "is not warned about)"
    )
    # A model reaching above sea level and below it, or starting at 0, is not warned
    # about; nor one marked as depth, nor one checked already (its warnings said then).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for start in (-2, 0):
            z = ("z", np.arange(start, start + 5) * 10.0, {"units": "m"})
            grid_from_velocity(velocity.assign_coords(z=z))
        down = elevation.assign_coords(z=elevation.z.assign_attrs(positive="down"))
        grid_from_velocity(down)
        grid_from_velocity(elevation, check_values=False)


def test_a_workflow_models_warnings_are_said_once_at_its_line_and_before_its_errors(tmp_path):
    # Said at the model's line, once (a file model's z warning came 2 to 4 times a run), at
    # the caller's line (it was contextlib's), and before an error found after it (dropped).
    velocity = constant_model({"z": 5, "x": 6}, 10.0)
    elevation = velocity.assign_coords(z=("z", np.arange(-4, 1) * 10.0, {"units": "m"}))
    elevation.to_dataset(name="vp").to_zarr(tmp_path / "m.zarr", zarr_format=3, consolidated=False)
    path = tmp_path / "wf.yaml"
    synthetic = "  synthetic: gradient\n  shape: {z: 21, x: 31}\n"
    text = SMALL.replace(synthetic, f"  path: {tmp_path}/m.zarr\n")
    path.write_text(text.replace("x: 100.0", "x: 10.0").replace("z: 0.0", "z: -10.0"))
    with pytest.warns(InputWarning) as caught:
        prepare_workflow(read_workflow(path))
    said = [w for w in caught if "coordinate 'z' runs from -40 to 0 m" in str(w.message)]
    assert len(said) == 1 and str(said[0].message).startswith(f"{path}:1: model: ")
    assert said[0].filename == __file__
    elevation[2, 3] = np.nan
    elevation.to_dataset(name="vp").to_zarr(tmp_path / "n.zarr", zarr_format=3, consolidated=False)
    path.write_text(path.read_text().replace("m.zarr", "n.zarr"))
    with pytest.warns(InputWarning, match="coordinate 'z' runs from -40 to 0 m"):
        with pytest.raises(InputError, match="1 bad value"):
            prepare_workflow(read_workflow(path))


def test_a_decreasing_x_is_still_to_be_sorted():
    velocity = constant_model({"z": 5, "x": 6}, 10.0)
    with pytest.raises(InputError) as error:
        grid_from_velocity(velocity.isel(x=slice(None, None, -1)))
    assert str(error.value) == (
        "coordinate 'x' decreases (from 50 to 0 m); sort the model so that it increases "
        '(model.sortby("x"))'
    )


def workflow_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        read_workflow(path)
    return str(error.value)


def test_a_station_name_in_a_point_is_an_unknown_key_not_a_bad_number(tmp_path):
    # It was reported as "sources[0].name: Input should be a valid number".
    text = SMALL.replace("{z: 0.0, x: 100.0}", "{z: 0.0, x: 100.0, name: STA1}")
    message = workflow_error(tmp_path, text)
    assert "wf.yaml:7: sources[0]: unknown key 'name': points are given by model dims only" in (
        message
    )
    assert "valid number" not in message
    grid = SMALL.replace("  - {z: 0.0, x: 100.0}", "  grid: {z: 0.0, station: [1, 2]}")
    assert "wf.yaml:7: sources.grid: unknown key 'station'" in workflow_error(tmp_path, grid)
    # A dim in upper case gets the hint a CSV header gets; a generator's key outside a
    # list is not said to be inside one.
    upper = SMALL.replace("{z: 0.0, x: 100.0}", "{Z: 0.0, x: 100.0}")
    assert "sources[0]: unknown key 'Z': did you mean 'z'? (dim names are lower case" in (
        workflow_error(tmp_path, upper)
    )
    nested = SMALL.replace("  - {z: 0.0, x: 100.0}", "  grid: {z: 0.0, line: [1, 2]}")
    message = workflow_error(tmp_path, nested)
    assert "sources.grid: unknown key 'line': points are given by model dims only" in message


def test_a_line_inside_a_list_of_points_is_explained(tmp_path):
    line = "{line: {start: {z: 0, x: 0}, stop: {z: 0, x: 100}, count: 3}}"
    text = SMALL.replace("  - {z: 0.0, x: 100.0}", f"  - {{z: 0.0, x: 100.0}}\n  - {line}")
    message = workflow_error(tmp_path, text)
    assert (
        "wf.yaml:8: sources[1]: line inside a list: a list holds points only ({z: ..., x: ...}); "
        "a line is the whole sources or receivers entry ({line: ...}); for several lines, "
        "list their points in a CSV file ({csv: ...}) or give a grid ({grid: ...})"
    ) in message


def test_a_line_of_one_point_between_two_places_is_refused(tmp_path):
    line = "  line: {start: {z: 0, x: 0}, stop: {z: 0, x: 100}, count: 1}"
    message = workflow_error(tmp_path, SMALL.replace("  - {z: 0.0, x: 100.0}", line))
    assert "wf.yaml:7: sources.line: count 1 with start and stop apart: give count >= 2" in message
    # One point where start is stop is that point.
    path = tmp_path / "one.yaml"
    path.write_text(SMALL.replace("  - {z: 0.0, x: 100.0}", line.replace("x: 100}", "x: 0}")))
    assert resolve_points(read_workflow(path).sources, "source") == ([{"z": 0.0, "x": 0.0}], None)
    # A grid's range of one value between two places was silently its start.
    ranged = "  grid: {z: 0.0, x: {start: 0, stop: 400, count: 1}}"
    message = workflow_error(tmp_path, SMALL.replace("  - {z: 0.0, x: 100.0}", ranged))
    assert "sources.grid.x: count 1 with start and stop apart: give count >= 2, or one value" in (
        message
    )


def test_sources_at_one_place_are_solved_with_a_warning(tmp_path):
    # Between nodes and within the snapping tolerance of each other: one place.
    listed = "  - {z: 0.0, x: 100.0}\n  - {z: 0.0, x: 120.0}\n  - {z: 0.0, x: 100.0000000001}"
    path = tmp_path / "wf.yaml"
    path.write_text(SMALL.replace("  - {z: 0.0, x: 100.0}", listed))
    with pytest.warns(InputWarning) as record:
        prepared = prepare_workflow(read_workflow(path))
    assert len(prepared.sources) == 3  # kept: a repeat may be meant
    assert str(record[0].message).startswith(
        f"{path}:6: sources: sources 0 and 2 (numbered from 0) are at one place, and 1 "
        "source(s) in all repeat an earlier one"
    )
    velocity = constant_model({"z": 11, "x": 21}, 10.0)
    with pytest.warns(InputWarning, match="sources 1 and 2 .* are at one place") as record:
        times = traveltimes(velocity, {"z": [0.0, 5.0, 5.0], "x": [1.0, 2.0, 2.0]}, radius=2)
    assert record[0].filename == __file__  # the warning points at the caller
    assert times.sizes["source"] == 3
    named = {"name": ["A", "B", "C"], "z": [0.0, 5.0, 5.0], "x": [1.0, 2.0, 2.0]}
    with pytest.warns(InputWarning, match=r"sources 1 'B' and 2 'C' \(numbered from 0\) are at"):
        traveltimes(velocity, named, radius=2)
    quietly(traveltimes, velocity, [{"z": 0.0, "x": 1.0}, {"z": 0.0, "x": 2.0}])


def test_a_csv_file_of_points_is_read_by_the_python_api(tmp_path, monkeypatch):
    # traveltimes(velocity, "stations.csv") was "sources must be a sequence of mappings or
    # a table": the file is read as a workflow's csv: entry, names and warnings alike.
    velocity = constant_model({"z": 11, "x": 21}, 10.0)
    (tmp_path / "st.csv").write_text("name,z,x\nA,0,50\nB,0,150\n")
    monkeypatch.chdir(tmp_path)
    times = traveltimes(velocity, "st.csv", radius=2)
    assert list(times["source"].values) == ["A", "B"]
    expected = traveltimes(velocity, {"name": ["A", "B"], "z": [0, 0], "x": [50, 150]}, radius=2)
    xr.testing.assert_identical(times, expected)
    at = traveltime_at(times, tmp_path / "st.csv", velocity=velocity)
    assert list(at["point"].values) == ["A", "B"] and np.all(np.diag(at.values) == 0.0)
    with pytest.raises(InputError, match="sources given as a path must name a CSV file"):
        traveltimes(velocity, "st.txt")
    with pytest.raises(InputError, match="source CSV file nope.csv does not exist"):
        traveltimes(velocity, "nope.csv")
    # A row outside the model is named by its file and line, as in a workflow.
    (tmp_path / "far.csv").write_text("# stations\nname,z,x\nA,0,50\n\nB,0,9999\n")
    with pytest.raises(InputError, match=r"^source CSV file far.csv:5: source 1 'B' \(numbered"):
        traveltimes(velocity, "far.csv")
    with pytest.raises(InputError, match=r"^point CSV file ~/far.csv:5: point 1 'B'"):
        monkeypatch.setenv("HOME", str(tmp_path))  # read where the table reads it
        traveltime_at(times, "~/far.csv", velocity=velocity)


def test_tables_of_sources_take_what_a_csv_file_takes():
    velocity = constant_model({"z": 11, "x": 21}, 10.0)
    point = {"z": 0.0, "x": 50.0}
    expected = traveltimes(velocity, [point]).values
    # A column that is not a dim is ignored with the CSV file's warning (an elevation with
    # the note on z); it was ignored silently. The station's name is used, not ignored.
    table = pd.DataFrame({"station": ["A"], "z": [0.0], "x": [50.0], "elev": [310.0]})
    with pytest.warns(InputWarning) as record:
        times = traveltimes(velocity, table)
    np.testing.assert_array_equal(times.values, expected)
    assert len(record) == 1 and record[0].filename == __file__
    assert str(record[0].message).startswith(
        "the sources table: ignoring column(s) 'elev'; positions are read from z, x. "
        f"raygrid's {Z_IS_DEPTH}; 'elev' is not used"
    )
    # A pandas Series indexed by dims is one point (it was a list of its values), in
    # traveltime_at as a mapping is; a structured array is a table, as is an object array
    # of mappings (a sequence).
    np.testing.assert_array_equal(quietly(traveltimes, velocity, pd.Series(point)), expected)
    at = {"z": 30.0, "x": 120.0}
    one = traveltime_at(times, pd.Series(at), velocity=velocity)
    assert one.dims == ("source",)
    xr.testing.assert_identical(one, traveltime_at(times, at, velocity=velocity))
    structured = np.array([(0.0, 50.0)], dtype=[("z", float), ("x", float)])
    np.testing.assert_array_equal(quietly(traveltimes, velocity, structured), expected)
    mappings = np.array([point], dtype=object)
    np.testing.assert_array_equal(quietly(traveltimes, velocity, mappings), expected)
    # A list of Series is points as a list of mappings is (it was "must be a mapping",
    # though one Series was a point: adversarial review).
    series = quietly(traveltimes, velocity, [pd.Series(point)])
    np.testing.assert_array_equal(series, expected)
    # A Dataset's coordinates other than its index are columns too; a column named 0 is
    # named, not "unnamed".
    table = xr.Dataset({d: ("s", [v]) for d, v in point.items()}, coords={"elev": ("s", [3.0])})
    with pytest.warns(InputWarning, match=r"ignoring column\(s\) 'elev'"):
        traveltimes(velocity, table.assign_coords(s=[7]))
    with pytest.warns(InputWarning, match=r"ignoring column\(s\) 0; positions"):
        traveltimes(velocity, pd.DataFrame({0: ["A"], "z": [0.0], "x": [50.0]}))
    # Clear refusals where there were TypeErrors or a message about the first number.
    two_dims = xr.Dataset({d: (("a", "b"), [[v, v]]) for d, v in point.items()})
    refusals = [
        (two_dims, "the sources table's column 'z' has 2 dims; a column holds one number"),
        (np.array([[0.0, 50.0]]), "sources given as a NumPy array have no dim names"),
        # Said once, not once a point ("must be a mapping", 20 lines for 20 points).
        ([[0.0, 50.0], (0.0, 60.0)], "sources given as rows of numbers have no dim names"),
        ({"z": ["top"], "x": [50.0]}, "the sources table's column 'z' is not numbers"),
    ]
    for sources, message in refusals:
        with pytest.raises(InputError, match=re.escape(message)):
            traveltimes(velocity, sources)


def test_units_given_for_a_file_that_has_others_are_refused(tmp_path):
    model = constant_model({"z": 5, "x": 6}, 10.0)
    model.to_dataset(name="vp").to_zarr(tmp_path / "m.zarr", zarr_format=3, consolidated=False)
    # Taken, km/s read as m/s would have slowed every time by 1000 without a word.
    with pytest.raises(InputError, match=r"m.zarr: the velocity's units are 'm/s' in the file, "):
        load_velocity(tmp_path / "m.zarr", units="km/s")
    with pytest.raises(InputError, match="coordinate 'z' is in 'm' in the file, not 'km'"):
        load_velocity(tmp_path / "m.zarr", length_unit="km")
    # Where the file is what is wrong, it says how to mend it (nothing else would).
    with pytest.raises(InputError, match=r"model.attrs\['units'\] = 'km/s', then write it"):
        load_velocity(tmp_path / "m.zarr", units="km/s")
    with pytest.raises(InputError, match=r"model\['z'\].attrs\['units'\] = 'km', then write"):
        load_velocity(tmp_path / "m.zarr", length_unit="km")
    same = load_velocity(tmp_path / "m.zarr", units="m/s", length_unit="m")  # no conflict
    assert same.attrs["units"] == "m/s"
    # Units are compared by size, not spelling; a spelling raygrid does not read is the one
    # the option corrects (it could be before, and must still be).
    spelled = constant_model({"z": 5, "x": 6}, 10.0).to_dataset(name="vp")
    spelled["vp"].attrs["units"] = "m s-1"
    spelled["z"].attrs["units"] = "meters"
    spelled.to_zarr(tmp_path / "cf.zarr", zarr_format=3, consolidated=False)
    cf = load_velocity(tmp_path / "cf.zarr", units="m/s", length_unit="m")
    assert cf.attrs["units"] == "m s-1" and cf["z"].attrs["units"] == "meters"
    with pytest.raises(InputError, match=r"the velocity's units are 'm s-1' in the file, not"):
        load_velocity(tmp_path / "cf.zarr", units="km/s")
    spelled["vp"].attrs["units"] = "m/second"
    spelled["x"].attrs["units"] = "metros"
    spelled.to_zarr(tmp_path / "odd.zarr", zarr_format=3, consolidated=False)
    with pytest.raises(InputError, match="velocity has units 'm/second'"):
        load_velocity(tmp_path / "odd.zarr")
    odd = load_velocity(tmp_path / "odd.zarr", units="m/s", length_unit="m")
    assert odd.attrs["units"] == "m/s" and odd["x"].attrs["units"] == "m"
    # A unit given that raygrid does not read is refused whatever the file holds: where the
    # file had its own, "m/second" was taken and silently ignored.
    for given in ({"units": "m/second"}, {"length_unit": "metros"}):
        for name in ("m.zarr", "odd.zarr"):
            with pytest.raises(InputError, match=r"(units|length_unit) '\w+/?\w*' is not a unit"):
                load_velocity(tmp_path / name, **given)


def test_coordinates_without_units_take_the_unit_given(tmp_path):
    bare = constant_model({"z": 5, "x": 6}, 10.0).to_dataset(name="vp")
    for d in ("z", "x"):
        bare[d].attrs = {}
    bare.to_zarr(tmp_path / "bare.zarr", zarr_format=3, consolidated=False)
    with pytest.raises(InputError, match=r"coordinate 'z' has no 'units' attribute: give the "):
        load_velocity(tmp_path / "bare.zarr")
    grid = grid_from_velocity(load_velocity(tmp_path / "bare.zarr", length_unit="km"))
    assert grid.length_unit == "km" and grid.spacing == (10.0, 10.0)
    # And in a workflow, with the velocity's units.
    bare["vp"].attrs = {}
    bare.to_zarr(tmp_path / "bare2.zarr", zarr_format=3, consolidated=False)
    path = tmp_path / "wf.yaml"
    model = f"  path: {tmp_path / 'bare2.zarr'}\n  units: m/s\n  length_unit: km\n"
    path.write_text(SMALL.replace("  synthetic: gradient\n  shape: {z: 21, x: 31}\n", model))
    path.write_text(path.read_text().replace("x: 100.0", "x: 10.0"))
    grid = prepare_workflow(read_workflow(path)).grid
    assert grid.length_unit == "km" and grid.shape == (5, 6)


def test_a_npy_model_in_a_workflow_may_name_its_dims(tmp_path):
    np.save(tmp_path / "v.npy", np.full((31, 21), 2000.0))  # x first
    model = (
        f"  path: {tmp_path / 'v.npy'}\n  units: m/s\n  length_unit: m\n  spacing: 10.0\n"
        "  dims: [x, z]\n"
    )
    path = tmp_path / "wf.yaml"
    path.write_text(SMALL.replace("  synthetic: gradient\n  shape: {z: 21, x: 31}\n", model))
    prepared = prepare_workflow(read_workflow(path))
    assert prepared.grid.shape == (21, 31)
    path.write_text(path.read_text().replace("[x, z]", "[x, x]"))
    with pytest.raises(InputError, match=r"dims \('x', 'x'\) for a 2D array"):
        prepare_workflow(read_workflow(path))
    path.write_text(path.read_text().replace("[x, x]", "[x, q]"))
    assert "wf.yaml:6: model.dims[1]" in workflow_error(tmp_path, path.read_text())


def test_a_model_both_synthetic_and_from_a_file_is_named_as_such(tmp_path):
    # It was "model.path: Extra inputs are not permitted (unknown key)".
    text = SMALL.replace("  synthetic: gradient\n", "  synthetic: gradient\n  path: m.zarr\n")
    assert "wf.yaml:1: model: a model is synthetic or read from a file (path), not both" in (
        workflow_error(tmp_path, text)
    )


def test_a_file_unit_key_on_a_synthetic_model_says_what_unit_it_is_in(tmp_path):
    # After the warning that velocities of 5 to 8 m/s are no rock's, `units: km/s` was an
    # "unknown key", though the README lists model.units (for files).
    text = SMALL.replace("  synthetic: gradient\n", "  synthetic: gradient\n  units: km/s\n")
    assert (
        "wf.yaml:1: model: units applies to a model read from a file (path), not to a "
        "synthetic one: a synthetic model's velocities (velocity, top, bottom, velocities) "
        "are in m/s and its spacing and interfaces in m"
    ) in workflow_error(tmp_path, text)
    text = text.replace("  units: km/s\n", "  units: km/s\n  length_unit: km\n")
    assert "model: units, length_unit apply to a model read from a file" in (
        workflow_error(tmp_path, text)
    )
    grouped = SMALL.replace("  synthetic: gradient\n", "  synthetic: gradient\n  group: vp\n")
    assert "model: group applies to a model read from a file" in workflow_error(tmp_path, grouped)


def test_a_cluster_file_and_a_workflow_given_for_each_other_are_named(tmp_path):
    # A cluster file read as a workflow gave ten "missing key" and "unknown key" lines; a
    # workflow read as a cluster file "cluster must be one of ...".
    from raygrid.pipeline.clusterfile import read_cluster

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("cluster: local\nn_workers: 2\n")
    with pytest.raises(InputError) as error:
        read_workflow(cluster)
    assert str(error.value) == (
        f"{cluster} is a cluster file (a cluster key and none of a workflow's sections), not "
        "a workflow: give the workflow here and the cluster file with --cluster"
    )
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(SMALL)
    with pytest.raises(InputError) as error:
        read_cluster(workflow)
    assert str(error.value) == (
        f"{workflow} is a workflow (it has grid, model, outputs, sources and no cluster key), "
        "not a cluster file: give it as the workflow, and a cluster file (such as "
        "configs/local.yaml) with --cluster"
    )


def csv_receivers_error(tmp_path: Path, text: str) -> str:
    """What preparing the small workflow says with its receivers in a CSV file of ``text``."""
    (tmp_path / "receivers.csv").write_text(text)
    path = tmp_path / "wf.yaml"
    path.write_text(SMALL + f"receivers: {{csv: {tmp_path}/receivers.csv}}\n")
    with pytest.raises(InputError) as error:
        prepare_workflow(read_workflow(path))
    return str(error.value)


def test_a_csv_point_outside_the_model_is_named_by_its_line(tmp_path):
    # It was named "receiver 1 (numbered from 0)" only: a file's rows are found by line.
    assert (
        f"receivers: receiver CSV file {tmp_path}/receivers.csv:5: receiver 1 (numbered from "
        "0): receiver x=99999 is outside the model"
    ) in csv_receivers_error(tmp_path, "# stations\nz,x\n\n0,10\n0,99999\n")


def test_every_point_outside_the_model_is_named_at_once(tmp_path):
    # Only the first was: a station list with several outside took a run per station.
    said = csv_receivers_error(tmp_path, "name,z,x\nA,0,10\nB,0,3100\nC,-5,20\n")
    lines = said.splitlines()
    assert lines[0].endswith(
        f"receiver CSV file {tmp_path}/receivers.csv:3: receiver 1 'B' (numbered from 0): "
        "receiver x=3100 is outside the model: x spans [0, 300] m"
    )
    assert lines[1] == "1 more receiver(s) cannot be placed:"
    assert lines[2].startswith(
        f"  receiver CSV file {tmp_path}/receivers.csv:4: receiver 2 'C' (numbered from 0): "
        "receiver z=-5 is outside the model"
    )
    # Many: the first ten named, then how many more.
    velocity = constant_model({"z": 5, "x": 6}, 10.0)
    with pytest.raises(InputError) as error:
        traveltimes(velocity, [{"z": 0.0, "x": 100.0 + k} for k in range(13)], radius=2)
    lines = str(error.value).splitlines()
    assert lines[0].startswith("source 0 (numbered from 0): source x=100 is outside")
    assert lines[1] == "12 more source(s) cannot be placed:"
    assert lines[2].startswith("  source 1 (numbered from 0): source x=101 is outside")
    assert lines[10].startswith("  source 9 (numbered from 0)") and lines[11] == "  and 3 more"


def test_yaml_as_written_elsewhere_exponents_merge_keys_and_home(tmp_path, monkeypatch):
    # 1e1 was text to PyYAML ("not a valid number"), `<<: *anchor` "not valid YAML", and a
    # store under ~ was made half in a folder named "~" and half in the home folder.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "wf.yaml"
    path.write_text(
        "model: {synthetic: gradient, shape: {z: 21, x: 31}, spacing: 1e1, top: 5e2,"
        " bottom: 4.0e+3}\n"
        "sources:\n  - &s {z: 0.0, x: 0.0}\n  - {<<: *s, x: 100.0}\n"
        "outputs: {store: ~/surveys/s.zarr}\n"
    )
    workflow = read_workflow(path)
    assert (workflow.model.spacing, workflow.model.top, workflow.model.bottom) == (10.0, 500, 4000)
    assert workflow.sources == [{"z": 0.0, "x": 0.0}, {"z": 0.0, "x": 100.0}]
    assert workflow.outputs.store == tmp_path / "home" / "surveys" / "s.zarr"
    # A key given twice is still refused, beside a merge key; empty tiles are no tiles.
    path.write_text(path.read_text().replace("{<<: *s, x: 100.0}", "{<<: *s, x: 1.0, x: 2.0}"))
    with pytest.raises(InputError, match="key 'x' is given twice"):
        read_workflow(path)
    path.write_text(SMALL + "compute: {tiles: {}}\n")
    with pytest.raises(InputError, match="compute.tiles: Dictionary should have at least 1 item"):
        read_workflow(path)


def test_yaml_numbers_are_read_as_yaml_1_2_reads_them(tmp_path):
    # PyYAML reads YAML 1.1: `x: 0300` was octal, 192, and `z: 021` 17, silently (a CSV file
    # reads 300), and `radius: 1:30` base 60, 90: refused as a radius nobody wrote.
    path = tmp_path / "wf.yaml"
    written = SMALL.replace("{z: 21, x: 31}", "{z: 021, x: 0x1F}").replace("x: 100.0", "x: 0100")
    path.write_text(written)
    workflow = read_workflow(path)
    assert dict(workflow.model.shape) == {"z": 21, "x": 31}
    assert workflow.sources == [{"z": 0.0, "x": 100.0}]
    path.write_text(written.replace("radius: 2", "radius: 1:30"))
    with pytest.raises(InputError, match=r"wf.yaml:5: grid.radius: Input should be a valid int"):
        read_workflow(path)


def _lopsided():
    # 10 m along z and 80 m along x at one radius: the star reaches 8 times further in x.
    velocity = constant_model({"z": 41, "x": 6}, 10.0)
    return velocity.assign_coords(x=("x", np.arange(6) * 80.0, {"units": "m"}))


@pytest.mark.parametrize(
    "call",
    [
        lambda: traveltimes(_lopsided(), [{"z": 0.0, "x": 0.0}], radius=2),
        lambda: traveltime(_lopsided(), {"z": 0.0, "x": 0.0}, radius=2),
        lambda: traveltime(
            constant_model({"z": 5, "x": 6}, 10.0).assign_attrs(units="km/s"), {"z": 0, "x": 0}
        ),
        lambda: traveltime(constant_model({"z": 5, "x": 6}, 10.0), {"z": 0, "x": 0}, client=1),
        lambda: traveltime_at(
            traveltime(
                constant_model({"z": 5, "x": 6}, 10.0), {"z": 0.5, "x": 0.5}, radius=2
            ).drop_vars(["source_z", "source_x"]),
            {"z": 1.5, "x": 1.5},
            velocity=constant_model({"z": 5, "x": 6}, 10.0),
        ),
    ],
    ids=["lopsided-traveltimes", "lopsided-traveltime", "units", "client", "no-source"],
)
def test_input_warnings_point_at_the_users_line(call):
    # Each site counted its own stacklevel, and traveltimes' lopsided warning pointed one
    # frame above the caller; now the first frame outside raygrid is taken, however deep.
    with pytest.warns(InputWarning) as record:
        call()
    assert [r.filename for r in record] == [__file__] * len(record)


def test_an_axis_the_star_spans_whole_is_not_called_lopsided():
    # A 3D model two nodes thick in y: radius 1 there reaches all of it. The warning told
    # the user to take y: 3, which the radius check then refused.
    grid = grid_from_velocity(constant_model({"z": 21, "y": 2, "x": 21}, 10.0))
    assert grid.lopsided_star((3, 1, 3)) is None
    wide = constant_model({"z": 21, "y": 2, "x": 21}, 10.0)
    wide = grid_from_velocity(wide.assign_coords(x=("x", np.arange(21) * 40.0, {"units": "m"})))
    said = wide.lopsided_star((3, 1, 3))
    assert "120 m along x but only 30 m along z" in said
    assert said.endswith("radius: {z: 12, y: 1, x: 3}")
    # A suggestion never exceeds the model: z has 21 nodes, so at most 20.
    assert wide.lopsided_star((1, 1, 6)).endswith("radius: {z: 20, y: 1, x: 6}")


def test_an_elevation_axis_and_other_tools_columns_are_named_in_the_hints():
    # dims elev, northing, easting: the hint renamed the two horizontal axes and left elev
    # out; a DataFrame of lon and depth got no hint where the same CSV file got one.
    model = constant_model({"z": 5, "y": 6, "x": 7}, 10.0, 2000.0)
    upward = model.rename(z="elev", y="northing", x="easting")
    upward["elev"].attrs["positive"] = "up"  # as a CF file marks it
    with pytest.raises(InputError, match=r"'elev' measures up where raygrid's z is depth") as said:
        traveltime(upward, {"z": 0.0, "y": 0.0, "x": 0.0})
    renames = "velocity.rename({'northing': 'y', 'easting': 'x'})"
    to_z = (
        "velocity.assign_coords({'elev': (-velocity['elev']).assign_attrs(positive='down')})"
        ".rename({'elev': 'z'}).sortby('z')"
    )
    assert renames in str(said.value) and to_z in str(said.value)
    fixed = eval(to_z, {"velocity": eval(renames, {"velocity": upward})})  # as it says
    traveltime(fixed, {"z": 0.0, "y": 0.0, "x": 0.0}, radius=2)  # (positive up: refused)
    import pandas as pd

    table = pd.DataFrame({"lon": [10.0], "lat": [20.0], "depth": [0.0]})
    with pytest.raises(InputError, match=r"no column for \['z', 'y', 'x'\]; columns are the "
                       r"model's coordinates.*lon -> x, lat -> y, depth -> z"):  # fmt: skip
        traveltimes(model, table, radius=2)


def test_a_files_axes_named_otherwise_are_renamed(tmp_path):
    # A NetCDF file with axes depth, northing, easting: the error's hint was Python only
    # (velocity.rename), and a workflow had no way to read it.
    model = constant_model({"z": 6, "y": 5, "x": 7}, 10.0, 2000.0)
    model = model.rename(z="depth", y="northing", x="easting")
    model.to_dataset(name="vp").to_netcdf(tmp_path / "m.nc")
    hint = r"rename\(\{'depth': 'z', 'northing': 'y', 'easting': 'x'\}\) \(load_velocity\("
    with pytest.raises(InputError, match=hint + r"..., rename=...\), model.rename in a workflow"):
        grid_from_velocity(load_velocity(tmp_path / "m.nc"))
    names = {"depth": "z", "northing": "y", "easting": "x"}
    velocity = load_velocity(tmp_path / "m.nc", rename=names)
    assert velocity.dims == ("z", "y", "x") and velocity["x"].attrs["units"] == "m"
    path = tmp_path / "wf.yaml"
    path.write_text(
        f"model:\n  path: {tmp_path / 'm.nc'}\n  rename: {{depth: z, northing: y, easting: x}}\n"
        "sources:\n  - {z: 0.0, y: 10.0, x: 20.0}\noutputs:\n  store: o.zarr\n"
    )
    assert prepare_workflow(read_workflow(path)).grid.dims == ("z", "y", "x")
    bad = {
        "names \\['height'\\], not axes of the velocity": {"height": "z", **names},
        "must give axes the names z, y or x, each once": {**names, "northing": "z"},
    }
    for message, rename in bad.items():
        with pytest.raises(InputError, match=message):
            load_velocity(tmp_path / "m.nc", rename=rename)
    # A coordinate already named z along another axis (an elevation): said, not xarray's
    # bare "the new name 'z' conflicts".
    elevation = model.assign_coords(z=("easting", np.zeros(7), {"units": "m"}))
    elevation.to_dataset(name="vp").to_netcdf(tmp_path / "e.nc")
    with pytest.raises(InputError, match=r"the name 'z' of another coordinate of the file: drop"):
        load_velocity(tmp_path / "e.nc", rename=names)
    np.save(tmp_path / "m.npy", np.full((3, 4), 2000.0))
    with pytest.raises(InputError, match="rename is for Zarr and NetCDF models"):
        load_velocity(tmp_path / "m.npy", rename=names, spacing=10.0, length_unit="m", units="m/s")


@pytest.mark.parametrize("kind", ["nc", "zarr"])
def test_a_model_in_a_group_is_read_by_its_group(tmp_path, kind):
    # A file holding P and S models in groups: not reachable by name before (the root has
    # no variable, and the refusal said only "holds no data variable").
    path = tmp_path / f"models.{kind}"
    vp = constant_model({"z": 6, "x": 7}, 10.0, 2000.0)
    vs = constant_model({"z": 6, "x": 7}, 10.0, 1150.0)
    write = {"nc": "to_netcdf", "zarr": "to_zarr"}[kind]
    plain = {"consolidated": False} if kind == "zarr" else {}
    getattr(xr.Dataset(attrs={"title": "P and S"}), write)(path, **plain)
    getattr(vp.to_dataset(name="vp"), write)(path, group="models/p", mode="a", **plain)
    getattr(vs.to_dataset(name="vs"), write)(path, group="models/s", mode="a", **plain)
    for group, speed in (("models/p", 2000.0), ("/models/s", 1150.0)):
        velocity = load_velocity(path, group=group)
        assert float(velocity.max()) == speed
    groups = r"its groups with variables: /models/p \['vp'\], /models/s \['vs'\] \(group="
    for given, said in (
        ({}, "holds no data variable: no velocity model; " + groups),
        ({"group": "models/q"}, "has no group 'models/q'; " + groups),
        ({"variable": "vs"}, "has no variable 'vs'; it has \\[\\]; " + groups),
        # The group read is not listed as another to read.
        ({"group": "models/p", "variable": "vs"}, r"\(group 'models/p'\) has no variable 'vs'; "
         r"it has \['vp'\]; its groups with variables: /models/s \['vs'\] \("),
    ):  # fmt: skip
        with pytest.raises(InputError, match=said):
            load_velocity(path, **given)
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(
        f"model:\n  path: {path}\n  group: models/s\n"
        "sources:\n  - {z: 0.0, x: 20.0}\noutputs:\n  store: o.zarr\n"
    )
    grid = prepare_workflow(read_workflow(workflow)).grid
    assert float(grid.slowness.min()) == 1 / 1150.0
    if kind == "zarr":  # a group that is there but not xarray's: not "no group"
        import zarr

        zarr.open_group(path, mode="a").create_group("raw").create_array("vp", shape=(3, 4),
                                                                         dtype="f8")  # fmt: skip
        with pytest.raises(InputError, match=r"cannot open it as Zarr \(KeyError: .*dimension"):
            load_velocity(path, group="raw")
    np.save(tmp_path / "m.npy", np.full((3, 4), 2000.0))
    with pytest.raises(InputError, match="group is for Zarr and NetCDF models"):
        load_velocity(tmp_path / "m.npy", group="p", spacing=10.0, length_unit="m", units="m/s")


def test_units_are_read_in_any_case_and_spelt_out():
    # "kilometers", "KM" and "KM/S" were refused ("expected one of [...]") where "meters"
    # passed; a NetCDF file's attributes are written every way.
    model = constant_model({"z": 11, "x": 21}, 0.5, 3.5).assign_attrs(units="km/s")
    model = model.assign_coords(
        z=model.z.assign_attrs(units="km"), x=model.x.assign_attrs(units="km")
    )
    source = {"z": 0.0, "x": 2.3}
    expected = traveltime(model, source, radius=3)
    for length, speed in (
        ("kilometers", "KM/S"),
        (" Kilometre ", "kilometres/second"),
        ("KM", "km/sec"),
        ("km", "km s**-1"),  # UDUNITS' exponents, and pint's text
        ("km", "km s^-1"),
        ("kilometer", "kilometer / second"),
    ):
        spelt = model.assign_attrs(units=speed).assign_coords(
            z=model.z.assign_attrs(units=length), x=model.x.assign_attrs(units=length)
        )
        np.testing.assert_array_equal(traveltime(spelt, source, radius=3).values, expected.values)
    # Axes spelt apart (a file's z in KM, its x given length_unit="km") are one unit: the
    # field's own lookups were refused ("the field's x coordinates ... are not the model's").
    mixed = model.assign_coords(x=model.x.assign_attrs(units="KM"))
    field = traveltime(mixed, source, radius=3, predecessors=True)
    at = traveltime_at(field, {"z": 0.35, "x": 1.01}, velocity=model)
    assert at == traveltime_at(expected, {"z": 0.35, "x": 1.01}, velocity=model, radius=3)
    with pytest.raises(InputError, match="coordinate 'z' has units 'furlongs'"):
        traveltime(model.assign_coords(z=model.z.assign_attrs(units="furlongs")), source, radius=3)


def test_a_model_part_of_which_no_medium_has_is_warned_about():
    # A fill value for "no data" (1e-20 m/s) in an otherwise 2 km/s model ran silently:
    # times of 1e301 s, or, in float32, nodes "not reached" (the slowness is inf there).
    model = constant_model({"z": 11, "x": 21}, 10.0, 2000.0)
    filled = model.copy(data=model.values.copy())
    filled[5, 5] = 1e-20
    said = (
        r"part of the model is slower than 1 m/s or faster than 100000 m/s, which no medium "
        r"is \(a fill value for no data\?\)"
    )
    with pytest.warns(InputWarning, match=said):
        traveltime(filled, {"z": 0.0, "x": 0.0}, radius=2)
    fast = model.copy(data=model.values.copy())
    fast[5, 5] = 1e6
    with pytest.warns(InputWarning, match="which no medium is"):
        traveltime(fast, {"z": 0.0, "x": 0.0}, radius=2)
    air_to_mantle = model.copy(data=np.linspace(330.0, 14_000.0, model.size).reshape(model.shape))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traveltime(air_to_mantle, {"z": 0.0, "x": 0.0}, radius=2)


def test_a_dims_column_mistyped_is_guessed(tmp_path):
    # name,z,xx: "ignoring 'xx'", then every row refused for missing x, nothing said of xx.
    (tmp_path / "r.csv").write_text("name,z,xx\nA,0,100\nB,0,200\n")
    model = constant_model({"z": 11, "x": 31}, 10.0, 2000.0)
    with pytest.warns(InputWarning, match=r"ignoring column\(s\) 'xx'; .*did you mean 'x' for "):
        with pytest.raises(InputError, match="missing: \\['x'\\]"):
            traveltimes(model, tmp_path / "r.csv", radius=2)


def test_tables_with_a_dim_mistyped_or_one_the_model_lacks_are_told_so():
    # A table of z, xx: "no column for ['x']", nothing said of xx (the hint was written
    # but never reached); a table with y on a 2D model was taken, every point put on the
    # section, with "did you mean 'y' for 'y'?" (a tomography review), where one point with
    # a y was refused.
    model = constant_model({"z": 11, "x": 31}, 10.0, 2000.0)
    times = traveltimes(model, [{"z": 0.0, "x": 0.0}], radius=2)
    with pytest.raises(InputError, match=r"no column for \['x'\]; did you mean 'x' for 'xx'\?"):
        traveltime_at(times, {"z": [1.0], "xx": [3.0]}, velocity=model)
    flat = r"has a column for \['y'\]: the model is 2D \('z', 'x'\); leave out \['y'\]"
    with pytest.raises(InputError, match="the points table " + flat):
        traveltime_at(times, {"z": [1.0], "y": [0.0], "x": [3.0]}, velocity=model)
    with pytest.raises(InputError, match="the sources table " + flat):
        traveltimes(model, pd.DataFrame({"z": [0.0], "y": [5.0], "x": [3.0]}))
    stations = xr.Dataset({d: ("station", [1.0]) for d in "zyx"})
    with pytest.raises(InputError, match="the points' Dataset " + flat):
        traveltime_at(times, stations, velocity=model)
    with pytest.raises(InputError, match=r"leave out \['y'\]"):
        traveltime_at(times, {"z": 1.0, "y": 0.0, "x": 3.0}, velocity=model)  # as before
    # A store's receivers given back as points: told how to rename them (a tomography
    # review: "no column for ['z', 'x']" only); renamed, read along their own dim.
    receivers = xr.Dataset({f"receiver_{d}": ("receiver", [1.0, 2.0]) for d in "zx"})
    with pytest.raises(InputError, match=r"it has the receivers' \['receiver_z', 'receiver_x'\]: "
                       r'rename them \(\.rename\(receiver_z="z", receiver_x="x"\)\)'):  # fmt: skip
        traveltime_at(times, receivers, velocity=model)
    renamed = receivers.rename(receiver_z="z", receiver_x="x")
    assert traveltime_at(times, renamed, velocity=model).dims == ("source", "receiver")
    # A scalar y coordinate (stations cut from a 3D set with .sel) is not a column.
    cut = xr.Dataset({d: ("station", [1.0]) for d in "zx"}, coords={"y": 250.0})
    with pytest.warns(InputWarning, match="ignoring column"):
        traveltimes(model, cut, radius=2)
    assert traveltime_at(times, cut, velocity=model).dims == ("source", "station")
    # A column named Y is not taken for a y the model lacks ("did you mean 'y' for 'Y'?"
    # sent users to a column refused next).
    with pytest.warns(InputWarning) as said:
        traveltime_at(times, pd.DataFrame({"z": [1.0], "x": [3.0], "Y": [1.0]}), velocity=model)
    assert "did you mean" not in str(said[0].message)


@pytest.mark.parametrize("given, said", [("null", "None"), ("[1]", "[1]"), ("5", "5")])
def test_a_section_that_is_not_a_mapping_is_said_so(tmp_path, given, said):
    # pydantic said "Input should be a valid dictionary or instance of FileModel": a class
    # the workflow's writer never sees.
    path = tmp_path / "wf.yaml"
    path.write_text(SMALL.replace("grid:\n  radius: 2\n", f"grid: {given}\n"))
    with pytest.raises(
        InputError,
        match=rf"wf.yaml:4: grid: must be a mapping of keys to values, got {re.escape(said)}$",
    ):
        read_workflow(path)
