"""The CPU Dijkstra equals scipy's Dijkstra on the same explicit graph, bit for bit."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygrid.kernels import (
    EXACT,
    MEAN,
    dijkstra,
    dijkstra_graph,
    forward_star,
    moser_graph,
    precompute_weights,
)

from reference import explicit_graph, reference_times

CASES = [
    # shape (nz, ny, nx), radius (rz, ry, rx), spacing (hz, hy, hx)
    ((13, 1, 17), (3, 0, 3), (10.0, 1.0, 10.0)),
    ((9, 1, 12), (2, 0, 4), (7.0, 1.0, 13.0)),
    ((6, 7, 8), (2, 2, 2), (1.0, 1.5, 2.0)),
    ((5, 6, 4), (1, 2, 3), (3.0, 2.0, 1.0)),
]


def random_slowness(shape, seed):
    rng = np.random.default_rng(seed)
    return 1.0 / rng.uniform(300.0, 6000.0, shape)


@pytest.mark.parametrize("rule", [EXACT, MEAN])
@pytest.mark.parametrize("shape, radius, spacing", CASES)
def test_equals_scipy_exactly(shape, radius, spacing, rule):
    slowness = random_slowness(shape, seed=sum(shape))
    star = forward_star(radius)
    graph = explicit_graph(slowness, spacing, star.offsets, rule)
    source = slowness.size // 2 + 1
    expected = reference_times(graph, [source], [0.0])
    times, predecessor = dijkstra(slowness, np.array(spacing), star, [source], [0.0], rule=rule)
    np.testing.assert_array_equal(times, expected)
    # Precomputed weights give the same floats.
    weights = precompute_weights(slowness, np.array(spacing), star, rule)
    again, _ = dijkstra(slowness, np.array(spacing), star, [source], [0.0], weights=weights)
    np.testing.assert_array_equal(again, expected)
    # Predecessors are consistent: t(v) == t(u) + w(u, v) exactly, via the same graph.
    check_predecessors(times, predecessor, star, shape, graph, seeds=[source])


def check_predecessors(times, predecessor, star, shape, graph, seeds):
    nodes = np.stack(np.unravel_index(np.arange(times.size), shape), axis=1)
    for v in range(times.size):
        if v in seeds:
            assert predecessor[v] == -1
            continue
        u = np.ravel_multi_index(tuple(nodes[v] - star.offsets[predecessor[v]]), shape)
        assert times[v] == times[u] + graph[u, v]


def test_multiple_seeds_equal_super_source():
    shape, radius, spacing = (11, 1, 14), (3, 0, 2), (5.0, 1.0, 4.0)
    slowness = random_slowness(shape, seed=3)
    star = forward_star(radius)
    graph = explicit_graph(slowness, spacing, star.offsets)
    seeds = np.array([5, 40, 77])
    seed_times = np.array([0.003, 0.0, 0.0125])
    expected = reference_times(graph, seeds, seed_times)
    times, _ = dijkstra(slowness, np.array(spacing), star, seeds, seed_times)
    np.testing.assert_array_equal(times, expected)
    # A node seeded twice keeps its smaller time, in the solver and the reference alike
    # (the reference's sparse matrix once added the two).
    twice, twice_times = np.append(seeds, 77), np.append(seed_times, 0.0005)
    expected = reference_times(graph, twice, twice_times)
    times, _ = dijkstra(slowness, np.array(spacing), star, twice, twice_times)
    np.testing.assert_array_equal(times, expected)
    assert times[77] == 0.0005


def test_early_exit_settles_the_targets():
    shape, radius, spacing = (20, 1, 20), (3, 0, 3), (1.0, 1.0, 1.0)
    slowness = random_slowness(shape, seed=4)
    star = forward_star(radius)
    full, _ = dijkstra(slowness, np.array(spacing), star, [0], [0.0])
    targets = np.array([21, 45])
    partial, _ = dijkstra(slowness, np.array(spacing), star, [0], [0.0], target_nodes=targets)
    np.testing.assert_array_equal(partial[targets], full[targets])
    assert np.isinf(partial).sum() > 0  # it did stop early


@pytest.mark.parametrize("precomputed", [False, True])
def test_one_prepared_graph_serves_many_sources(precomputed):
    # A survey builds the graph once and solves every source on it, from several threads:
    # each source must equal scipy on the explicit graph, in any order (nothing a solve
    # does may leak into the next through the shared graph).
    shape, radius, spacing = (12, 3, 10), (2, 1, 3), (4.0, 6.0, 5.0)
    slowness = random_slowness(shape, seed=6)
    star = forward_star(radius)
    weights = precompute_weights(slowness, np.array(spacing), star) if precomputed else None
    graph = moser_graph(slowness, np.array(spacing), star, weights=weights)
    explicit = explicit_graph(slowness, spacing, star.offsets)
    sources = [0, slowness.size - 1, 77, 200, 0]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        solved = list(pool.map(lambda s: dijkstra_graph(graph, [s], [0.0]), sources))
    for source, (times, predecessor) in zip(sources, solved):
        np.testing.assert_array_equal(times, reference_times(explicit, [source], [0.0]))
        check_predecessors(times, predecessor, star, shape, explicit, seeds=[source])
    np.testing.assert_array_equal(graph.slowness[graph.interior], slowness.ravel())


def test_graph_refuses_weights_of_another_model_or_precision():
    slowness = random_slowness((6, 1, 7), seed=7)
    star = forward_star((2, 0, 2))
    weights = precompute_weights(slowness, np.ones(3), star)
    with pytest.raises(ValueError, match="do not fit this model and star"):
        moser_graph(slowness[:5], np.ones(3), star, weights=weights[:30])
    graph = moser_graph(slowness, np.ones(3), star, weights=weights)
    with pytest.raises(ValueError, match="precomputed weights are float64, the times float32"):
        dijkstra_graph(graph, [0], [0.0], dtype=np.float32)


def test_float32_rounds_each_step():
    shape, radius, spacing = (15, 1, 15), (3, 0, 3), (10.0, 1.0, 10.0)
    slowness = random_slowness(shape, seed=5)
    star = forward_star(radius)
    t64, _ = dijkstra(slowness, np.array(spacing), star, [7], [0.0])
    t32, _ = dijkstra(slowness, np.array(spacing), star, [7], [0.0], dtype=np.float32)
    assert t32.dtype == np.float32
    np.testing.assert_allclose(t32, t64, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    nz=st.integers(2, 7),
    ny=st.integers(1, 4),
    nx=st.integers(2, 7),
    data=st.data(),
)
def test_property_random_models_equal_scipy(seed, nz, ny, nx, data):
    radius = (
        data.draw(st.integers(1, nz - 1)),
        0 if ny == 1 else data.draw(st.integers(1, ny - 1)),
        data.draw(st.integers(1, nx - 1)),
    )
    spacing = tuple(data.draw(st.floats(0.1, 100.0)) for _ in range(3))
    rng = np.random.default_rng(seed)
    # Strong contrasts too: slowness over four orders of magnitude.
    slowness = 10.0 ** rng.uniform(-4, 0, (nz, ny, nx))
    star = forward_star(radius)
    graph = explicit_graph(slowness, spacing, star.offsets)
    source = data.draw(st.integers(0, slowness.size - 1))
    times, _ = dijkstra(slowness, np.array(spacing), star, [source], [0.0])
    np.testing.assert_array_equal(times, reference_times(graph, [source], [0.0]))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 0.0, -1.0])
def test_slowness_that_is_not_finite_and_positive_is_refused(bad):
    # Checked by two reductions (min and max) now, not a mask: a NaN must still fail.
    slowness = np.full((5, 1, 6), 1e-3)
    slowness[3, 0, 4] = bad
    with pytest.raises(ValueError, match="slowness must be finite and positive everywhere"):
        dijkstra(slowness, np.ones(3), forward_star((1, 0, 1)), [0], [0.0])


def test_a_weight_rule_by_name_is_the_same_rule():
    slowness = np.random.default_rng(3).uniform(2e-4, 7e-4, (6, 1, 9))
    star = forward_star((3, 0, 3))
    for name, code in (("exact", EXACT), ("mean", MEAN)):
        by_name, _ = dijkstra(slowness, np.ones(3), star, [4], [0.0], rule=name)
        by_code, _ = dijkstra(slowness, np.ones(3), star, [4], [0.0], rule=code)
        np.testing.assert_array_equal(by_name, by_code)
    assert moser_graph(slowness, np.ones(3), star, "mean").rule == MEAN


def _small_solve(**kwargs):
    return dijkstra(np.full((4, 1, 5), 1e-3), np.ones(3), forward_star((1, 0, 1)), **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        # Each was taken: int32 times came back as -2147483648, an int8 predecessor of a
        # 256-offset star wrapped (below), seed 5.7 seeded node 5, the wrong length was
        # NumPy's broadcast error from inside the solve.
        ({"dtype": np.int32}, "dtype must be float32 or float64"),
        ({"dtype": "float16"}, "dtype must be float32 or float64"),
        ({"dtype": "float23"}, "dtype must be float32 or float64"),  # was solved in float64
        ({"dtype": None}, "dtype must be float32 or float64"),
        ({"times": np.zeros(20, np.int64)}, "times must be float32 or float64"),
        ({"times": np.full(19, np.inf)}, "times must be a flat array of the grid's 20 nodes"),
        ({"times": [np.inf] * 20}, "times must be a flat array of the grid's 20 nodes"),
        ({"predecessor": np.zeros(20, np.uint16)}, "predecessor must be a signed integer"),
        ({"predecessor": np.full(20, -1.0)}, "predecessor must be a signed integer"),
        ({"predecessor": np.full(4, -1, np.int16)}, "predecessor must be a flat array"),
        ({"seed_nodes": [5.7]}, "seed nodes must be integer flat indices"),
    ],
)
def test_outputs_and_seeds_the_solve_cannot_use_are_refused(kwargs, message):
    kwargs = {"seed_nodes": [5], "seed_times": [0.0], **kwargs}
    with pytest.raises(ValueError, match=message):
        _small_solve(**kwargs)


def test_a_predecessor_array_too_narrow_for_the_star_is_refused():
    star = forward_star((10, 0, 10))  # 256 offsets: int8 cannot hold 255
    slowness = np.full((12, 1, 12), 1e-3)
    with pytest.raises(ValueError, match="holds 255 .*e.g. int16; got int8"):
        dijkstra(slowness, np.ones(3), star, [5], [0.0], predecessor=np.full(144, -1, np.int8))
    _, predecessor = dijkstra(
        slowness, np.ones(3), star, [5], [0.0], predecessor=np.full(144, -1, np.int16)
    )
    assert predecessor.max() > 127  # what int8 wrapped


def test_given_outputs_of_either_precision_are_filled():
    for dtype in (np.float32, np.float64):
        times = np.full(20, np.inf, dtype)
        out, _ = _small_solve(seed_nodes=[5], seed_times=[0.0], times=times)
        assert out is times and np.isfinite(times).all()


def test_a_2d_slowness_has_the_strides_a_gpu_copy_takes_whole():
    # A 2D model's slowness came as `s[:, np.newaxis, :]`: C-contiguous to NumPy, but its
    # 0 stride made Numba's CUDA copies send it row by row (1601 copies at 1601^2).
    import importlib.util

    import numba_cuda

    from raygrid.kernels.layout import checked_slowness

    # Numba's own rule for a device copy (the module is pure Python; the simulator, on in
    # the tests, replaces it with a stub, so it is loaded from its file).
    path = os.path.join(os.path.dirname(numba_cuda.__file__), "numba/cuda/cudadrv/dummyarray.py")
    spec = importlib.util.spec_from_file_location("dummyarray_for_test", path)
    dummyarray = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dummyarray)
    from raygrid.pipeline import constant_model
    from raygrid.pipeline.grid import grid_from_velocity

    def whole(array):
        layout = dummyarray.Array.from_desc(0, array.shape, array.strides, array.itemsize)
        return layout.is_c_contig

    plane = np.full((5, 6), 1e-3)
    given = plane[:, np.newaxis, :]
    assert given.flags.c_contiguous and not whole(given)
    checked = checked_slowness(given)
    assert whole(checked) and np.shares_memory(checked, plane)  # no copy made
    assert whole(grid_from_velocity(constant_model({"z": 5, "x": 6}, 1000.0)).slowness)
