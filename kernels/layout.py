"""Geometry of a grid padded by the radius with dummy nodes (and cut into GPU tiles).

Shared by the CPU Dijkstra (padding only: no bounds checks in its inner loop) and the CUDA
kernels (padding plus tiles and halos). Pure NumPy, so it is tested without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PaddedLayout", "checked_slowness", "checked_spacing", "flat_steps", "BAD_SLOWNESS"]

#: The error a model with a slowness that is not finite and positive raises, wherever it
#: is checked (on the host, or on the device as the GPU solvers pad it).
BAD_SLOWNESS = "slowness must be finite and positive everywhere"


def checked_slowness(slowness: np.ndarray, values: bool = True) -> np.ndarray:
    """``slowness`` as a C-contiguous float64 ``(nz, ny, nx)`` array, every value finite and
    positive, for every solver (CPU and CUDA) that pads it.

    Infinite slowness is what marks the padding's dummy nodes, so a real node must not have
    it; NaN compares as no edge at all, zero gives free edges, and a negative value negative
    weights, under which Dijkstra's times are wrong.

    ``values=False`` leaves the values to the caller: the GPU solvers check them on the
    device as they pad the model (:func:`~raygrid.kernels.cuda.arrays.padded_slowness`).

    Raises
    ------
    ValueError
        If the array is not 3D, or holds a value that is not finite and positive.
    """
    slowness = np.ascontiguousarray(slowness, dtype=np.float64)
    if slowness.ndim != 3:
        raise ValueError(f"slowness must be 3D (nz, ny, nx), got shape {slowness.shape}")
    # Plain C strides, the same memory: a length-1 axis may carry any stride and still be
    # C-contiguous to NumPy (0 from ``[:, np.newaxis, :]``), which Numba's CUDA copies
    # take for a non-contiguous array and send row by row. A reshape of the flat view
    # gives every axis the stride C order gives it.
    slowness = slowness.reshape(-1).reshape(slowness.shape)
    # Two reductions without temporaries (a NaN makes min and max NaN, which fails both
    # comparisons): 2 ms instead of 5.5 ms at 1601^2 on the GPU host, where the whole
    # solve takes 60 ms (benchmarks/results/gpu_study_h200.md).
    if values and slowness.size and not (slowness.min() > 0 and slowness.max() < np.inf):
        raise ValueError(BAD_SLOWNESS)
    return slowness


def checked_spacing(spacing) -> np.ndarray:
    """``spacing`` as a float64 array ``(hz, hy, hx)``, each finite and positive.

    A zero spacing makes every edge free (all times 0) and a NaN one no edge at all, with
    no error: the kernels take the spacing as it is. A 2D model's ``hy`` is any positive
    number (no offset steps along ``y``).

    Raises
    ------
    ValueError
        If it is not three numbers, each finite and > 0.
    """
    try:
        values = np.asarray(spacing, dtype=np.float64)
    except (TypeError, ValueError):
        values = np.empty(0)
    if values.shape != (3,) or not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(
            f"spacing must be three finite positive numbers (hz, hy, hx) in metres, got {spacing!r}"
        )
    return values


def flat_steps(vectors: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Flat (C-order) index steps of integer vectors ``(..., 3)`` in a grid of ``shape``:
    a node's flat index for node indices, or the step of a star offset (negative parts
    allowed) in the grid, the padded grid or a shared tile."""
    vectors = np.asarray(vectors, dtype=np.int64)
    return (vectors[..., 0] * shape[1] + vectors[..., 1]) * shape[2] + vectors[..., 2]


