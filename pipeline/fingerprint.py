"""Fingerprints of workflows: what decides a survey store's contents, hashed.

A store records the fingerprint of the workflow that made it and short digests of its parts;
a rerun resumes the store only if its own fingerprint is the same, and a refusal names the
parts that differ (:data:`FINGERPRINT_PARTS`).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np
import xarray as xr

from .grid import DIRECT_REACH, Grid
from .options import Options

if TYPE_CHECKING:
    from .workflow import Workflow

__all__ = ["FINGERPRINT_PARTS", "workflow_fingerprint", "model_digest"]

#: What each part of a fingerprint is (:func:`workflow_fingerprint`).
FINGERPRINT_PARTS = {
    "model": "the model's values",
    "sources": "the sources",
    "receivers": "the receivers",
    "source_names": "the sources' names",
    "receiver_names": "the receivers' names",
    "grid": "the graph options (radius, weights, precision)",
    "outputs": "what is stored (fields, receiver_table, rays)",
    "backend": "the backend (backend auto may choose another on another machine)",
    "algorithm": "the algorithm",
    "tiles": "the tiles (they decide tied rays when rays are stored)",
    "dims": "the model's dims",
    "origin": "the model's origin",
    "spacing": "the model's spacing",
    "shape": "the model's shape",
    "length_unit": "the model's length unit",
    "direct_reach": "how far a receiver near a source is joined to it straight "
    "(a rule of raygrid's version)",
    "face_legs": "how a straight leg lying in a cell face is timed (a rule of raygrid's version)",
    "node_ends": "whether a source or receiver on a node is joined straight to the other "
    "near it (a rule of raygrid's version)",
    "node_snap": "which points near a node of float32 coordinates are put on it (a rule of "
    "raygrid's version)",
}


def workflow_fingerprint(
    workflow: Workflow,
    grid: Grid,
    options: Options,
    points: dict,
    indices: dict[str, np.ndarray],
    names: dict[str, list[str]] | None = None,
) -> tuple[str, dict[str, str]]:
    """SHA-256 of everything that decides what the store holds, and short digests of its
    parts (each key of the recipe, and ``model`` for the values) to say what differs.

    The model's values and coordinates, the graph options, the resolved points (so an edited
    CSV file counts) and their ``names`` by dim (``source``, ``receiver``: the store's
    coordinates), and the output choices; not the batch size, the cluster or the plot,
    which change how a store is filled, not what it holds (nor the tiles, unless rays are
    stored: see below). The resolved backend counts: CPU
    and GPU times were a few ulps apart (FMA contraction, since written out of the kernels,
    not yet compared on a device). A model loaded in memory is
    hashed as its slowness; a lazy one (tiled solves) by its values block by block
    (:func:`_model_digests`), so a model file edited in place is another workflow either way.
    ``indices``: the ``sources`` and ``receivers`` in node units, as the workflow located
    them (for the rules of raygrid's version that depend on where they lie).
    """
    graph = workflow.grid.model_dump(mode="json")
    radius = graph["radius"]
    if isinstance(radius, dict) and len(set(radius.values())) == 1:
        # {z: 3, x: 3} is radius 3: one star, one fingerprint (the store was refused as
        # another workflow's when its radius was rewritten so).
        graph["radius"] = next(iter(radius.values()))
    recipe = {
        "grid": graph,
        "sources": points["sources"],
        "receivers": points["receivers"],
        "outputs": workflow.outputs.model_dump(
            mode="json", include={"fields", "receiver_table", "rays"}
        ),
        "backend": options.backend,
        "algorithm": options.algorithm,
        "dims": list(grid.dims),
        "origin": list(grid.origin),
        "spacing": list(grid.spacing),
        "shape": list(grid.shape),
        "length_unit": grid.length_unit,
        # Receivers' times near sources follow this rule (earlier stores: 1):
        # a store filled under another is refused, never finished under a second rule.
        "direct_reach": DIRECT_REACH,
    }
    if _legs_in_faces(grid, indices):
        # Such legs take the faster side (earlier stores: the cell of higher index); only
        # stores that hold one say so, so that no other store is refused.
        recipe["face_legs"] = "faster side"
    exact = workflow.grid.weights == "exact"
    if _node_ends_joined(grid, indices, grid.radius3(workflow.grid.radius), exact):
        # A node end is joined straight to the other within reach (earlier stores: only
        # two off-node ends): only stores that hold such a pair say so, as for face_legs.
        recipe["node_ends"] = "joined within reach"
    if _snapped_otherwise(grid, points, indices):
        # Placed otherwise than before 2026-11-27 (onto a node, or off it): only stores
        # that hold such a point say so, as for face_legs.
        recipe["node_snap"] = "half an ulp and the coordinates' deviation"
    if workflow.compute.tiles is not None and workflow.outputs.rays:
        # Where two paths tie, which one a ray takes depends on the order tiles were solved
        # in: other tiles may store other (equally fast) rays, so resuming with them would
        # not give the store an uninterrupted run writes.
        recipe["tiles"] = dict(workflow.compute.tiles)
    for what, labels in (names or {}).items():  # only if named: unnamed recipes as before
        recipe[f"{what}_names"] = labels
    values = _model_values(grid)
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
    for chunk in values:
        digest.update(chunk)
    parts = {
        key: _part_digest([json.dumps(value, sort_keys=True).encode()])
        for key, value in recipe.items()
    }
    parts["model"] = _part_digest(values)
    return digest.hexdigest(), parts


def _legs_in_faces(grid: Grid, indices: dict[str, np.ndarray]) -> bool:
    """Whether a source and a receiver, both off-node, lie in one cell face (halfway
    between the same two node rows of an axis): the straight leg between them may lie in
    it (``Grid.segment_time``). ``indices``: the points in node units, by ``sources`` and
    ``receivers``."""

    def faces(what: str) -> set[tuple[int, float]]:
        found = set()
        placed = np.asarray(indices[what], dtype=np.float64).reshape(-1, 3)
        for index3 in placed[~grid.on_nodes(placed)]:
            found.update((k, float(i)) for k, i in enumerate(index3) if i % 1.0 == 0.5)
        return found

    return bool(faces("sources") & faces("receivers"))


def _node_ends_joined(
    grid: Grid, indices: dict[str, np.ndarray], radius3: tuple[int, int, int], exact: bool
) -> bool:
    """Whether a source and a receiver, one of them or both on a node, are joined by a
    straight leg (``Grid.joined_points``): before 2026-12-05 only two off-node ends were.
    ``indices`` as for :func:`_legs_in_faces`."""
    receivers = np.asarray(indices["receivers"], dtype=np.float64).reshape(-1, 3)
    if not len(receivers):
        return False
    off = ~grid.on_nodes(receivers)
    for source3 in np.asarray(indices["sources"], dtype=np.float64).reshape(-1, 3):
        joined = grid.joined_points(source3, receivers, radius3, exact)
        if np.any(joined & ~(off & (not grid.on_node(source3)))):
            return True
    return False


def _snapped_otherwise(grid: Grid, points: dict, indices: dict[str, np.ndarray]) -> bool:
    """Whether a source or receiver is placed otherwise than raygrid placed it before
    2026-11-27 (``Grid.to_index``), which put a point on a node within four units in the
    last place of the coordinates' float type, times the axis's largest magnitude (1.9 m
    at a float32 northing of 4e6 m). Only axes stored in float32 or coarser can differ."""
    coarse = [k for k, eps in enumerate(grid.rounding) if eps > 1e-10]
    if not coarse:
        return False
    column = {"z": 0, "y": 1, "x": 2}
    for what in ("sources", "receivers"):
        for point, index3 in zip(points[what], indices[what]):
            for k in coarse:
                dim, origin, h = grid.dims[k], grid.origin[k], grid.spacing[k]
                n = len(grid.coords[dim])
                value, last = float(point[dim]), origin + h * (n - 1)
                i = (value - origin) / h
                nearest = round(i)
                node = float(grid.coords[dim][min(max(nearest, 0), n - 1)])
                magnitude = max(abs(h), abs(origin), abs(last))
                near = abs(value - node) <= 4 * grid.rounding[k] * magnitude
                snapped = near or abs(i - nearest) <= 1e-9 * max(1.0, abs(i))
                before = min(max(float(nearest) if snapped else i, 0.0), n - 1.0)
                if before != index3[column[dim]]:
                    return True
    return False


def model_digest(grid: Grid) -> str:
    """The short digest of a grid's model values that a store keeps (its ``model`` part).

    The same digest as the fingerprint's, so a copy of the model (the one a tiled run
    writes into its store) can be checked against the values that were fingerprinted.
    """
    return _part_digest(_model_values(grid))


def _part_digest(chunks: list) -> str:
    """Short SHA-256 of one part of a fingerprint: enough to say which part differs."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()[:16]


