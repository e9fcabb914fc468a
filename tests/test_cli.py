"""The real `raygrid` command: the quickstart end to end, and bad workflows."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

import raygrid.pipeline as rg

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "workflows" / "quickstart.yaml"


def raygrid(*args, cwd):
    """Run the installed console script as a user would."""
    exe = shutil.which("raygrid", path=str(Path(sys.executable).parent)) or "raygrid"
    return subprocess.run([exe, *map(str, args)], cwd=cwd, capture_output=True, text=True)


def test_quickstart_writes_store_and_png(tmp_path):
    run = raygrid("run", QUICKSTART, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "solved 1 source(s)" in run.stdout
    store = tmp_path / "quickstart-output" / "quickstart.zarr"
    png = tmp_path / "quickstart-output" / "quickstart.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dataset = xr.open_zarr(store, consolidated=False)
    spec = yaml.safe_load(QUICKSTART.read_text())
    assert dataset["traveltime"].dims == ("source", "z", "x")
    assert dataset.attrs["raygrid_version"] == rg.__version__
    # The stored field is the API's result for the same inputs, exactly.
    velocity = rg.gradient_model(spec["model"]["shape"], 10.0, 500.0, 4000.0)
    expected = rg.traveltime(velocity, spec["sources"][0], radius=5)
    np.testing.assert_array_equal(dataset["traveltime"].isel(source=0).values, expected.values)
    # One ray per receiver, ending at the receiver with the receiver's traveltime.
    assert dataset.sizes["ray"] == len(spec["receivers"])
    for ray, receiver in enumerate(spec["receivers"]):
        last = int(dataset["ray_start"][ray] + dataset["ray_count"][ray]) - 1
        assert float(dataset["ray_x"][last]) == receiver["x"]
        assert float(dataset["ray_time"][last]) == pytest.approx(
            float(dataset["receiver_traveltime"][0, ray]), rel=1e-12
        )
    # A second run refuses to overwrite, unless asked.
    again = raygrid("run", QUICKSTART, cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert raygrid("run", QUICKSTART, "--overwrite", cwd=tmp_path).returncode == 0


def write_workflow(tmp_path, **changes):
    spec = yaml.safe_load(QUICKSTART.read_text())
    spec["model"]["shape"] = {"z": 21, "x": 31}
    spec["sources"] = [{"z": 0.0, "x": 150.0}]
    spec["receivers"] = [{"z": 200.0, "x": 10.0}, {"z": 100.0, "x": 290.0}]
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            spec[section][field] = value
        else:
            spec[section] = value
    path = tmp_path / "workflow.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"grid__radious": 3}, "grid.radious: Extra inputs are not permitted"),
        ({"grid__radius": "five"}, "grid.radius"),
        ({"model": {"path": "missing.zarr"}}, "missing.zarr does not exist"),
        ({"sources": [{"z": -50.0, "x": 10.0}]}, "source z=-50 is outside the model"),
        ({"receivers": [{"z": 10.0, "x": 9999.0}]}, "receiver x=9999 is outside the model"),
        ({"grid__weights": "linear"}, "grid.weights"),
        ({"extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_bad_workflow_fails_cleanly_and_writes_nothing(tmp_path, changes, message):
    path = write_workflow(tmp_path, **changes)
    run = raygrid("run", path, cwd=tmp_path)
    assert run.returncode == 2
    assert message in run.stderr
    assert "workflow.yaml" in run.stderr or "outside" in run.stderr or "exist" in run.stderr
    assert not (tmp_path / "quickstart-output").exists()


def test_bad_units_in_model_file(tmp_path):
    velocity = rg.constant_model({"z": 5, "x": 5}, 10.0, 2000.0).assign_attrs(units="ft/s")
    velocity.to_dataset(name="vp").to_zarr(tmp_path / "m.zarr", zarr_format=3, consolidated=False)
    path = write_workflow(tmp_path, model={"path": "m.zarr"}, grid={"radius": 2})
    run = raygrid("run", path, cwd=tmp_path)
    assert run.returncode == 2 and "velocity has units 'ft/s'" in run.stderr
    assert not (tmp_path / "quickstart-output").exists()


def test_validate(tmp_path):
    assert raygrid("validate", QUICKSTART, cwd=tmp_path).returncode == 0
    bad = write_workflow(tmp_path, grid__radious=3)
    run = raygrid("validate", bad, cwd=tmp_path)
    assert run.returncode == 2 and "radious" in run.stderr
    assert raygrid("validate", tmp_path / "nope.yaml", cwd=tmp_path).returncode == 2


def test_version():
    run = raygrid("--version", cwd=ROOT)
    assert run.returncode == 0 and rg.__version__ in run.stdout
