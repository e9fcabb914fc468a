"""Each ray's length in each model cell: the rows of a traveltime tomography's sensitivity
matrix.

A ray's traveltime is the sum of its legs' times, each leg timed the way the solver timed it
(docs/method.md sections 1 and 3): a leg between two nodes is a star edge, whose cells and
length fractions the star's crossing tables hold (:func:`~raygrid.kernels.star_crossings`,
read off the weight's own walk); a first or last leg, from a point between nodes, is walked
the same way (:func:`~raygrid.kernels.crossings.leg_crossings`); a leg lying in a cell face
(straight between a source and a receiver at one half-integer depth) is timed through the
faster cell on either side (``Grid.segment_time``), so its length goes there. Summed over
the cells, ``length * slowness`` is the ray's traveltime to rounding: no rule of the solver
is written a second time here.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..kernels import forward_star, star_crossings
from ..kernels.crossings import leg_crossings
from .errors import InputError
from .grid import Grid
from .inspect import point_number
from .points import locate_points, source_list
from .rays import RayField, checked_field, is_store, model_dims, ray_legs

__all__ = ["ray_cells"]


def ray_cells(
    result: xr.Dataset,
    receivers: Any,
    *,
    source: str | int | Sequence[str | int] | None = None,
) -> xr.Dataset:
    """The length of each ray in each cell of the model it was traced on: what a
    traveltime tomography's sensitivity (Frechet) matrix holds, row by row.

    Parameters
    ----------
    result : xarray.Dataset
        From :func:`raygrid.pipeline.traveltime` or :func:`~raygrid.pipeline.traveltimes`
        with ``predecessors=True``. (A survey store keeps its rays' points, not the legs'
        node indices: solve its sources with ``predecessors=True`` for their cells.)
    receivers : sequence of mappings, or a table
        The rays' ends, as :func:`~raygrid.pipeline.raypaths` takes them.
    source : str or int, or a sequence of them, optional
        Which source, of a result with a ``source`` dim; or several (names or numbers),
        for the rows of a whole survey at once: each source's rays to every receiver,
        numbered source after source (``ray = k * n_receivers + receiver`` for the ``k``-th
        source given), the order of ``traveltime_at(result.isel(source=...), receivers)``
        flattened, with columns ``source`` (its number in ``result``) and ``receiver``.

    Returns
    -------
    xarray.Dataset
        Along dim ``entry``, one per (ray, cell) the ray crosses: ``ray`` (the receiver's
        number, from 0), ``cell`` (the cell's flat index in the model's ``(z, y, x)``
        C order: the node it surrounds), ``cell_z``, ... (its index along each dim) and
        ``length`` (m, whatever the model's length unit). Entries are sorted by ray, then
        cell; attributes ``n_rays``, ``model_dims`` and ``model_shape``. For each ray,
        ``sum(length / velocity[cell])`` (velocity in m/s: a model in km/s times 1000) is
        its traveltime to rounding: with SciPy, ``G = scipy.sparse.csr_matrix((c.length,
        (c.ray, c.cell)), shape=(c.n_rays, v.size))`` and ``G @ (1 / v.ravel())``, ``v`` the
        result's ``velocity`` (in ``(z, y, x)`` order, whatever the order given), gives the
        rays' times. A ray to the source itself has no entries.

    Raises
    ------
    InputError
        As :func:`~raygrid.pipeline.raypaths`; for a survey store.

    Notes
    -----
    With ``weights="mean"`` (Moser's mean slowness), an edge's time is half its length
    in each end node's cell, and its length goes there half and half, as the solver
    weighed it.
    """
    if (
        isinstance(source, Sequence)
        and not isinstance(source, str)
        or isinstance(source, np.ndarray)
    ):
        return _survey_cells(result, receivers, list(np.asarray(source, dtype=object).ravel()))
    if isinstance(result, xr.Dataset) and is_store(result):
        raise InputError(
            "ray_cells needs the legs' nodes, which a survey store does not keep (only its "
            "rays' points): solve its sources with traveltime(..., predecessors=True) or "
            "traveltimes(..., predecessors=True)"
        )
    field, grid = checked_field(result, source, "ray_cells", stores=False)
    listed, _ = source_list(receivers, model_dims(result), "receivers")
    locate_points(grid, listed, "receiver")
    _, _, legs, _ = ray_legs(field, listed, grid)
    # Every ray's star edges at once, from one star's tables; the other legs one by one.
    none = [np.empty((0, 3))]  # (no receivers: an empty table, as raypaths gives [])
    owner = np.concatenate([np.full(between.sum(), k) for k, (_, between) in enumerate(legs)]
                           + [np.empty(0, dtype=np.int64)])  # fmt: skip
    starts = np.concatenate([points[:-1][between] for points, between in legs] + none)
    ends = np.concatenate([points[1:][between] for points, between in legs] + none)
    edge, flat, length = _star_edges(field, grid, starts, ends)
    rays, cells, lengths = [owner[edge]], [flat], [length]
    for k, (points, between) in enumerate(legs):
        for i in np.flatnonzero(~between):
            flat, length = _leg(field, grid, points[i], points[i + 1])
            rays.append(np.full(len(flat), k))
            cells.append(flat)
            lengths.append(length)
    table = _table(grid, np.concatenate(rays), np.concatenate(cells), np.concatenate(lengths))
    return table.assign_attrs(n_rays=len(listed))


def _survey_cells(result: xr.Dataset, receivers: Any, sources: list) -> xr.Dataset:
    """:func:`ray_cells` of several sources, their rays numbered source after source."""
    if not sources:
        raise InputError("ray_cells was given no sources (source=[]): name one or more")
    tables = []
    for k, chosen in enumerate(sources):
        table = ray_cells(result, receivers, source=chosen)
        count = table.attrs["n_rays"]
        number = point_number(result, chosen, "source", "the result")
        tables.append(
            table.assign(
                receiver=table["ray"].assign_attrs(long_name="the ray's receiver, from 0"),
                ray=(table["ray"] + k * count).assign_attrs(
                    long_name="the ray's row: k * n_receivers + receiver, for the k-th source"
                ),
                source=(
                    "entry",
                    np.full(table.sizes["entry"], number),
                    {"long_name": "the ray's source, its number in the result"},
                ),
            )  # fmt: skip
        )
    joined = xr.concat(tables, "entry", combine_attrs="override")
    return joined.assign_attrs(n_rays=count * len(sources), n_sources=len(sources))


def _star_edges(
    field: RayField, grid: Grid, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which edge, flat cell and length (m) each piece of legs between nodes (star edges)
    is, from the star's crossing tables: an edge ``u -> v`` crosses the cells of its
    forward offset from its lower node (``u`` where ``v - u`` is forward, else ``v``), as
    its weight summed them."""
    if not len(starts):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0)
    star = forward_star(field.radius)
    tables = star_crossings(star, grid.spacing3, field.rule, grid.shape3)
    starts, ends = starts.astype(np.int64), ends.astype(np.int64)
    k = np.asarray(field.predecessor.at(ends), dtype=np.int64)  # the edge each leg ends by
    low = np.where(star.is_forward[k][:, None], starts, ends)
    j = star.half[k]
    pieces = tables.start[j + 1] - tables.start[j]
    edge = np.repeat(np.arange(len(j)), pieces)
    # Each edge's entries of the tables, in order: its start, then one more each piece.
    entry = (
        tables.start[j][edge]
        + np.arange(pieces.sum())
        - np.repeat(np.cumsum(pieces) - pieces, pieces)
    )
    flat = np.ravel_multi_index(low.T, grid.shape3)[edge] + tables.step[entry]
    return edge, flat, tables.fraction[entry] * tables.length[j][edge]


def _leg(
    field: RayField, grid: Grid, a3: np.ndarray, b3: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Flat cells and lengths (m) of a leg from or to a point between nodes, walked as its
    time was: a leg in a cell face through the fastest cell beside each piece, of the two
    beside a face or the four around a cell edge (``Grid.segment_time``'s face rule, the
    least slowness over the slab of each face axis)."""
    cells, fractions, length = leg_crossings(a3, b3, grid.spacing3)
    faces = [k for k in range(3) if a3[k] == b3[k] and a3[k] % 1.0 == 0.5]
    if faces:  # segment_time took the higher of each pair of cells: the lower ones too
        shifts = np.array(list(itertools.product((0, 1), repeat=len(faces))))
        around = np.repeat(cells[None], len(shifts), axis=0)  # (choices, pieces, 3)
        around[:, :, faces] -= shifts[:, None, :]
        slowness = field.slowness.at(around)  # (choices, pieces)
        cells = around[np.argmin(slowness, axis=0), np.arange(len(cells))]
    return np.ravel_multi_index(cells.T, grid.shape3), fractions * length


def _table(grid: Grid, rays: np.ndarray, cells: np.ndarray, lengths: np.ndarray) -> xr.Dataset:
    """The entries, one per (ray, cell), lengths summed where a ray crosses a cell twice."""
    # One int64 a (ray, cell), sorted as the pairs would be: np.unique of rows (axis=1)
    # sorted structured rows, 3x slower (73 % of 4000 rays' 3.5 s on 201 x 401).
    count = int(np.prod(grid.shape3))
    if rays.size and (int(rays.max()) + 1) * count >= 2**63:
        unique, which = np.unique(np.stack([rays, cells]), axis=1, return_inverse=True)
    else:
        key, which = np.unique(rays.astype(np.int64) * count + cells, return_inverse=True)
        unique = np.divmod(key, count)
    summed = np.bincount(which.ravel(), weights=lengths, minlength=len(unique[0]))
    index = np.unravel_index(unique[1], grid.shape3)
    data = {
        "ray": ("entry", unique[0], {"long_name": "the ray's receiver, numbered from 0"}),
        "cell": ("entry", unique[1], {"long_name": "flat index of the cell, (z, y, x) order"}),
        **{
            f"cell_{d}": ("entry", index["zyx".index(d)], {"long_name": f"cell index along {d}"})
            for d in grid.dims
        },
        "length": ("entry", summed, {"units": "m", "long_name": "length of the ray in the cell"}),
    }
    return xr.Dataset(data, attrs={"model_dims": list(grid.dims), "model_shape": list(grid.shape)})
