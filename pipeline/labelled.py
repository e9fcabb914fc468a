"""Points given the xarray way: coordinates as arrays along dims of their own.

``field.interp(z=zs, x=xs)`` with ``zs`` and ``xs`` DataArrays along ``station`` gives a
result along ``station``, keeping its coordinates (xarray's vectorised indexing). A
lookup's points given as an :class:`xarray.Dataset` (or a mapping of DataArrays) are read
the same way: stations along their own dim keep it and their names, and a lattice of trial
hypocentres (``xr.Dataset(coords={"z": zs, "x": xs})``) gives a grid search's cube along
its own ``z`` and ``x``. Other tables (lists of mappings, DataFrames, CSV files) give the
flat ``point`` dim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from .errors import InputError
from .points import number_column
from .positions import (
    NAME_COLUMNS,
    check_names,
    name_column,
    refuse_off_section,
    warn_ignored_columns,
)

__all__ = ["LabelledPoints", "labelled_points"]


@dataclass(frozen=True)
class LabelledPoints:
    """Points along dims of their own, flattened to be located one after another.

    Attributes
    ----------
    columns : dict of str to numpy.ndarray
        Each model dim's coordinates, flat (C order of ``dims``).
    dims : tuple of str
        The points' own dims (the broadcast of their coordinate arrays).
    shape : tuple of int
        Their lengths.
    coords : dict
        The points' coordinates to keep on the result (their dims among ``dims``).
    """

    columns: dict[str, np.ndarray]
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    coords: dict[str, xr.Variable]

    def unflat(self, values: np.ndarray, lead: tuple[str, ...]) -> xr.DataArray:
        """``values`` (``(..., n)``: leading dims ``lead``, then the flat points) as a
        DataArray along ``lead`` and the points' own dims, with their coordinates."""
        shaped = values.reshape(values.shape[:-1] + self.shape)
        return xr.DataArray(shaped, dims=lead + self.dims, coords=self.coords)


def _as_dataset(points: Any) -> xr.Dataset | None:
    """``points`` as a Dataset where given the xarray way, else ``None``."""
    if isinstance(points, xr.Dataset):
        return points
    if (
        isinstance(points, Mapping)
        and any(isinstance(v, xr.DataArray) for v in points.values())
        and all(isinstance(v, xr.DataArray) or np.ndim(v) == 0 for v in points.values())
    ):
        try:  # (a Dataset would join their coordinates, outside either one's NaN)
            xr.align(*(v for v in points.values() if isinstance(v, xr.DataArray)), join="exact")
            return xr.Dataset(dict(points))
        except (ValueError, TypeError) as error:  # e.g. one dim of two lengths
            raise InputError(f"the points' coordinates do not align: {error}") from None
    return None


def labelled_points(points: Any, dims: tuple[str, ...], taken: set[str]) -> LabelledPoints | None:
    """Points given as a Dataset (or a mapping of DataArrays) with coordinates along dims
    of their own, flattened; ``None`` for any other form (and for a Dataset of scalars,
    one point, or without every model dim: the other forms' rules refuse it).

    Parameters
    ----------
    points : Any
        The points as given.
    dims : tuple of str
        The model's dims.
    taken : set of str
        Names the result uses already (``source``, ``source_x``, ``point_x``, ...): a
        points' dim or coordinate of one of them is refused, not silently overwritten.
    """
    table = _as_dataset(points)
    if table is None or any(d not in table.variables for d in dims):
        return None
    # (A scalar coordinate, y of stations cut from a 3D set with .sel, is not a column.)
    columns_given = [n for n, v in table.variables.items() if v.ndim or n in table.data_vars]
    refuse_off_section(columns_given, dims, "the points' Dataset")
    located = [table[d] for d in dims]
    if not any(column.dims for column in located):
        return None
    try:  # stations' coordinates along one dim must agree, not be joined with NaN
        located = xr.align(*located, join="exact")
    except ValueError as error:
        raise InputError(f"the points' coordinates do not align: {error}") from None
    broadcast = xr.broadcast(*located)
    own = broadcast[0].dims
    clash = sorted(taken & {*own, *table.coords, *(n for n in NAME_COLUMNS if n in table)})
    if clash:
        raise InputError(
            f"the points' dims or coordinates {clash} are names the result uses: rename them "
            "(Dataset.rename)"
        )
    columns = {}
    for d, column in zip(dims, broadcast, strict=True):
        try:  # the flat tables' rule: numbers (of an object array too), None missing
            columns[d] = number_column(np.asarray(column.values)).ravel()
        except (TypeError, ValueError):
            raise InputError(f"the points' {d!r} is not numbers ({column.dtype})") from None
    # Coordinates along the points' own dims (names, station codes, the lattice's axes);
    # a name variable kept as one, as a table's name column names its points.
    kept = {
        name: variable
        for name, variable in table.variables.items()
        if (name in table.coords or name in NAME_COLUMNS) and set(variable.dims) <= set(own)
    }
    label = name_column([n for n in kept if n not in table.indexes])
    if label is not None:
        # A name variable names the points, checked as a table's names are (none blank,
        # no two alike); along one dim without an index, it becomes that dim's index, to
        # select them by (.sel(point="STA1"), as a table's names give the "point" dim).
        values = np.atleast_1d(kept[label].values).ravel().tolist()
        names = check_names(values, lambda i: f"the points' point {i} (from 0, flat)")
        variable = kept.pop(label)
        if len(own) == 1 and variable.dims == own and own[0] not in table.indexes:
            kept[own[0]] = xr.Variable(own, np.array(names, dtype=object))
        else:
            kept[label] = variable.copy(data=np.array(names, dtype=object).reshape(variable.shape))
    # Other variables (an elevation) are warned about as a table's other columns are.
    others = [n for n in table.data_vars if n not in kept and n != label]
    warn_ignored_columns(others, list(dims), "the points' Dataset", complete=True)
    return LabelledPoints(columns, own, broadcast[0].shape, kept)
