"""NodeValues: model-shaped arrays read at nodes and boxes, block by block when lazy."""

import dask
import dask.array as da
import numpy as np
import pytest

from raygrid.pipeline import nodevalues
from raygrid.pipeline.nodevalues import NodeValues


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 nodes a side, so that these small arrays span several."""
    monkeypatch.setattr(nodevalues, "BLOCK", 4)


def _random_boxes(shape3, rng, count=40):
    for _ in range(count):
        low = [int(rng.integers(0, n)) for n in shape3]
        high = [int(rng.integers(lo + 1, n + 1)) for lo, n in zip(low, shape3)]
        yield np.array(low), np.array(high)


@pytest.mark.parametrize("block", [4, 32])
@pytest.mark.parametrize(
    ("shape", "chunks"),
    [((13, 7, 11), (4, 3, 5)), ((9, 1, 12), (2, 1, 12)), ((17, 19), (5, (3, 7, 9)))],
)
def test_lazy_reads_equal_the_array(monkeypatch, shape, chunks, block):
    monkeypatch.setattr(nodevalues, "BLOCK", block)
    rng = np.random.default_rng(3)
    values = rng.random(shape)
    eager = NodeValues(values)
    lazy = NodeValues(da.from_array(values, chunks=chunks))
    shape3 = eager.shape3
    assert lazy.shape3 == shape3 == (shape if len(shape) == 3 else (shape[0], 1, shape[1]))
    whole = values if values.ndim == 3 else values[:, np.newaxis, :]
    for low, high in _random_boxes(shape3, rng):
        box = lazy.box(low, high)
        assert box.flags.c_contiguous and eager.box(low, high).flags.c_contiguous
        np.testing.assert_array_equal(box, whole[tuple(map(slice, low, high))])
        np.testing.assert_array_equal(eager.box(low, high), box)
    nodes = np.stack([rng.integers(0, n, size=(5, 6)) for n in shape3], axis=-1)
    expected = whole[nodes[..., 0], nodes[..., 1], nodes[..., 2]]
    np.testing.assert_array_equal(lazy.at(nodes), expected)
    np.testing.assert_array_equal(eager.at(nodes), expected)
    for node in nodes.reshape(-1, 3)[:10]:
        assert lazy.value(node) == whole[tuple(node)] == eager.value(node)


def test_blocks_are_read_once_together_and_converted_value_by_value(small_blocks):
    values = np.arange(1.0, 1.0 + 8 * 6 * 10).reshape(8, 6, 10)
    lazy = NodeValues(da.from_array(values, chunks=(8, 6, 10)), convert=lambda v, start: 1.0 / v)
    whole = 1.0 / values
    np.testing.assert_array_equal(lazy.box((0, 0, 0), (8, 6, 10)), whole)
    assert (lazy.fetched, lazy.computations) == (2 * 2 * 3, 1)  # every block, one trip
    np.testing.assert_array_equal(lazy.box((1, 1, 1), (7, 5, 9)), whole[1:7, 1:5, 1:9])
    assert lazy.value((3, 2, 4)) == whole[3, 2, 4]
    np.testing.assert_array_equal(lazy.at([[0, 0, 0], [7, 5, 9]]), whole[[0, 7], [0, 5], [0, 9]])
    assert (lazy.fetched, lazy.computations) == (12, 1)  # all from the cache


def test_prefetch_reads_the_blocks_of_many_boxes_in_one_computation(small_blocks):
    values = np.random.default_rng(1).random((16, 1, 16))
    lazy = NodeValues(da.from_array(values, chunks=8))
    boxes = [((0, 0, 0), (2, 1, 2)), ((5, 0, 5), (9, 1, 9)), ((15, 0, 15), (16, 1, 16))]
    lazy.prefetch(boxes)
    # A 2D array's blocks hold as many nodes as 3D ones, 8^2 here: the second box overlaps
    # four, the first and third lie in two of those.
    assert (lazy.fetched, lazy.computations) == (4, 1)
    for low, high in boxes:
        np.testing.assert_array_equal(lazy.box(low, high), values[tuple(map(slice, low, high))])
    assert lazy.computations == 1
    NodeValues(values).prefetch(boxes)  # in memory: nothing to do


def test_the_cache_is_bounded(small_blocks, monkeypatch):
    values = np.zeros((8, 6, 10))
    block_bytes = 4 * 4 * 4 * 8
    lazy = NodeValues(da.from_array(values, chunks=(4, 3, 5)), cache_bytes=2 * block_bytes)
    for node in ((0, 0, 0), (4, 0, 0), (0, 0, 4)):  # the third drops the first
        lazy.value(node)
    assert lazy.fetched == 3 and len(lazy._cache) == 2
    lazy.value((4, 0, 0))  # still held
    assert lazy.fetched == 3
    lazy.value((0, 0, 0))  # dropped: read again
    assert lazy.fetched == 4 and len(lazy._cache) == 2
    # A read needing more blocks than the cache holds still gets them all, and the cache
    # keeps no more than its bound after it.
    np.testing.assert_array_equal(lazy.box((0, 0, 0), (8, 6, 10)), values)
    assert lazy._held <= 2 * block_bytes
    np.testing.assert_array_equal(lazy.at(np.array([[0, 0, 0], [7, 5, 9]])), [0.0, 0.0])
    assert lazy._held <= 2 * block_bytes
    # The bound is read when a reader is made (the README names the module constant).
    monkeypatch.setattr(nodevalues, "CACHE_BYTES", 123)
    assert NodeValues(da.zeros((4, 4), chunks=2))._cache_bytes == 123


def test_converted_values_keep_the_converted_type(small_blocks):
    # A float32 velocity model read as float64 slowness: every read gives the converted
    # floats, not float32 roundings of them.
    values = np.random.default_rng(5).uniform(1000.0, 3000.0, (6, 5, 9)).astype(np.float32)
    lazy = NodeValues(
        da.from_array(values, chunks=3), convert=lambda v, start: 1.0 / v.astype(float)
    )
    whole = 1.0 / values.astype(float)
    nodes = np.array([[0, 0, 0], [5, 4, 8], [3, 2, 6]])
    assert lazy.dtype == np.float64
    np.testing.assert_array_equal(lazy.at(nodes), whole[tuple(nodes.T)])
    assert lazy.at(nodes).dtype == np.float64
    assert lazy.value(nodes[1]) == whole[5, 4, 8]
    np.testing.assert_array_equal(lazy.box((1, 1, 1), (6, 5, 9)), whole[1:, 1:, 1:])
    assert lazy._block_bytes() == 4 * 4 * 4 * 8


def test_a_lazy_array_is_never_computed_whole(small_blocks):
    values = da.from_array(np.ones((12, 12, 12)), chunks=6)
    computed = []

    class Sizes(dask.callbacks.Callback):
        def _posttask(self, key, result, dsk, state, worker_id):
            computed.append(getattr(result, "size", 0))

    lazy = NodeValues(values)
    with Sizes():
        lazy.box((2, 2, 2), (10, 10, 10))
        lazy.at([[0, 0, 0], [11, 11, 11]])
    assert lazy.fetched == 27 and max(computed) <= 6**3


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="2D or 3D"):
        NodeValues(np.zeros(5))


def test_2d_blocks_hold_as_many_nodes_as_3d_ones():
    # 32^2 blocks of a 2D field made a ray walked back through a tiled solve's field a
    # round trip every ~10 steps; its blocks now hold as many nodes as a 3D one's.
    assert nodevalues.BLOCK == 32
    assert list(NodeValues(da.zeros((500, 900), chunks=100))._block) == [181, 1, 181]
    assert list(NodeValues(da.zeros((50, 900), chunks=100))._block) == [50, 1, 181]
    assert list(NodeValues(da.zeros((90, 90, 90), chunks=30))._block) == [32, 32, 32]
    assert list(NodeValues(da.zeros((90, 1, 90), chunks=30))._block) == [90, 1, 90]


@pytest.mark.parametrize("cache_blocks", [None, 1])
def test_rays_of_a_lazy_field_are_walked_together(small_blocks, monkeypatch, cache_blocks):
    """Many rays on a lazy field (a tiled solve's) read its predecessors' blocks only when
    every ray waits for one: at most a round trip per block the longest ray enters, not
    one each time any ray enters one, and the same rays as in memory; with a cache of one
    block, too (each ray then waits in turn)."""
    import raygrid.pipeline as rg
    from raygrid.pipeline.grid import grid_from_velocity
    from raygrid.pipeline.rays import _node_paths, ray_field, trace_rays

    if cache_blocks is not None:
        monkeypatch.setattr(nodevalues, "CACHE_BYTES", cache_blocks * 8 * 8 * 8)
    # 80 blocks of 8^2 nodes (a 2D array's blocks hold 4^3 nodes here).
    velocity = rg.gradient_model({"z": 60, "x": 80}, 5.0, 1000.0, 3000.0)
    result = rg.traveltime(velocity, {"z": 5.0, "x": 12.5}, radius=2, predecessors=True)
    lazy = result.chunk({"z": 14, "x": 18})
    grid = grid_from_velocity(velocity)
    receivers = [{"z": 290.0, "x": float(x)} for x in range(0, 400, 40)]
    receivers += [{"z": 145.0, "x": 387.0}, {"z": 0.0, "x": 0.0}]

    field = ray_field(lazy, grid)
    assert field.predecessor.lazy and field.times.lazy
    rays = trace_rays(field, receivers, grid)
    one_by_one = ray_field(lazy, grid)
    for receiver, ray in zip(receivers, rays):
        expected = rg.raypath(result, receiver)
        for name in [*grid.dims, "time"]:
            np.testing.assert_array_equal(ray[name].values, expected[name].values)
        assert ray.attrs == expected.attrs
        trace_rays(one_by_one, [receiver], grid)  # one ray at a time

    # The walk alone, from nodes far from the source, against the paths in memory.
    ends = np.array([[59, 0, x] for x in range(0, 80, 9)] + [[30, 0, 79], [0, 0, 79]])
    eager = _node_paths(ray_field(result, grid), ends)
    walked = ray_field(lazy, grid)
    paths = _node_paths(walked, ends)
    for path, expected in zip(paths, eager):
        np.testing.assert_array_equal(path, expected)
    entered = [
        1 + int(np.any(np.diff(path // walked.predecessor._block, axis=0), axis=1).sum())
        for path in eager
    ]
    trips = walked.predecessor.computations
    if cache_blocks is None:
        assert trips <= max(entered) < sum(entered) / 2
        assert field.predecessor.computations < one_by_one.predecessor.computations / 2
    else:
        assert trips <= sum(entered)


def test_rays_read_their_legs_a_cache_full_at_a_time(small_blocks):
    # One read-ahead of every ray's blocks kept only what fits the cache and read the rest
    # block by block; rays are now timed in groups whose blocks fit, one read-ahead each.
    import raygrid.pipeline as rg
    from raygrid.pipeline.grid import grid_from_velocity
    from raygrid.pipeline.rays import ray_field, trace_rays

    # 80 blocks of 8^2 nodes (a 2D array's blocks hold 4^3 nodes here).
    velocity = rg.checkerboard(rg.gradient_model({"z": 60, "x": 80}, 5.0, 1e3, 3e3), 50.0)
    result = rg.traveltime(velocity, {"z": 5.0, "x": 12.5}, radius=2, predecessors=True)
    grid = grid_from_velocity(velocity)
    lazy = grid_from_velocity(velocity.chunk({"z": 14, "x": 18}), load=False)
    receivers = [{"z": 290.0, "x": float(x)} for x in range(0, 400, 25)]
    reads = {}
    for blocks in (200, 12):
        slowness = NodeValues(
            lazy.velocity.data, convert=lazy._checked_slowness, cache_bytes=blocks * 8 * 8 * 8
        )
        rays = trace_rays(ray_field(result, grid, slowness=slowness), receivers, grid)
        for ray, receiver in zip(rays, receivers):
            xr_ray = rg.raypath(result, receiver)
            np.testing.assert_array_equal(ray["time"].values, xr_ray["time"].values)
        reads[blocks] = slowness.computations
    assert reads[200] <= 2  # the receivers' last legs, then every leg of every ray
    assert reads[12] < 60  # 133 when one read-ahead kept what fit and read the rest singly
