"""Values at the nodes of a model-shaped array, read by kernel node index, block by block.

A tiled solve leaves each source's times and predecessors on the workers, chunked by tiles,
and its model in a Zarr store: the receivers' times and rays read only the nodes along a few
rays, so they fetch small blocks around those nodes instead of gathering arrays the size of
the model to the client (which a model too large for one worker would not survive).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import dask
import dask.array as da
import numpy as np

__all__ = ["NodeValues", "CACHE_BYTES", "BLOCK", "block_shape"]

#: Bytes of blocks a lazy :class:`NodeValues` keeps in memory, at most, for reuse (least
#: recently used dropped first); read when the reader is made.
CACHE_BYTES = 64 * 2**20

#: Edge, in nodes, of the cubic blocks a lazy :class:`NodeValues` reads in 3D (fewer along
#: an axis shorter than that): 32^3 float64 values are 256 KiB, so the cache holds a few
#: hundred blocks and a ray crossing the model needs a few dozen. A 2D array's blocks hold
#: as many nodes, ``BLOCK**1.5`` a side (181^2): 32^2 blocks made a ray walked back
#: through a tiled field a round trip to the workers every ~10 steps. Not the array's
#: chunks, which follow the tiles and may be hundreds of MiB each.
BLOCK = 32


class NodeValues:
    """A model-shaped array read at kernel node indices ``(z, y, x)`` (``y = 0`` in 2D).

    Parameters
    ----------
    values : numpy.ndarray or dask.array.Array
        Shaped like the model, in the grid's dim order (2D ``(z, x)`` or 3D ``(z, y, x)``).
        A NumPy array is read in place. A dask array is read in blocks of :data:`BLOCK`
        nodes a side, kept in a cache: never computed whole.
    convert : callable, optional
        ``convert(values, start)``, applied to each block read (e.g. velocity to slowness),
        ``start`` the kernel index ``(z, y, x)`` of its first node (to say where a bad value
        is). It must act value by value, so that a box cut from converted blocks equals the
        converted box.
    client : distributed.Client, optional
        Computes the blocks of a dask array (default: dask's current scheduler).
    cache_bytes : int, optional
        Bound on the blocks kept (default :data:`CACHE_BYTES`).

    Notes
    -----
    Reads that need several blocks (:meth:`at`, :meth:`box`, :meth:`prefetch`) fetch the
    missing ones in one computation: one round trip to the workers, not one per block.

    Boxes are returned C-contiguous, so the kernels that read them (the segment times of
    :mod:`raygrid.kernels.segment`) compile once for every caller. A leg's time on a box
    shifted to its corner equals its time on the whole model bit for bit: between nodes its
    face parameters are quotients of exact half-integers, unchanged by an integer shift
    (:func:`raygrid.kernels.segment.segment_time`'s notes); for a leg from a point, the
    point is shifted by whole nodes to ``point - low`` with ``low <= floor(point)``, which
    is exact.
    """

    def __init__(
        self,
        values: np.ndarray | da.Array,
        *,
        convert: Callable[[np.ndarray, tuple[int, int, int]], np.ndarray] | None = None,
        client: Any = None,
        cache_bytes: int | None = None,
    ):
        if values.ndim == 2:
            values = values[:, np.newaxis, :]
        if values.ndim != 3:
            raise ValueError(f"node values must be 2D or 3D, not {values.ndim}D")
        self.lazy = isinstance(values, da.Array)
        if not self.lazy:
            values = np.asarray(values)
            if convert is not None:
                values = convert(values, (0, 0, 0))
        self.values = values
        self.shape3 = tuple(int(n) for n in values.shape)
        # The values' type as read: converted blocks may differ from the array (float32
        # velocity, float64 slowness). A probe value, so nothing of the array is read.
        probe = np.ones((1, 1, 1), dtype=values.dtype)
        self.dtype = (convert(probe, (0, 0, 0)) if self.lazy and convert else probe).dtype
        self._convert = convert
        self._client = client
        self._cache_bytes = int(CACHE_BYTES if cache_bytes is None else cache_bytes)
        self._cache: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()
        self._held = 0  # bytes in the cache
        self._block = block_shape(self.shape3)
        self.fetched = 0  # blocks read so far (a lazy array's reads, for tests and logs)
        self.computations = 0  # round trips that read them

    def value(self, node3: Iterable[int]) -> Any:
        """The value at one node (integer indices ``(z, y, x)``)."""
        z, y, x = (int(i) for i in node3)
        if not self.lazy:
            return self.values[z, y, x]
        bz, by, bx = self._block
        key = (z // bz, y // by, x // bx)
        block = self._cache.get(key)  # the common case, kept cheap: a step along a ray
        if block is None:
            block = self._blocks([key])[0]
        else:
            self._cache.move_to_end(key)
        return block[z - key[0] * bz, y - key[1] * by, x - key[2] * bx]

    def cached(self, nodes3: np.ndarray) -> np.ndarray:
        """Whether each node's value is at hand (in memory, or in a block held), so that
        :meth:`at` reads it without a round trip; nodes of shape ``(..., 3)``."""
        nodes3 = np.asarray(nodes3, dtype=np.int64)
        if not self.lazy:
            return np.ones(nodes3.shape[:-1], dtype=bool)
        keys, which = np.unique(nodes3.reshape(-1, 3) // self._block, axis=0, return_inverse=True)
        held = np.array([tuple(int(k) for k in key) in self._cache for key in keys], dtype=bool)
        return held[which.reshape(-1)].reshape(nodes3.shape[:-1])

    def at(self, nodes3: np.ndarray) -> np.ndarray:
        """Values at nodes, integer indices of shape ``(..., 3)``."""
        nodes3 = np.asarray(nodes3, dtype=np.int64)
        if not self.lazy:
            return self.values[nodes3[..., 0], nodes3[..., 1], nodes3[..., 2]]
        flat = nodes3.reshape(-1, 3)
        keys = flat // self._block
        unique, which = np.unique(keys, axis=0, return_inverse=True)
        blocks = self._blocks([tuple(int(k) for k in key) for key in unique])
        out = np.empty(len(flat), dtype=self.dtype)
        within = flat - keys * self._block
        for k, block in enumerate(blocks):
            chosen = which.reshape(-1) == k
            local = within[chosen]
            out[chosen] = block[local[:, 0], local[:, 1], local[:, 2]]
        return out.reshape(nodes3.shape[:-1])

    def box(self, low: Iterable[int], high: Iterable[int]) -> np.ndarray:
        """The values of nodes ``low <= node < high`` (per axis), C-contiguous."""
        low = np.array([int(i) for i in low])
        high = np.array([int(i) for i in high])
        if not self.lazy:
            return np.ascontiguousarray(self.values[tuple(map(slice, low, high))])
        keys = self._keys(low, high)
        blocks = self._blocks(keys)
        out = np.empty(tuple(high - low), dtype=self.dtype)
        for key, block in zip(keys, blocks):
            start = np.array(key) * self._block
            first = np.maximum(low, start)
            end = np.minimum(high, start + block.shape)
            part = block[tuple(map(slice, first - start, end - start))]
            out[tuple(map(slice, first - low, end - low))] = part
        return out

    def prefetch(self, boxes: Iterable[tuple[Iterable[int], Iterable[int]]]) -> None:
        """Read, in one computation, the blocks that boxes ``(low, high)`` will need (as
        many as the cache holds): a caller about to read many boxes saves a round trip per
        block."""
        if not self.lazy:
            return
        keys: dict[tuple[int, int, int], None] = {}
        for low, high in boxes:
            keys.update(dict.fromkeys(self._keys(np.asarray(low), np.asarray(high))))
        self._blocks(list(keys)[: self._room()])

    def groups(
        self, boxes_per_item: list[list[tuple[Iterable[int], Iterable[int]]]]
    ) -> list[list[int]]:
        """Items (each a list of boxes ``(low, high)``, e.g. a ray's legs) in consecutive
        groups whose blocks fit the cache together: a caller prefetching each group before
        reading it pays a round trip per group, where one prefetch of everything would keep
        only what fits and read the rest block by block. All items in one group when the
        array is in memory."""
        if not self.lazy:
            return [list(range(len(boxes_per_item)))] if boxes_per_item else []
        groups: list[list[int]] = [[]]
        held: set[tuple[int, int, int]] = set()
        for k, boxes in enumerate(boxes_per_item):
            keys = {
                key for low, high in boxes for key in self._keys(np.asarray(low), np.asarray(high))
            }
            if groups[-1] and len(held | keys) > self._room():
                groups.append([])
                held = set()
            groups[-1].append(k)
            held |= keys
        return groups if groups[-1] else []

    def _keys(self, low: np.ndarray, high: np.ndarray) -> list[tuple[int, int, int]]:
        """The blocks overlapping the box ``low <= node < high``."""
        first = np.asarray(low) // self._block
        last = (np.asarray(high) - 1) // self._block
        return [
            (kz, ky, kx)
            for kz in range(first[0], last[0] + 1)
            for ky in range(first[1], last[1] + 1)
            for kx in range(first[2], last[2] + 1)
        ]

    def _room(self) -> int:
        """Blocks the cache holds (at least one)."""
        return max(self._cache_bytes // self._block_bytes(), 1)

    def _block_bytes(self) -> int:
        return int(np.prod(self._block)) * self.dtype.itemsize

    def _blocks(self, keys: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """Blocks of a lazy array, from the cache or read (the missing ones in one
        computation) and cached."""
        missing = [key for key in keys if key not in self._cache]
        if missing:
            pieces = [
                self.values[tuple(slice(k * b, (k + 1) * b) for k, b in zip(key, self._block))]
                for key in missing
            ]
            if self._client is not None:
                read = self._client.compute(pieces, sync=True)
            else:
                read = dask.compute(*pieces)
            self.computations += 1
            self.fetched += len(missing)
            for key, block in zip(missing, read):
                block = np.asarray(block)
                if self._convert is not None:
                    start = tuple(int(k * b) for k, b in zip(key, self._block))
                    block = self._convert(block, start)
                self._cache[key] = block
                self._held += self._cache[key].nbytes
        found = []
        for key in keys:
            self._cache.move_to_end(key)
            found.append(self._cache[key])
        # Dropped only now, least recently used first, when every block asked for is in
        # ``found``: a read needing more than the cache holds gets them all, and the cache
        # keeps only its bound (the rest lives as long as the caller needs it), but always
        # its newest block (a bound below one block would make each step a round trip).
        while self._held > self._cache_bytes and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._held -= dropped.nbytes
        return found


def block_shape(shape3: tuple[int, int, int]) -> np.ndarray:
    """The blocks a lazy :class:`NodeValues` of ``shape3`` reads: :data:`BLOCK` ^ 3 nodes
    (read when called), as cubic as its axes longer than one allow, cut to the array."""
    axes = sum(n > 1 for n in shape3) or 1
    edge = max(int(round(BLOCK ** (3 / axes))), 1)
    return np.array([min(edge, n) for n in shape3])
