"""Tile, halo and strip geometry: pure functions, no Dask."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from raygrid.pipeline import InputError
from raygrid.pipeline.tiles import SMALL_TILE_NODES, tile_grid


@pytest.mark.parametrize(
    "shape, tile, radius",
    [
        ((10, 1, 13), (4, 1, 5), (2, 0, 3)),
        ((7, 8, 9), (3, 4, 4), (2, 1, 3)),
        ((5, 1, 5), (5, 1, 5), (1, 0, 1)),
    ],
)
def test_interiors_partition_and_strips_cover_halos(shape, tile, radius):
    geometry = tile_grid(dict(zip(("z", "y", "x"), tile)), ("z", "y", "x"), shape, radius)
    owner = np.full(shape, -1)
    for n, index in enumerate(geometry):
        assert np.all(owner[geometry.interior(index)] == -1)
        owner[geometry.interior(index)] = n
    assert np.all(owner >= 0)  # interiors partition the grid
    for index in geometry:
        # The neighbours' strips exactly cover the halo (extended minus interior).
        covered = np.zeros(shape, dtype=int)
        for neighbour in geometry.neighbours(index):
            covered[geometry.strip(neighbour, index)] += 1
        halo = np.zeros(shape, dtype=bool)
        halo[geometry.extended(index)] = True
        halo[geometry.interior(index)] = False
        np.testing.assert_array_equal(covered, halo.astype(int))
        # Every node of the tile can reach only nodes of the extended box.
        for node in itertools.product(*(range(s.start, s.stop) for s in geometry.interior(index))):
            for axis in range(3):
                ext = geometry.extended(index)[axis]
                assert ext.start <= max(node[axis] - radius[axis], 0)
                assert ext.stop >= min(node[axis] + radius[axis] + 1, shape[axis])


def test_local_and_owner():
    geometry = tile_grid({"z": 4, "x": 5}, ("z", "x"), (10, 1, 13), (2, 0, 3))
    assert geometry.counts == (3, 1, 3)
    assert geometry.extended((1, 0, 1)) == (slice(2, 10), slice(0, 1), slice(2, 13))
    assert geometry.local(geometry.interior((1, 0, 1)), (1, 0, 1)) == (
        slice(2, 6), slice(0, 1), slice(3, 8),
    )  # fmt: skip
    np.testing.assert_array_equal(
        geometry.owner(np.array([[9, 0, 12], [0, 0, 5]])), [[2, 0, 2], [0, 0, 1]]
    )


@pytest.mark.parametrize(
    "tiles, message",
    [
        ({"q": 4}, "unknown dims"),
        ({"z": 0}, "positive integer"),
        ({"z": 2.5}, "positive integer"),
        ({"z": 1, "x": 8}, "smaller than the halo"),
        ([4, 4], "must map dim names"),
    ],
)
def test_bad_tiles(tiles, message):
    with pytest.raises(InputError, match=message):
        tile_grid(tiles, ("z", "x"), (10, 1, 13), (2, 0, 3))


@pytest.mark.parametrize(
    "dims, shape, tile, said",
    [
        (("z", "x"), (100, 1, 200), (100, 1, 40), "tiles of 100 x 40 nodes are small"),
        (("z", "x"), (100, 1, 100), (64, 1, 64), None),  # 4096 nodes: not small
        (("z", "y", "x"), (40, 40, 40), (10, 10, 10), "tiles of 10 x 10 x 10 nodes are small"),
        (("z", "y", "x"), (12, 12, 12), (12, 12, 12), None),  # one tile: nothing is cut
    ],
)
def test_small_tiles_are_said_with_their_size_in_the_models_dims(dims, shape, tile, said):
    # 7^3 tiles on a 60^3 model took 316 s against 0.84 s whole, without a word.
    radius = (2, 2 if "y" in dims else 0, 2)
    tiles = {d: t for d, t in zip(("z", "y", "x"), tile) if d in dims}
    geometry = tile_grid(tiles, dims, shape, radius)
    message = geometry.small_tiles(dims)
    if said is None:
        assert message is None
    else:
        assert message.startswith(said) and f"tiles of {SMALL_TILE_NODES} nodes or more" in message
