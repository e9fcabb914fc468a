"""Crossing tables sum the same floats as the weight functions they are read from."""

from __future__ import annotations

import numpy as np
import pytest

from raygrid.kernels import (
    EXACT,
    MEAN,
    PaddedLayout,
    forward_star,
    mean_slowness_time_cpu,
    segment_time_cpu,
    star_crossings,
)


@pytest.mark.parametrize("rule", [EXACT, MEAN])
@pytest.mark.parametrize("radius", [(3, 0, 4), (2, 2, 2), (1, 3, 2)])
def test_table_weights_equal_the_weight_functions_bitwise(rule, radius):
    rng = np.random.default_rng(sum(radius) + rule)
    shape = tuple(2 * r + 3 for r in radius)
    slowness = rng.uniform(1e-4, 2e-3, shape)
    spacing = np.array([7.0, 3.0, 11.0])
    star = forward_star(radius)
    layout = PaddedLayout.unblocked(shape, radius)
    padded = layout.pad(slowness, np.inf).reshape(-1)
    table = star_crossings(star, spacing, rule, layout.padded)
    for low in [(0, 0, 0), (1, min(1, shape[1] - 1), 2), tuple(r for r in radius)]:
        base = int(layout.padded_flat(np.ravel_multi_index(low, shape)))
        for j, offset in enumerate(star.forward):
            high = tuple(int(a + b) for a, b in zip(low, offset))
            if not all(0 <= h < n for h, n in zip(high, shape)):
                continue
            total = 0.0
            for e in range(table.start[j], table.start[j + 1]):
                total += padded[base + table.step[e]] * table.fraction[e]
            weight = total * table.length[j]
            if rule == EXACT:
                expected = segment_time_cpu(slowness, *map(float, low), *map(float, high), *spacing)
            else:
                expected = mean_slowness_time_cpu(slowness, *low, *high, *spacing)
            assert weight == expected, (low, offset)


def test_fractions_sum_to_one_and_cells_step_along_the_segment():
    star = forward_star((5, 0, 5))
    table = star_crossings(star, np.ones(3), EXACT, (20, 1, 20))
    for j, offset in enumerate(star.forward):
        pieces = table.fraction[table.start[j] : table.start[j + 1]]
        assert np.all(pieces > 0)
        assert pieces.sum() == pytest.approx(1.0, rel=1e-15)
        # One piece per cell: the start cell plus one per face crossed, corners counted once.
        assert len(pieces) <= 1 + np.abs(offset).sum()


@pytest.mark.parametrize("rule", [EXACT, MEAN])
def test_only_the_lengths_depend_on_the_spacing(rule):
    """The GPU kernels compile the cells and fractions in as constants, once per star and
    tile, and take only the lengths per model: a spacing must not change the rest."""
    star = forward_star((3, 2, 4))
    unit = star_crossings(star, np.ones(3), rule, (9, 7, 11))
    for spacing in ([7.0, 3.0, 11.0], [0.1, 250.0, 1.0 / 3.0]):
        table = star_crossings(star, np.array(spacing), rule, (9, 7, 11))
        np.testing.assert_array_equal(table.start, unit.start)
        np.testing.assert_array_equal(table.step, unit.step)
        assert table.fraction.tobytes() == unit.fraction.tobytes()
        assert not np.array_equal(table.length, unit.length)


def test_tables_are_made_once_per_star_spacing_rule_and_grid():
    # Every GPU solve asked for them twice (1.4 ms each at 2D radius 5, tracing the walk in
    # Python): they are cached, and read-only, since every caller shares them.
    star = forward_star((3, 0, 3))
    table = star_crossings(star, np.array([10.0, 1.0, 10.0]), EXACT, (20, 1, 20))
    assert star_crossings(forward_star((3, 0, 3)), [10, 1, 10], EXACT, (20, 1, 20)) is table
    for array in (table.start, table.step, table.fraction, table.length):
        assert not array.flags.writeable
    other_grid = star_crossings(star, np.array([10.0, 1.0, 10.0]), EXACT, (20, 1, 21))
    assert not np.array_equal(other_grid.step, table.step)
    assert star_crossings(star, np.array([10.0, 1.0, 10.0]), MEAN, (20, 1, 20)) is not table
    assert star_crossings(forward_star((2, 0, 3)), [10, 1, 10], EXACT, (20, 1, 20)) is not table
