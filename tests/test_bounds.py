"""Edge lower bounds: the moving minimum is right, never above a weight, and pruning with it
changes no float (float64 is covered by the scipy tests of test_dijkstra)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import minimum_filter

from raygrid.kernels import EXACT, MEAN, PaddedLayout, dijkstra, forward_star, precompute_weights
from raygrid.kernels.bounds import reach_lengths, slowness_floor
from raygrid.kernels.crossings import star_crossings

from reference import explicit_graph, reference_times_float32

CASES = [
    ((13, 1, 17), (3, 0, 3), (10.0, 1.0, 10.0)),
    ((9, 1, 12), (2, 0, 4), (7.0, 1.0, 13.0)),
    ((6, 7, 8), (2, 2, 2), (1.0, 1.5, 2.0)),
    ((5, 6, 4), (1, 2, 3), (3.0, 2.0, 1.0)),
]


def contrasted_slowness(shape, seed):
    # Four orders of magnitude, so a loose or wrong bound would show.
    return 10.0 ** np.random.default_rng(seed).uniform(-4, 0, shape)


def model(kind, shape, seed):
    if kind == "constant":  # every bound is tight: the weight is the floor times the length
        return np.full(shape, 1.0 / 3000.0)
    return contrasted_slowness(shape, seed)


@pytest.mark.parametrize("shape, radius, spacing", CASES)
def test_floor_is_the_window_minimum(shape, radius, spacing):
    slowness = contrasted_slowness(shape, seed=1)
    window = tuple(2 * r + 1 for r in radius)
    expected = minimum_filter(slowness, size=window, mode="nearest")
    original = slowness.copy()
    np.testing.assert_array_equal(slowness_floor(slowness, radius), expected)
    np.testing.assert_array_equal(slowness, original)  # the input is not a scratch buffer


@pytest.mark.parametrize("kind", ["contrasted", "constant"])
@pytest.mark.parametrize("rule", [EXACT, MEAN])
@pytest.mark.parametrize("shape, radius, spacing", CASES)
def test_bound_never_exceeds_a_weight(shape, radius, spacing, rule, kind):
    slowness = model(kind, shape, seed=2)
    star = forward_star(radius)
    weights = precompute_weights(slowness, np.array(spacing), star, rule)
    layout = PaddedLayout.unblocked(shape, star.radius)
    reach = reach_lengths(star_crossings(star, np.array(spacing), rule, layout.padded).length)
    floor = slowness_floor(slowness, star.radius).reshape(-1)
    nodes = np.stack(np.unravel_index(np.arange(slowness.size), shape), axis=1)
    for j, offset in enumerate(star.forward):
        ends = nodes + offset
        inside = np.all((ends >= 0) & (ends < np.array(shape)), axis=1)
        u = np.flatnonzero(inside)
        v = np.ravel_multi_index(tuple(ends[inside].T), shape)
        # Either end's floor bounds the edge: its cells lie in both windows.
        assert np.all(floor[u] * reach[j] <= weights[u, j])
        assert np.all(floor[v] * reach[j] <= weights[u, j])
        assert np.all(np.isinf(weights[~inside, j]))


@pytest.mark.parametrize("kind", ["contrasted", "constant"])
@pytest.mark.parametrize("shape, radius, spacing", CASES)
def test_pruned_float32_solve_equals_reference(shape, radius, spacing, kind):
    """scipy covers float64; in float32 the bound is rounded like the weights and the
    pruned solves (on the fly and precomputed) still equal a plain float32 Dijkstra."""
    slowness = model(kind, shape, seed=3)
    star = forward_star(radius)
    spacing = np.array(spacing)
    graph = explicit_graph(slowness, spacing, star.offsets)
    seeds, seed_times = [0, slowness.size - 1], [0.0, 0.5]
    expected = reference_times_float32(graph, seeds, seed_times)
    weights = precompute_weights(slowness, spacing, star, EXACT, dtype=np.float32)
    fly, _ = dijkstra(slowness, spacing, star, seeds, seed_times, dtype=np.float32)
    pre, _ = dijkstra(slowness, spacing, star, seeds, seed_times, weights=weights,
                      dtype=np.float32)  # fmt: skip
    np.testing.assert_array_equal(fly, expected)
    np.testing.assert_array_equal(pre, expected)
