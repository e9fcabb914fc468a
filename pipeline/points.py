"""Points (sources, receivers) as users give them: mappings, tables, CSV files, named or
not, located on a grid with every bad one named at once (docs/method.md section 3)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from numbers import Real
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr

from .errors import InputError, other_case, warn_input
from .grid import Grid, OutsideModel
from .models import is_number
from .positions import (
    NAME_COLUMNS,
    check_names,
    csv_points,
    csv_row_lines,
    mistyped_hint,
    name_column,
    other_columns_hint,
    prefixed_hint,
    refuse_off_section,
    warn_ignored_columns,
)

__all__ = [
    "PointError", "as_table", "number_column", "source_list", "given_path", "locate_points",
    "repeated_sources", "one_point", "BAD_POINTS_SHOWN",
]  # fmt: skip


def one_point(points: Any) -> bool:
    """One point: a mapping of numbers (a mapping of sequences is a table of columns)."""
    return isinstance(points, Mapping) and all(np.ndim(value) == 0 for value in points.values())


def as_table(points: Any) -> Any:
    """``points`` with the forms that name their dims another way made mappings: a pandas
    Series (one point, its index naming the dims) and a NumPy structured array (a table,
    its fields naming the columns)."""
    if isinstance(points, pd.Series):
        return points.to_dict()
    if isinstance(points, pd.DataFrame) and points.index.name in NAME_COLUMNS:
        return points.reset_index()  # stations indexed by name: the names are a column
    if isinstance(points, np.ndarray) and points.dtype.names:
        return {name: points[name] for name in points.dtype.names}
    return points


def number_column(column: np.ndarray) -> np.ndarray:
    """A table's column as float64, if it holds real numbers (``None`` read as NaN, a
    missing value): text (``"0"``) and booleans are refused as a lone point's coordinates
    are, not converted (``True`` read as 1 m); a ``ValueError`` says so."""
    kind = column.dtype.kind
    if kind == "O":
        # None is a missing value (a catalogue's depth, JSON's null): NaN, as pandas reads it.
        real = all(
            v is None or isinstance(v, Real) and not isinstance(v, (bool, np.bool_))
            for v in column.flat
        )
        if real:
            column = np.array([np.nan if v is None else v for v in column.flat]).reshape(
                column.shape
            )
        kind = "f" if real else "O"
    if kind not in "iuf":
        raise ValueError(f"{column.dtype} values")
    return column.astype(np.float64)


def source_list(
    points: Any, dims: tuple[str, ...], what: str = "sources"
) -> tuple[list[dict], list[str] | None]:
    """Points (``what``: sources, ...) as a list of mappings, from a sequence of mappings or
    a table of columns named after ``dims`` (a dict of sequences, a pandas DataFrame, an
    xarray Dataset, a NumPy structured array); a pandas Series indexed by dim names is one
    point. And the points' names, if given (else ``None``).

    A ``name`` (or ``station``) column, or key of every mapping, names the points
    (:func:`~.positions.check_names`), as in a CSV file; so does a DataFrame's index of
    that name. Other columns that are not dims (an elevation) are ignored with an
    :class:`~.errors.InputWarning`. A path (``"stations.csv"``) is read as a workflow's
    ``csv:`` entry is (:func:`~.positions.csv_points`).
    """
    if given_path(points) is not None:
        # A station list on disk, read as a workflow reads one (names, ignored columns).
        return csv_points(points, what)
    points = as_table(points)
    listed = isinstance(points, list | tuple) and len(points) > 0
    numbers = listed and all(is_number(p) for p in points)
    # Rows of coordinates ([[z, y, x], ...]): each was refused as "not a mapping", one line
    # a point.
    rows = (
        listed and len(points) > 1 and all(isinstance(p, list | tuple | np.ndarray) for p in points)
    )
    if numbers or rows or isinstance(points, np.ndarray) and points.dtype != object:
        # A list of numbers was taken as that many points, each "not a mapping".
        given = "a list of numbers" if numbers else "rows of numbers" if rows else "a NumPy array"
        raise InputError(
            f"{what} given as {given} have no dim names: give a sequence of mappings "
            f"such as [{{'z': 0.0, 'x': 100.0}}], or a table of columns such as "
            f"{{'z': zs, 'x': xs}}"
        )
    if isinstance(points, xr.Dataset) or hasattr(points, "columns") or isinstance(points, Mapping):
        missing = [d for d in dims if d not in points]
        given = list(points.variables if isinstance(points, xr.Dataset) else points.keys())
        if isinstance(points, xr.Dataset):  # (a scalar coordinate, y of a .sel: no column)
            given = [n for n in given if points[n].ndim or n in points.data_vars]
        if missing:
            # (A DataFrame of lat, lon, depth got no hint; the same CSV file did.)
            hint = other_case(given, missing) or other_columns_hint(given)
            hint = hint or prefixed_hint(given, missing)
            hint = hint or mistyped_hint([n for n in given if n not in dims], missing)
            raise InputError(f"the {what} table has no column for {missing}{hint}")
        refuse_off_section(given, dims, f"the {what} table")
        columns = {}
        for d in dims:
            try:
                column = number_column(np.asarray(points[d]))
            except (TypeError, ValueError):
                raise InputError(f"the {what} table's column {d!r} is not numbers") from None
            if column.ndim > 1:  # e.g. a Dataset variable on two dims
                raise InputError(
                    f"the {what} table's column {d!r} has {column.ndim} dims; a column holds "
                    "one number per point"
                )
            columns[d] = column
        lengths = {d: len(column) for d, column in columns.items() if column.ndim}
        if len(set(lengths.values())) > 1:
            raise InputError(f"the {what} table's columns differ in length: {lengths}")
        # A number for a column is every point's (surface receivers: {"z": 0.0, "x": xs}),
        # as gradient_traveltime broadcasts it.
        count = next(iter(lengths.values()), 1)
        columns = {d: np.broadcast_to(column, (count,)) for d, column in columns.items()}
        if isinstance(points, xr.Dataset):
            # Its variables and coordinates; of its indexes only one that names the points
            # (stations along a dim "station", as a DataFrame indexed by name), not a row
            # number.
            names = [
                *points.data_vars,
                *(c for c in points.coords if c not in points.indexes or c in NAME_COLUMNS),
            ]
        else:
            names = list(points.keys())
        warn_ignored_columns(names, list(dims), f"the {what} table", complete=True)
        n = len(columns[dims[0]])
        label = name_column(names)
        labels = None
        if label is not None:
            labels = np.atleast_1d(np.asarray(points[label], dtype=object)).tolist()
            if len(labels) != n:
                raise InputError(f"the {what} table's {label!r} column is not one per point")
            labels = check_names(labels, lambda i: f"the {what} table's row {i} (from 0)")
        return [{d: float(columns[d][i]) for d in dims} for i in range(n)], labels
    if isinstance(points, (str, bytes)) or not hasattr(points, "__iter__"):
        raise InputError(f"{what} must be a sequence of mappings or a table of columns")
    # Each a pandas Series too, as one point is (a DataFrame's rows, iterrows' values).
    return _named_mappings([as_table(p) if isinstance(p, pd.Series) else p for p in points], what)


def _named_mappings(points: list, what: str) -> tuple[list, list[str] | None]:
    """A sequence of points as mappings without their names, and the names: a ``name``
    (or ``station``) key names a point, and then every point must have one."""
    keys = {key for p in points if isinstance(p, Mapping) for key in p}
    label = name_column(list(keys))
    if label is None:
        return points, None
    # What is not a mapping is refused where the points are located, as without names.
    labels = [p.get(label) if isinstance(p, Mapping) else None for p in points]
    labels = check_names(labels, lambda i: f"point {i} (from 0) of the {what}")
    return [{k: v for k, v in p.items() if k != label} for p in points], labels


def given_path(points: Any) -> str | os.PathLike | None:
    """``points`` where they name a CSV file (:func:`source_list` reads it), else ``None``."""
    return points if isinstance(points, (str, os.PathLike)) else None


def locate_points(
    grid: Grid,
    points: list[Mapping[str, float]],
    what: str,
    names: list[str] | None = None,
    path: str | os.PathLike | None = None,
    outside: Literal["raise", "nan"] = "raise",
) -> np.ndarray:
    """``(n, 3)`` fractional node indices of ``points`` (``what``: source, point, ...);
    ``path``: the CSV file they were read from; ``outside="nan"``: a point outside the
    model (or with a NaN coordinate) is a row of NaN rather than refused.

    Raises
    ------
    PointError
        For a point outside the model or not a point: it names the point by its number
        (and its name, from ``names``) when there are several, and by its file and line
        when they came from ``path``, and carries that number. Every bad point is named
        (up to :data:`BAD_POINTS_SHOWN`), the first first: a station list with three
        stations outside took three runs to mend.
    """
    # All at once where they are plain numbers inside the model (a grid search's 1e5 trial
    # hypocentres took 50 us each point by point); the rest point by point, which refuses
    # or places them.
    located, slow = grid.to_indices(points)
    bad, count = [], 0
    for i in slow.tolist():  # (ints: a workflow finds a point's line by its number)
        try:
            located[i] = grid.to_index(points[i], what)
        except InputError as error:
            if outside == "nan" and isinstance(error, OutsideModel):
                located[i] = np.nan
                continue
            count += 1
            if len(bad) < BAD_POINTS_SHOWN:  # the rest counted only: a file in km had all
                bad.append((i, error))
    if not bad:
        slip = grid.km_in_m(located, what) if what in ("source", "receiver") else None
        if slip:
            warn_input(slip if path is None else f"{what} CSV file {path}: {slip}")
        return located
    # A file's rows are found by line (its comments and blank lines counted).
    rows = [i for i, _ in bad]
    lines = {} if path is None else dict(zip(rows, csv_row_lines(path, rows)))

    def said(i: int, error: InputError) -> str:
        name = f" {names[i]!r}" if names is not None else ""
        number = "" if len(points) == 1 else f"{what} {i}{name} (numbered from 0): "
        where = "" if path is None else f"{what} CSV file {path}:{lines[i]}: "
        return f"{where}{number}{error}"

    message = said(*bad[0])
    if count > 1:
        message += f"\n{count - 1} more {what}(s) cannot be placed:" + "".join(
            f"\n  {said(*other)}" for other in bad[1:]
        )
        if count > len(bad):
            message += f"\n  and {count - len(bad)} more"
    raise PointError(message, index=bad[0][0])


#: Bad points a :class:`PointError` names, the first included.
BAD_POINTS_SHOWN = 10


def repeated_sources(positions: np.ndarray, names: list[str] | None = None) -> str | None:
    """Why sources at one place (the same node, or the same point between nodes, after
    snapping) deserve a warning, or None: each is solved again, the same field for the
    same time; a station listed twice is the usual cause.

    Parameters
    ----------
    positions : numpy.ndarray
        ``(n, 3)`` fractional node indices (:func:`locate_points`).
    names : list of str, optional
        The sources' names, to say which by name too.
    """
    unique, inverse = np.unique(positions, axis=0, return_inverse=True)
    if len(unique) == len(positions):
        return None
    inverse = inverse.reshape(-1)  # numpy 2.0.0 gave it the shape of the input
    first = np.flatnonzero(np.bincount(inverse)[inverse] > 1)[0]
    same = np.flatnonzero(inverse == inverse[first])
    extra = len(positions) - len(unique)
    a, b = (f"{k} {names[k]!r}" if names is not None else str(k) for k in same[:2])
    return (
        f"sources {a} and {b} (numbered from 0) are at one place, and "
        f"{extra} source(s) in all repeat an earlier one: each is solved again (the same "
        "field); drop the repeats unless that is meant"
    )


class PointError(InputError):
    """A bad point of a list (:func:`locate_points`): ``index`` is its number."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index

    def __reduce__(self) -> tuple:  # pickled with its index (process pools, Dask)
        return (type(self), (str(self), self.index))