def _model_values(grid: Grid) -> list:
    """What the fingerprint hashes of a model's values, in order."""
    if grid.slowness is not None:
        return [np.ascontiguousarray(grid.slowness)]  # hashed as a buffer: not copied
    # A lazy model (tiled solves): its values block by block, never loaded whole.
    return [f"speed_factor {grid.speed_factor!r}".encode(), *_model_digests(grid.velocity)]


def _block_digest(values: np.ndarray) -> bytes:
    """SHA-256 of one block of model values: dtype, shape and bytes (C order)."""
    values = np.ascontiguousarray(values)
    digest = hashlib.sha256(f"{values.dtype.str} {values.shape}".encode())
    digest.update(values.tobytes())
    return digest.digest()


def _model_digests(velocity: xr.DataArray) -> list[bytes]:
    """One SHA-256 per block of a model's values, in block order (C order of block indices).

    A dask-backed model (a Zarr or chunked NetCDF file opened lazily) is hashed where it is
    read, block by block on dask's local threaded scheduler: only a few blocks are in memory
    at once, and editing one value of the file in place changes its block's digest. The
    local scheduler, not a cluster's, because the client opened the file and can read it;
    workers elsewhere may not see the same path. The digests follow the file's chunking, so
    a rechunked copy of the same values counts as another model (a refusal, never a mix).
    Any other array is in memory already (tiled solves read it whole): one block.
    """
    values = velocity.data
    if not isinstance(values, da.Array):
        return [_block_digest(np.asarray(values))]
    blocks = values.to_delayed().ravel()  # C order of the block indices
    digests = [dask.delayed(_block_digest, pure=True)(block) for block in blocks]
    return list(dask.compute(*digests, scheduler="threads"))
