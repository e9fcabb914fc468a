"""ray_cells: each ray's length in each cell, summing to the ray's traveltime."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raygrid.pipeline as rg


def times_from_cells(cells: xr.Dataset, velocity: xr.DataArray, n_rays: int) -> np.ndarray:
    """Each ray's ``sum(length / v)`` over its cells (v in m/s), as a tomography's ``G s``."""
    slowness = 1.0 / velocity.transpose(*[d for d in "zyx" if d in velocity.dims]).values.ravel()
    return np.bincount(
        cells["ray"].values,
        weights=cells["length"].values * slowness[cells["cell"].values],
        minlength=n_rays,
    )


def assert_cells_give_the_rays_times(velocity, source, receivers, **options):
    result = rg.traveltime(velocity, source, predecessors=True, **options)
    cells = rg.ray_cells(result, receivers)
    rays = rg.raypaths(result, receivers)
    expected = np.array([ray.attrs["traveltime"] for ray in rays])
    np.testing.assert_allclose(times_from_cells(cells, velocity, len(rays)), expected, rtol=1e-13)
    return cells


@pytest.mark.parametrize("weights", ["exact", "mean"])
@pytest.mark.parametrize("source", [{"z": 0.0, "x": 100.0}, {"z": 13.3, "x": 251.7}])
def test_a_rays_cells_sum_to_its_traveltime(weights, source):
    # On and off nodes, both weight rules, receivers between nodes and near the source
    # (straight from it): each leg's length goes where the solver timed it.
    velocity = rg.checkerboard(rg.gradient_model({"z": 31, "x": 41}, 10.0, 1500.0, 4000.0), 50.0)
    rng = np.random.default_rng(3)
    receivers = [{"z": float(z), "x": float(x)} for z, x in rng.uniform(0, 300, (12, 2))]
    receivers += [{"z": 15.0, "x": 255.2}, source]  # straight from it; at the source itself
    cells = assert_cells_give_the_rays_times(velocity, source, receivers, radius=3, weights=weights)
    assert (cells["length"] >= 0).all()
    assert set(cells.data_vars) == {"ray", "cell", "cell_z", "cell_x", "length"}
    assert cells["length"].attrs["units"] == "m"


def test_a_3d_rays_cells_sum_to_its_traveltime():
    model = rg.gradient_model({"z": 11, "y": 12, "x": 13}, 10.0, 1500.0, 4000.0)
    velocity = rg.checkerboard(model, 30.0, 0.3)
    rng = np.random.default_rng(4)
    receivers = [dict(zip("zyx", map(float, p))) for p in rng.uniform(0, 100, (10, 3))]
    cells = assert_cells_give_the_rays_times(
        velocity, {"z": 3.3, "y": 51.2, "x": 60.9}, receivers, radius=2
    )
    flat = np.ravel_multi_index([cells[f"cell_{d}"].values for d in "zyx"], velocity.shape)
    np.testing.assert_array_equal(flat, cells["cell"].values)


def test_a_straight_ray_in_a_constant_model_crosses_each_cell_whole():
    # Node-centred cells: half a cell at each end, whole cells between.
    velocity = rg.constant_model({"z": 5, "x": 21}, 10.0, 2000.0)
    result = rg.traveltime(velocity, {"z": 20.0, "x": 0.0}, radius=2, predecessors=True)
    cells = rg.ray_cells(result, [{"z": 20.0, "x": 100.0}])
    assert cells["cell_z"].values.tolist() == [2] * 11
    assert cells["cell_x"].values.tolist() == list(range(11))
    np.testing.assert_allclose(cells["length"].values, [5.0] + [10.0] * 9 + [5.0], rtol=1e-15)


def test_a_leg_in_a_cell_face_goes_through_the_faster_cell():
    # A source and a receiver 5 m deep on a 10 m grid: their straight leg lies in the face
    # between the fast top row and the row below, timed through the fast one (the face
    # rule): a walk of the kernel alone booked it to the slow row, 0.67 % off (tomography
    # review).
    velocity = rg.gradient_model({"z": 21, "x": 201}, 10.0, 3000.0, 1000.0)
    receivers = [{"z": 5.0, "x": 1030.7}, {"z": 5.0, "x": 1017.0}]
    cells = assert_cells_give_the_rays_times(velocity, {"z": 5.0, "x": 1000.3}, receivers, radius=4)
    assert (cells["cell_z"] == 0).all()


@pytest.mark.parametrize("weights", ["exact", "mean"])
def test_a_leg_along_a_cell_edge_goes_through_the_fastest_of_four_cells(weights):
    # In 3D a source and a receiver at one half-integer depth and y lie on the edge where
    # four cells meet, timed through the fastest (diagonal here); the cell was chosen one
    # axis at a time, 3 of the 4 compared: the time booked to the 3000 m/s cell, 100 % off.
    velocity = rg.constant_model({"z": 6, "y": 6, "x": 21}, 10.0, 2000.0)
    values = velocity.values.copy()
    values[2, 2], values[3, 3], values[2, 3], values[3, 2] = 6000.0, 3000.0, 1000.0, 1000.0
    velocity = velocity.copy(data=values)
    receivers = [{"z": 25.0, "y": 25.0, "x": 90.1}, {"z": 25.0, "y": 25.0, "x": 60.0}]
    source = {"z": 25.0, "y": 25.0, "x": 50.3}
    cells = assert_cells_give_the_rays_times(velocity, source, receivers, radius=3, weights=weights)
    assert set(zip(cells["cell_z"].values, cells["cell_y"].values)) == {(2, 2)}


def test_a_table_of_receivers_and_a_source_of_several():
    velocity = rg.gradient_model({"z": 21, "x": 31}, 10.0, 1500.0, 3000.0)
    sources = [{"z": 0.0, "x": 50.0}, {"z": 0.0, "x": 250.0}]
    result = rg.traveltimes(velocity, sources, radius=3, predecessors=True)
    receivers = {"z": [200.0, 150.0], "x": [10.0, 290.0]}
    one = rg.ray_cells(result, receivers, source=1)
    xr.testing.assert_identical(one, rg.ray_cells(result.isel(source=1), receivers))
    with pytest.raises(rg.InputError, match="ray_cells takes one source: pass source="):
        rg.ray_cells(result, receivers)
    # A field alone: said for ray_cells (it said "raypath needs ... or a survey store").
    with pytest.raises(rg.InputError, match=r"^ray_cells needs the Dataset returned by trav"):
        rg.ray_cells(rg.traveltime(velocity, sources[0], radius=3), receivers)
    # No receivers: no entries (raypaths gives []), not NumPy's "need at least one array".
    empty = rg.ray_cells(result, [], source=0)
    assert empty.sizes["entry"] == 0 and empty.attrs["n_rays"] == 0
    assert one.attrs == {"model_dims": ["z", "x"], "model_shape": [21, 31], "n_rays": 2}
    # Several sources at once, rows numbered source after source: a survey's matrix in one
    # call, in the order of its lookups' times (each source's rows were offset by hand).
    named = rg.traveltimes(
        velocity, [{"name": n, **p} for n, p in zip(["A", "B"], sources)], radius=3,
        predecessors=True,
    )  # fmt: skip
    both = rg.ray_cells(named, receivers, source=["B", 0])
    assert both.attrs["n_rays"] == 4 and both.attrs["n_sources"] == 2
    times = times_from_cells(both, named["velocity"], 4)
    expected = rg.traveltime_at(named.isel(source=[1, 0]), receivers).values.ravel()
    np.testing.assert_allclose(times, expected, rtol=1e-14)
    first = both.where(both["source"] == 1, drop=True)
    np.testing.assert_array_equal(first["receiver"].values, one["ray"].values)
    np.testing.assert_array_equal(first["length"].values, one["length"].values)
    assert set(both.where(both["source"] == 0, drop=True)["ray"].values.astype(int)) <= {2, 3}
    with pytest.raises(rg.InputError, match="no sources"):
        rg.ray_cells(named, receivers, source=[])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    radius=st.integers(1, 4),
    weights=st.sampled_from(["exact", "mean"]),
)
def test_cells_sum_to_the_rays_times_on_random_models(seed, radius, weights):
    # Speeds from 500 to 6000 m/s in cells of random size, source and receivers anywhere.
    rng = np.random.default_rng(seed)
    shape = {"z": int(rng.integers(4, 16)), "x": int(rng.integers(4, 16))}
    velocity = rg.constant_model(shape, 10.0, 1000.0).copy(
        data=rng.uniform(500.0, 6000.0, (shape["z"], shape["x"]))
    )
    span = {d: 10.0 * (n - 1) for d, n in shape.items()}

    def point():
        return {d: float(np.round(rng.uniform(0, span[d]) * 2) / 2) for d in shape}

    receivers = [point() for _ in range(6)]
    radius = min(radius, min(shape.values()) - 1)
    assert_cells_give_the_rays_times(velocity, point(), receivers, radius=radius, weights=weights)


@pytest.mark.parametrize("shape", [(5, 1, 7), (2**40, 2**20, 3)], ids=["model", "past-int64"])
def test_entries_are_summed_per_ray_and_cell_in_their_order(shape):
    # One int64 key a (ray, cell) (3x faster than unique rows), or rows where rays x cells
    # would pass int64.
    from types import SimpleNamespace

    from raygrid.pipeline.raycells import _table

    grid = SimpleNamespace(shape3=shape, shape=shape, dims=("z", "y", "x"))
    rng = np.random.default_rng(1)
    rays = np.repeat(np.arange(8), 12)
    cells = rng.integers(0, 6, rays.size) * (np.prod(shape, dtype=np.int64) // 6)
    lengths = rng.uniform(0.0, 10.0, rays.size)
    table = _table(grid, rays, cells, lengths)
    summed = {}
    for r, c, length in zip(rays.tolist(), cells.tolist(), lengths):
        summed[(r, c)] = summed.get((r, c), 0.0) + length
    pairs = sorted(summed)
    assert list(zip(table["ray"].values.tolist(), table["cell"].values.tolist())) == pairs
    np.testing.assert_allclose(table["length"].values, [summed[p] for p in pairs], rtol=1e-15)
    z, y, x = np.unravel_index(table["cell"].values, shape)
    np.testing.assert_array_equal(table["cell_x"].values, x)
