"""Every bad input gets an InputError naming the problem, before anything is computed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import xarray as xr

from raygrid.pipeline import (
    InputError,
    constant_model,
    raypath,
    traveltime,
    traveltime_at,
    traveltimes,
)
from raygrid.pipeline.errors import Z_IS_DEPTH, InputWarning

SOURCE = {"z": 0.0, "x": 50.0}


@pytest.fixture
def velocity():
    return constant_model({"z": 11, "x": 21}, 10.0, 2000.0)


@pytest.mark.parametrize(
    "bad, count, message",
    [
        (np.nan, 1, "nan at z=30, x=40"),
        (np.inf, 1, "inf at z=30, x=40"),
        (0.0, 1, "0.0 at z=30, x=40"),
        (-5.0, 1, "-5.0 at z=30, x=40"),
        (-np.inf, 1, "-inf at z=30, x=40"),
    ],
)
def test_bad_velocity_values(velocity, bad, count, message):
    values = velocity.values.copy()
    values[3, 4] = bad
    values[7, 9] = bad
    with pytest.raises(InputError, match="2 bad value") as info:
        traveltime(velocity.copy(data=values), SOURCE)
    assert message in str(info.value)


def test_non_uniform_coordinates(velocity):
    x = velocity["x"].values.copy()
    x[5] += 3.0
    bad = velocity.assign_coords(x=("x", x, {"units": "m"}))
    with pytest.raises(InputError, match="'x' is not uniform"):
        traveltime(bad, SOURCE)


def test_float32_coordinates_are_uniform_to_their_rounding(tmp_path):
    # NetCDF files often store coordinates in float32: steps of 0.1 km vary by 2e-6 of a
    # step there, and such a model was refused as "not uniform" (step 0.1 ... mean step 0.1).
    from raygrid.pipeline import load_velocity

    coords = {
        d: np.arange(n, dtype=np.float32) * np.float32(0.1) for d, n in (("z", 31), ("x", 61))
    }
    model = xr.Dataset(
        {"vp": (("z", "x"), np.full((31, 61), 3.0, np.float32), {"units": "km/s"})},
        coords={d: (d, v, {"units": "km"}) for d, v in coords.items()},
    )
    model.to_netcdf(tmp_path / "f32.nc")
    velocity = load_velocity(tmp_path / "f32.nc")
    exact = velocity.assign_coords({d: velocity[d].astype(np.float64) for d in ("z", "x")})
    exact = exact.assign_coords(z=np.arange(31) * 0.1, x=np.arange(61) * 0.1)
    for d in ("z", "x"):
        exact[d].attrs["units"] = "km"
    times = traveltime(velocity, {"z": 0.0, "x": 3.0}, radius=3).values
    np.testing.assert_allclose(times, traveltime(exact, {"z": 0.0, "x": 3.0}, radius=3).values,
                               rtol=1e-6)  # fmt: skip
    # A real unevenness is still one, named to enough digits to see it.
    uneven = coords["x"].copy()
    uneven[30:] += np.float32(1e-4)
    with pytest.raises(
        InputError, match=r"step 0.1000998\d* between 2.9000001 and 3.0000999, mean"
    ):
        traveltime(velocity.assign_coords(x=("x", uneven, {"units": "km"})), SOURCE)


def test_points_on_float32_coordinates_are_on_their_nodes():
    # Within float32 rounding of the stored coordinates (UTM-like km far from 0), the last
    # node was "outside the model" and a node's own coordinate was 1e-4 nodes off it, its
    # time 4e-6 s rather than 0.
    x = (512.3 + 0.1 * np.arange(41)).astype(np.float32)
    z = (0.1 * np.arange(21)).astype(np.float32)
    velocity = xr.DataArray(
        np.full((21, 41), 3.0), dims=("z", "x"), attrs={"units": "km/s"},
        coords={"z": ("z", z, {"units": "km"}), "x": ("x", x, {"units": "km"})},
    )  # fmt: skip
    for node in (0, 2, 40):
        field = traveltime(velocity, {"z": 0.0, "x": float(512.3 + 0.1 * node)}, radius=2)
        assert field.values[0, node] == 0.0, node
    with pytest.raises(InputError, match="source x=516.31 is outside the model"):
        traveltime(velocity, {"z": 0.0, "x": 516.31}, radius=2)  # 10 m out is out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_points_placed_all_at_once_are_placed_as_one_by_one(dtype):
    # A lookup's many points are placed in one pass (1e5 trial hypocentres took 50 us each
    # one by one): the same floats as point by point, on nodes, on faces, near them within
    # the stored type's rounding, on the edges and just outside (left to to_index).
    from raygrid.pipeline import grid_from_velocity

    x0 = 4_000_000.0 if dtype == np.float32 else 512.3
    step = 10.0 if dtype == np.float32 else 0.1
    x = (x0 + np.arange(41) * step).astype(dtype)
    z = (np.arange(21) * step).astype(dtype)
    unit = "m" if dtype == np.float32 else "km"
    velocity = xr.DataArray(
        np.full((21, 41), 3000.0 if unit == "m" else 3.0), dims=("z", "x"),
        attrs={"units": f"{unit}/s"},
        coords={"z": ("z", z, {"units": unit}), "x": ("x", x, {"units": unit})},
    )  # fmt: skip
    grid = grid_from_velocity(velocity)
    rng = np.random.default_rng(0)
    nodes_x, nodes_z = x.astype(np.float64), z.astype(np.float64)
    near = [0.0, 0.5, 1e-12, -1e-12, 0.49999999, 0.1, 0.125, 0.13, -0.3, 1e-6]
    points = []
    for _ in range(3000):
        i, k = rng.integers(0, 41), rng.integers(0, 21)
        dx, dz = rng.choice(near) * step, rng.choice(near) * step
        points.append({"z": float(nodes_z[k] + dz), "x": float(nodes_x[i] + dx)})
    points += [
        {"z": 0.0, "x": float(nodes_x[-1]) + 1e-9},
        {"z": -1e-13, "x": float(x0)},
        {"z": 0.0, "x": np.float32(nodes_x[3])},
        {"z": 1, "x": float(nodes_x[5])},
    ]
    located, slow = grid.to_indices(points)
    assert 0 < len(slow) < 1000  # most at once
    assert len(grid.to_indices(points[:8])[1]) == 0  # a few at once too (compiled: faster)
    fast = np.setdiff1d(np.arange(len(points)), slow)
    one_by_one = np.array([grid.to_index(points[i]) for i in fast])
    # Bit for bit (assert_array_equal counts -0.0 as 0.0: z = -0.0 gave -0.0 at once).
    assert np.array_equal(located[fast].view(np.int64), one_by_one.view(np.int64))
    zero = grid.to_indices([{"z": -0.0, "x": float(nodes_x[1])}] * 40)[0]
    assert (
        np.signbit(zero).sum() == 0 and np.signbit(grid.to_index({"z": -0.0, "x": x0})).sum() == 0
    )
    assert (one_by_one % 1.0 == 0.0).any() and (one_by_one % 1.0 == 0.5).any()
    # Text, yes/no and other dims are left to to_index, which refuses them.
    for odd in ({"z": "1", "x": x0}, {"z": True, "x": x0}, {"z": 0.0}, [0.0, x0]):
        assert len(grid.to_indices([*points[:40], odd])[1]) == 41


def test_points_near_float32_nodes_far_from_0_are_not_moved_onto_them():
    # float32 UTM northings (0.25 m apart at 4e6 m): a source 1.8 m east of a node was
    # snapped onto it (four units in the last place, 1.9 m, counted as rounding), its time
    # 98 m away 1.8 % late; and a point 1.8 m outside the model was put on its edge. Only
    # half a unit (0.125 m) is the stored type's rounding.
    x0 = 4_000_000.0
    for dtype in (np.float64, np.float32):
        velocity = xr.DataArray(
            np.full((41, 41), 2000.0), dims=("z", "x"), attrs={"units": "m/s"},
            coords={"z": ("z", np.arange(41) * 10.0, {"units": "m"}),
                    "x": ("x", (x0 + np.arange(41) * 10.0).astype(dtype), {"units": "m"})},
        )  # fmt: skip
        field = traveltime(velocity, {"z": 200.0, "x": x0 + 201.8}, radius=5)
        time = float(traveltime_at(field, {"z": 200.0, "x": x0 + 300.0}, velocity=velocity))
        assert time == pytest.approx(98.2 / 2000.0, rel=1e-9), dtype
        for x in (x0 - 1.8, x0 + 401.8):
            with pytest.raises(InputError, match="is outside the model"):
                traveltime(velocity, {"z": 0.0, "x": x}, radius=2)
        on_node = traveltime(velocity, {"z": 0.0, "x": x0 + 100.1}, radius=2)
        assert (on_node.values[0, 10] == 0.0) == (dtype == np.float32)  # within 0.125 m


def test_decimal_node_positions_on_a_float32_arange_are_nodes():
    # np.arange(0, 50, 0.1, dtype=float32) gathers rounding beyond half a unit in the last
    # place (0.9 is stored as 0.90000004): 99 of 500 nodes written as decimals were taken
    # as between nodes. The coordinates' deviation from the uniform grid counts too.
    from raygrid.pipeline.grid import grid_from_velocity

    x = np.arange(0, 50, 0.1, dtype=np.float32)
    z = np.arange(0, 2.01, 0.1).astype(np.float32)
    velocity = xr.DataArray(
        np.full((z.size, x.size), 3.0), dims=("z", "x"), attrs={"units": "km/s"},
        coords={"z": ("z", z, {"units": "km"}), "x": ("x", x, {"units": "km"})},
    )  # fmt: skip
    grid = grid_from_velocity(velocity)
    for k in range(x.size):
        written = round(float(x[k]), 4)  # as a user writes the node
        assert grid.to_index({"z": 1.0, "x": written})[2] == k, written
    assert grid.to_index({"z": 1.0, "x": 0.95})[2] == pytest.approx(9.5)  # between: kept


def test_float32_coordinates_too_coarse_for_their_steps_are_refused():
    # float32 rounds values near 4.2e6 m to 0.5 m: steps of 0.7 m were stored as 0.5 and 1.0
    # m, passed as uniform (to the float32 tolerance), and the grid was taken as 0.722 m.
    # Rounded to equal values, the steps were refused only as "not monotonic".
    def model(x, step):
        z = ("z", np.arange(5) * step, {"units": "m"})
        return xr.DataArray(
            np.full((5, x.size), 2000.0), dims=("z", "x"), attrs={"units": "m/s"},
            coords={"z": z, "x": ("x", x, {"units": "m"})},
        )  # fmt: skip

    rounds = r"float32, which rounds values near 4\.2\d*e\+06 m to 0\.5 m"
    then = r".*store the coordinates in float64"
    coarse = {0.7: f"'x' is stored as {rounds}: too coarse",
              0.2: f"'x' is not monotonic: neighbours are equal in {rounds}"}  # fmt: skip
    for step, said in coarse.items():
        x = (4.2e6 + np.arange(10) * step).astype(np.float32)
        with pytest.raises(InputError, match=said + then):
            traveltime(model(x, step), {"z": 0.0, "x": float(x[0])}, radius=2)
    # UTM northings 10 m apart in float32 over 1 km: the spacing is known to 0.05 %, taken;
    # over 300 m, taken too as its steps are exact (all equal as stored).
    for n in (101, 31):
        x = (4.2e6 + np.arange(n) * 10.0).astype(np.float32)
        assert traveltime(model(x, 10.0), {"z": 0.0, "x": float(x[0])}, radius=2).sizes["x"] == n
    # Equal values that are no rounding, and float64, are "not monotonic" as before.
    for x in (np.array([0.0, 10.0, 10.0, 20.0], np.float32), np.zeros(3)):
        with pytest.raises(InputError, match="'x' is not monotonic$"):
            traveltime(model(x, 10.0), {"z": 0.0, "x": 0.0}, radius=1)


@pytest.mark.parametrize("coords", [[str(10 * i) for i in range(9)], "datetime"])
def test_coordinates_that_are_not_numbers_are_refused(coords):
    # Text was read as numbers (np.float64("10")), and times as nanoseconds.
    if coords == "datetime":
        coords = np.datetime64("2026-01-01") + np.arange(9) * np.timedelta64(1, "D")
    velocity = xr.DataArray(
        np.full((9, 9), 2000.0), dims=("z", "x"), attrs={"units": "m/s"},
        coords={"z": ("z", np.arange(9.0), {"units": "m"}), "x": ("x", coords, {"units": "m"})},
    )  # fmt: skip
    with pytest.raises(InputError, match="coordinate 'x' must hold numbers .*got dtype"):
        traveltime(velocity, {"z": 0.0, "x": 0.0})


def test_a_subnormal_speed_is_refused_as_zero(velocity):
    # Its slowness overflowed: inf times and NumPy's overflow warning, no error.
    values = velocity.values.copy()
    values[5, 7] = 1e-310
    with pytest.raises(InputError, match="1 bad value.*subnormal.*1e-310 at z=50, x=70"):
        traveltime(velocity.copy(data=values), SOURCE)


@pytest.mark.parametrize("dtype", [np.complex128, object, bool])
def test_velocities_that_are_not_real_numbers_are_refused(velocity, dtype):
    # Complex values were cast to real with only NumPy's warning; objects gave a TypeError.
    with pytest.raises(InputError, match="velocity must hold real numbers .* got dtype"):
        traveltime(velocity.astype(dtype), SOURCE)


def test_non_monotonic_coordinates(velocity):
    x = velocity["x"].values.copy()
    x[[3, 4]] = x[[4, 3]]
    with pytest.raises(InputError, match="'x' is not monotonic"):
        traveltime(velocity.assign_coords(x=("x", x, {"units": "m"})), SOURCE)


def test_decreasing_coordinates(velocity):
    with pytest.raises(InputError, match="'z' decreases"):
        traveltime(velocity.isel(z=slice(None, None, -1)), SOURCE)


@pytest.mark.parametrize("dims", [("z", "y"), ("a", "x"), ("x",)])
def test_unknown_or_missing_dims(dims):
    shape = (5,) * len(dims)
    bad = xr.DataArray(np.ones(shape), dims=dims, attrs={"units": "m/s"})
    with pytest.raises(InputError, match="velocity dims must be"):
        traveltime(bad, SOURCE)


def test_wrong_dims_say_how_to_make_them_right(tmp_path):
    # An extra one-node axis (a time step) was first refused for its coordinate's units.
    from raygrid.pipeline import load_velocity

    coords = {"time": [0], "depth": ("depth", np.arange(5.0), {"units": "m"}),
              "x": ("x", np.arange(6.0), {"units": "m"})}  # fmt: skip
    model = xr.DataArray(np.full((1, 5, 6), 2000.0), dims=("time", "depth", "x"),
                         coords=coords, attrs={"units": "m/s"})  # fmt: skip
    model.to_dataset(name="vp").to_zarr(tmp_path / "t.zarr", zarr_format=3, consolidated=False)
    with pytest.raises(InputError, match=r"got \('time', 'depth', 'x'\): drop the one-node "
                       r"'time' with velocity.squeeze\('time'\); rename axes with "
                       r"velocity.rename\(\{'depth': 'z'\}\)"):  # fmt: skip
        load_velocity(tmp_path / "t.zarr")
    flat = xr.DataArray(np.full((5, 1, 6), 2000.0), dims=("z", "y", "x"), attrs={"units": "m/s"},
                        coords={d: (d, np.arange(n, dtype=float), {"units": "m"})
                                for d, n in (("z", 5), ("y", 1), ("x", 6))})  # fmt: skip
    with pytest.raises(InputError, match=r"dim 'y' has 1 node.*velocity.squeeze\('y'\)"):
        traveltime(flat, SOURCE)
    # A north-south section is raygrid's (z, x) one: it had no hint ("northing" was told
    # to become y, which a 2D model cannot have either).
    section = flat.isel(y=0, drop=True)
    for name in ("y", "northing"):
        with pytest.raises(InputError, match=rf"rename\(\{{'{name}': 'x'\}}\)"):
            traveltime(section.rename({"x": name}), {"z": 0.0, name: 1.0})


def test_missing_coordinate(velocity):
    with pytest.raises(InputError, match="no coordinate for dim 'x'"):
        traveltime(velocity.drop_vars("x"), SOURCE)


def test_missing_and_unknown_units(velocity):
    with pytest.raises(InputError, match="velocity has no 'units'"):
        traveltime(velocity.assign_attrs(units=None).drop_attrs(deep=False), SOURCE)
    with pytest.raises(InputError, match="velocity has units 's'"):
        traveltime(velocity.assign_attrs(units="s"), SOURCE)
    bad = velocity.copy()
    bad["x"].attrs = {}
    with pytest.raises(InputError, match="coordinate 'x' has no 'units'"):
        traveltime(bad, SOURCE)
    bad["x"].attrs = {"units": "furlong"}
    with pytest.raises(InputError, match="coordinate 'x' has units 'furlong'"):
        traveltime(bad, SOURCE)


def test_inconsistent_units(velocity):
    bad = velocity.copy()
    bad["x"].attrs = {"units": "km"}
    with pytest.raises(InputError, match="inconsistent units"):
        traveltime(bad, SOURCE)


def test_a_point_in_metres_on_a_model_in_km_is_named_so():
    # Stations in metres on a model in km were only "outside the model: y spans [0, 6] km".
    model = constant_model({"z": 11, "x": 21}, 100.0, 3000.0)
    model = model.assign_coords({d: (model[d] / 1e3).assign_attrs(units="km") for d in "zx"})
    with pytest.raises(InputError, match=r"x=1500 is outside .*; is it in m\? Points are in "
                       r"the model's unit, km \(x=1.5\)"):  # fmt: skip
        traveltime(model, {"z": 0.0, "x": 1500.0})
    with pytest.raises(InputError, match=r"x=7 is outside the model: x spans \[0, 2\] km$"):
        traveltime(model, {"z": 0.0, "x": 7.0})  # 7 km just beyond: no guess
    with pytest.raises(InputError, match=r"x=500 is outside .*; is it in m\? .*\(x=0.5\)"):
        traveltime(model, {"z": 0.0, "x": 500.0})  # (under 100 times the span: said too)


def test_points_in_km_on_a_model_in_metres_are_warned_about(tmp_path):
    # The other slip lands inside the model: ten stations in km ran in one 500 m cell of a
    # model in m ("valid workflow"), silently.
    model = constant_model({"z": 41, "x": 61}, 500.0, 5000.0)
    stations = {"z": [0.0, 0.0, 1.5], "x": [3.2, 10.5, 25.0]}
    with pytest.warns(InputWarning, match=r"all 3 sources lie within one cell \(z 0 to 1.5, x "
                      r"3.2 to 25 m\); at 1000 times .* are they in km\?"):  # fmt: skip
        traveltimes(model, stations, radius=2)
    path = tmp_path / "stations.csv"
    path.write_text("z,x\n0,3.2\n0,10.5\n")
    with pytest.warns(InputWarning, match=r"source CSV file .*stations.csv: all 2 sources"):
        traveltimes(model, str(path), radius=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traveltimes(model, {"z": [0.0, 0.0], "x": [3200.0, 10500.0]}, radius=2)  # in m
        traveltimes(model, {"z": [0.0, 0.0], "x": [3.2, 40.0]}, radius=2)  # 40 km: outside


@pytest.mark.parametrize(
    "source, message",
    [
        (
            {"z": -1.0, "x": 50.0},
            "source z=-1 is outside the model: z spans \\[0, 100\\] m; "
            f"{re.escape(Z_IS_DEPTH)}: a station above the top",
        ),
        ({"z": 0.0, "x": 200.5}, "source x=200.5 is outside the model"),
        ({"z": 0.0, "x": 200.0001}, r"x=200.0001 is outside the model: x spans \[0, 200\] m"),
        ({"z": 0.0}, "missing: \\['x'\\]"),
        ({"z": 0.0, "x": 1.0, "y": 2.0}, r"unknown: \['y'\].*the model is 2D: leave out \['y'\]"),
        ({"z": float("nan"), "x": 1.0}, "^source z=nan is not a finite number$"),  # "outside"
        ({"z": 0.0, "x": -float("inf")}, "^source x=-inf is not a finite number$"),
        ({"z": "deep", "x": 1.0}, "is not a number"),
        ({"z": "50", "x": 1.0}, "source z='50' is not a number"),  # was taken as 50
        ({"z": True, "x": 1.0}, "source z=True is not a number"),  # was taken as 1
        ([0.0, 50.0], "must be a mapping"),
        # Several: a pointer to traveltimes, not the table printed or "not a number".
        ([{"z": 0.0, "x": 5.0}], "takes one source.*rg.traveltimes\\(velocity, sources\\)"),
        ({"z": [0.0, 1.0], "x": [5.0, 6.0]}, "takes one source, a mapping such as"),
    ],
)
def test_bad_source(velocity, source, message):
    with pytest.raises(InputError, match=message):
        traveltime(velocity, source)


def test_traveltimes_names_the_source_outside(velocity):
    sources = [SOURCE, {"z": 0.0, "x": 500.0}, SOURCE]
    with pytest.raises(InputError, match=r"^source 1 \(numbered from 0\): source x=500 is out"):
        traveltimes(velocity, sources)
    # Named (a station table): by its name too, not only its number.
    named = [{**point, "name": name} for point, name in zip(sources, ("A", "FAR", "C"))]
    with pytest.raises(InputError, match=r"^source 1 'FAR' \(numbered from 0\): source x=500"):
        traveltimes(velocity, named)


def test_receiver_outside(velocity):
    result = traveltime(velocity, SOURCE, predecessors=True, radius=2)
    with pytest.raises(InputError, match="receiver x=500 is outside the model"):
        raypath(result, {"z": 10.0, "x": 500.0})


def test_raypath_needs_predecessors(velocity):
    with pytest.raises(InputError, match="predecessors=True"):
        raypath(traveltime(velocity, SOURCE, radius=2), {"z": 10.0, "x": 10.0})


@pytest.mark.parametrize(
    "drop", [["radius_z", "radius_x"], ["weights"], ["precision"], ["source_z"]]
)
def test_raypath_refuses_a_result_that_lost_how_it_was_solved(velocity, drop):
    # Without its radius a ray's last leg would be chosen from another star: a wrong time,
    # not an error, unless refused.
    result = traveltime(velocity, SOURCE, predecessors=True, radius=2)
    result = result.drop_vars([name for name in drop if name in result.coords])
    result.attrs = {k: v for k, v in result.attrs.items() if k not in drop}
    with pytest.raises(InputError, match=rf"missing attrs \[{drop[0]!r}"):
        raypath(result, {"z": 15.0, "x": 13.0})


@pytest.mark.parametrize("value", [None, "two", 2.5, True])
def test_a_recorded_radius_that_is_not_a_radius_is_refused(velocity, value):
    # radius_z=None was a bare TypeError from int() deep in raypath.
    from raygrid.pipeline import traveltime_at

    result = traveltime(velocity, SOURCE, predecessors=True, radius=2).assign_attrs(radius_z=value)
    result["traveltime"].attrs["radius_z"] = value  # (traveltime_at reads its own first)
    for lookup in (raypath, traveltime_at):
        with pytest.raises(InputError, match=rf"attribute radius_z = {value!r} is not a rad"):
            lookup(result, {"z": 15.0, "x": 13.0})
    result["traveltime"].attrs["radius_z"] = 2.0  # e.g. through a format without integers
    as_float = result.assign_attrs(radius_z=2.0)
    assert raypath(as_float, {"z": 15.0, "x": 13.0}).attrs["traveltime"] > 0


def line_of_sources(count: int) -> list[dict[str, float]]:
    """``count`` sources at the top of the model, each at its own place (sources at one
    place are solved, but warned about)."""
    return [{"z": 0.0, "x": 200.0 * i / count} for i in range(count)]


def test_a_cuda_batch_beyond_shared_memory_is_an_input_error(velocity):
    # It used to surface as a ValueError from the kernels' launch check, mid-solve.
    # Tiles shrink to fit a batch down to a warp of threads; 64 time tiles fit none.
    with pytest.raises(InputError, match="cannot run radius .* with batch 64 in float64"):
        traveltimes(velocity, line_of_sources(64), backend="cuda", batch=64, radius=2)


def test_a_star_beyond_the_gpus_constant_memory_is_an_input_error():
    # 2D radius 14 with weights on the fly: ptxas refused the kernel at its first launch
    # on the device, a raw link error from deep in the solve.
    from raygrid.pipeline.errors import spelt_for_workflows

    wide = constant_model({"z": 40, "x": 40}, 10.0, 2000.0)
    with pytest.warns(InputWarning, match="star offsets"), pytest.raises(InputError) as refused:
        traveltime(wide, SOURCE, radius=14, backend="cuda")
    assert str(refused.value) == (
        "the CUDA pull solver cannot run radius (14, 0, 14): its star's tables (offsets, and "
        "each edge's cell crossings where weights are computed on the fly) are compiled into "
        "the kernel and need more than the GPU's 64 KB of constant memory; use a smaller "
        'radius or algorithm="near-far" (untiled)'
    )
    # A workflow can precompute the weights instead (no crossing tables then).
    with spelt_for_workflows(), pytest.warns(InputWarning), pytest.raises(InputError) as refused:
        traveltime(wide, SOURCE, radius=14, backend="cuda")
    assert str(refused.value).endswith(
        "; use compute.precompute: true or a smaller radius or compute.algorithm: near-far "
        "(untiled)"
    )


def test_a_refusal_names_the_settings_as_its_reader_writes_them(velocity):
    # The same check refuses a Python call and a workflow: each told in its own words.
    from concurrent.futures import ThreadPoolExecutor

    from raygrid.pipeline.errors import spelt_for_workflows, workflow_spelling

    def refused() -> str:
        with pytest.raises(InputError) as error:
            traveltimes(velocity, line_of_sources(64), backend="cuda", batch=64, radius=2)
        return str(error.value)

    assert refused().endswith('use a smaller batch= or a smaller radius or precision="float32"')
    with spelt_for_workflows():
        said = refused()
        # A context of this thread: a task is told (Dask's threads do not inherit it; new
        # threads do only where Python is built to, free-threaded 3.14's default).
        inherits = bool(getattr(sys.flags, "thread_inherit_context", False))
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(workflow_spelling).result() is inherits
    assert said.endswith(
        "use a smaller compute.cuda_batch or a smaller radius or grid.precision: float32"
    )
    assert not workflow_spelling()


def test_a_cuda_batch_counts_only_up_to_the_sources(velocity, monkeypatch):
    # One source in a batch of 64 used to be refused (or solved on shrunk tiles).
    import raygrid.pipeline.solve as solve

    used = []

    def solve_seeds(grid, star, options, seeds, *args, **kwargs):
        used.append(options.batch)
        return np.zeros((len(seeds), grid.velocity.size)), None

    monkeypatch.setattr(solve, "solve_seeds", solve_seeds)
    traveltimes(velocity, [SOURCE], backend="cuda", batch=64, radius=2)
    traveltimes(velocity, line_of_sources(3), backend="cuda", batch=64, radius=2)
    assert used == [1, 3]


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("damage", ["cycle", "no such edge", "outside"])
def test_raypath_refuses_corrupted_predecessors(velocity, lazy, damage):
    # Walked back in compiled code (no bounds checks), an edge number past the star read
    # memory beyond the offsets, and a step outside the model memory beyond the field.
    result = traveltime(velocity, SOURCE, predecessors=True, radius=2)
    offsets = result["star_offset"].values  # (k, 3): z, y, x
    predecessor = result["predecessor"].values.copy()  # (z, x)
    end = {"z": 80.0, "x": 100.0}  # node (8, 10)
    if damage == "cycle":  # (8, 10) from (7, 10) and (7, 10) from (8, 10)
        down = int(np.flatnonzero((offsets == [1, 0, 0]).all(axis=1))[0])
        up = int(np.flatnonzero((offsets == [-1, 0, 0]).all(axis=1))[0])
        predecessor[8, 10], predecessor[7, 10] = down, up
    elif damage == "no such edge":
        predecessor[8, 10] = len(offsets)
    else:  # (0, 0) from a node above and left of it
        end = {"z": 0.0, "x": 0.0}
        predecessor[0, 0] = int(np.flatnonzero((offsets[:, 0] > 0) & (offsets[:, 2] > 0))[0])
    result["predecessor"].values[...] = predecessor
    if lazy:  # a tiled solve's result is read block by block
        result = result.chunk({"z": 4, "x": 4})
    with pytest.raises(InputError, match=r"predecessors form a cycle.*result is corrupted"):
        raypath(result, end)


def test_raypath_refuses_unknown_weights(velocity):
    result = traveltime(velocity, SOURCE, predecessors=True, radius=2)
    result.attrs["weights"] = "fast"
    with pytest.raises(InputError, match="weights 'fast' are not one of"):
        raypath(result, {"z": 15.0, "x": 13.0})


@pytest.mark.parametrize(
    "radius, message",
    [
        (0, "radius along 'z' must be >= 1"),
        (-2, "must be >= 1"),
        (11, "radius along 'z' is 11 but the model has only 11 nodes"),
        ({"z": 2}, "missing: \\['x'\\]"),
        ({"z": 2, "x": 2, "q": 1}, "unknown: \\['q'\\]"),
        (2.5, "must be an integer"),
        (True, "must be an integer"),
        # In which dims' order? Named as what it must be ("radius along 'z' ... got (5, 3)").
        ((5, 3), r"radius must be one integer or a mapping .*\{'z': 3, 'x': 3\}\), got \(5, 3\)"),
    ],
)
def test_bad_radius(velocity, radius, message):
    with pytest.raises(InputError, match=message):
        traveltime(velocity, SOURCE, radius=radius)


@pytest.mark.parametrize(
    "option, message",
    [
        ({"weights": "linear"}, "weights must be one of"),
        ({"backend": "tpu"}, "backend must be one of"),
        ({"precision": "float16"}, "precision must be one of"),
        ({"algorithm": "bellman"}, "algorithm must be one of"),
        ({"algorithm": "pull"}, "algorithm='pull' does not run on backend='cpu'"),
        # A list in a dict's "in": TypeError (unhashable), not the option named.
        ({"weights": ["exact"]}, "weights must be one of"),
        ({"precision": ["float32"]}, "precision must be one of"),
        ({"precision": np.float32}, r"precision must be one of .* \(by name: 'float32'\)$"),
        ({"precision": None}, r"precision must be one of .*, got None$"),  # not "float64"
        ({"backend": {"cpu": 1}}, "backend must be one of"),
    ],
)
def test_bad_options(velocity, option, message):
    with pytest.raises(InputError, match=message):
        traveltime(velocity, SOURCE, **option)


def test_a_pandas_series_is_a_source_as_it_is_a_point(velocity):
    # traveltime_at took a Series; traveltime refused it as "not a mapping".
    import pandas as pd

    field = traveltime(velocity, pd.Series(SOURCE), radius=2)
    np.testing.assert_array_equal(field.values, traveltime(velocity, SOURCE, radius=2).values)
    assert float(field["source_x"]) == SOURCE["x"]
    # ... and a receiver of raypath (refused as "not a position").
    result = traveltime(velocity, SOURCE, radius=2, predecessors=True)
    receiver = {"z": 30.0, "x": 12.5}
    ray = raypath(result, pd.Series(receiver))
    assert ray.attrs["traveltime"] == raypath(result, receiver).attrs["traveltime"]


def test_not_a_dataarray(velocity):
    with pytest.raises(InputError, match="must be an xarray.DataArray"):
        traveltime(np.ones((4, 4)), SOURCE)
    # A file's Dataset: which variable to pick, said.
    with pytest.raises(InputError, match=r"got Dataset: pick its velocity, e.g. dataset\['vp'\]"):
        traveltime(velocity.to_dataset(name="vp"), SOURCE)
    # A result (or store) holding its velocity among other variables: that one, not the
    # first ("ray_x", "traveltime").
    result = traveltime(velocity, SOURCE, predecessors=True)
    assert list(result.data_vars)[0] != "velocity"
    with pytest.raises(InputError, match=r"e.g. dataset\['velocity'\] \(it holds \["):
        traveltime(result, SOURCE)


def test_cuda_without_a_gpu_is_a_clear_error(velocity, monkeypatch):
    import raygrid.kernels.cuda as cuda_kernels
    from raygrid.kernels.cuda import device

    # No GPU, whatever this machine has (the suite also runs on GPU hosts).
    for module in (cuda_kernels, device):
        monkeypatch.setattr(module, "gpu_present", lambda: False)
    monkeypatch.setattr(cuda_kernels, "cuda_usable", lambda: False)
    monkeypatch.setattr(cuda_kernels, "simulating", lambda: False)
    with pytest.raises(InputError, match="backend='cuda' cannot run here: no usable NVIDIA GPU"):
        traveltime(velocity, SOURCE, backend="cuda")
    # "auto" quietly means the CPU when there is no GPU, and says so in the attributes.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert traveltime(velocity, SOURCE, backend="auto", radius=2).attrs["backend"] == "cpu"
    # ... unless the algorithm asked for runs only on a GPU: said so, not "not on cpu".
    with pytest.raises(InputError, match="backend='auto' cannot use a GPU here: no usable"):
        traveltime(velocity, SOURCE, backend="auto", algorithm="near-far", radius=2)


def test_a_gpu_without_the_cuda_compiler_is_named_with_what_to_install(velocity, monkeypatch):
    # numba-cuda without its [cu13] extra finds the driver but not NVRTC or NVVM: the GPU
    # machine's first kernel failed with DynamicLibNotFoundError, under "auto" too.
    import raygrid.kernels.cuda as cuda_kernels
    from raygrid.kernels.cuda import device

    missing = 'DynamicLibNotFoundError: Failure finding "libnvrtc.so.13"'
    monkeypatch.setattr(device, "gpu_present", lambda: True)
    monkeypatch.setattr(cuda_kernels, "gpu_present", lambda: True)
    monkeypatch.setattr(device, "compiler_problem", lambda: missing)
    monkeypatch.setattr(cuda_kernels, "simulating", lambda: False)
    assert not device.cuda_usable()
    monkeypatch.setattr(cuda_kernels, "cuda_usable", device.cuda_usable)
    said = "Numba cannot compile CUDA kernels here .*libnvrtc.*raygrid\\[cuda\\]"
    with pytest.raises(InputError, match=f"backend='cuda' cannot run here: {said}"):
        traveltime(velocity, SOURCE, backend="cuda", radius=2)
    with pytest.warns(InputWarning, match=f"backend='auto' runs on the CPU: {said}"):
        field = traveltime(velocity, SOURCE, backend="auto", radius=2)
    assert field.attrs["backend"] == "cpu"


def test_the_cuda_compiler_is_found_from_the_test_extra():
    # numba-cuda[cu13] (the test and cuda extras) brings NVVM, libdevice and NVRTC; the
    # probe compiles without a GPU, in a process without the simulator.
    script = "from raygrid.kernels.cuda import compiler_problem; print(compiler_problem())"
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "None", run.stdout + run.stderr


def test_auto_with_the_cpu_dijkstra_is_the_cpu_where_there_is_a_gpu(velocity, monkeypatch):
    # It was resolved to CUDA first, then refused: "dijkstra does not run on backend='cuda'",
    # on the GPU node only (a login node, or validate for another machine, said cpu).
    import raygrid.kernels.cuda as cuda_kernels
    from raygrid.pipeline.options import check_options

    monkeypatch.setattr(cuda_kernels, "cuda_usable", lambda: True)
    for here in (True, False):
        options = check_options("exact", "auto", "float64", "dijkstra", here=here)
        assert (options.backend, options.algorithm) == ("cpu", "dijkstra")
    assert check_options("exact", "auto", "float64").backend == "cuda"  # no algorithm: a GPU


def test_a_bad_point_error_survives_pickling(velocity):
    # Raised in a process pool or a Dask worker, it must come back whole.
    import pickle

    from raygrid.pipeline.points import PointError

    with pytest.raises(PointError) as raised:
        traveltimes(velocity, [SOURCE, {"z": 0.0, "x": 500.0}])
    back = pickle.loads(pickle.dumps(raised.value))
    assert (type(back), str(back), back.index) == (PointError, str(raised.value), 1)


def test_a_folder_given_as_a_workflow_is_named_so(tmp_path):
    from raygrid.pipeline.workflow import read_workflow

    with pytest.raises(InputError, match="is a folder, not a workflow file"):
        read_workflow(tmp_path)


@pytest.mark.parametrize("batch", [0, -1, 1.5, True])
def test_bad_batch(velocity, batch):
    from raygrid.pipeline import traveltimes

    with pytest.raises(InputError, match="batch must be a positive integer"):
        traveltimes(velocity, [SOURCE], batch=batch)


def test_bad_sources_table(velocity):
    from raygrid.pipeline import traveltimes

    with pytest.raises(InputError, match="no column for \\['x'\\]"):
        traveltimes(velocity, {"z": [0.0, 10.0]})
    with pytest.raises(InputError, match="no sources given"):
        traveltimes(velocity, [])
    with pytest.raises(InputError, match="columns differ in length"):
        traveltimes(velocity, {"z": [0.0, 10.0], "x": [0.0]})
    # Not two points each "not a mapping": one position without its dims' names.
    with pytest.raises(InputError, match="^sources given as a list of numbers have no dim names"):
        traveltimes(velocity, [0.0, 50.0])
    # A number for a column is every point's ("columns differ in length: {'z': 1, ...}").
    line = traveltimes(velocity, {"z": 0.0, "x": [0.0, 10.0]})
    assert line["source_z"].values.tolist() == [0.0, 0.0]
    assert line["source_x"].values.tolist() == [0.0, 10.0]
    with pytest.raises(InputError, match="source x=999 is outside"):
        traveltimes(velocity, [SOURCE, {"z": 0.0, "x": 999.0}])
    # Text and booleans are refused as a lone point's are, not read as numbers (True: 1 m).
    for column in (["0"], [True], np.array(["5e1"], dtype=object)):
        with pytest.raises(InputError, match="the sources table's column 'z' is not numbers"):
            traveltimes(velocity, {"z": column, "x": [5.0]})
    assert (
        traveltimes(velocity, {"z": [0, 1.5], "x": np.array([3, 4], dtype=object)}).sizes["source"]
        == 2
    )  # integers, and numbers held as objects, are numbers


@pytest.mark.parametrize("flag", ["precompute", "predecessors", "progress"])
def test_an_on_off_option_must_be_a_bool(velocity, flag):
    from raygrid.pipeline import traveltimes

    # "no" is a true value in Python: it turned precompute and predecessors on.
    with pytest.raises(InputError, match=f"{flag} must be True or False, got 'no'"):
        traveltimes(velocity, [SOURCE], **{flag: "no"})
    if flag == "predecessors":
        with pytest.raises(InputError, match="predecessors must be True or False"):
            traveltime(velocity, SOURCE, predecessors="no", tiles={"z": 8, "x": 8})


def test_a_table_s_load_must_be_a_bool(velocity):
    # load="no" loaded the store whole.
    from raygrid.pipeline import TraveltimeTable

    field = traveltime(velocity, SOURCE, radius=2, predecessors=True)
    with pytest.raises(InputError, match="load must be True or False, got 'no'"):
        TraveltimeTable(field, load="no")
    assert TraveltimeTable(field, load=False) is not None


def test_synthetic_models_refuse_velocities_that_are_not_positive():
    from raygrid.pipeline import gradient_model

    with pytest.raises(InputError, match="velocity must be a finite positive number, got -2000"):
        constant_model({"z": 11, "x": 21}, 10.0, -2000.0)
    with pytest.raises(InputError, match="top must be a finite positive number, got -5.0"):
        gradient_model({"z": 11, "x": 21}, 10.0, top=-5.0, bottom=4000.0)


@pytest.mark.parametrize(
    "shape, spacing, message",
    [
        ({"z": 11, "x": 21}, float("nan"), "spacing z must be a finite positive number, got nan"),
        ({"z": 11, "x": 21}, float("inf"), "spacing z must be a finite positive number, got inf"),
        ({"z": 11, "x": 21}, {"z": 10.0, "x": "10"}, "spacing x must be a finite positive"),
        ({"z": 11, "x": 21}, 0.0, "spacing z must be a finite positive number, got 0.0"),
        ({"z": 5.9, "x": 21}, 10.0, "shape z: need a whole number of nodes, at least 2, got 5.9"),
        ({"z": 1, "x": 21}, 10.0, "shape z: need a whole number of nodes, at least 2, got 1"),
        # A typo's extra digits: 2^63 - 1 overflowed to an axis of 0 nodes; 2^62 and 1e20
        # were NumPy's raw ValueError and OverflowError.
        ({"z": 2, "x": 2**63 - 1}, 10.0, r"2 x 9,223,372,036,854,775,807 nodes is 1.84e\+19"),
        ({"z": 2, "x": 2**62}, 10.0, "more than any machine holds .*: is a size mistyped?"),
        ({"z": 2, "x": 1e20}, 10.0, "2 x 100,000,000,000,000,000,000 nodes is 2e\\+20 nodes"),
    ],
)
def test_synthetic_grids_refuse_what_is_no_grid(shape, spacing, message):
    # nan spacing built a model that failed only when solved; 5.9 nodes were 5.
    with pytest.raises(InputError, match=message):
        constant_model(shape, spacing)


@pytest.mark.parametrize(
    "spacing, origin, message",
    [
        (-10.0, None, "m.npy: spacing z must be a finite positive number, got -10.0"),
        ("10", None, "m.npy: spacing z must be a finite positive number, got '10'"),
        (True, None, "m.npy: spacing z must be a finite positive number, got True"),
        (10.0, {"x": float("nan")}, "m.npy: origin x must be a finite number, got nan"),
        (10.0, "5", "m.npy: origin z must be a finite number, got '5'"),
        # float64 itself too coarse this far out: was "not monotonic" or a bare "too coarse".
        (5.0, 1e17, r"neighbours are equal in float64, .* relative to a nearer origin"),
        (5.0, 1e16, r"float64, which rounds .* to 2 m: too coarse .* nearer origin"),
    ],
)
def test_a_npy_grid_is_checked_as_given(tmp_path, spacing, origin, message):
    # -10 was told to negate its z (an elevation axis), "10" and True were taken.
    from raygrid.pipeline import load_velocity

    np.save(tmp_path / "m.npy", np.full((5, 6), 2000.0))
    with pytest.raises(InputError, match=message):
        load_velocity(
            tmp_path / "m.npy", units="m/s", length_unit="m", spacing=spacing, origin=origin
        )


@pytest.mark.parametrize(
    "values, units, word",
    [(2.0, "m/s", "slow"), (2000.0, "km/s", "fast")],
)
def test_a_velocity_in_the_wrong_unit_is_warned_about(velocity, values, units, word):
    wrong = velocity.copy(data=np.full(velocity.shape, values))
    wrong.attrs["units"] = units
    with pytest.warns(InputWarning, match=rf"no rock is that {word}; is the model's 'units'"):
        traveltime(wrong, {"z": 0.0, "x": 0.0}, radius=2)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda rg: rg.constant_model({"z": 3, "x": 3}, 10.0, True), "velocity must be a finite"),
        (lambda rg: rg.constant_model({"z": 3, "x": 3}, 10.0, "2000"), "got '2000'"),
        (lambda rg: rg.gradient_model({"z": 3, "x": 3}, 10.0, True, 500.0), "top must be a"),
        (lambda rg: rg.gradient_model({"z": 3, "x": 3}, 10.0, 500.0, "4000"), "bottom must be"),
        (lambda rg: rg.layered_model({"z": 3, "x": 3}, 10.0, [True], [1e3, 2e3]), "interfaces"),
        (lambda rg: rg.layered_model({"z": 3, "x": 3}, 10.0, "12", [1e3, 2e3]), "list of numbers"),
        (lambda rg: rg.checkerboard(rg.constant_model({"z": 3, "x": 3}), "20"), "size must be"),
    ],
)  # fmt: skip
def test_model_builders_take_numbers_only(build, message):
    # True was a 1 m/s model (or an interface at 1 m) without a word; text crashed with
    # "Unknown format code 'g'" and the like.
    import raygrid.pipeline as rg

    with pytest.raises(InputError, match=message):
        build(rg)


@pytest.mark.parametrize("spacing", [1e200, 1e-200, 1e99])
def test_a_grid_float64_cannot_measure_is_refused(spacing):
    # 1e200 m made every time inf, 1e-200 m every time 0 (squared lengths overflow or
    # underflow), silently; 1e99 m over 4 steps is 4e99 m, inside the range.
    model = constant_model({"z": 5, "x": 5}, spacing, 2000.0)
    if spacing == 1e99:
        assert np.isfinite(traveltime(model, {"z": 0.0, "x": 0.0}, radius=1).values).all()
        return
    with pytest.raises(InputError, match=r"coordinate 'z': a spacing of .* outside what edge"):
        traveltime(model, {"z": 0.0, "x": 0.0}, radius=1)


def test_a_velocity_that_overflows_in_metres_per_second_is_refused(velocity):
    # 1e306 km/s passed the value check (made in km/s) and was inf m/s: zero slowness.
    fast = velocity.copy(data=np.full(velocity.shape, 1e306)).assign_attrs(units="km/s")
    with pytest.raises(InputError, match="leave float64's range in m/s"):
        traveltime(fast, {"z": 0.0, "x": 0.0}, radius=2)


def test_plausible_velocities_give_no_warning(velocity):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traveltime(velocity, {"z": 0.0, "x": 0.0}, radius=2)
        kilometres = velocity.copy(data=velocity.values / 1000.0)
        kilometres.attrs["units"] = "km/s"
        traveltime(kilometres, {"z": 0.0, "x": 0.0}, radius=2)


@pytest.mark.parametrize("dtype", ["<f8", ">f8", "<f4", ">f4", "<i4", ">i2", "f2"])
@pytest.mark.parametrize("order", ["C", "F", "transposed"])
@pytest.mark.parametrize("unit", ["m/s", "km/s"])
def test_the_slowness_of_a_model_in_memory_is_the_lazy_models(dtype, order, unit):
    # Converted without a copy first (in C order whatever the input's): the same floats as
    # the conversion of a lazy model's tiles, which the tiled solves equal bitwise.
    import dask.array as da

    from raygrid.pipeline import grid_from_velocity

    rng = np.random.default_rng(1)
    values = rng.uniform(1.5, 6.5, (9, 11)) * (1.0 if unit == "km/s" else 1000.0)
    values = values.astype(dtype) if dtype[-2] != "i" else np.round(values).astype(dtype)
    if order == "F":
        values = np.asfortranarray(values)
    coords = {"z": ("z", np.arange(9) * 10.0, {"units": "m"}),
              "x": ("x", np.arange(11) * 10.0, {"units": "m"})}  # fmt: skip
    dims = ("z", "x")
    if order == "transposed":
        values, dims = np.ascontiguousarray(values.T), ("x", "z")
    velocity = xr.DataArray(values, dims=dims, coords=coords, attrs={"units": unit})
    grid = grid_from_velocity(velocity)
    lazy = grid.slowness_of(da.from_array(velocity.transpose("z", "x").values, chunks=4))
    assert grid.slowness.flags.c_contiguous
    assert grid.slowness.tobytes() == np.asarray(lazy.compute()).tobytes()
