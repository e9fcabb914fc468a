"""NodeValues: model-shaped arrays read at nodes and boxes, chunk by chunk when lazy."""

import dask
import dask.array as da
import numpy as np
import pytest

from raygrid.pipeline.nodevalues import NodeValues


def _random_boxes(shape3, rng, count=40):
    for _ in range(count):
        low = [int(rng.integers(0, n)) for n in shape3]
        high = [int(rng.integers(lo + 1, n + 1)) for lo, n in zip(low, shape3)]
        yield np.array(low), np.array(high)


@pytest.mark.parametrize(
    ("shape", "chunks"),
    [((13, 7, 11), (4, 3, 5)), ((9, 1, 12), (2, 1, 12)), ((17, 19), (5, (3, 7, 9)))],
)
def test_lazy_reads_equal_the_array(shape, chunks):
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
    np.testing.assert_array_equal(
        lazy.at(nodes), whole[nodes[..., 0], nodes[..., 1], nodes[..., 2]]
    )
    np.testing.assert_array_equal(eager.at(nodes), lazy.at(nodes))
    for node in nodes.reshape(-1, 3)[:10]:
        assert lazy.value(node) == whole[tuple(node)] == eager.value(node)


def test_each_chunk_is_read_once_and_converted_value_by_value():
    values = np.arange(1.0, 1.0 + 8 * 6 * 10).reshape(8, 6, 10)
    lazy = NodeValues(da.from_array(values, chunks=(4, 3, 5)), convert=lambda v: 1.0 / v)
    whole = 1.0 / values
    np.testing.assert_array_equal(lazy.box((0, 0, 0), (8, 6, 10)), whole)
    assert lazy.fetched == 8  # every chunk, once
    np.testing.assert_array_equal(lazy.box((1, 1, 1), (7, 5, 9)), whole[1:7, 1:5, 1:9])
    assert lazy.value((3, 2, 4)) == whole[3, 2, 4]
    assert lazy.fetched == 8  # all from the cache


def test_the_cache_is_bounded():
    values = np.zeros((8, 6, 10))
    chunk_bytes = 4 * 3 * 5 * 8
    lazy = NodeValues(da.from_array(values, chunks=(4, 3, 5)), cache_bytes=2 * chunk_bytes)
    lazy.box((0, 0, 0), (8, 6, 10))
    assert lazy.fetched == 8 and len(lazy._cache) == 2
    lazy.value((7, 5, 9))  # the last chunk read: still held
    assert lazy.fetched == 8
    lazy.value((0, 0, 0))  # the first: dropped long ago
    assert lazy.fetched == 9
    tiny = NodeValues(da.from_array(values, chunks=(4, 3, 5)), cache_bytes=1)
    tiny.value((0, 0, 0))
    assert len(tiny._cache) == 1  # one chunk is always kept, however large


def test_a_lazy_array_is_never_computed_whole():
    values = da.from_array(np.ones((12, 12, 12)), chunks=6)
    computed = []

    class Sizes(dask.callbacks.Callback):
        def _posttask(self, key, result, dsk, state, worker_id):
            computed.append(getattr(result, "size", 0))

    lazy = NodeValues(values)
    with Sizes():
        lazy.box((2, 2, 2), (10, 10, 10))
    assert lazy.fetched == 8 and max(computed) <= 6**3


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="2D or 3D"):
        NodeValues(np.zeros(5))
