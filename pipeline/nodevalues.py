"""Values at the nodes of a model-shaped array, read by kernel node index, chunk by chunk.

A tiled solve leaves each source's times and predecessors on the workers, chunked by tiles,
and its model in a Zarr store: the receivers' times and rays read only the nodes along a few
rays, so they fetch the chunks holding those nodes instead of gathering arrays the size of
the model to the client (which a model too large for one worker would not survive).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np

__all__ = ["NodeValues", "CACHE_BYTES"]

#: Chunks a lazy :class:`NodeValues` keeps in memory, at most, for reuse (least recently
#: used dropped first). One chunk is always kept, however large.
CACHE_BYTES = 64 * 2**20


class NodeValues:
    """A model-shaped array read at kernel node indices ``(z, y, x)`` (``y = 0`` in 2D).

    Parameters
    ----------
    values : numpy.ndarray or dask.array.Array
        Shaped like the model, in the grid's dim order (2D ``(z, x)`` or 3D ``(z, y, x)``).
        A NumPy array is read in place. A dask array is read one chunk at a time, and chunks
        are cached: never computed whole.
    convert : callable, optional
        Applied to each chunk read (e.g. velocity to slowness). It must act value by value,
        so that a box cut from converted chunks equals the converted box.
    client : distributed.Client, optional
        Computes the chunks of a dask array (default: dask's current scheduler).
    cache_bytes : int
        Bound on the chunks kept, see :data:`CACHE_BYTES`.

    Notes
    -----
    Boxes are returned C-contiguous, so the kernels that read them (the segment times of
    :mod:`raygrid.kernels.segment`) compile once for every caller. A leg's time on a box
    shifted to its corner equals its time on the whole model bit for bit: between nodes its
    face parameters are quotients of exact half-integers, unchanged by an integer shift
    (docs/method.md section 1).
    """

    def __init__(
        self,
        values: np.ndarray | da.Array,
        *,
        convert: Callable[[np.ndarray], np.ndarray] | None = None,
        client: Any = None,
        cache_bytes: int = CACHE_BYTES,
    ):
        if values.ndim == 2:
            values = values[:, np.newaxis, :]
        if values.ndim != 3:
            raise ValueError(f"node values must be 2D or 3D, not {values.ndim}D")
        self.lazy = isinstance(values, da.Array)
        if not self.lazy:
            values = np.asarray(values)
            if convert is not None:
                values = convert(values)
        self.values = values
        self.shape3 = tuple(int(n) for n in values.shape)
        self._convert = convert
        self._client = client
        self._cache_bytes = int(cache_bytes)
        self._cache: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()
        self.fetched = 0  # chunks read so far (a lazy array's reads, for tests and logs)
        if self.lazy:
            self._bounds = [np.cumsum((0, *c)) for c in values.chunks]

    def value(self, node3: np.ndarray) -> Any:
        """The value at one node (integer indices ``(z, y, x)``)."""
        z, y, x = (int(i) for i in node3)
        if not self.lazy:
            return self.values[z, y, x]
        key = tuple(self._chunk_of(axis, i) for axis, i in enumerate((z, y, x)))
        start = (int(b[k]) for b, k in zip(self._bounds, key))
        return self._chunk(key)[tuple(i - s for i, s in zip((z, y, x), start))]

    def at(self, nodes3: np.ndarray) -> np.ndarray:
        """Values at nodes, integer indices of shape ``(..., 3)``."""
        nodes3 = np.asarray(nodes3, dtype=np.int64)
        if not self.lazy:
            return self.values[nodes3[..., 0], nodes3[..., 1], nodes3[..., 2]]
        flat = nodes3.reshape(-1, 3)
        out = np.array([self.value(node) for node in flat], dtype=self.values.dtype)
        return out.reshape(nodes3.shape[:-1])

    def box(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """The values of nodes ``low <= node < high`` (per axis), C-contiguous."""
        low = [int(i) for i in low]
        high = [int(i) for i in high]
        if not self.lazy:
            return np.ascontiguousarray(self.values[tuple(map(slice, low, high))])
        out = None
        # The chunks overlapping the box, along each axis.
        spans = [
            range(self._chunk_of(axis, lo), self._chunk_of(axis, hi - 1) + 1)
            for axis, (lo, hi) in enumerate(zip(low, high))
        ]
        for kz in spans[0]:
            for ky in spans[1]:
                for kx in spans[2]:
                    key = (kz, ky, kx)
                    chunk = self._chunk(key)
                    if out is None:
                        shape = tuple(h - lo for lo, h in zip(low, high))
                        out = np.empty(shape, dtype=chunk.dtype)
                    start = [int(b[k]) for b, k in zip(self._bounds, key)]
                    source, target = [], []
                    for lo, hi, s, n in zip(low, high, start, chunk.shape):
                        a, e = max(lo, s), min(hi, s + n)
                        source.append(slice(a - s, e - s))
                        target.append(slice(a - lo, e - lo))
                    out[tuple(target)] = chunk[tuple(source)]
        return out

    def _chunk_of(self, axis: int, index: int) -> int:
        """Which chunk along ``axis`` holds node ``index``."""
        return int(np.searchsorted(self._bounds[axis], index, side="right")) - 1

    def _chunk(self, key: tuple[int, int, int]) -> np.ndarray:
        """One chunk of a lazy array, from the cache or read (and cached)."""
        chunk = self._cache.get(key)
        if chunk is not None:
            self._cache.move_to_end(key)
            return chunk
        block = self.values.blocks[key]
        chunk = self._client.compute(block, sync=True) if self._client else block.compute()
        chunk = np.asarray(chunk)
        if self._convert is not None:
            chunk = self._convert(chunk)
        self.fetched += 1
        self._cache[key] = chunk
        held = sum(c.nbytes for c in self._cache.values())
        while held > self._cache_bytes and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            held -= dropped.nbytes
        return chunk
