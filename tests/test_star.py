from math import gcd

import numpy as np
import pytest

from raygrid.kernels import forward_star, star_offsets


@pytest.mark.parametrize(
    "radius, expected",
    [
        ((1, 0, 1), 8),
        ((2, 0, 2), 16),
        ((5, 0, 5), 80),
        ((1, 1, 1), 26),
        ((2, 2, 2), 98),
        ((3, 0, 1), 16),
    ],
)
def test_star_sizes(radius, expected):
    assert star_offsets(radius).shape == (expected, 3)


@pytest.mark.parametrize("radius", [(1, 0, 1), (3, 0, 2), (2, 1, 3), (2, 2, 2)])
def test_star_is_reduced_symmetric_and_complete(radius):
    offsets = star_offsets(radius)
    as_set = {tuple(o) for o in offsets.tolist()}
    assert len(as_set) == len(offsets)
    assert all((-a, -b, -c) in as_set for a, b, c in as_set)
    assert all(gcd(gcd(a, b), c) == 1 for a, b, c in as_set)
    full = star_offsets(radius, reduce=False)
    assert len(full) == np.prod([2 * r + 1 for r in radius]) - 1
    # Every dropped offset is a multiple of a kept one.
    for o in {tuple(o) for o in full.tolist()} - as_set:
        g = gcd(gcd(o[0], o[1]), o[2])
        assert tuple(c // g for c in o) in as_set


def test_star_half_tables():
    star = forward_star((2, 1, 3))
    assert len(star.forward) * 2 == star.size
    for k, offset in enumerate(star.offsets):
        expected = offset if star.is_forward[k] else -offset
        np.testing.assert_array_equal(star.forward[star.half[k]], expected)
    # Forward means a larger flat index on any grid.
    steps = (star.offsets[:, 0] * 7 + star.offsets[:, 1]) * 11 + star.offsets[:, 2]
    np.testing.assert_array_equal(steps > 0, star.is_forward)


@pytest.mark.parametrize("radius", [(0, 0, 0), (-1, 0, 1)])
def test_star_rejects_bad_radius(radius):
    with pytest.raises(ValueError):
        star_offsets(radius)


@pytest.mark.parametrize("radius", [(3.9, 0, 3), 3, (3, 3), (True, 0, 1), "abc", None])
def test_a_radius_that_is_not_three_integers_is_refused(radius):
    # (3.9, 0, 3) was radius 3 (int() truncated it); a bare 3 a TypeError on unpacking.
    with pytest.raises(ValueError, match=r"radius must be three integers \(rz, ry, rx\)"):
        forward_star(radius)


def test_a_radius_of_numpy_integers_is_taken():
    star = forward_star(np.array([2, 0, 2]))
    assert star.radius == (2, 0, 2) and all(type(r) is int for r in star.radius)
