"""Domain decomposition geometry: tiles, their halos, and the strips between them.

Plain functions of shapes and slices, tested without Dask (as dask-image does its
``_chunk_faces``). Grids are the kernels' 3D ``(nz, ny, nx)``; a 2D model has ``ny == 1``
and a zero radius along ``y``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from .errors import InputError

__all__ = ["TileGrid", "tile_grid"]

Index = tuple[int, int, int]
Box = tuple[slice, slice, slice]

#: Tiles of fewer nodes than this are warned about (:meth:`TileGrid.small_tiles`, which
#: says what was measured: on 2 workers sharing 2 cores, 7^3 tiles took 12 s where the
#: whole 40^3 model took 0.6 s).
SMALL_TILE_NODES = 4096


@dataclass(frozen=True)
class TileGrid:
    """A grid cut into tiles of ``tile`` nodes, each with a halo of ``radius`` nodes.

    The halo of a tile is every node outside it that one of its nodes is joined to, so a
    tile solve that knows its halo's times has every edge into its interior.

    Attributes
    ----------
    shape : tuple of int
        ``(nz, ny, nx)``.
    tile : tuple of int
        Tile shape; the last tile along an axis may be smaller.
    radius : tuple of int
        ``(rz, ry, rx)``, the forward-star radius and so the halo width.
    """

    shape: Index
    tile: Index
    radius: Index

    @property
    def counts(self) -> Index:
        """Tiles along each axis."""
        return tuple(-(-n // t) for n, t in zip(self.shape, self.tile))

    def __iter__(self) -> Iterator[Index]:
        return iter(itertools.product(*(range(c) for c in self.counts)))

    def __len__(self) -> int:
        return int(np.prod(self.counts))

    def small_tiles(self, dims: tuple[str, ...]) -> str | None:
        """What to say of tiles too small to be worth their Dask tasks, or ``None``: the
        model is cut and a whole tile holds fewer than :data:`SMALL_TILE_NODES` nodes.

        ``dims``: the model's dims, ``("z", "x")`` or ``("z", "y", "x")``, to name the
        tile's size in the model's terms.
        """
        nodes = int(np.prod(self.tile))
        if len(self) == 1 or nodes >= SMALL_TILE_NODES:
            return None
        size = dict(zip(("z", "y", "x"), self.tile))
        return (
            f"tiles of {' x '.join(str(size[d]) for d in dims)} nodes are small: each costs "
            "Dask tasks every round whatever its size, and small tiles take more rounds (a "
            "40^3 model at radius 2 took 0.04 s whole, 0.4-1 s in 20^3 tiles and 3-6 s in "
            "10^3, on 2 workers); "
            f"tiles of {SMALL_TILE_NODES} nodes or more run faster, and tiles are for models "
            "larger than a worker's memory, not for speed"
        )

    def interior(self, index: Index) -> Box:
        """Global slices of the nodes a tile owns."""
        return tuple(
            slice(i * t, min((i + 1) * t, n)) for i, t, n in zip(index, self.tile, self.shape)
        )

    def extended(self, index: Index) -> Box:
        """Global slices of a tile with its halo, clipped to the grid."""
        return tuple(
            slice(max(s.start - r, 0), min(s.stop + r, n))
            for s, r, n in zip(self.interior(index), self.radius, self.shape)
        )

    def neighbours(self, index: Index) -> list[Index]:
        """Tiles whose interiors touch this tile's halo (faces, edges and corners)."""
        found = []
        for step in itertools.product((-1, 0, 1), repeat=3):
            other = tuple(i + s for i, s in zip(index, step))
            if other != index and all(0 <= o < c for o, c in zip(other, self.counts)):
                if self.strip(other, index) is not None:
                    found.append(other)
        return found

    def strip(self, source: Index, target: Index) -> Box | None:
        """Global slices of ``source``'s interior inside ``target``'s halo, or ``None``.

        This is all ``target`` needs from ``source``: the boundary strip that travels.
        """
        box = []
        for owned, reach in zip(self.interior(source), self.extended(target)):
            start, stop = max(owned.start, reach.start), min(owned.stop, reach.stop)
            if start >= stop:
                return None
            box.append(slice(start, stop))
        return tuple(box)

    def local(self, box: Box, index: Index) -> Box:
        """``box`` (global) in the coordinates of ``index``'s extended array."""
        origin = [s.start for s in self.extended(index)]
        return tuple(slice(b.start - o, b.stop - o) for b, o in zip(box, origin))

    def owner(self, node: np.ndarray) -> np.ndarray:
        """Tile index ``(..., 3)`` of global node indices ``(..., 3)``."""
        return np.asarray(node) // np.asarray(self.tile)


def tile_grid(
    tiles: Mapping[str, int], dims: tuple[str, ...], shape: Index, radius: Index
) -> TileGrid:
    """Validate a per-dim tile spec such as ``{"z": 256, "x": 256}`` into a :class:`TileGrid`.

    Dims left out are not cut. A tile must be at least the radius along each axis it cuts,
    so that a halo reaches only the adjacent tiles.

    Raises
    ------
    InputError
        For unknown dims, non-positive sizes, or tiles smaller than the halo.
    """
    if not isinstance(tiles, Mapping):
        raise InputError(f"tiles must map dim names to tile sizes, got {tiles!r}")
    unknown = set(tiles) - set(dims)
    if unknown:
        raise InputError(f"tiles names unknown dims {sorted(unknown)}; the model has {dims}")
    full = dict(zip(("z", "y", "x"), shape))
    halo = dict(zip(("z", "y", "x"), radius))
    size = {}
    for dim in ("z", "y", "x"):
        value = tiles.get(dim, full[dim])
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(f"tile size along {dim!r} must be a positive integer, got {value!r}")
        value = min(int(value), full[dim])
        if value < halo[dim] and value < full[dim]:
            raise InputError(
                f"tile size {value} along {dim!r} is smaller than the halo (radius "
                f"{halo[dim]}): use tiles of at least the radius"
            )
        size[dim] = value
    return TileGrid(shape=shape, tile=(size["z"], size["y"], size["x"]), radius=radius)
