"""Points named by a ``name`` (or ``station``) column: coordinates to select results by."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

import raygrid.pipeline as rg
from raygrid.pipeline.cli import main
from raygrid.pipeline.errors import InputError
from raygrid.pipeline.inspect import describe
from raygrid.pipeline.positions import CsvPoints, resolve_points
from raygrid.pipeline.workflow import prepare_workflow, read_workflow, run_workflow

from clusters import in_process_client

VELOCITY = rg.constant_model({"z": 11, "x": 21}, 10.0)
POINTS = [{"z": 0.0, "x": 50.0}, {"z": 20.0, "x": 130.0}]


def quietly(function, *args, **kwargs):
    """Call ``function``, failing on any warning (a name column is used, not ignored)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return function(*args, **kwargs)


ZS, XS, AB = [0.0, 20.0], [50.0, 130.0], ["A", "B"]


@pytest.mark.parametrize(
    "sources",
    [
        pd.DataFrame({"name": AB, "z": ZS, "x": XS}),
        pd.DataFrame({"z": ZS, "x": XS}, index=pd.Index(AB, name="station")),
        {"station": AB, "z": ZS, "x": XS},
        xr.Dataset({"z": ("s", ZS), "x": ("s", XS)}, coords={"name": ("s", AB)}),
        # Stations along a dim of their own, its index the names: they were dropped.
        xr.Dataset({"z": ("station", ZS), "x": ("station", XS)}, coords={"station": AB}),
        [{"name": "A", **POINTS[0]}, {"name": "B", **POINTS[1]}],
    ],
    ids=["column", "index", "dict", "dataset", "dataset-index", "mappings"],
)
def test_named_sources_are_the_source_coordinate(sources):
    unnamed = rg.traveltimes(VELOCITY, POINTS)
    named = quietly(rg.traveltimes, VELOCITY, sources)
    assert named.indexes["source"].tolist() == ["A", "B"]
    xr.testing.assert_identical(named.drop_vars("source"), unnamed)
    xr.testing.assert_identical(named.sel(source="B").drop_vars("source"), unnamed.isel(source=1))


def test_named_points_are_the_point_coordinate_and_positions_have_units():
    field = rg.traveltimes(VELOCITY, POINTS)
    table = pd.DataFrame({"name": ["R1", "R2"], "z": [35.0, 100.0], "x": [41.0, 200.0]})
    at = quietly(rg.traveltime_at, field, table, velocity=VELOCITY)
    assert at.indexes["point"].tolist() == ["R1", "R2"]
    assert at["point_x"].attrs["units"] == "m"
    unnamed = rg.traveltime_at(field, table.drop(columns="name"), velocity=VELOCITY)
    np.testing.assert_array_equal(at.sel(point="R2").values, unnamed.isel(point=1).values)
    # One named point: the name stays, as a scalar coordinate.
    one = quietly(rg.traveltime_at, field, {"name": "R1", "z": 35.0, "x": 41.0}, velocity=VELOCITY)
    assert one.dims == ("source",) and one["point"].item() == "R1"
    # Station numbers are names too, as their digits.
    numbered = rg.traveltimes(VELOCITY, {"name": [101, 102], "z": [0.0, 0.0], "x": [0.0, 10.0]})
    assert numbered.indexes["source"].tolist() == ["101", "102"]


@pytest.mark.parametrize(
    "sources, message",
    [
        ([{"name": "A", **POINTS[0]}, POINTS[1]], "point 1 (from 0) of the sources has no name"),
        (
            [{"name": "A", **POINTS[0]}, {"name": " A ", **POINTS[1]}],
            "point 1 (from 0) of the sources has the name 'A' again (first at point 0 (from "
            "0) of the sources): names label the points",
        ),
        (
            {"name": ["A", np.nan], "z": [0.0, 0.0], "x": [0.0, 1.0]},
            "the sources table's row 1 (from 0) has no name",
        ),
        (
            {"name": ["A", "  "], "z": [0.0, 0.0], "x": [0.0, 1.0]},
            "the sources table's row 1 (from 0) has a blank name",
        ),
        (
            {"name": ["A", 2.5], "z": [0.0, 0.0], "x": [0.0, 1.0]},
            "the sources table's row 1 (from 0) has a name that is not text: 2.5",
        ),
    ],
)
def test_names_missing_blank_or_repeated_are_refused(sources, message):
    with pytest.raises(InputError) as refused:
        rg.traveltimes(VELOCITY, sources)
    assert message in str(refused.value)


