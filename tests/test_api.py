"""The public API's contract: outputs, attributes, units, dims, models and files."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import raygrid.pipeline as rg
from raygrid.pipeline.options import check_options, unused_settings


@pytest.fixture(scope="module")
def model():
    velocity = rg.gradient_model({"z": 21, "x": 31}, 10.0, 1000.0, 3000.0)
    return rg.checkerboard(velocity, size=50.0, amplitude=0.1)


def test_traveltime_dataarray_and_attrs(model):
    field = rg.traveltime(model, {"z": 0.0, "x": 150.0}, radius={"z": 2, "x": 3})
    assert field.name == "traveltime"
    assert field.dims == ("z", "x")
    assert field.attrs["units"] == "s"
    assert field.attrs["radius_z"] == 2 and field.attrs["radius_x"] == 3
    assert field.attrs["weights"] == "exact"
    assert field.attrs["precision"] == "float64"
    assert field.attrs["raygrid_version"] == rg.__version__
    assert "Dijkstra" in field.attrs["method"]
    assert field.attrs["star_offsets"] == 24
    np.testing.assert_array_equal(field["x"], model["x"])
    assert float(field.sel(z=0.0, x=150.0)) == 0.0


def test_predecessor_dataset(model):
    result = rg.traveltime(model, {"z": 0.0, "x": 150.0}, radius=2, predecessors=True)
    assert set(result.data_vars) == {"traveltime", "predecessor", "star_offset", "velocity"}
    assert result["predecessor"].dtype == np.int16
    assert int(result["predecessor"].sel(z=0.0, x=150.0)) == -1
    assert (result["predecessor"].values >= 0).sum() == model.size - 1


def test_a_predecessor_dataset_saved_to_zarr_and_reopened_traces_the_same_rays(model, tmp_path):
    # Its "axis" labels were NumPy "<U1", which Zarr v3 has no specification for: every
    # to_zarr of a result warned UnstableSpecificationWarning.
    result = rg.traveltime(model, {"z": 0.0, "x": 100.0}, predecessors=True, radius=3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*does not have a Zarr V3 specification")
        result.to_zarr(tmp_path / "rays.zarr", zarr_format=3, consolidated=False)
    reopened = xr.open_zarr(tmp_path / "rays.zarr", consolidated=False)
    assert list(reopened["axis"].values) == ["z", "y", "x"]
    for receiver in ({"z": 150.0, "x": 10.0}, {"z": 33.3, "x": 177.7}):
        ray, again = rg.raypath(result, receiver), rg.raypath(reopened, receiver)
        assert ray.identical(again)


def test_units_km_equal_m(model):
    in_km = model.copy() / 1000.0
    in_km.attrs = {"units": "km/s"}
    in_km = in_km.assign_coords(
        z=("z", model["z"].values / 1000, {"units": "km"}),
        x=("x", model["x"].values / 1000, {"units": "km"}),
    )
    a = rg.traveltime(model, {"z": 0.0, "x": 150.0}, radius=3)
    b = rg.traveltime(in_km, {"z": 0.0, "x": 0.15}, radius=3)
    np.testing.assert_allclose(b.values, a.values, rtol=1e-13)


def test_dim_order_does_not_matter():
    velocity = rg.gradient_model({"z": 7, "y": 6, "x": 8}, 10.0, 1000.0, 2000.0)
    a = rg.traveltime(velocity, {"z": 10.0, "y": 20.0, "x": 30.0}, radius=2)
    b = rg.traveltime(
        velocity.transpose("x", "z", "y"), {"z": 10.0, "y": 20.0, "x": 30.0}, radius=2
    )
    assert b.dims == ("z", "y", "x")
    np.testing.assert_array_equal(a.values, b.values)


def test_a_section_of_a_3d_model_keeps_where_it_was_cut():
    # v3.sel(y=...) solved in 2D: the result dropped the scalar y, so where it lies.
    velocity = rg.gradient_model({"z": 7, "y": 6, "x": 8}, 10.0, 1000.0, 2000.0)
    section = velocity.sel(y=20.0)
    result = rg.traveltime(section, {"z": 10.0, "x": 30.0}, radius=2, predecessors=True)
    assert result["traveltime"].dims == ("z", "x") and float(result["y"]) == 20.0
    ray = rg.raypath(result, {"z": 60.0, "x": 70.0})
    assert ray.attrs["traveltime"] == float(rg.traveltime_at(result, {"z": 60.0, "x": 70.0}))
    fields = rg.traveltimes(section, {"z": 0.0, "x": [0.0, 70.0]}, radius=2)
    assert float(fields["y"]) == 20.0 and fields.sizes["source"] == 2


def test_anisotropic_spacing_and_mean_rule():
    velocity = rg.constant_model({"z": 11, "x": 16}, {"z": 5.0, "x": 20.0}, 1500.0)
    radius = {"z": 4, "x": 1}  # an even reach: radius 3 would be warned about (4 times longer)
    exact = rg.traveltime(velocity, {"z": 0.0, "x": 0.0}, radius=radius)
    mean = rg.traveltime(velocity, {"z": 0.0, "x": 0.0}, radius=radius, weights="mean")
    # In a constant model both rules give slowness x length.
    np.testing.assert_allclose(exact.values, mean.values, rtol=1e-13)
    assert float(exact.sel(z=50.0, x=0.0)) == pytest.approx(50.0 / 1500.0, rel=1e-14)
    assert float(exact.sel(z=0.0, x=300.0)) == pytest.approx(300.0 / 1500.0, rel=1e-14)


def test_mean_rule_reaches_the_solver_and_the_rays():
    # A constant model cannot tell the rules apart: a checkerboard does. The pipeline's
    # field is the kernel's Dijkstra under MEAN, and rays re-add MEAN legs.
    from raygrid.kernels import MEAN, dijkstra, forward_star
    from raygrid.pipeline.grid import grid_from_velocity
    from raygrid.pipeline.solve import source_seeds

    velocity = rg.checkerboard(
        rg.gradient_model({"z": 15, "x": 17}, 10.0, 1000.0, 2500.0), 30.0, 0.3
    )
    source = {"z": 0.0, "x": 45.0}
    mean = rg.traveltime(velocity, source, radius=3, weights="mean", predecessors=True)
    exact = rg.traveltime(velocity, source, radius=3)
    grid = grid_from_velocity(velocity)
    star = forward_star(grid.radius3(3))
    nodes, times = source_seeds(grid, star, grid.to_index(source))
    expected, _ = dijkstra(
        grid.slowness, np.array(grid.spacing3), star, grid.flat(nodes), times, rule=MEAN
    )
    np.testing.assert_array_equal(mean["traveltime"].values, expected.reshape(grid.shape))
    assert not np.array_equal(mean["traveltime"].values, exact.values)
    on_node = {"z": 140.0, "x": 160.0}
    assert rg.raypath(mean, on_node).attrs["traveltime"] == float(mean["traveltime"].sel(on_node))
    off_node = {"z": 101.0, "x": 33.0}
    at = float(rg.traveltime_at(mean, off_node))
    assert rg.raypath(mean, off_node).attrs["traveltime"] == at
    assert at != float(
        rg.traveltime_at(rg.traveltime(velocity, source, radius=3, predecessors=True), off_node)
    )


def test_float32(model):
    a = rg.traveltime(model, {"z": 0.0, "x": 150.0}, radius=3)
    b = rg.traveltime(model, {"z": 0.0, "x": 150.0}, radius=3, precision="float32")
    assert b.dtype == np.float32 and b.attrs["precision"] == "float32"
    np.testing.assert_allclose(b.values, a.values, rtol=2e-6)


def test_auto_backend_is_cpu(model):
    field = rg.traveltime(model, {"z": 0.0, "x": 150.0}, radius=2, backend="auto")
    assert field.attrs["backend"] == "cpu"


def test_synthetic_models():
    layered = rg.layered_model({"z": 11, "x": 5}, 10.0, [35.0, 72.0], [1500.0, 2500.0, 4000.0])
    np.testing.assert_array_equal(
        layered.isel(x=0).values[[0, 3, 4, 7, 8, 10]], [1500, 1500, 2500, 2500, 4000, 4000]
    )
    gradient = rg.gradient_model({"z": 5, "x": 3}, 10.0, 500.0, 900.0)
    np.testing.assert_allclose(gradient.isel(x=1).values, [500, 600, 700, 800, 900])
    board = rg.checkerboard(rg.constant_model({"z": 4, "x": 4}, 10.0, 1000.0), 20.0, 0.1)
    assert set(np.unique(board.values)) == {900.0, 1100.0}
    for velocity in (layered, gradient, board):
        rg.grid_from_velocity(velocity)  # every synthetic model is valid input
        # z is depth, and says so as files should (CF), for other tools reading it saved.
        assert velocity["z"].attrs == {"units": "m", "positive": "down"}
        assert velocity["x"].attrs == {"units": "m"}


def test_load_velocity_formats(tmp_path, model):
    zarr_path = tmp_path / "model.zarr"
    model.to_dataset(name="vp").to_zarr(zarr_path, zarr_format=3, consolidated=False)
    netcdf_path = tmp_path / "model.nc"
    model.to_dataset(name="vp").to_netcdf(netcdf_path)
    npy_path = tmp_path / "model.npy"
    np.save(npy_path, model.values)
    from_zarr = rg.load_velocity(zarr_path)
    from_netcdf = rg.load_velocity(netcdf_path, "vp")
    from_npy = rg.load_velocity(npy_path, units="m/s", length_unit="m", spacing=10.0)
    for loaded in (from_zarr, from_netcdf, from_npy):
        xr.testing.assert_allclose(loaded.reset_coords(drop=True), model.reset_coords(drop=True))
    expected = rg.traveltime(model, {"z": 0.0, "x": 150.0}, radius=2)
    np.testing.assert_array_equal(
        rg.traveltime(from_zarr, {"z": 0.0, "x": 150.0}, radius=2).values, expected.values
    )


def test_load_velocity_checks_files_chunk_by_chunk(tmp_path, model):
    """Zarr and NetCDF models stay file-backed after validation, and a bad value in one
    chunk is still found and located."""
    import dask.array as da

    chunked = model.chunk({"z": 7, "x": 9})
    chunked.to_dataset(name="vp").to_zarr(tmp_path / "m.zarr", zarr_format=3, consolidated=False)
    model.to_dataset(name="vp").to_netcdf(tmp_path / "m.nc")
    assert isinstance(rg.load_velocity(tmp_path / "m.zarr", "vp").data, da.Array)
    # NetCDF and .npy (memory-mapped) stay lazily indexed (a tiled solve chunks them by its
    # tiles): not in memory.
    assert not rg.load_velocity(tmp_path / "m.nc", "vp").variable._in_memory
    np.save(tmp_path / "m.npy", model.values)
    npy = {"units": "m/s", "length_unit": "m", "spacing": 10.0}
    assert not rg.load_velocity(tmp_path / "m.npy", **npy).variable._in_memory
    bad = model.copy()
    bad[10, 20] = np.nan
    z, x = float(bad["z"][10]), float(bad["x"][20])
    bad.chunk({"z": 7, "x": 9}).to_dataset(name="vp").to_zarr(
        tmp_path / "bad.zarr", zarr_format=3, consolidated=False
    )
    bad.to_dataset(name="vp").to_netcdf(tmp_path / "bad.nc")
    np.save(tmp_path / "bad.npy", bad.values)
    for path in (tmp_path / "bad.zarr", tmp_path / "bad.nc", tmp_path / "bad.npy"):
        with pytest.raises(rg.InputError, match=f"1 bad value.*z={z:g}, x={x:g}"):
            rg.load_velocity(path, **npy) if path.suffix == ".npy" else rg.load_velocity(path, "vp")


def _written(model: xr.DataArray, path: Path) -> None:
    """``model`` written to ``path`` as its suffix says (a tomography's iteration)."""
    if path.suffix == ".zarr":
        model.to_dataset(name="vp").to_zarr(path, mode="w", zarr_format=3, consolidated=False)
    elif path.suffix == ".nc":
        model.to_dataset(name="vp").to_netcdf(path)
    else:
        np.save(path, model.values)


@pytest.mark.parametrize("suffix", [".zarr", ".nc", ".npy"])
def test_a_result_keeps_its_files_model_as_it_was_solved_on(tmp_path, model, suffix):
    # A tomography's next iteration rewrites the model's file: the result kept the lazy
    # array, and its rays moved with the new file (9 % at 10 % faster), silently. A .npy or
    # NetCDF model (indexed lazily without dask) was kept lazy after Zarr's was mended.
    path = tmp_path / f"it{suffix}"
    _written(model, path)
    npy = {"spacing": 10.0, "length_unit": "m", "units": "m/s"}
    loaded = rg.load_velocity(path, **npy) if suffix == ".npy" else rg.load_velocity(path, "vp")
    result = rg.traveltime(loaded, {"z": 0.0, "x": 150.0}, radius=2, predecessors=True)
    assert result["velocity"].variable._in_memory  # read once, for the solve and the result
    receiver = {"z": 200.0, "x": 140.0}
    before = rg.raypath(result, receiver)
    loaded.close()  # (a NetCDF file open is locked against the rewrite)
    _written(model * 1.1, path)
    xr.testing.assert_identical(rg.raypath(result, receiver), before)
    assert float(rg.traveltime_at(result, receiver)) == before.attrs["traveltime"]


def test_a_path_under_home_is_read_as_a_workflows_is(tmp_path, model, monkeypatch):
    # Workflows read ~ as the home folder; load_velocity and open_survey took it literally:
    # a store a workflow wrote to ~/s.zarr "did not exist" to open_survey("~/s.zarr").
    monkeypatch.setenv("HOME", str(tmp_path))
    _written(model, tmp_path / "m.nc")
    assert rg.load_velocity("~/m.nc", "vp").identical(rg.load_velocity(tmp_path / "m.nc", "vp"))
    with pytest.raises(rg.InputError, match=f"{tmp_path / 's.zarr'}"):
        rg.open_survey("~/s.zarr")


def test_a_netcdf_models_close_closes_its_file(tmp_path, model):
    # The model is a variable of the dataset opened: its close() closed nothing, and the
    # next iteration's rewrite of the file was refused ("Permission denied", HDF5's lock).
    path = tmp_path / "it.nc"
    _written(model, path)
    loaded = rg.load_velocity(path, "vp")
    rg.traveltime(loaded, {"z": 0.0, "x": 150.0}, radius=2)
    loaded.close()
    _written(model * 1.1, path)
    assert float(rg.load_velocity(path, "vp")[0, 0]) == float(model[0, 0] * 1.1)


def test_a_npy_model_is_checked_a_box_at_a_time_never_read_whole(tmp_path, model, monkeypatch):
    # np.load read the whole array into memory: a cube larger than memory failed there.
    import dask

    from raygrid.pipeline.io import NpyArray

    np.save(tmp_path / "m.npy", model.values)
    reads = []
    original = NpyArray._read

    def recorded(self, key):
        reads.append(key)
        return original(self, key)

    monkeypatch.setattr(NpyArray, "_read", recorded)
    with dask.config.set({"array.chunk-size": "1KiB"}):  # 128 values a chunk
        loaded = rg.load_velocity(tmp_path / "m.npy", units="m/s", length_unit="m", spacing=10.0)
    sizes = [np.empty(model.shape)[key].size for key in reads]
    assert len(sizes) > 4 and max(sizes) <= 128, sizes
    assert sum(sizes) >= model.size  # every value was checked
    np.testing.assert_array_equal(loaded.values, model.values)  # read on demand, all of it
    # A solve reads the file once (it was checked, then read again to be converted).
    reads.clear()
    source = {"z": 0.0, "x": 150.0}
    result = rg.traveltime(loaded, source, radius=2, predecessors=True)
    assert sum(np.empty(model.shape)[key].size for key in reads) == model.size
    # A ray off a lazy model reads the blocks along it, not the whole model (twice).
    from raygrid.pipeline import nodevalues

    monkeypatch.setattr(nodevalues, "BLOCK", 4)  # 2D blocks of 8^2 nodes: several here
    chunked = result.assign(velocity=loaded.chunk({"z": 7, "x": 8}))
    reads.clear()
    ray = rg.raypath(chunked, {"z": 200.0, "x": 140.0})
    assert 0 < sum(np.empty(model.shape)[key].size for key in reads) < model.size
    xr.testing.assert_identical(ray, rg.raypath(result, {"z": 200.0, "x": 140.0}))


def test_a_bad_value_is_located_without_shuffling_the_model(tmp_path, model, caplog):
    # With a cluster up, flattening a chunked model to find its bad node made Dask shuffle
    # it between the workers (six warnings) to name one node.
    from clusters import in_process_client

    bad = model.copy()
    bad[10, 20], bad[12, 3] = -1.0, np.nan  # in blocks (1, 2) and (1, 0): the second first
    bad.chunk({"z": 7, "x": 9}).to_dataset(name="vp").to_zarr(
        tmp_path / "bad.zarr", zarr_format=3, consolidated=False
    )
    z, x = float(bad["z"][12]), float(bad["x"][3])
    with in_process_client(), caplog.at_level("WARNING"):
        with pytest.raises(
            rg.InputError, match=f"2 bad value.*the first found is nan at z={z:g}, x={x:g}"
        ):
            rg.load_velocity(tmp_path / "bad.zarr", "vp")
    assert not [r for r in caplog.records if "shuffle" in r.name], caplog.text


def test_a_client_without_tiles_is_said_to_be_unused(model):
    # It was ignored, unsaid: the source was solved in this process all the same.
    with pytest.warns(rg.InputWarning, match=r"client is for tiled solves \(tiles=...\)"):
        field = rg.traveltime(model, {"z": 0.0, "x": 0.0}, radius=2, client=object())
    np.testing.assert_array_equal(field, rg.traveltime(model, {"z": 0.0, "x": 0.0}, radius=2))


def test_settings_a_named_backend_does_not_use_are_said(model):
    source = [{"z": 0.0, "x": 0.0}]
    expected = rg.traveltimes(model, source, radius=1)
    with pytest.warns(rg.InputWarning, match=r"batch=4 is for the CUDA pull solver: this solve "
                      r"\(backend='cpu', algorithm='dijkstra'\) does not use it"):  # fmt: skip
        field = rg.traveltimes(model, source, radius=1, batch=np.int64(4))
    np.testing.assert_array_equal(field, expected)
    # On CUDA (said before the solve, so the text is checked without one).
    pull = check_options("exact", "cuda", "float64")
    assert unused_settings(pull, "cuda", 1, 2) == (
        "threads=2 is for the CPU backend: this solve (backend='cuda', algorithm='pull') "
        "does not use it"
    )
    assert unused_settings(pull, "cuda", 8, None) == ""
    near_far = check_options("exact", "cuda", "float64", "near-far")
    assert unused_settings(near_far, "cuda", 2, 2) == (
        "batch=2 is for the CUDA pull solver and threads=2 is for the CPU backend: this "
        "solve (backend='cuda', algorithm='near-far') does not use them"
    )
    # "auto" leaves the backend open: settings for either are expected.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rg.traveltimes(model, source, radius=1, batch=2, threads=2, backend="auto")


def test_load_velocity_errors(tmp_path, model):
    with pytest.raises(rg.InputError, match="does not exist"):
        rg.load_velocity(tmp_path / "missing.zarr")
    (tmp_path / "model.txt").write_text("1 2 3")
    with pytest.raises(rg.InputError, match="unknown model format"):
        rg.load_velocity(tmp_path / "model.txt")
    np.save(tmp_path / "m.npy", model.values)
    with pytest.raises(rg.InputError, match="has no coordinates: give its spacing"):
        rg.load_velocity(tmp_path / "m.npy", units="m/s")
    with pytest.raises(rg.InputError, match="m.npy: velocity has no 'units'"):
        rg.load_velocity(tmp_path / "m.npy", spacing=10.0, length_unit="m")
    # Taken as metres, a spacing meant in km made every time 1000 times too small, silently.
    with pytest.raises(
        rg.InputError,
        match=r"m.npy: a .npy model's or array's spacing has no unit: give "
        r"it \(length_unit= in Python, model.length_unit in a workflow\), m or km",
    ):
        rg.load_velocity(tmp_path / "m.npy", spacing=1.0, units="km/s")
    with pytest.raises(rg.InputError, match="length_unit 'feet' is not a unit raygrid reads"):
        rg.load_velocity(tmp_path / "m.npy", spacing=1.0, units="km/s", length_unit="feet")
    in_km = rg.load_velocity(tmp_path / "m.npy", spacing=1.0, units="km/s", length_unit="km")
    assert in_km["x"].attrs["units"] == in_km["z"].attrs["units"] == "km"
    with pytest.raises(rg.InputError, match=r"m.npy: spacing is given per dim .*missing \['x'\]"):
        rg.load_velocity(tmp_path / "m.npy", units="m/s", length_unit="m", spacing={"z": 10.0})
    with pytest.raises(rg.InputError, match=r"m.npy: origin .*unknown \['y'\]"):
        rg.load_velocity(
            tmp_path / "m.npy", units="m/s", length_unit="m", spacing=10.0, origin={"y": 1.0}
        )
    with pytest.raises(rg.InputError, match=r"dims \('z', 'y', 'x'\) for a 2D array"):
        rg.load_velocity(
            tmp_path / "m.npy", units="m/s", length_unit="m", spacing=10.0, dims=("z", "y", "x")
        )
    with pytest.raises(rg.InputError, match=r"m.npy: variable 'vp' names a variable of a Zarr"):
        rg.load_velocity(
            tmp_path / "m.npy", "vp", units="m/s", length_unit="m", spacing=10.0
        )  # was ignored
    shifted = rg.load_velocity(
        tmp_path / "m.npy", units="m/s", length_unit="m", spacing=10.0, origin={"x": 5.0}
    )
    assert float(shifted["x"][0]) == 5.0 and float(shifted["z"][0]) == 0.0
    # One origin for every dim, as one spacing: a workflow's origin: 0 (the README's
    # default) was refused as "not a valid dictionary".
    from raygrid.pipeline.workflow import FileModel

    for origin in (0, 5.0):
        model_file = FileModel(
            path=tmp_path / "m.npy", units="m/s", length_unit="m", spacing=10.0, origin=origin
        )
        everywhere = model_file.build()
        assert float(everywhere["x"][0]) == float(everywhere["z"][0]) == origin
    with pytest.raises(rg.InputError, match=r"spacing is given per dim .*missing \['x'\]"):
        rg.gradient_model({"z": 5, "x": 4}, {"z": 10.0}, 1000.0, 2000.0)
    two = xr.Dataset({"vp": model, "vs": model / 2})
    two.to_zarr(tmp_path / "two.zarr", zarr_format=3, consolidated=False)
    with pytest.raises(rg.InputError, match=r"name the velocity \(variable= in Python, model.v"):
        rg.load_velocity(tmp_path / "two.zarr")
    with pytest.raises(rg.InputError, match="has no variable 'rho'"):
        rg.load_velocity(tmp_path / "two.zarr", "rho")
    xr.Dataset().to_zarr(tmp_path / "empty.zarr", zarr_format=3, consolidated=False)
    with pytest.raises(rg.InputError, match="empty.zarr holds no data variable"):
        rg.load_velocity(tmp_path / "empty.zarr")
    # A Zarr store is a Zarr store whatever its folder is called, v2 or v3.
    for version in (2, 3):
        model.to_zarr(tmp_path / f"v{version}", zarr_format=version, consolidated=False)
        loaded = rg.load_velocity(tmp_path / f"v{version}")
        np.testing.assert_array_equal(loaded.values, model.values)


def test_traveltimes_many_sources_on_threads(model):
    sources = [{"z": 0.0, "x": 150.0}, {"z": 95.5, "x": 12.3}, {"z": 200.0, "x": 300.0}]
    many = rg.traveltimes(model, sources, radius=3, threads=2, precompute=True)
    assert many.dims == ("source", "z", "x")
    np.testing.assert_array_equal(many["source_x"], [150.0, 12.3, 300.0])
    for i, source in enumerate(sources):
        one = rg.traveltime(model, source, radius=3)
        np.testing.assert_array_equal(many.isel(source=i).values, one.values)
    # A table of columns works too.
    table = rg.traveltimes(model, {"z": [0.0, 95.5], "x": [150.0, 12.3]}, radius=3)
    np.testing.assert_array_equal(table.values, many.values[:2])
    for threads in (0, -1, 2.5, True):
        with pytest.raises(rg.InputError, match="threads must be a positive integer"):
            rg.traveltimes(model, sources, radius=3, threads=threads)


def test_synthetic_model_mistakes_are_caught():
    base = rg.gradient_model({"z": 5, "x": 4}, 10.0, 1000.0, 2000.0)
    for size in (0.0, -10.0, float("nan")):
        with pytest.raises(rg.InputError, match="checkerboard size must be a finite positive"):
            rg.checkerboard(base, size)
    km = base.assign_coords(z=base["z"] / 1000, x=base["x"] / 1000)
    km["z"].attrs["units"] = km["x"].attrs["units"] = "km"
    assert rg.checkerboard(km, 0.02).attrs["checkerboard"] == "0.02 km, +-0.05"
    # A size in another unit: one or two cubes, or cubes finer than the nodes, unsaid.
    with pytest.warns(rg.InputWarning, match=r"cubes of 20 km are larger than the model along"):
        rg.checkerboard(km, 20.0)
    with pytest.warns(rg.InputWarning, match=r"cubes of 0.02 m are smaller than every node spa"):
        rg.checkerboard(base, 0.02)
    # The same squares in km as in m: a node on a square's edge went to the square before it
    # (0.06 / 0.02 = 2.9999999999999996), making squares of one and three nodes.
    row = rg.constant_model({"z": 2, "x": 13}, 10.0, 1000.0)
    in_km = row.assign_coords(z=row["z"] / 1000, x=row["x"] / 1000)
    in_km["z"].attrs["units"] = in_km["x"].attrs["units"] = "km"
    np.testing.assert_array_equal(
        rg.checkerboard(in_km, 0.02, 0.1).values, rg.checkerboard(row, 20.0, 0.1).values
    )
    with pytest.raises(rg.InputError, match=r"velocity dims must be \('z', 'x'\) .*'depth'"):
        rg.checkerboard(base.rename(z="depth"), 20.0)
    # Units written as a list were a TypeError (unhashable), not the units' error.
    listed = base.copy()
    listed.attrs["units"] = ["m/s"]
    with pytest.raises(rg.InputError, match=r"velocity has units \['m/s'\]; expected a speed"):
        rg.traveltime(listed, {"z": 0.0, "x": 0.0})
    listed = base.copy()
    listed["x"].attrs["units"] = np.array(["m"])
    with pytest.raises(rg.InputError, match=r"coordinate 'x' has units array"):
        rg.traveltime(listed, {"z": 0.0, "x": 0.0})
    with pytest.warns(rg.InputWarning, match=r"interface\(s\) at \[5000.0\] m leave a layer no"):
        rg.layered_model({"z": 5, "x": 4}, 10.0, [20.0, 5000.0], [1000.0, 2000.0, 3000.0])


def test_every_public_name_is_its_modules_and_found_lazily():
    import importlib
    import subprocess
    import sys

    # The package imports its names on first use (pipeline/__init__.py): each is the object
    # its module defines, listed by dir(), and a submodule is an attribute as before.
    for name in rg.__all__:
        module = importlib.import_module(f"raygrid.pipeline.{rg._SOURCES[name]}")
        assert getattr(rg, name) is getattr(module, name), name
    assert set(rg.__all__) == set(rg._SOURCES)
    assert set(rg.__all__) <= set(dir(rg))
    # Tab completion offers the API and the submodules, not the package's own imports.
    assert {"workflow", "plot", "survey"} <= set(dir(rg))
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(dir(rg))
    assert (
        rg.workflow.read_workflow
        is importlib.import_module("raygrid.pipeline.workflow").read_workflow
    )
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        rg.no_such_name  # noqa: B018
    # So the CLI starts without Dask, xarray, Zarr or Numba: `raygrid --help` took 2.7 s.
    script = (
        "import sys, raygrid.pipeline.cli; heavy = ('dask', 'numba', 'xarray', 'zarr', 'numpy'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    heavy = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert heavy.stdout.strip() == "[]", heavy.stdout


def test_a_numpy_array_in_memory_is_given_its_grid_as_a_npy_file_is(tmp_path, model):
    # What scikit-fmm, pykonal and fteikpy take: an array and a spacing. It was refused
    # ("must be a path"), and traveltime(array) said only that it is no DataArray.
    with pytest.raises(rg.InputError, match=r"got ndarray: give a NumPy array its grid with "
                       r"raygrid.pipeline.load_velocity\(array, spacing=10.0"):  # fmt: skip
        rg.traveltime(model.values, {"z": 0.0, "x": 0.0})
    np.save(tmp_path / "m.npy", model.values)
    settings = {"spacing": 10.0, "length_unit": "m", "units": "m/s"}
    from_file = rg.load_velocity(tmp_path / "m.npy", **settings)
    values = model.values.copy()
    in_memory = rg.load_velocity(values, **settings)
    xr.testing.assert_identical(in_memory, from_file.load())
    values[0, 0] = 1.0  # a copy: later edits of the array do not reach the model
    assert in_memory.values[0, 0] == model.values[0, 0]
    source = {"z": 0.0, "x": 150.0}
    np.testing.assert_array_equal(
        rg.traveltime(in_memory, source, radius=2), rg.traveltime(model, source, radius=2)
    )
    # Its axes in another order (fteikpy's (z, x, y), pykonal's (x, y, z)) named by dims.
    swapped = rg.load_velocity(model.values.T, dims=("x", "z"), **settings)
    xr.testing.assert_identical(swapped.transpose("z", "x"), in_memory)
    with pytest.raises(rg.InputError, match=r"the velocity array: velocity has no 'units'"):
        rg.load_velocity(model.values, spacing=10.0, length_unit="m")
    with pytest.raises(rg.InputError, match=r"the velocity array: .*has no coordinates"):
        rg.load_velocity(model.values, units="m/s", length_unit="m")
    with pytest.raises(rg.InputError, match=r"velocity must be finite and positive"):
        rg.load_velocity(np.zeros((5, 6)), **settings)
    with pytest.raises(rg.InputError, match=r"axes are named by dims; rename, group and"):
        rg.load_velocity(model.values, rename={"a": "z"}, **settings)
    # A tuple per axis is refused by name, not read as one spacing ("spacing z must be a
    # finite positive number, got (5.0, 10.0)"), nor taken in some axis order.
    with pytest.raises(rg.InputError, match=r"spacing must be one number for every dim or a "
                       r"mapping by dim name, e.g. \{'z': ..., 'x': ...\}, got tuple "
                       r"\(5.0, 10.0\)"):  # fmt: skip
        rg.load_velocity(model.values, spacing=(5.0, 10.0), length_unit="m", units="m/s")
    zero_d = rg.load_velocity(model.values, spacing=np.array(10.0), length_unit="m", units="m/s")
    xr.testing.assert_identical(zero_d, in_memory)  # a 0-d array is one number
    # A masked array's data under the mask was taken as velocities, silently.
    masked = np.ma.masked_greater(model.values, 2900.0)
    with pytest.raises(rg.InputError, match=r"the velocity array is masked: give every node"):
        rg.load_velocity(masked, **settings)
    xr.testing.assert_identical(rg.load_velocity(np.ma.masked_array(values), **settings),
                                rg.load_velocity(values, **settings))  # fmt: skip


def test_a_map_view_model_is_told_how_to_solve_it():
    # A surface-wave group-velocity map (y, x) was refused without a word on what to do.
    velocity = rg.gradient_model({"z": 5, "x": 6}, 10.0, 1000.0, 2000.0).rename({"z": "y"})
    with pytest.raises(rg.InputError, match=r"a 2D map \(y, x\) is solved as a section: "
                       r"velocity.rename\(\{'y': 'z'\}\)"):  # fmt: skip
        rg.traveltime(velocity, {"y": 0.0, "x": 0.0})
    renamed = velocity.rename({"y": "z"})
    assert float(rg.traveltime(renamed, {"z": 0.0, "x": 0.0}, radius=2).max()) > 0
