"""traveltime_at: times at points between nodes (hypocentres in a traveltime table) by the
method's own last-leg rule: the floats of raypaths and of a survey's receiver table."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
import yaml

import raygrid.pipeline as rg
from raygrid.pipeline import InputError, traveltime_at
from raygrid.pipeline.workflow import read_workflow, run_workflow

from clusters import in_process_client

STATIONS = [{"z": 0.0, "y": 500.0, "x": 800.0}, {"z": 0.0, "y": 2500.0, "x": 1500.0}]
HYPOCENTRES = {"z": [2345.6, 1200.0, 3000.0], "y": [1234.5, 700.0, 2000.0],
               "x": [1711.1, 300.0, 2222.2]}  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return rg.gradient_model({"z": 41, "y": 31, "x": 31}, 100.0, 2000.0, 5000.0)


@pytest.fixture(scope="module")
def tables(model):
    return rg.traveltimes(model, STATIONS, radius=3, predecessors=True)


def test_a_point_between_nodes_gets_its_raypath_time(tables):
    times = traveltime_at(tables, HYPOCENTRES)
    assert times.dims == ("source", "point") and times.shape == (2, 3)
    for s in range(2):
        for p in range(3):
            hypocentre = {d: HYPOCENTRES[d][p] for d in "zyx"}
            ray = rg.raypath(tables.isel(source=s), hypocentre)
            assert float(times[s, p]) == ray.attrs["traveltime"]  # the same floats
    one = traveltime_at(tables.isel(source=1), {d: HYPOCENTRES[d][0] for d in "zyx"})
    assert one.dims == () and float(one) == float(times[1, 0])
    assert float(one["point_x"]) == HYPOCENTRES["x"][0]


def test_a_table_read_at_a_hypocentre_is_the_hypocentre_solved_read_at_the_station(model, tables):
    # Reciprocity: the table (a source at each station) read at the event equals a solve
    # from the event read at the stations, to the rounding of the legs' order.
    table = traveltime_at(tables["traveltime"], HYPOCENTRES, velocity=model)
    for p in range(3):
        hypocentre = {d: HYPOCENTRES[d][p] for d in "zyx"}
        direct = rg.traveltime(model, hypocentre, radius=3)
        back = traveltime_at(direct, STATIONS, velocity=model)
        np.testing.assert_allclose(table[:, p].values, back.values, rtol=1e-12)


def test_constant_velocity_within_the_radius_error():
    model = rg.constant_model({"z": 31, "y": 31, "x": 31}, 100.0, 3000.0)
    field = rg.traveltime(model, STATIONS[0], radius=3)
    found = traveltime_at(field, HYPOCENTRES, velocity=model).values
    distance = np.sqrt(sum((np.array(HYPOCENTRES[d]) - STATIONS[0][d]) ** 2 for d in "zyx"))
    exact = distance / 3000.0
    assert np.all(found >= exact * (1 - 1e-12))  # paths on the graph are never shorter
    assert np.all(found <= exact * 1.03)  # radius 3 in 3D: within 3 %


@pytest.mark.parametrize("axis", ["z", "x"])
def test_a_leg_lying_in_a_cell_face_takes_the_faster_side(axis):
    # Two points 5 m deep on a 10 m grid under a slow top row: the straight leg between them
    # runs along the face of the slow row and the fast one. It was timed in the cell of
    # higher index whatever the speeds (the mirrored model came out 2.7 % late), and must
    # take the fast side, in traveltime_at and the ray alike, for the model and its mirror.
    slow_top = np.full((11, 31), 5000.0)
    slow_top[0] = 1000.0
    expected = 44.0 / 5000.0
    for speeds, depth in ((slow_top, 5.0), (slow_top[::-1].copy(), 95.0)):
        coords = {d: (d, 10.0 * np.arange(n), {"units": "m"}) for d, n in zip("zx", speeds.shape)}
        model = xr.DataArray(speeds, dims=("z", "x"), coords=coords, attrs={"units": "m/s"})
        source, receiver = {"z": depth, "x": 103.0}, {"z": depth, "x": 147.0}
        if axis == "x":  # the same along a vertical face
            model = model.transpose().rename(z="x", x="z").transpose("z", "x")
            source, receiver = ({"z": p["x"], "x": p["z"]} for p in (source, receiver))
        field = rg.traveltime(model, source, radius=3, predecessors=True)
        assert float(traveltime_at(field, receiver)) == pytest.approx(expected, rel=1e-14)
        assert float(rg.raypath(field, receiver)["time"][-1]) == float(
            traveltime_at(field, receiver)
        )
        # Reciprocal: the same floats from the other end.
        back = rg.traveltime(model, receiver, radius=3)
        assert float(traveltime_at(back, source, velocity=model)) == float(
            traveltime_at(field, receiver)
        )


@pytest.mark.parametrize("unit", ["m", "km"])
def test_a_point_on_a_face_is_on_it_whatever_the_rounding_of_its_coordinate(unit):
    # Written in km from a z of 2.7 km, the face 5 m below the first row came out
    # 0.4999999999999912 nodes: its legs were timed through the slow cell alone (15 % late
    # against the same model in m), and a source at x index 3.5 tied to the other node.
    size = 1e-3 if unit == "km" else 1.0
    speeds = np.full((6, 12), 3000.0)
    speeds[0] = 1500.0
    coords = {
        "z": ("z", (2700.0 + 10.0 * np.arange(6)) * size, {"units": unit}),
        "x": ("x", (4100.0 + 10.0 * np.arange(12)) * size, {"units": unit}),
    }
    model = xr.DataArray(
        speeds * size, dims=("z", "x"), coords=coords, attrs={"units": f"{unit}/s"}
    )
    grid = rg.grid_from_velocity(model)
    source, receiver = (
        {"z": 2705.0 * size, "x": 4123.0 * size},
        {"z": 2705.0 * size, "x": 4135.0 * size},
    )
    assert grid.to_index(receiver).tolist() == [0.5, 0.0, 3.5]
    field = rg.traveltime(model, source, radius=3)
    assert float(traveltime_at(field, receiver, velocity=model)) == pytest.approx(12.0 / 3000.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("rough", [True, False])
def test_the_compiled_box_search_is_the_per_point_rule(dtype, rough):
    # Grid.last_legs searches the boxes of points in memory in compiled code, skipping
    # nodes a lower bound rules out: it must pick the node Grid.last_leg picks (np.argmin
    # over every leg of the box: the first among equal totals, as in a constant model)
    # and give the same floats, for points anywhere (corners, faces, edges), in 2D and 3D.
    from raygrid.pipeline.grid import grid_from_velocity
    from raygrid.pipeline.nodevalues import NodeValues

    rng = np.random.default_rng(7)
    for shape in ({"z": 9, "y": 8, "x": 10}, {"z": 13, "x": 17}):
        model = rg.constant_model(shape, 10.0, 2000.0)
        if rough:
            model = model.copy(data=rng.uniform(500.0, 6000.0, model.shape))
        grid = grid_from_velocity(model)
        radius3 = grid.radius3({d: r for d, r in zip(grid.dims, (2, 3, 2))})
        source = {d: float(rng.uniform(0, 10.0 * (n - 1))) for d, n in shape.items()}
        times = rg.traveltime(model, source, radius=dict(zip(grid.dims, (2, 3, 2))))
        values = NodeValues(times.values.astype(dtype))
        n = 200
        points = rng.uniform(0, 1, (n, 3)) * (np.array(grid.shape3) - 1)
        points[: n // 4] = np.round(points[: n // 4] * 2) / 2  # faces, edges, corners, nodes
        # Anywhere, and near the source, where the straight leg from it counts; the source
        # between nodes and on one (those legs timed together in compiled code).
        for source3 in (grid.to_index(source), np.round(grid.to_index(source))):
            near = source3 + rng.uniform(-6, 6, (n, 3)) * (np.array(grid.shape3) > 1)
            near = np.clip(near, 0, np.array(grid.shape3) - 1)
            near[: n // 3] = np.round(near[: n // 3])
            tried = np.concatenate([points, near])
            found = grid.last_legs(values, tried, radius3, source3=source3)
            assert any(got[0] is None for got in found)  # some reached straight
            slowness = grid.slowness_values()
            for point3, got in zip(tried, found):
                if grid.on_node(point3):
                    node = point3.astype(np.int64)
                    itself = (node, values.value(node), 0.0)
                    want = grid._straight_if_faster(itself, source3, point3, radius3, slowness)
                else:
                    want = grid.last_leg(values, point3, radius3, source3=source3)
                assert (got[0] is None) == (want[0] is None), point3
                if want[0] is not None:
                    assert np.array_equal(got[0], want[0]), point3
                assert got[1] == want[1] and got[1].dtype == want[1].dtype, point3
                assert got[2] == want[2], point3
    # Fields with NaN (a survey store's unfinished source, lost chunks) or inf here and
    # there, and in big-endian order (np.fromfile(">f4")): as np.argmin picks, or read.
    field = times.values.astype(dtype)
    field.reshape(-1)[rng.choice(field.size, field.size // 5)] = np.inf
    field.reshape(-1)[rng.choice(field.size, field.size // 5)] = np.nan
    swapped = field.astype(field.dtype.newbyteorder(">"))
    between = [p for p in points if not grid.on_node(p)]
    for values in (NodeValues(field), NodeValues(swapped), NodeValues(np.full_like(field, np.nan))):
        for point3, got in zip(between, grid.last_legs(values, np.array(between), radius3)):
            want = grid.last_leg(values, point3, radius3)
            assert np.array_equal(got[0], want[0]) and got[2] == want[2], point3
            assert got[1] == want[1] or (np.isnan(got[1]) and np.isnan(want[1])), point3


def test_a_leg_along_an_edge_of_four_cells_takes_the_fastest():
    # In 3D a leg may run along a cell edge (halfway on two axes), where four cells meet:
    # it is timed through the fastest of them, either way round.
    from raygrid.pipeline.grid import grid_from_velocity

    speeds = np.full((4, 4, 9), 1000.0)
    speeds[1, 2] = 4000.0  # one of the four cells around the edge z=1.5, y=1.5
    model = rg.constant_model({"z": 4, "y": 4, "x": 9}, 10.0, 1000.0).copy(data=speeds)
    grid = grid_from_velocity(model)
    a, b = np.array([1.5, 1.5, 1.2]), np.array([1.5, 1.5, 6.7])
    expected = 55.0 / 4000.0
    assert grid.segment_time(a, b) == pytest.approx(expected, rel=1e-14)
    assert grid.segment_time(b, a) == grid.segment_time(a, b)


def test_bad_lookups_are_clear(model, tables):
    field = tables["traveltime"]
    with pytest.raises(InputError, match="needs the model: pass velocity="):
        traveltime_at(field, STATIONS)
    with pytest.raises(InputError, match=r"point 1 \(numbered from 0\): point x=9999 is out"):
        traveltime_at(tables, [STATIONS[0], {"z": 0.0, "y": 0.0, "x": 9999.0}])
    small = rg.constant_model({"z": 5, "y": 5, "x": 5}, 100.0, 3000.0)
    with pytest.raises(InputError, match="is not the model's"):
        traveltime_at(field, STATIONS, velocity=small)
    with pytest.raises(InputError, match="records no radius"):
        traveltime_at(field.drop_attrs(), STATIONS, velocity=model)
    # Another radius than the solve's picks other last legs: refused, not a silent answer.
    with pytest.raises(InputError, match=r"radius \{'z': 5, 'y': 5, 'x': 5\} is not the radius"):
        traveltime_at(tables, STATIONS, radius=5)
    np.testing.assert_array_equal(
        traveltime_at(tables, STATIONS, radius=3).values, traveltime_at(tables, STATIONS).values
    )
    np.testing.assert_array_equal(
        traveltime_at(field.drop_attrs(), STATIONS, velocity=model, radius=3).values,
        traveltime_at(tables, STATIONS).values,
    )
    # Without the source's position a point near an off-node source cannot be reached
    # straight from it: said, not silent.
    one = rg.traveltime(model, {"z": 5.5, "y": 3.3, "x": 7.1}, radius=3)
    with pytest.warns(rg.InputWarning, match="records no source position"):
        traveltime_at(
            one.drop_vars(["source_z", "source_y", "source_x"]).drop_attrs(),
            {"z": 6.5, "y": 3.3, "x": 7.1}, velocity=model, radius=3,
        )  # fmt: skip
    with pytest.raises(InputError, match="points table has no column"):
        traveltime_at(tables, {"z": [0.0], "x": [1.0]})
    # A store kept without fields (outputs.fields: false) is named as such.
    receivers_only = tables.drop_vars("traveltime").assign(
        receiver_traveltime=(("source", "receiver"), np.zeros((tables.sizes["source"], 1)))
    )
    with pytest.raises(InputError, match=r"written with outputs.fields: false keeps its receiv"):
        traveltime_at(receivers_only, STATIONS)


def test_a_field_without_source_positions_is_said_once_a_lookup(model):
    # Said once for each source of the field (three times for three sources).
    sources = [{"z": z, "y": 3.3, "x": 7.1} for z in (5.5, 0.0, 9.0)]
    field = rg.traveltimes(model, sources, radius=3)
    bare = field.drop_vars([f"source_{d}" for d in ("z", "y", "x")])

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        traveltime_at(bare, {"z": 6.5, "y": 3.3, "x": 7.1}, velocity=model)
    told = [w for w in said if "records no source position" in str(w.message)]
    assert len(told) == 1, [str(w.message) for w in said]


def test_a_field_is_read_only_on_the_grid_it_was_solved_on(model, tables):
    # Same sizes, other places: the times of other points came back without a word.
    field = tables["traveltime"]
    wider = rg.gradient_model({"z": 41, "y": 31, "x": 31}, 200.0, 2000.0, 5000.0)
    with pytest.raises(InputError, match=r"field's z coordinates \(0 to 4000 m\) are not the "):
        traveltime_at(field, STATIONS, velocity=wider)
    with pytest.raises(InputError, match=r"x coordinates \(0 to 3000 m\) are not the model's "):
        traveltime_at(field, STATIONS, velocity=model.assign_coords(x=model["x"] + 10.0))
    in_km = model.assign_coords(
        {d: (model[d] / 1000.0).assign_attrs(units="km") for d in model.dims}
    )
    with pytest.raises(InputError, match=r"\(0 to 4000 m\) are not the model's \(0 to 4 km\)"):
        traveltime_at(field, STATIONS, velocity=in_km)
    # A thinned or cropped result: its predecessors were read at other nodes' places.
    one = tables.isel(source=0)
    for part in (one.isel(z=slice(None, None, 2)), one.isel(x=slice(0, 20))):
        with pytest.raises(InputError, match=r"solved on \{'z': 41, 'y': 31, 'x': 31\} nodes"):
            rg.raypath(part, {"z": 1000.0, "y": 1000.0, "x": 1000.0})
        with pytest.raises(InputError, match="thinned or cropped field"):
            traveltime_at(part, {"z": 1000.0, "y": 1000.0, "x": 1000.0})


CLOSE = [{"z": 3.3, "x": 101.7}, {"z": 5.5, "x": 503.3}]  # off-node, 400 m apart
NEAR_FIRST = {"z": 20.5, "x": 110.2}  # within reach of the first: a straight leg from it
NEAR_SECOND = {"z": 7.7, "x": 507.1}  # and of the second


def test_single_source_results_stack_with_their_own_positions():
    # The position was an attribute: xr.concat kept the first result's for every source,
    # and the second source's time near the first came out 20 times early, silently.
    model = rg.constant_model({"z": 41, "x": 61})
    stacked = xr.concat([rg.traveltime(model, s, radius=4) for s in CLOSE], dim="source")
    together = rg.traveltimes(model, CLOSE, radius=4)
    np.testing.assert_array_equal(stacked["source_x"], [101.7, 503.3])
    np.testing.assert_array_equal(
        traveltime_at(stacked, NEAR_FIRST, velocity=model).values,
        traveltime_at(together, NEAR_FIRST, velocity=model).values,
    )
    # Surface sources share source_z: xarray keeps one scalar for all of them under either
    # default (the README's recipe was refused); coords="all" keeps each one's.
    surface = [{"z": 0.0, "x": 101.7}, {"z": 0.0, "x": 503.3}]
    fields = [rg.traveltime(model, s, radius=4) for s in surface]
    for new_defaults in (False, True):
        with xr.set_options(use_new_combine_kwarg_defaults=new_defaults):
            with pytest.raises(InputError, match="coords='all'"):
                traveltime_at(xr.concat(fields, dim="source"), NEAR_FIRST, velocity=model)
            stacked = xr.concat(fields, dim="source", coords="all")
        np.testing.assert_array_equal(
            traveltime_at(stacked, NEAR_FIRST, velocity=model).values,
            traveltime_at(
                rg.traveltimes(model, surface, radius=4), NEAR_FIRST, velocity=model
            ).values,
        )
    with in_process_client() as client:
        tiled = rg.traveltime(model, CLOSE[1], radius=4, tiles={"z": 21, "x": 31}, client=client)
        tiled = tiled.compute()
    assert float(tiled["source_x"]) == 503.3 and "source_x" not in tiled.attrs


@pytest.mark.parametrize("how", ["first position", "old attributes"])
def test_a_field_whose_recorded_source_is_another_fields_is_refused(how):
    # xarray's newer concat defaults (coords="minimal", compat="override") and results
    # saved with the position as attributes both give every source the first position.
    model = rg.constant_model({"z": 41, "x": 61})
    results = [rg.traveltime(model, s, radius=4, predecessors=True) for s in CLOSE]
    if how == "old attributes":
        names = ["source_z", "source_x"]
        for k, r in enumerate(results):
            position = {n: float(r[n]) for n in names}
            results[k] = r.drop_vars(names).assign_attrs(position)
            results[k]["traveltime"].attrs.update(position)
        stacked = xr.concat(results, dim="source")
    else:
        with xr.set_options(use_new_combine_kwarg_defaults=True):
            stacked = xr.concat(results, dim="source")
        assert float(stacked.isel(source=1)["source_x"]) == 101.7  # what it guards against
    # Near either source: a point near the second, not joined to the recorded (first)
    # position, was read 2.6x late without a word.
    for point in (NEAR_FIRST, NEAR_SECOND):
        with pytest.raises(InputError, match="2 sources share one recorded position"):
            traveltime_at(stacked["traveltime"], point, velocity=model)
    # One source selected: its scalar position is checked against its times before any
    # point is read, joined to it or not.
    second = stacked.isel(source=1)
    for point in (NEAR_FIRST, NEAR_SECOND):
        with pytest.raises(InputError, match=r"times do not start at its recorded source \(z=3.3"):
            traveltime_at(second, point)
    with pytest.raises(InputError, match="xr.concat or merge of several traveltime"):
        rg.raypath(second, {"z": 390.0, "x": 595.0})
    # The first source's own field and position agree: its rays and times are as solved.
    first = stacked.isel(source=0)
    ray = rg.raypath(first, NEAR_FIRST)
    assert ray.attrs["traveltime"] == float(traveltime_at(first, NEAR_FIRST))


def test_a_model_other_than_the_fields_is_refused():
    # A field records a check of its model (model_check): another model given apart is
    # refused, faster or slower (a Vs model for a Vp table), near the source or not. The
    # same values in other units or another float type are the same model.
    model = rg.constant_model({"z": 41, "x": 61})
    field = rg.traveltime(model, CLOSE[0], radius=4)
    far = {"z": 390.5, "x": 590.5}
    for other in (model * 2.0, model / 1.7):
        for point in (NEAR_FIRST, far):
            with pytest.raises(InputError, match=r"velocity is not the model the field was "
                               r"solved on: .*a ratio of (2\)|0.588)"):  # fmt: skip
                traveltime_at(field, point, velocity=other)
    in_km = (model / 1e3).assign_attrs(units="km/s")
    same = traveltime_at(field, far, velocity=model.astype(np.float32))
    assert float(traveltime_at(field, far, velocity=in_km)) == float(same)
    rays = rg.traveltime(model, CLOSE[0], radius=4, predecessors=True)  # holds its model
    assert "model_check" in rays.attrs or "model_check" in rays["traveltime"].attrs
    # A field saved before the record: the seeds around its source still tell a faster
    # model, checked before any point, near the source or not (a far point's last legs
    # read the model too).
    older = field.copy()
    del older.attrs["model_check"]
    for point in (NEAR_FIRST, far):
        with pytest.raises(InputError, match="or the velocity is not the model the field was"):
            traveltime_at(older, point, velocity=model * 2.0)
    with pytest.raises(InputError, match="field must be an xarray.DataArray or Dataset"):
        traveltime_at(field.values, NEAR_FIRST, velocity=model)


def test_the_source_check_passes_every_solved_field():
    # The bound it checks, t(seed) <= the straight leg from the source, holds with room to
    # spare for float32 (seeds rounded), both weight rules and a source on a node (t = 0
    # there, and with exact weights its box reached along straight legs), in 2D and 3D, on
    # a rough model where paths through nodes compete with legs.
    for shape, source in [
        ({"z": 21, "x": 23}, {"z": 13.7, "x": 61.1}),
        ({"z": 21, "x": 23}, {"z": 10.0, "x": 60.0}),
        ({"z": 9, "y": 11, "x": 10}, {"z": 23.3, "y": 50.0, "x": 41.9}),
    ]:
        model = rg.checkerboard(rg.gradient_model(shape, 10.0, 1500.0, 3000.0), 20.0)
        grid = rg.grid.solved_grid(model)
        for precision, weights in [("float64", "exact"), ("float32", "exact"), ("float64", "mean")]:
            field = rg.traveltime(model, source, radius=2, precision=precision, weights=weights)
            values = rg.nodevalues.NodeValues(field.transpose(*grid.dims).values)
            exact = weights == "exact"
            located = grid.located_source(values, source, grid.radius3(2), exact=exact)
            np.testing.assert_array_equal(located, grid.to_index(source, "source"))


def test_a_recorded_source_a_few_cells_off_is_refused():
    # Only the node nearest the recorded position was checked: one 4 m off (0.4 cell) on
    # each axis passed, and a point 26 m away came out 12 % early.
    model = rg.constant_model({"z": 41, "x": 41}, 10.0, 2000.0)
    field = rg.traveltime(model, {"z": 200.5, "x": 200.5}, radius=3)
    moved = field.assign_coords(source_z=204.0, source_x=204.0)
    with pytest.raises(InputError, match=r"recorded source \(z=204, x=204 m\): .* at a node next"):
        traveltime_at(moved, {"z": 204.0, "x": 230.0}, velocity=model)
    # Times changed since the solve (an origin time added) are refused too: said as such.
    with pytest.raises(InputError, match="the times were changed since the solve"):
        traveltime_at(field + 1.0, {"z": 204.0, "x": 230.0}, velocity=model)
    # A source on a node: its node's own time, not a leg "taking 0 s" (read as rounded).
    on_node = rg.traveltime(model, {"z": 200.0, "x": 200.0}, radius=3)
    with pytest.raises(InputError, match=r"1 s at the source's node, which starts at 0 s\. .*"
                       r"an origin time added: add it to the times read instead"):  # fmt: skip
        traveltime_at(on_node + 1.0, {"z": 204.0, "x": 230.0}, velocity=model)
    # Times scaled since the solve (ms read as s) left its node's 0 as it was, and passed.
    for scale in (1000.0, 1.5):
        with pytest.raises(InputError, match=r"s at a node next to it, where the straight leg"):
            traveltime_at(on_node * scale, {"z": 204.0, "x": 230.0}, velocity=model)


def test_times_changed_since_the_solve_are_refused_wherever_the_points_lie():
    # Fields of several sources (positions along "source") were checked only where a point
    # was joined straight to its source: +5 s passed for points far from the sources and
    # was refused near one, so a grid search's coarse pass ran and its fine pass stopped.
    model = rg.gradient_model({"z": 41, "x": 61}, 10.0, 2000.0, 4000.0)
    sources = [{"z": 0.0, "x": 100.5}, {"z": 3.3, "x": 455.5}]
    fields = rg.traveltimes(model, sources, radius=3, predecessors=True)
    later = fields.assign(traveltime=fields["traveltime"] + 5.0)
    far, near = {"z": 350.0, "x": 280.0}, {"z": 3.0, "x": 103.0}
    for point in (far, near):
        with pytest.raises(InputError, match="the times were changed since the solve"):
            traveltime_at(later, point)
    table = rg.TraveltimeTable(fields)
    assert np.isfinite(table.at([far, near]).values).all()
    assert not table._unchecked  # each checked once, at its first read
    # A big store read lazily around the points is checked where a point uses its source:
    # the check would read a chunk no point needs.
    lazy = rg.TraveltimeTable(later.chunk({"z": 8, "x": 8}), load=False)
    assert np.allclose(lazy.at(far).values, table.at(far).values + 5.0)
    with pytest.raises(InputError, match="the times were changed since the solve"):
        lazy.at(near)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_times_made_earlier_since_the_solve_are_refused(precision):
    # Only later times were refused (a seed above its leg): halved, x 0.99 or an origin
    # time subtracted, the fields gave times early by up to half, silently (an xarray
    # user's review). The seed of least time is reached by its own leg, exactly.
    model = rg.gradient_model({"z": 41, "x": 61}, 10.0, 500.0, 4000.0)
    point = {"z": 200.0, "x": 350.0}
    for source in ({"z": 0.0, "x": 300.0}, {"z": 3.3, "x": 301.7}):  # on a node, and off
        field = rg.traveltime(model, source, radius=4, precision=precision)
        assert np.isfinite(float(traveltime_at(field, point, velocity=model)))
        for earlier in (field - 0.001, field * 0.99, field / 2):
            with pytest.raises(InputError, match="earlier than its recorded source .* no path"
                               "|at the source's node, which starts at 0 s"):  # fmt: skip
                traveltime_at(earlier.assign_attrs(field.attrs), point, velocity=model)
        # A slower model than the field's (a Vs model for a Vp field), near the source.
        slower = (model / 1.73).assign_attrs(model.attrs)
        bare = field.drop_attrs().assign_attrs(radius_z=4, radius_x=4, weights="exact")
        with pytest.warns(rg.InputWarning, match="records no check of the model"):
            with pytest.raises(InputError, match="earlier than its recorded source"):
                traveltime_at(bare, point, velocity=slower)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_a_source_in_a_cell_far_slower_than_its_neighbours_is_not_refused(precision):
    # A review's case: the source's cell 1e8 times slower (a fill value): in float32 a
    # node behind it tied by rounding with the node it is reached from, was taken as the
    # first reached (least time), and the field refused as made earlier. By least leg.
    values = np.full((9, 9), 1000.0)
    values[4, 4] = 1e-5
    coords = {d: (d, np.arange(9) * 10.0, {"units": "m"}) for d in "zx"}
    model = xr.DataArray(values, dims=("z", "x"), attrs={"units": "m/s"}, coords=coords)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rg.InputWarning)  # (the fill value is said)
        field = rg.traveltime(model, {"z": 40.0, "x": 40.0}, radius=2, precision=precision)
        assert np.isfinite(float(traveltime_at(field, {"z": 40.0, "x": 45.0}, velocity=model)))


def _survey_store(tmp_path, receivers, **compute):
    """A 2D survey store of two sources and these receivers, with a receiver table."""
    spec = {
        "model": {"synthetic": "gradient", "shape": {"z": 31, "x": 41}, "spacing": 50.0},
        "grid": {"radius": 3},
        "sources": [{"z": 0.0, "x": 100.0}, {"z": 20.0, "x": 1555.0}],
        "receivers": receivers,
        "outputs": {"store": str(tmp_path / "survey.zarr"), "plot": None, "rays": False},
        "compute": compute,
    }
    path = tmp_path / "workflow.yaml"
    path.write_text(yaml.safe_dump(spec))
    with in_process_client() as client:
        run_workflow(read_workflow(path), client=client)
    return rg.open_survey(tmp_path / "survey.zarr")


def test_points_outside_read_nan_when_asked(model, tables, tmp_path):
    # A grid search or an optimiser stepping past the model's edges crashed on the first
    # point outside (and a catalogue row without a depth, NaN, too).
    points = {"z": [2345.6, -10.0, np.nan, 1200.0], "y": [1234.5, 700.0, 700.0, 700.0],
              "x": [1711.1, 300.0, 300.0, 99999.0]}  # fmt: skip
    with pytest.raises(InputError, match="point 1 .*z=-10 is outside the model"):
        traveltime_at(tables, points)
    read = traveltime_at(tables, points, outside="nan")
    assert read.dims == ("source", "point") and read.sizes["point"] == 4
    inside = traveltime_at(tables, {d: v[:1] for d, v in points.items()})
    np.testing.assert_array_equal(read.values[:, :1], inside.values)
    assert np.isnan(read.values[:, 1:]).all()
    table = rg.TraveltimeTable(tables)
    np.testing.assert_array_equal(table.at(points, outside="nan").values, read.values)
    # Many points (placed at once, the outside ones one by one), some outside.
    many = {d: np.tile(v, 12) for d, v in points.items()}
    np.testing.assert_array_equal(table.at(many, outside="nan").values, np.tile(read.values, 12))
    one = table.at({"z": -1.0, "y": 0.0, "x": 0.0}, outside="nan")
    assert one.dims == ("source",) and np.isnan(one.values).all()
    # A missing coordinate given as None (JSON's null) reads NaN too, as NaN does; refused
    # by default, naming it (it was "not a number" either way).
    gaps = [{"z": None, "y": 700.0, "x": 300.0}, {"z": 1200.0, "y": 700.0, "x": 300.0}]
    missing = table.at(gaps, outside="nan").values
    assert np.isnan(missing[:, 0]).all() and np.isfinite(missing[:, 1]).all()
    columns = {d: [p[d] for p in gaps] for d in ("z", "y", "x")}
    np.testing.assert_array_equal(table.at(columns, outside="nan").values, missing)
    with pytest.raises(InputError, match=r"point 0 .*point z is missing \(None\)"):
        table.at(gaps)
    # Only where a point is; text is still refused, as a misspelt option is.
    with pytest.raises(InputError, match="point z='deep' is not a number"):
        table.at({"z": "deep", "y": 0.0, "x": 0.0}, outside="nan")
    with pytest.raises(InputError, match='outside must be "raise" or "nan", got \'clip\''):
        table.at(points, outside="clip")
    # A store read lazily, the same.
    receivers = [{"z": 1234.5, "x": 987.6}, {"z": 1500.0, "x": 0.0}]
    store = _survey_store(tmp_path, receivers)
    found = traveltime_at(store, receivers + [{"z": 1e6, "x": 0.0}], outside="nan").values
    np.testing.assert_array_equal(found[:, :2], store["receiver_traveltime"].values)
    assert np.isnan(found[:, 2]).all()


def test_points_given_the_xarray_way_keep_their_dims_and_coordinates(model, tables):
    # Stations along their own dim (a Dataset) came back along "point", their codes moved to
    # a "point" coordinate and other coordinates dropped; a lattice of trial hypocentres
    # (a grid search) was refused for its 2D columns.
    flat = traveltime_at(tables, HYPOCENTRES)
    codes = ["E1", "E2", "E3"]
    events = xr.Dataset(
        {d: ("event", v) for d, v in HYPOCENTRES.items()},
        coords={"event": codes, "magnitude": ("event", [1.5, 2.0, 0.7])},
    )
    read = traveltime_at(tables, events)
    assert read.dims == ("source", "event")
    assert list(read["event"].values) == codes and list(read["magnitude"]) == [1.5, 2.0, 0.7]
    np.testing.assert_array_equal(read.values, flat.values)
    np.testing.assert_array_equal(read["point_x"].values, HYPOCENTRES["x"])
    assert list(read["source"].values) == list(tables["source"].values)
    # A mapping of DataArrays and numbers, as interp takes them.
    along = {d: xr.DataArray(v, dims="event") for d, v in HYPOCENTRES.items() if d != "z"}
    surface = traveltime_at(tables, {"z": 0.0, **along})
    assert surface.dims == ("source", "event")
    np.testing.assert_array_equal(
        surface.values, traveltime_at(tables, {"z": 0.0, **{d: a.values for d, a in along.items()}})
    )
    # A lattice: a cube along the Dataset's own dims, each value the flat lookup's.
    lattice = xr.Dataset(
        coords={"z": [1000.0, 2345.6], "y": [700.0, 1234.5, 2000.5], "x": [300.0, 1711.1]}
    )
    cube = rg.TraveltimeTable(tables).at(lattice, outside="nan")
    assert cube.dims == ("source", "z", "y", "x") and cube.shape == (2, 2, 3, 2)
    np.testing.assert_array_equal(cube["z"].values, lattice["z"].values)
    z, y, x = np.meshgrid(lattice["z"], lattice["y"], lattice["x"], indexing="ij")
    points = {"z": z.ravel(), "y": y.ravel(), "x": x.ravel()}
    np.testing.assert_array_equal(cube.values.reshape(2, -1), traveltime_at(tables, points).values)
    assert cube["point_y"].dims == ("z", "y", "x")
    # One source's field: the same dims without "source".
    one = traveltime_at(tables.isel(source=0), lattice)
    assert one.dims == ("z", "y", "x")
    np.testing.assert_array_equal(one.values, cube.values[0])
    # Names the result uses, and coordinates that do not agree, are refused.
    with pytest.raises(InputError, match=r"\['source'\] are names the result uses"):
        traveltime_at(tables, events.rename(event="source"))
    with pytest.raises(InputError, match="do not align"):
        traveltime_at(tables, {"z": xr.DataArray([0.0], coords={"e": [1]}),
                               "y": xr.DataArray([0.0], coords={"e": [2]}), "x": 0.0})  # fmt: skip
    with pytest.warns(rg.InputWarning, match="ignoring column.*'elevation'"):
        traveltime_at(tables, events.assign(elevation=("event", [1.0, 2.0, 3.0])))
    # A name variable names the points as a table's names do: checked, and the index of
    # their dim where it has none (it was a plain coordinate: .sel(point="E1") failed, and
    # two points of one name passed; a review of the change).
    flat_named = traveltime_at(tables, {**HYPOCENTRES, "name": codes})
    named = traveltime_at(tables, events.drop_vars("event").rename(event="point").assign(
        name=("point", codes)))  # fmt: skip
    xr.testing.assert_identical(
        named.sel(point="E2").drop_vars("magnitude"), flat_named.sel(point="E2")
    )
    with pytest.raises(InputError, match="has the name 'E1' again"):
        traveltime_at(tables, events.assign(name=("event", ["E1", "E1", "E3"])))
    kept = traveltime_at(tables, events.assign(name=("event", ["a", "b", "c"])))
    assert list(kept["event"].values) == codes and list(kept["name"].values) == ["a", "b", "c"]
    # Columns of objects read as a flat table's do (numbers, None missing: they were refused
    # here alone), and a coordinate named as the result is refused (to_dataset() failed).
    loose = events.assign(z=("event", np.array([2345.6, None, 3000.0], dtype=object)))
    read = traveltime_at(tables, loose, outside="nan").values
    assert np.isnan(read[:, 1]).all()
    np.testing.assert_array_equal(read[:, [0, 2]], flat.values[:, [0, 2]])
    with pytest.raises(InputError, match=r"\['traveltime'\] are names the result uses"):
        traveltime_at(tables, events.assign_coords(traveltime=("event", [1, 2, 3])))


def test_a_table_checks_each_sources_position_once(model, tables, monkeypatch):
    # A point near a station, asked again and again (an optimiser's steps): the position
    # check ran every call (0.2 ms of a 0.6 ms call).
    from raygrid.pipeline.grid import Grid

    calls = []
    check = Grid.located_source
    monkeypatch.setattr(Grid, "located_source", lambda *a, **k: calls.append(1) or check(*a, **k))
    table = rg.TraveltimeTable(tables)
    near = {"z": 450.0, "y": 520.3, "x": 790.7}  # 4.5 nodes under the first station: joined
    first = table.at(near).values
    for _ in range(3):
        np.testing.assert_array_equal(table.at(near).values, first)
    assert len(calls) == 2  # once a source (two stations)


def test_a_survey_store_reads_its_receiver_table(tmp_path):
    receivers = [{"z": 1234.5, "x": 987.6}, {"z": 1500.0, "x": 0.0}, {"z": 55.5, "x": 1999.9}]
    store = _survey_store(tmp_path, receivers)
    found = traveltime_at(store, receivers)
    np.testing.assert_array_equal(found.values, store["receiver_traveltime"].values)
    # Its model given apart, lazily read: checked on the lattice alone, and passes.
    assert "model_check" in store.attrs
    apart = traveltime_at(store, receivers, velocity=store["velocity"])
    np.testing.assert_array_equal(apart.values, found.values)
    # Its 'traveltime' read with xarray alone records its radius and model check too: a
    # wrong radius= (13.6 % off at radius 1) or a Vs model for its Vp fields (up to 56 %)
    # was taken with, at most, a warning that sent the user nowhere.
    plain = xr.open_zarr(tmp_path / "survey.zarr", consolidated=False)["traveltime"]
    velocity = store["velocity"].load()
    read = traveltime_at(plain, receivers, velocity=velocity)
    np.testing.assert_array_equal(read.values, found.values)
    with pytest.raises(InputError, match="radius {'z': 1, 'x': 1} is not the radius the field"):
        traveltime_at(plain, receivers, velocity=velocity, radius=1)
    with pytest.raises(InputError, match="is not the model the field was solved on"):
        traveltime_at(plain, receivers, velocity=velocity / 1.7)


def test_a_lookup_of_sources_not_solved_yet_says_so(tmp_path):
    # A store still running (or stopped part-way) keeps NaN for the sources it has not
    # finished: read silently, a grid search summing with nansum located with whichever
    # stations were done.
    receivers = [{"z": 1234.5, "x": 987.6}]
    store = _survey_store(tmp_path, receivers)
    import zarr

    zarr.open_array(tmp_path / "survey.zarr" / "traveltime", mode="r+")[1] = np.nan
    zarr.open_array(tmp_path / "survey.zarr" / "source_done", mode="r+")[1] = 0
    store = rg.open_survey(tmp_path / "survey.zarr")
    points = [{"z": 500.0, "x": 500.0}, {"z": 700.0, "x": 1800.0}]
    said = r"1 of the 2 sources have no times \(NaN\) at the points \(numbered from 0 along " \
        r"'source': 1\): not solved \(a survey store still running"  # fmt: skip
    with pytest.warns(rg.InputWarning, match=said):
        found = traveltime_at(store, points)
    assert np.isfinite(found.values[0]).all() and np.isnan(found.values[1]).all()
    with pytest.warns(rg.InputWarning, match="the field has no times"):
        traveltime_at(store.isel(source=1), points)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the sources done: nothing to say
        traveltime_at(store.isel(source=[0]), points)


@pytest.mark.parametrize("tiles", [None, {"z": 16, "x": 14}], ids=["plain", "tiled"])
def test_a_grid_search_reads_a_stores_fields_whole_with_the_same_floats(
    tmp_path, monkeypatch, tiles
):
    # Thousands of trial hypocentres cover a store's field several times over: each field
    # (and the model, once) is read whole and searched in compiled code, not block by block
    # point by point (0.3 ms a point), and gives the same floats.
    from raygrid.pipeline import lookup

    store = _survey_store(
        tmp_path, [{"z": 55.5, "x": 1999.9}], **({"tiles": tiles} if tiles else {})
    )
    # Another model given apart is refused, tiled or not: a tiled store records no check of
    # its model (it never held it whole), and a Vs model given for it was read silently.
    assert ("model_check" in store.attrs) == (tiles is None)
    slower = (store["velocity"] / 1.73).assign_attrs(store["velocity"].attrs)
    with pytest.raises(InputError, match="velocity is not the model the field was solved on"):
        traveltime_at(store, {"z": 55.5, "x": 1999.9}, velocity=slower)
    rng = np.random.default_rng(3)
    points = {"z": rng.uniform(0, 1500, 400), "x": rng.uniform(0, 2000, 400)}
    searched = []  # whether each source's times were read lazily (else: arrays)
    best, arrays = lookup.Grid.last_legs, lookup.Grid.last_leg_arrays
    monkeypatch.setattr(
        lookup.Grid, "last_legs",
        lambda grid, times, *a, **k: searched.append(times.lazy) or best(grid, times, *a, **k),
    )  # fmt: skip
    monkeypatch.setattr(
        lookup.Grid, "last_leg_arrays",
        lambda grid, times, *a, **k: searched.append(times.lazy) or arrays(grid, times, *a, **k),
    )  # fmt: skip
    whole = traveltime_at(store, points)
    assert searched == [False, False]  # one source at a time, each in memory
    few = traveltime_at(store, {d: v[:3] for d, v in points.items()})  # a few: around them,
    # where a field is chunked by tiles; a field of one chunk is read whole (each block
    # around a point read and decompressed all of it again: 20 s for 100 points on 400).
    assert searched[2:] == [tiles is not None] * 2
    np.testing.assert_array_equal(few.values, whole.values[:, :3])
    monkeypatch.setattr(lookup, "LOAD_BYTES", 0)  # too big to read whole: block by block
    blocks = traveltime_at(store, points)
    assert searched[4:] == [True, True]
    np.testing.assert_array_equal(whole.values, blocks.values)


def test_a_tiled_store_is_read_only_around_the_points(tmp_path, monkeypatch):
    # A survey store's fields can be larger than memory: reading times at a few points
    # computes the blocks around them (of each field and of the model), never a whole one,
    # and does not scan the model for bad values (read where the legs are, checked there).
    from dask.callbacks import Callback

    from raygrid.pipeline import nodevalues

    monkeypatch.setattr(nodevalues, "BLOCK", 4)  # 2D blocks of 8^2 nodes: smaller than its tiles

    receivers = [{"z": 1234.5, "x": 987.6}, {"z": 55.5, "x": 1999.9}]
    store = _survey_store(tmp_path, receivers, tiles={"z": 16, "x": 14})
    sizes = []

    class Sizes(Callback):
        def _posttask(self, key, result, dsk, state, worker_id):
            sizes.append(getattr(result, "size", 0))

    with Sizes():
        found = traveltime_at(store, receivers)
    np.testing.assert_array_equal(found.values, store["receiver_traveltime"].values)
    assert sizes and max(sizes) <= 16 * 14 < 31 * 41
    store["velocity"][3, 5] = np.nan  # a bad value away from the points: not looked at
    np.testing.assert_array_equal(traveltime_at(store, receivers).values, found.values)
    store["velocity"][24, 19] = np.nan  # where a leg reads: refused, and located
    z, x = (float(store[d][i]) for d, i in (("z", 24), ("x", 19)))
    with pytest.raises(
        InputError, match=f"velocity must be finite .* the first found is nan at z={z:g}, x={x:g}"
    ):
        traveltime_at(store, receivers)


def test_a_table_built_once_reads_as_traveltime_at(model, tables, monkeypatch):
    # Locating events one after another: the model is checked and converted when the
    # table is built, not at every call, and each call gives traveltime_at's result.
    from raygrid.pipeline import lookup

    named = tables.assign_coords(source=("source", ["STA1", "STA2"]))
    table = rg.TraveltimeTable(named)
    assert repr(table) == (
        "<TraveltimeTable: 2 sources on a 41 x 31 x 31 model (m), radius z=3, y=3, x=3>"
    )
    built = []
    solved = lookup.solved_grid
    monkeypatch.setattr(lookup, "solved_grid", lambda v: built.append(v) or solved(v))
    for z, y, x in zip(*HYPOCENTRES.values()):
        point = {"z": z, "y": y, "x": x, "name": "EV"}
        assert table.at(point).identical(traveltime_at(named, point))
    assert len(built) == len(HYPOCENTRES["z"])  # traveltime_at's calls alone
    assert table.at(HYPOCENTRES).identical(traveltime_at(named, HYPOCENTRES))
    # One station's field selected from the table keeps its name and position.
    station = traveltime_at(named.sel(source="STA2"), HYPOCENTRES)
    assert station["source"].item() == "STA2"
    assert [float(station[f"source_{d}"]) for d in "zyx"] == list(STATIONS[1].values())
    np.testing.assert_array_equal(station.values, table.at(HYPOCENTRES).values[1])
    one = tables["traveltime"].isel(source=0)  # a field without a source dim
    single = rg.TraveltimeTable(one, velocity=model)
    assert repr(single).startswith("<TraveltimeTable: one field on a 41 x 31 x 31 model")
    assert single.at(HYPOCENTRES).identical(traveltime_at(one, HYPOCENTRES, velocity=model))
    # (It said "traveltime_at needs the model" to a TraveltimeTable's user.)
    with pytest.raises(InputError, match=r"\(traveltime_at, TraveltimeTable\) needs the model"):
        rg.TraveltimeTable(one)  # refused when built, not at the first call
    with pytest.raises(InputError, match="outside the model"):
        table.at({"z": -500.0, "y": 0.0, "x": 0.0})


def test_a_table_of_a_store_loads_its_model_once_for_grid_searches(tmp_path, monkeypatch):
    from raygrid.pipeline import lookup

    store = _survey_store(tmp_path, [{"z": 55.5, "x": 1999.9}])
    table = rg.TraveltimeTable(store, load=False)  # read lazily, as a store too big is
    assert repr(table).endswith(", read lazily from a store>")
    rng = np.random.default_rng(5)
    points = {"z": rng.uniform(0, 1500, 400), "x": rng.uniform(0, 2000, 400)}
    loads = []
    solved = lookup.solved_grid
    monkeypatch.setattr(lookup, "solved_grid", lambda v: loads.append(v) or solved(v))
    first = table.at(points)  # read whole: the lazy model loaded, once
    again = table.at(points)
    few = table.at({d: v[:3] for d, v in points.items()})  # around the points, lazily
    assert len(loads) == 1
    assert first.identical(again)
    np.testing.assert_array_equal(few.values, first.values[:, :3])
    assert first.identical(traveltime_at(store, points))


def test_a_table_pickles_for_dask_workers(model, tables):
    # Shipped to workers to locate events in parallel: "cannot pickle '_thread.lock'".
    import pickle

    table = rg.TraveltimeTable(tables)
    copy = pickle.loads(pickle.dumps(table))
    np.testing.assert_array_equal(copy.at(HYPOCENTRES).values, table.at(HYPOCENTRES).values)


def test_a_table_is_read_from_several_threads(monkeypatch):
    # A lazy model's blocks are cached in the table and shared by its calls; the cache
    # (evicting, as a big model's does) raised KeyErrors from 8 threads at once.
    from concurrent.futures import ThreadPoolExecutor

    import dask

    from raygrid.pipeline import nodevalues

    monkeypatch.setattr(nodevalues, "CACHE_BYTES", 32 * 32 * 8)  # about a block: evictions
    model = rg.gradient_model({"z": 61, "x": 71}, 20.0, 2000.0, 5000.0)
    sources = [{"z": 0.0, "x": 100.0}, {"z": 500.0, "x": 1000.0}]
    lazy = rg.traveltimes(model, sources, radius=2, predecessors=True).chunk({"z": 16, "x": 16})
    table = rg.TraveltimeTable(lazy, load=False)  # the model read block by block, cached
    rng = np.random.default_rng(0)
    points = [{"z": float(rng.uniform(0, 1200)), "x": float(rng.uniform(0, 1400))}
              for _ in range(64)]  # fmt: skip
    expected = [traveltime_at(lazy, point) for point in points]
    with dask.config.set(scheduler="synchronous"), ThreadPoolExecutor(8) as pool:
        found = list(pool.map(table.at, points))
    for one, other in zip(found, expected):
        assert one.identical(other)


def test_a_table_of_a_store_that_fits_in_memory_reads_it_once(tmp_path, monkeypatch):
    # Read lazily, each call read the store's chunks again: 35 ms an event on a 31^3 store
    # of 5 stations against 2.4 ms in memory. A store that fits is read when the table is
    # built; the caller's Dataset stays lazy.
    from raygrid.pipeline import lookup

    receivers = [{"z": 1234.5, "x": 987.6}, {"z": 55.5, "x": 1999.9}]
    store = _survey_store(tmp_path, receivers)
    table = rg.TraveltimeTable(store)
    assert table.field.chunks is None and table.grid.slowness is not None
    assert store["traveltime"].chunks is not None and store["velocity"].chunks is not None
    assert "lazily" not in repr(table)
    found = table.at(receivers)
    np.testing.assert_array_equal(found.values, store["receiver_traveltime"].values)
    assert found.identical(traveltime_at(store, receivers).compute())
    monkeypatch.setattr(lookup, "LOAD_BYTES", 0)  # too big: read lazily, around the points
    assert rg.TraveltimeTable(store).field.chunks is not None
    # Its 'traveltime' alone records its radius (and model check) as a result's does.
    alone = rg.TraveltimeTable(store["traveltime"], velocity=store["velocity"])
    assert alone.at(receivers).identical(found)


@pytest.mark.parametrize("positions", [True, False])
def test_many_sources_are_looked_up_on_threads_with_the_same_floats(model, monkeypatch, positions):
    # A survey designer's 5000 points in 3000 fields took 27-48 s on one thread. Sources are
    # spread over threads (the compiled box search runs without the GIL), and each
    # point's time is built from arrays, not a tuple a point: the same floats as one thread.
    from raygrid.pipeline import lookup

    sources = [{"z": 0.0, "y": 300.0 + 700.0 * k, "x": 400.0 + 500.0 * k} for k in range(4)]
    fields = rg.traveltimes(model, sources, radius=3)
    if not positions:  # said once, at the caller's line, not from a thread
        fields = fields.drop_vars([f"source_{d}" for d in ("z", "y", "x")])
    rng = np.random.default_rng(5)
    points = {d: rng.uniform(0.0, 100.0 * (n - 1), 300) for d, n in model.sizes.items()}
    points["z"][:4] = 0.0  # on the sources' plane: some joined to a source, straight
    points["y"][:4], points["x"][:4] = 310.0, 405.0
    table = rg.TraveltimeTable(fields, velocity=model)

    chosen = []
    threads = lookup._lookup_threads
    monkeypatch.setattr(lookup, "_lookup_threads", lambda *a: chosen.append(threads(*a)) or 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = table.at(points)
    monkeypatch.setattr(lookup, "_lookup_threads", lambda *a: chosen.append(threads(*a)) or 3)
    monkeypatch.setattr(lookup, "THREADED_LOOKUP", 1)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        several = table.at(points)
    xr.testing.assert_identical(several, one)
    assert chosen[0] == 1 and chosen[1] == min(4, rg.solve.usable_cpus())
    # Each point its own rule, point by point (the tuples rays are made of).
    grid = table.grid
    for s, source in enumerate(sources):
        times = lookup.NodeValues(fields.isel(source=s).transpose(*grid.dims).values)
        index = np.array([grid.to_index(p, "point") for p in _rows(points)])
        legs = grid.last_legs(times, index, (3, 3, 3), grid.slowness_values(),
                              grid.to_index(source, "source") if positions else None)  # fmt: skip
        expected = np.array([t for _, t, _ in legs]) + np.array([g for _, _, g in legs])
        np.testing.assert_array_equal(one.isel(source=s).values, expected)
    told = [w for w in said if "records no source position" in str(w.message)]
    assert [w.filename for w in told] == ([] if positions else [__file__])


def _rows(columns: dict) -> list[dict]:
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def test_stacked_datasets_are_told_not_to_stack_their_model():
    # xr.concat(..., coords="all") of predecessors=True results stacked the model along
    # source too, and the lookup said only "velocity dims must be ('z', 'x')".
    v = rg.gradient_model({"z": 21, "x": 31}, 10.0, 1000.0, 3000.0)
    results = [
        rg.traveltime(v, {"z": 0.0, "x": x}, radius=2, predecessors=True) for x in (50.0, 250.0)
    ]
    stacked = xr.concat(results, dim="source", coords="all")
    with pytest.raises(InputError, match=r"got \('source', 'z', 'x'\): a model stacked along "
                       r"source .*data_vars=\['traveltime', 'predecessor'\]"):  # fmt: skip
        traveltime_at(stacked, {"z": 100.0, "x": 100.0})
    kept = xr.concat(results, dim="source", coords="all", data_vars=["traveltime", "predecessor"])
    point = {"z": 100.0, "x": 100.0}
    expected = [float(traveltime_at(r, point)) for r in results]
    np.testing.assert_array_equal(traveltime_at(kept, point).values, expected)
    xr.testing.assert_identical(
        rg.raypath(kept, point, source=1).drop_attrs(), rg.raypath(results[1], point).drop_attrs()
    )


def test_a_field_in_other_units_than_seconds_is_refused_as_such(model, tables):
    # Times in ms (units set) were refused by the source check, in 493 characters about
    # the source's position.
    field = tables["traveltime"]
    in_ms = (field * 1000).assign_attrs(units="ms")
    with pytest.raises(InputError, match=r"the field's times are in 'ms': lookups read"):
        traveltime_at(in_ms, HYPOCENTRES, velocity=model)
    seconds = field.assign_attrs(units="sec")
    np.testing.assert_array_equal(
        traveltime_at(seconds, HYPOCENTRES, velocity=model).values,
        traveltime_at(field, HYPOCENTRES, velocity=model).values,
    )


def test_lookup_threads_stay_within_memory_and_off_other_threads(monkeypatch):
    # A lazy store read whole is read by each thread: as many fields held at once (13 GB
    # on 64 cores for 200 MiB fields). A Dask task's (or a caller's pool's) lookup spread
    # over every CPU again, oversubscribing its workers.
    import threading

    from raygrid.pipeline import lookup

    monkeypatch.setattr(rg.solve, "usable_cpus", lambda: 64)
    big = 100 * 2**20
    assert lookup._lookup_threads(500, 5000, True) == 64
    assert lookup._lookup_threads(500, 5000, True, big) == lookup.LOAD_BYTES // big == 2
    assert lookup._lookup_threads(500, 5000, True, 10 * lookup.LOAD_BYTES) == 1
    assert lookup._lookup_threads(500, 5000, False) == 1
    assert lookup._lookup_threads(5, 5000, True) == 5  # no more threads than sources
    assert lookup._lookup_threads(3, 10, True) == 1  # small: one thread
    found = []
    thread = threading.Thread(target=lambda: found.append(lookup._lookup_threads(500, 5000, True)))
    thread.start()
    thread.join()
    assert found == [1]
