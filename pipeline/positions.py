"""Source and receiver positions in workflow files: inline lists, CSV files and generators.

Every form resolves to a list of points ``{"z": ..., "x": ...}`` in model coordinates, in a
fixed order (the store's ``source`` and ``receiver`` dims follow it):

- a list of mappings: ``[{z: 0, x: 100}, {z: 0, x: 200}]``;
- ``{csv: FILE}``: a CSV file with a header naming the model dims (other columns ignored);
- ``{line: {start: {...}, stop: {...}, count: N}}``: ``N`` points evenly spaced from
  ``start`` to ``stop`` inclusive;
- ``{grid: {z: 0.0, x: {start: 0, stop: 4000, count: 41}}}``: the Cartesian product of
  one value, a list of values or an evenly spaced range per dim, the last dim varying
  fastest (dims in the order ``z``, ``y``, ``x``).
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from .errors import InputError

__all__ = ["Points", "Point", "resolve_points"]

Coordinate = Annotated[float, Field(allow_inf_nan=False)]
Point = dict[str, Coordinate]
_DIM_ORDER = ("z", "y", "x")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CsvPoints(_Strict):
    """Points read from a CSV file whose header names the model dims."""

    csv: Path


class LineSpec(_Strict):
    start: Point
    stop: Point
    count: Annotated[int, Field(ge=1)]


class LinePoints(_Strict):
    """``count`` points evenly spaced on the segment from ``start`` to ``stop``."""

    line: LineSpec


class RangeSpec(_Strict):
    start: Coordinate
    stop: Coordinate
    count: Annotated[int, Field(ge=1)]

    def values(self) -> np.ndarray:
        return np.linspace(self.start, self.stop, self.count)


class GridPoints(_Strict):
    """The Cartesian product of per-dim values (a number, a list, or a range)."""

    grid: dict[str, Coordinate | Annotated[list[Coordinate], Field(min_length=1)] | RangeSpec]


def _kind(value: Any) -> str | None:
    if isinstance(value, list):
        return "points-list"
    if isinstance(value, BaseModel):
        return {CsvPoints: "points-csv", LinePoints: "points-line", GridPoints: "points-grid"}.get(
            type(value)
        )
    if isinstance(value, dict):
        for key in ("csv", "line", "grid"):
            if key in value:
                return f"points-{key}"
    return None


Points = Annotated[
    Annotated[list[Point], Tag("points-list")]
    | Annotated[CsvPoints, Tag("points-csv")]
    | Annotated[LinePoints, Tag("points-line")]
    | Annotated[GridPoints, Tag("points-grid")],
    Discriminator(
        _kind,
        custom_error_type="points",
        custom_error_message="expected a list of points, or a mapping with one key: csv, "
        "line or grid",
        custom_error_context={},
    ),
]


def _read_csv(path: Path, what: str) -> list[dict[str, float]]:
    if not path.is_file():
        where = "" if Path(path).is_absolute() else f" (from the working directory {Path.cwd()})"
        raise InputError(f"{what} CSV file {path} does not exist{where}")
    # utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name;
    # names are stripped, so "z, x" names z and x.
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames:
            reader.fieldnames = [str(name).strip() for name in reader.fieldnames]
        rows = list(reader)
    if not rows:
        raise InputError(f"{what} CSV file {path} has a header but no rows")
    dims = [d for d in _DIM_ORDER if d in rows[0]]
    if not dims:
        raise InputError(
            f"{what} CSV file {path}: the header names no model dim (z, y, x); "
            f"it has {sorted(rows[0])}"
        )
    points = []
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        try:
            point = {d: float(row[d]) for d in dims}
        except (TypeError, ValueError):
            raise InputError(
                f"{what} CSV file {path}:{number}: not a number in {[row[d] for d in dims]}"
            ) from None
        if not all(np.isfinite(v) for v in point.values()):
            raise InputError(f"{what} CSV file {path}:{number}: non-finite coordinate")
        points.append(point)
    return points


def resolve_points(spec: Any, what: Literal["source", "receiver"]) -> list[dict[str, float]]:
    """The points a validated ``sources``/``receivers`` entry stands for, in order.

    Raises
    ------
    InputError
        For a missing or malformed CSV file, or a generator whose dims disagree.
    """
    if isinstance(spec, list):
        return [dict(point) for point in spec]
    if isinstance(spec, CsvPoints):
        return _read_csv(spec.csv, what)
    if isinstance(spec, LinePoints):
        start, stop, count = spec.line.start, spec.line.stop, spec.line.count
        if set(start) != set(stop):
            raise InputError(
                f"{what} line: start and stop name different dims ({sorted(start)} vs "
                f"{sorted(stop)})"
            )
        fractions = np.linspace(0.0, 1.0, count) if count > 1 else np.zeros(1)
        return [{d: float(start[d] + f * (stop[d] - start[d])) for d in start} for f in fractions]
    dims = [d for d in _DIM_ORDER if d in spec.grid] + [d for d in spec.grid if d not in _DIM_ORDER]
    axes = []
    for d in dims:
        value = spec.grid[d]
        if isinstance(value, RangeSpec):
            axes.append([float(v) for v in value.values()])
        elif isinstance(value, list):
            axes.append([float(v) for v in value])
        else:
            axes.append([float(value)])
    return [dict(zip(dims, combo)) for combo in itertools.product(*axes)]