def test_a_csv_file_names_its_points_and_its_errors_name_the_line(tmp_path):
    path = tmp_path / "stations.csv"
    path.write_text("# a station list\nname,z,x,elevation\nSTA1,0,10,310\n\nSTA2 ,5,20,305\n")
    with pytest.warns(rg.errors.InputWarning, match=r"ignoring column\(s\) 'elevation'"):
        points, names = resolve_points(CsvPoints(csv=path), "receiver")
    assert points == [{"z": 0.0, "x": 10.0}, {"z": 5.0, "x": 20.0}]
    assert names == ["STA1", "STA2"]
    path.write_text("station,z,x\nSTA1,0,10\n# moved\nSTA1,5,20\n")
    with pytest.raises(InputError) as refused:
        resolve_points(CsvPoints(csv=path), "receiver")
    assert f"{path}:4: has the name 'STA1' again (first at receiver CSV file {path}:2):" in (
        str(refused.value)
    )
    path.write_text("station,z,x\n,0,10\n")
    with pytest.raises(InputError, match=r"stations.csv:2: has a blank name"):
        resolve_points(CsvPoints(csv=path), "receiver")


def test_a_yaml_point_with_a_name_is_told_where_names_go(tmp_path):
    path = tmp_path / "wf.yaml"
    spec = {
        "model": {"synthetic": "constant", "shape": {"z": 11, "x": 21}, "spacing": 10.0},
        "sources": [{"name": "S1", "z": 0.0, "x": 0.0}],
        "outputs": {"store": str(tmp_path / "s.zarr")},
    }
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match="to name stations, give them in a CSV file with a name"):
        read_workflow(path)


def named_workflow(directory: Path, receivers: str) -> Path:
    (directory / "shots.csv").write_text("name,z,x\nS1,0,0\nS2,0,100\nS3,30,200\n")
    (directory / "stations.csv").write_text(receivers)
    spec = {
        "model": {"synthetic": "gradient", "shape": {"z": 11, "x": 21}, "spacing": 10.0},
        "grid": {"radius": 3},
        "sources": {"csv": "shots.csv"},
        "receivers": {"csv": "stations.csv"},
        "outputs": {"store": "s.zarr", "receiver_table": True, "rays": True},
    }
    path = directory / "wf.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_survey_store_is_selected_by_name_and_a_renamed_station_is_another_workflow(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = named_workflow(tmp_path, "station,z,x\nSTA1,100,50\nSTA2,60,170\n")
    with in_process_client() as client:
        store = run_workflow(read_workflow(path), client=client)
        assert store.indexes["source"].tolist() == ["S1", "S2", "S3"]
        assert store.indexes["receiver"].tolist() == ["STA1", "STA2"]
        # The same numbers as the API's, found by name.
        prepared = prepare_workflow(read_workflow(path))
        field = rg.traveltimes(prepared.velocity, prepared.sources, radius=3)
        at = rg.traveltime_at(field, prepared.receivers, velocity=prepared.velocity)
        np.testing.assert_array_equal(
            store["receiver_traveltime"].sel(source="S2", receiver="STA2").values,
            at.isel(source=1, point=1).values,
        )
        # traveltime_at on the store keeps the sources' names.
        assert rg.traveltime_at(store, {"z": 0.0, "x": 10.0}).indexes["source"].tolist() == [
            "S1", "S2", "S3",
        ]  # fmt: skip
        text = describe(tmp_path / "s.zarr")
        assert "sources done: 3 / 3, named S1 ... S3" in text
        assert "receivers: 2, named STA1 ... STA2" in text
        # The fingerprint, which is not the file's sha256 (it was labelled so).
        assert "workflow fingerprint: " in text and "sha256" not in text
        # A name is part of what the store holds: renamed, the rerun is refused by name.
        path = named_workflow(tmp_path, "station,z,x\nSTA1,100,50\nSTA9,60,170\n")
        with pytest.raises(InputError, match="what differs is the receivers' names"):
            run_workflow(read_workflow(path), client=client)
    # Pictures of a source chosen by name, or by number; an unknown name is refused.
    runner = CliRunner()
    result = runner.invoke(main, ["plot", "s.zarr", "--source", "S3", "--source", "0"])
    assert result.exit_code == 0, result.output
    written = result.output.replace(str(tmp_path) + "/", "")
    assert "wrote s-source2-S3.png" in written and "wrote s-source0-S1.png" in written
    # From Python, an integer is a number even where a station has its digits for a name.
    from raygrid.pipeline.inspect import source_numbers

    numbered = xr.Dataset(coords={"source": ("source", np.array(["1", "0"], dtype=object))})
    assert source_numbers(numbered, [0, "0", "5"]) == [0, 1, 5]
    # Spaces around a name or number are not its own; a number is plain digits (int()
    # took " 1" for 1 beside a source named "1", and "1_0" for 10).
    assert source_numbers(numbered, [" 1", "0 ", " 5 "]) == [0, 1, 5]
    for text in ("1_0", "+1", "1.0"):
        with pytest.raises(InputError, match=f"source '{re.escape(text)}' is neither a source"):
            source_numbers(numbered, [text])
    result = runner.invoke(main, ["plot", "s.zarr", "--source", "S7"])
    assert result.exit_code != 0
    assert "source 'S7' is neither a source number nor a source's name" in result.output


