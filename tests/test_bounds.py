"""Edge lower bounds: the moving minimum is right, never above a weight, and pruning with it
changes no float."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import minimum_filter

from raygrid.kernels import EXACT, MEAN, PaddedLayout, dijkstra, forward_star, precompute_weights
from raygrid.kernels.bounds import reach_lengths, slowness_floor
from raygrid.kernels.crossings import star_crossings

CASES = [
    ((13, 1, 17), (3, 0, 3), (10.0, 1.0, 10.0)),
    ((9, 1, 12), (2, 0, 4), (7.0, 1.0, 13.0)),
    ((6, 7, 8), (2, 2, 2), (1.0, 1.5, 2.0)),
    ((5, 6, 4), (1, 2, 3), (3.0, 2.0, 1.0)),
]


def contrasted_slowness(shape, seed):
    # Four orders of magnitude, so a loose or wrong bound would show.
    return 10.0 ** np.random.default_rng(seed).uniform(-4, 0, shape)


@pytest.mark.parametrize("shape, radius, spacing", CASES)
def test_floor_is_the_window_minimum(shape, radius, spacing):
    slowness = contrasted_slowness(shape, seed=1)
    window = tuple(2 * r + 1 for r in radius)
    expected = minimum_filter(slowness, size=window, mode="nearest")
    np.testing.assert_array_equal(slowness_floor(slowness, radius), expected)


@pytest.mark.parametrize("rule", [EXACT, MEAN])
@pytest.mark.parametrize("shape, radius, spacing", CASES)
def test_bound_never_exceeds_a_weight(shape, radius, spacing, rule):
    slowness = contrasted_slowness(shape, seed=2)
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


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, radius, spacing", CASES)
def test_pruned_solve_equals_precomputed_solve(shape, radius, spacing, dtype):
    """The on-the-fly solve skips edges by their bound; the precomputed one relaxes every
    edge. Same floats, predecessors included, in both precisions."""
    slowness = contrasted_slowness(shape, seed=3)
    star = forward_star(radius)
    spacing = np.array(spacing)
    weights = precompute_weights(slowness, spacing, star, EXACT, dtype=dtype)
    seeds = [0, slowness.size - 1]
    pruned = dijkstra(slowness, spacing, star, seeds, [0.0, 0.5], dtype=dtype)
    full = dijkstra(slowness, spacing, star, seeds, [0.0, 0.5], weights=weights, dtype=dtype)
    np.testing.assert_array_equal(pruned[0], full[0])
    np.testing.assert_array_equal(pruned[1], full[1])