@dataclass(frozen=True)
class PaddedLayout:
    """A grid cut into tiles of ``block`` nodes, padded by the radius with dummy nodes.

    Real node ``(i, j, k)`` sits at padded index ``(i + rz, j + ry, k + rx)``. The padded
    grid holds ``blocks`` tiles of shape ``block`` plus a border of width ``radius`` on each
    side, so every tile's halo (the nodes within ``radius`` of it, which its nodes read) lies
    inside the padded array: no thread tests for the border (Monsegny & Agudelo 2013,
    section 3). Dummy nodes have infinite slowness and time, so they never improve a real
    node and are never improved.

    Parameters
    ----------
    shape : tuple of int
        Real grid ``(nz, ny, nx)``.
    radius : tuple of int
        Halo width ``(rz, ry, rx)``: the forward-star radius.
    block : tuple of int
        Tile shape ``(bz, by, bx)``; each must be at least the radius along its axis, so a
        halo reaches only the adjacent tiles (the update map's neighbourhood).
    """

    shape: tuple[int, int, int]
    radius: tuple[int, int, int]
    block: tuple[int, int, int]

    def __post_init__(self):
        for axis, (b, r, n) in enumerate(zip(self.block, self.radius, self.shape)):
            if b < 1:
                raise ValueError(f"block must be >= 1 along every axis, got {self.block}")
            if b < r and n > b:
                raise ValueError(
                    f"tile of {b} nodes along axis {axis} is smaller than the halo "
                    f"(radius {r}); use blocks of at least the radius"
                )

    @property
    def blocks(self) -> tuple[int, int, int]:
        """Number of tiles along each axis."""
        return tuple(-(-n // b) for n, b in zip(self.shape, self.block))

    @property
    def n_blocks(self) -> int:
        return int(np.prod(self.blocks))

    @property
    def padded(self) -> tuple[int, int, int]:
        """Shape of the padded arrays."""
        return tuple(nb * b + 2 * r for nb, b, r in zip(self.blocks, self.block, self.radius))

    @property
    def tile(self) -> tuple[int, int, int]:
        """Shape of one tile with its halo (the shared-memory array)."""
        return tuple(b + 2 * r for b, r in zip(self.block, self.radius))

    @property
    def threads(self) -> int:
        """Threads per block: one per tile node."""
        return int(np.prod(self.block))

    def interior(self) -> tuple[slice, slice, slice]:
        """Slices of the padded array that hold the real grid."""
        return tuple(slice(r, r + n) for r, n in zip(self.radius, self.shape))

    def pad(self, values: np.ndarray, fill: float) -> np.ndarray:
        """A padded copy of real-grid ``values`` (..., nz, ny, nx), dummies set to ``fill``."""
        lead = values.shape[:-3]
        out = np.full(lead + self.padded, fill, dtype=values.dtype)
        out[(...,) + self.interior()] = values
        return out

    def unpad(self, padded: np.ndarray) -> np.ndarray:
        """The real grid of a padded array (..., Pz, Py, Px)."""
        return padded[(...,) + self.interior()]

    @classmethod
    def unblocked(cls, shape: tuple[int, int, int], radius: tuple[int, int, int]):
        """Padding only, one tile: the layout of the CPU solver."""
        return cls(tuple(shape), tuple(radius), tuple(max(n, 1) for n in shape))

    def interior_flat(self) -> np.ndarray:
        """Padded flat index of every real node, in real flat order (``padded_flat`` of
        ``arange``, by slicing: no index arithmetic per node)."""
        size = int(np.prod(self.padded))
        return np.arange(size, dtype=np.int64).reshape(self.padded)[self.interior()].ravel()

    def padded_flat(self, flat: np.ndarray) -> np.ndarray:
        """Padded flat indices of real flat indices."""
        node = np.stack(np.unravel_index(np.asarray(flat, dtype=np.int64), self.shape), axis=-1)
        return np.ravel_multi_index(tuple((node + self.radius).T), self.padded)

    def block_of(self, flat: np.ndarray) -> np.ndarray:
        """Flat tile index of each real flat index."""
        node = np.stack(np.unravel_index(np.asarray(flat, dtype=np.int64), self.shape), axis=-1)
        return np.ravel_multi_index(tuple((node // self.block).T), self.blocks)

    def least_reading(self, flat: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Each tile's smallest of ``values`` over the real nodes ``flat`` that its
        tile-plus-halo holds (its own nodes and its neighbours' within the radius), ``inf``
        for a tile holding none; shape ``(n_blocks,)``.

        A node lies in the halo of the tile before its own along an axis if it is within
        the radius of its tile's low face, and of the tile after if within the radius of
        the high face (a block is at least the radius where there is a next tile, so no
        farther tile reads it). Nodes are first reduced to their smallest value per own tile
        and faces, so only those keys, not every node, are expanded to the 27 tiles around,
        an axis at a time. (Expanded node by node, the 8 005 seeds a decomposition tile's
        boundary strip gives a 1601^2 GPU solve took 21 ms of its 43 ms of setup on an
        H200's host; this way they take 1.3 ms on the workstation, where node by node took
        21-23 ms.)
        """
        node = np.stack(np.unravel_index(np.asarray(flat, dtype=np.int64), self.shape), axis=-1)
        block, radius = np.array(self.block), np.array(self.radius)
        own = node // block
        offset = node - own * block
        # Bits 0-2: near the low face along z, y, x; bits 3-5: near the high face.
        faces = ((offset < radius) << np.arange(3)) | (
            (offset >= block - radius) << np.arange(3, 6)
        )
        key = np.ravel_multi_index(tuple(own.T), self.blocks) * 64 + np.bitwise_or.reduce(faces, -1)
        keys, which = np.unique(key, return_inverse=True)
        least = np.full(len(keys), np.inf)
        np.minimum.at(least, which.ravel(), np.asarray(values, dtype=np.float64))
        # Along each axis, the tiles before, at and after each key's own, shape (3, 3, keys),
        # and whether the key's nodes lie in their halos; then the 27 combinations at once.
        own = np.stack(np.unravel_index(keys >> 6, self.blocks))[:, None]
        tile = own + np.array([-1, 0, 1])[:, None]
        face = (keys >> np.arange(6)[:, None]) & 1 == 1
        reads = np.stack([face[:3], np.ones_like(face[:3]), face[3:]], axis=1)
        reads &= (tile >= 0) & (tile < np.array(self.blocks)[:, None, None])
        stride = np.array([self.blocks[1] * self.blocks[2], self.blocks[2], 1])[:, None, None]
        index = tile * stride
        tiles = index[0][:, None, None] + index[1][None, :, None] + index[2][None, None, :]
        held = reads[0][:, None, None] & reads[1][None, :, None] & reads[2][None, None, :]
        out = np.full(self.n_blocks, np.inf)
        np.minimum.at(out, tiles[held], np.broadcast_to(least, held.shape)[held])
        return out