def test_a_pictures_file_name_carries_a_safe_name_cut_short(tmp_path):
    from raygrid.pipeline.inspect import PICTURE_NAME, picture_name

    assert picture_name("s", 2, "S3") == "s-source2-S3.png"
    assert picture_name("s", 0, None) == "s-source0.png"
    assert picture_name("s", 1, "a/b c") == "s-source1-a_b_c.png"
    long = picture_name("s", 3, "L" * 300)  # "File name too long" after it was drawn
    assert long == f"s-source3-{'L' * PICTURE_NAME}.png"
    (tmp_path / f".{long}.tmp").write_bytes(b"")  # with a temporary's prefix and suffix


def test_an_unnamed_workflow_keeps_its_fingerprint():
    # Names are fingerprinted only where given: stores made before points had names still
    # resume. The digest of this workflow as it was before names (2026-11-24).
    spec = {
        "model": {"synthetic": "constant", "shape": {"z": 11, "x": 21}, "spacing": 10.0},
        "grid": {"radius": 3},
        "sources": [{"z": 0.0, "x": 0.0}],
        "receivers": [{"z": 100.0, "x": 200.0}],
        "outputs": {"store": "s.zarr"},
    }
    prepared = prepare_workflow(rg.workflow.Workflow.model_validate(spec))
    assert prepared.names == {}
    assert prepared.fingerprint == FINGERPRINT_BEFORE_NAMES


FINGERPRINT_BEFORE_NAMES = "e8820405085882ec875aa5b63a5087f1f1323bf349d77dec296dd0bf40a5c358"


def test_one_radius_written_per_axis_is_the_same_workflow():
    # radius: {z: 3, x: 3} is radius 3, and a store made with one resumes with the other.
    spec = {
        "model": {"synthetic": "constant", "shape": {"z": 11, "x": 21}, "spacing": 10.0},
        "grid": {"radius": {"x": 3, "z": 3}},
        "sources": [{"z": 0.0, "x": 0.0}],
        "receivers": [{"z": 100.0, "x": 200.0}],
        "outputs": {"store": "s.zarr"},
    }
    per_axis = prepare_workflow(rg.workflow.Workflow.model_validate(spec))
    assert per_axis.fingerprint == FINGERPRINT_BEFORE_NAMES  # as radius: 3
    spec["grid"]["radius"] = {"z": 3, "x": 2}
    assert prepare_workflow(rg.workflow.Workflow.model_validate(spec)).fingerprint != (
        FINGERPRINT_BEFORE_NAMES
    )
