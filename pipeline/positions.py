"""Source and receiver positions in workflow files: inline lists, CSV files and generators.

Every form resolves to a list of points ``{"z": ..., "x": ...}`` in model coordinates, in a
fixed order (the store's ``source`` and ``receiver`` dims follow it):

- a list of mappings: ``[{z: 0, x: 100}, {z: 0, x: 200}]``, each naming model dims only
  (a point's ``name:`` is refused, not ignored; a ``line:`` is not an item of a list);
- ``{csv: FILE}``: a CSV file with a header naming the model dims, in lower case (``Z`` is
  refused, not guessed: other tools' ``Z`` is often an elevation); a ``name`` (or
  ``station``) column labels the points (the store's ``source`` or ``receiver`` coordinate,
  to select by name); other columns, such as an elevation, are ignored with an
  :class:`~.errors.InputWarning`; lines whose first non-blank character is ``#`` are
  comments, and every row has as many fields as the header;
- ``{line: {start: {...}, stop: {...}, count: N}}``: ``N`` points evenly spaced from
  ``start`` to ``stop`` inclusive (``count: 1`` only where ``start`` is ``stop``);
- ``{grid: {z: 0.0, x: {start: 0, stop: 4000, count: 41}}}``: the Cartesian product of
  one value, a list of values or an evenly spaced range per dim, the last dim varying
  fastest (dims in the order ``z``, ``y``, ``x``).
"""

from __future__ import annotations

import csv
import difflib
import functools
import itertools
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, Discriminator, Field, Tag, model_validator

from .errors import (
    ELEVATION_NAMES,
    LOWER_CASE_DIMS,
    OTHER_DIM_NAMES,
    Z_IS_DEPTH,
    InputError,
    missing_file,
    warn_input,
)
from .yamlfile import FilePath, Strict, schema_error

__all__ = [
    "NAME_COLUMNS",
    "mistyped_hint",
    "prefixed_hint",
    "refuse_off_section",
    "CsvPoints",
    "Points",
    "Point",
    "check_names",
    "csv_points",
    "csv_row_lines",
    "name_column",
    "other_columns_hint",
    "resolve_points",
    "warn_ignored_columns",
]

Coordinate = Annotated[float, Field(allow_inf_nan=False)]
_DIM_ORDER = ("z", "y", "x")
_GENERATORS = ("csv", "line", "grid")
#: Columns of a table of points (or keys of a point) that label the points by name, in the
#: order looked for: a station list's names, to select results by (``sel(receiver="STA1")``).
NAME_COLUMNS = ("name", "station")


def _dim_keys(value: Any, listed: bool = False) -> Any:
    """Refuse a key that is not a model dim, before its value is read: ``name: STA1`` in a
    point would otherwise be reported as "not a valid number", and ``line:`` in a list of
    points (``listed``) likewise."""
    if not isinstance(value, dict):
        return value  # the type error is pydantic's
    for key in value:
        if key in _DIM_ORDER:
            continue
        if listed and key in _GENERATORS:
            message = (
                f"{key} inside a list: a list holds points only ({{z: ..., x: ...}}); a "
                f"{key} is the whole sources or receivers entry ({{{key}: ...}})"
                + (
                    "; for several lines, list their points in a CSV file ({csv: ...}) or "
                    "give a grid ({grid: ...})"
                    if key == "line"
                    else ""
                )
            )
        elif isinstance(key, str) and key.lower() in _DIM_ORDER:  # as CSV headers are told
            message = f"unknown key {key!r}: did you mean {key.lower()!r}? ({LOWER_CASE_DIMS})"
        else:
            message = (
                f"unknown key {key!r}: points are given by model dims only (z, y, x); to "
                "name stations, give them in a CSV file with a name column"
            )
        raise schema_error("point_key", message)
    return value


Point = Annotated[dict[str, Coordinate], BeforeValidator(_dim_keys)]
#: A point as an item of a list of points, where a generator's key is a likely mistake.
ListedPoint = Annotated[
    dict[str, Coordinate], BeforeValidator(functools.partial(_dim_keys, listed=True))
]


class CsvPoints(Strict):
    """Points read from a CSV file whose header names the model dims, or whose columns
    ``rename`` maps to them (``{depth: z, northing: y, easting: x}``; ``name`` or
    ``station`` for the names' column), as ``model.rename`` does for a model file's axes."""

    csv: FilePath
    rename: dict[str, Literal["z", "y", "x", "name", "station"]] | None = None


def _one_point_is_one_place(spec: LineSpec | RangeSpec, what: str) -> None:
    # One point of a segment is ambiguous (its start? its middle?): refused, not guessed.
    if spec.count == 1 and spec.start != spec.stop:
        message = f"count 1 with start and stop apart: give count >= 2, or one {what}"
        raise schema_error("line_count", message)


class LineSpec(Strict):
    start: Point
    stop: Point
    count: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _one_point(self) -> LineSpec:
        _one_point_is_one_place(self, "point")
        return self


class LinePoints(Strict):
    """``count`` points evenly spaced on the segment from ``start`` to ``stop``."""

    line: LineSpec


class RangeSpec(Strict):
    start: Coordinate
    stop: Coordinate
    count: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _one_value(self) -> RangeSpec:  # was silently the start
        _one_point_is_one_place(self, "value")
        return self

    def values(self) -> np.ndarray:
        return np.linspace(self.start, self.stop, self.count)


class GridPoints(Strict):
    """The Cartesian product of per-dim values (a number, a list, or a range)."""

    grid: Annotated[
        dict[str, Coordinate | Annotated[list[Coordinate], Field(min_length=1)] | RangeSpec],
        BeforeValidator(_dim_keys),
    ]


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
    Annotated[list[ListedPoint], Tag("points-list")]
    | Annotated[CsvPoints, Tag("points-csv")]
    | Annotated[LinePoints, Tag("points-line")]
    | Annotated[GridPoints, Tag("points-grid")],
    Discriminator(
        _kind,
        custom_error_type="points",
        custom_error_message="expected a list of points, or a mapping with one of the keys "
        "csv (and its rename), line or grid",
        custom_error_context={},
    ),
]


# Words in the name of a column that gives a station's height or depth: such a column is
# ignored like any other that is not a model dim, and the warning says what z is instead.
_HEIGHT_WORDS = {"elevation", "elev", "altitude", "alt", "height", "depth"}


def _is_skipped(line: str) -> bool:
    """A comment (first non-blank character ``#``) or a blank line."""
    text = line.strip()
    return not text or text.startswith("#")


def _records(lines: list[str], where: str) -> list[tuple[int, list[str]]]:
    """The CSV records of a file's lines, each with the line it starts on (1-based and
    counting every line of the file: comments and blank lines are skipped, not renumbered).
    """
    numbers = [n for n, line in enumerate(lines, start=1) if not _is_skipped(line)]
    reader = csv.reader(lines[n - 1] for n in numbers)
    records = []
    while True:
        consumed = reader.line_num  # lines the reader has taken: the next record starts here
        try:
            fields = next(reader)
        except StopIteration:
            return records
        except csv.Error as error:  # e.g. a quote left open to the end of the file
            number = numbers[min(consumed, len(numbers) - 1)]
            raise InputError(f"{where}:{number}: {error}") from None
        records.append((numbers[consumed], fields))


def _how_to_rename(columns: dict[str, str]) -> str:
    """How to read ``columns`` (column name -> dim) as the dims they hold: in a workflow and
    in Python."""
    mapping = ", ".join(f"{name}: {dim}" for name, dim in columns.items())
    return (
        f"a workflow's csv entry reads them with rename: {{{mapping}}}; a DataFrame: "
        f".rename(columns={dict(columns)!r})"
    )


def other_columns_hint(names: list[Any]) -> str:
    """``"; columns are the model's coordinates ... lat -> y, depth -> z ..."`` for a table
    whose columns are named as other tools name them (a CSV file's header, a DataFrame's
    columns), else ``""``."""
    names = [name for name in names if isinstance(name, str)]
    other = {
        name: OTHER_DIM_NAMES[name.lower()] for name in names if name.lower() in OTHER_DIM_NAMES
    }
    if not other:
        return ""
    said = ", ".join(f"{name} -> {dim}" for name, dim in other.items())
    return (
        f"; columns are the model's coordinates, in its length unit, named z (depth, "
        f"positive down), y and x: {said}, projected onto the model first where they "
        f"are geographic ({_how_to_rename(other)})"
    )


def _header_hint(lines: list[str], header_line: int, names: list[str] | None = None) -> str:
    """A hint for a header that names no dim: ``np.savetxt(..., header="z,x")`` writes the
    header as ``# z,x``, a comment, so the first row of numbers was taken for the header;
    fields separated by another character than a comma (``name;z;x``, a spreadsheet's
    export in some locales); or columns named as other tools name them (latitude, depth)."""
    names = names or []
    if len(names) == 1:
        for sign in (";", "\t", "|", " "):
            parts = {part.strip() for part in names[0].split(sign)}
            if parts & set(_DIM_ORDER):
                return f"; its fields are separated by {sign!r}: separate them by commas"
    other = other_columns_hint(names)
    if other:
        return other
    for number, line in enumerate(lines[: header_line - 1], start=1):
        text = line.strip()
        if text.startswith("#"):
            names = {part.strip() for part in text.lstrip("#").split(",")}
            if names & set(_DIM_ORDER):
                return (
                    f"; line {number} ({text!r}) is a comment, as is every line whose first "
                    "character is '#': write the header without the '#'"
                )
    return ""


def _refuse_other_case(names: list[str], where: str, header_line: int) -> None:
    """Refuse a column named like a dim but in another case (``Z``, ``X``).

    Not read as the dim: station lists from other tools often give ``Z`` as elevation,
    positive up, where raygrid's z is depth, positive down; renaming the column is the
    moment to check which it is. Nor ignored like other columns: its points would lack
    that dim, or the file would seem to name none.
    """
    cased = [name for name in names if name.lower() in _DIM_ORDER and name not in _DIM_ORDER]
    if not cased:
        return
    twice = [name for name in cased if name.lower() in names]
    if twice:  # renaming it as meant would name a dim twice
        raise InputError(
            f"{where}:{header_line}: column {twice[0]!r} and the dim {twice[0].lower()!r} "
            f"differ only by case; drop or rename {twice[0]!r} (dim names are lower case)"
        )
    them = ", ".join(map(repr, cased))
    meant = ", ".join(repr(name.lower()) for name in cased)
    if len(cased) == 1:
        columns = f"column {them} is not a model dim"
    else:
        columns = f"columns {them} are not model dims"
    message = f"{where}:{header_line}: {columns}; did you mean {meant}? (dim names are lower case)"
    depth = [name for name in cased if name.lower() == "z"]
    if depth:
        message += (
            f"; raygrid's {Z_IS_DEPTH}: rename {depth[0]!r} "
            "to 'z' if it is a depth, not an elevation"
        )
    raise InputError(message)


def name_column(names: list[Any]) -> str | None:
    """The column of a table of points that names them (:data:`NAME_COLUMNS`), if any."""
    return next((c for c in NAME_COLUMNS if c in names), None)


def check_names(values: list[Any], row: Any) -> list[str]:
    """Points' names, checked: each a non-blank text (an integer is taken as its digits, as
    a station number), stripped, and no two alike, since they label the points to select
    them by. ``row(i)`` says where the point numbered ``i`` from 0 is, for the errors.

    Raises
    ------
    InputError
        For a missing or blank name (a table's empty cell), a name that is not text, or two
        points with one name.
    """
    names = []
    seen: dict[str, int] = {}
    for i, value in enumerate(values):
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            value = str(value)
        if not isinstance(value, str):
            missing = value is None or (isinstance(value, float) and np.isnan(value))
            what = "has no name" if missing else f"has a name that is not text: {value!r}"
            raise InputError(f"{row(i)} {what}")
        name = value.strip()
        if not name:
            raise InputError(f"{row(i)} has a blank name")
        if name in seen:
            raise InputError(
                f"{row(i)} has the name {name!r} again (first at "
                f"{row(seen[name]).rstrip(': ')}): names label the points, to select them "
                "by, so no two may be alike"
            )
        seen[name] = i
        names.append(name)
    return names


def refuse_off_section(names: list[Any], dims: tuple[str, ...] | list[str], where: str) -> None:
    """Refuse a table of points with a column for a dim the model lacks (``y`` on a 2D
    model): ignored, every point was put on the section whatever its ``y``, where one
    point with a ``y`` (or a CSV file with one) was refused."""
    flat = [d for d in _DIM_ORDER if d in names and d not in dims]
    if flat:
        raise InputError(
            f"{where} has a column for {flat}: the model is {len(dims)}D {tuple(dims)}; "
            f"leave out {flat} (the points' position off the section)"
        )


def prefixed_hint(names: list[Any], missing: list[str]) -> str:
    """``"; it has the receivers' [...]: rename them (.rename(receiver_z="z", ...))"``
    for a table whose columns are a result's or a store's positions (``receiver_z``,
    ``source_x``, ``point_x``) for every missing dim, or ``""``: a store's receivers given
    back as points were refused for "no column for ['z', 'x']" without a word on why."""
    for prefix in ("receiver", "source", "point"):
        found = {f"{prefix}_{d}": d for d in missing if f"{prefix}_{d}" in names}
        if found and len(found) == len(missing):
            pairs = ", ".join(f'{k}="{v}"' for k, v in found.items())
            return f"; it has the {prefix}s' {list(found)}: rename them (.rename({pairs}))"
    return ""


def mistyped_hint(names: list[Any], absent: list[str]) -> str:
    """``"; did you mean 'x' for 'xx'?"`` for columns named like a dim of ``absent`` (those
    a table lacks), or ``""``: a dim's column mistyped, every row refused for missing it,
    with nothing said of the column."""
    typed = {
        n: close[0]
        for n in names
        if isinstance(n, str) and n not in _DIM_ORDER  # ('y' on a 2D model is not a typo)
        and (close := difflib.get_close_matches(n.lower(), absent, 1))
    }  # fmt: skip
    return "".join(f"; did you mean {d!r} for {n!r}?" for n, d in typed.items())


def warn_ignored_columns(
    names: list[Any], dims: list[str], where: str, complete: bool = False
) -> None:
    """Warn once about the columns of a table of points that are not model dims.

    Station lists carry elevations and more: accepted, but the user must know they are
    not used, above all a height, which some tools read as the position's z. Shared by CSV
    files and the tables (DataFrame, Dataset, dict of columns) the Python API takes. The
    names' column
    (:func:`name_column`) is used, not ignored.
    """
    used = [*dims, name_column(names)]
    ignored = [(i, name) for i, name in enumerate(names) if name not in used]
    if not ignored:
        return
    shown = ", ".join(
        f"an unnamed column (column {i + 1})" if n is None or n == "" else repr(n)
        for i, n in ignored
    )
    message = f"{where}: ignoring column(s) {shown}; positions are read from {', '.join(dims)}"
    # A height is measured up, an elevation or a depth often from sea level; a user who
    # expects such a column to place the stations must be told what z is, and that it does not.
    words = {i: set(re.split(r"[^a-z]+", str(n).lower())) for i, n in ignored}
    heights = [n for i, n in ignored if _HEIGHT_WORDS & words[i]]
    if heights:
        message += (
            f". raygrid's {Z_IS_DEPTH}; "
            f"{', '.join(map(repr, heights))} {'is' if len(heights) == 1 else 'are'} not used"
        )
    # Another tool's name for a dim the table lacks (depth beside x): the points then miss
    # that dim, refused later without a word about the column that holds it.
    likely = {
        n: OTHER_DIM_NAMES[n.lower()]
        for _, n in ignored
        if isinstance(n, str) and OTHER_DIM_NAMES.get(n.lower()) not in (None, *dims)
    }
    if likely:
        message += (
            f"; {', '.join(f'{n!r} may be {d}' for n, d in likely.items())} (in the model's "
            f"coordinates and length unit, z positive down): rename it "
            f"({_how_to_rename(likely)})"
        )
    # A dim's column mistyped (xx for x), where the table lacks that dim: ``dims`` are a CSV
    # file's, those it has; ``complete``, the model's, all given (none to guess).
    absent = [] if complete else [d for d in _DIM_ORDER if d not in dims]
    message += mistyped_hint([n for _, n in ignored if n not in likely], absent)
    if name_column(names) is None:
        # A names' column mistyped ("nmae") left the points unnamed, with only this warning
        # to say so; a store's names are part of its fingerprint, so fixing it later means
        # solving again.
        spelled = [str(n) for _, n in ignored if isinstance(n, str)]
        close = [c for n in spelled for c in difflib.get_close_matches(n.lower(), NAME_COLUMNS, 1)]
        if close:
            message += f"; did you mean {close[0]!r}? (a column of that name names the points)"
    warn_input(message)


def csv_points(
    path: str | os.PathLike, what: str
) -> tuple[list[dict[str, float]], list[str] | None]:
    """The points of a CSV file named in the Python API (``traveltimes(velocity,
    "stations.csv")``), read as a workflow's ``csv:`` entry is, and their names; ``what``
    (``sources``, ``points``) names them in the messages.

    Raises
    ------
    InputError
        For a path that is not a ``.csv`` file, or a missing or malformed one.
    """
    path = Path(os.path.expanduser(os.fspath(path)))
    if path.suffix.lower() != ".csv":
        raise InputError(
            f"{what} given as a path must name a CSV file (.csv) whose header names the model "
            f"dims, got {str(path)!r}"
        )
    return _read_csv(path, what.removesuffix("s"))


def _read_csv(
    path: Path, what: str, rename: dict[str, str] | None = None
) -> tuple[list[dict[str, float]], list[str] | None]:
    """The points of a CSV file whose header names the model dims, and their names if a
    column gives them (:data:`NAME_COLUMNS`). ``rename`` maps columns of the header to the
    dims (or ``name``) first.

    Lines whose first non-blank character is ``#`` (comments) and blank lines are skipped,
    before or after the header; line numbers in errors count them. Columns other than the
    model dims and the names (an elevation) are ignored with an :class:`InputWarning`.

    Raises
    ------
    InputError
        For a missing or empty file, a header naming no dim, a dim twice or a dim in upper
        case (``Z``), no rows, a row
        with more or fewer fields than the header, a coordinate that is not a finite
        number, or a blank or repeated name (:func:`check_names`); naming the file and the
        line.
    """
    if not path.is_file():
        raise missing_file(path, f"{what} CSV file")
    where = f"{what} CSV file {path}"
    # utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name.
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            lines = handle.readlines()
    except UnicodeDecodeError as error:  # e.g. a station name saved as Latin-1
        number = path.read_bytes()[: error.start].count(b"\n") + 1
        raise InputError(
            f"{where}:{number}: not UTF-8 text ({error.reason}); save it as UTF-8"
        ) from None
    records = _records(lines, where)
    if not records:
        raise InputError(
            f"{where} has no header line naming the dims (z, y, x): it is empty, or holds "
            "only comments and blank lines"
        )
    header_line, header = records[0]
    names = [name.strip() for name in header]  # so "z, x" names z and x
    if rename:
        names = _renamed_columns(names, rename, where, header_line)
    _refuse_other_case(names, where, header_line)
    dims = [d for d in _DIM_ORDER if d in names]
    if not dims:
        raise InputError(
            f"{where}:{header_line}: the header names no model dim (z, y, x); it has {names}"
            + _header_hint(lines, header_line, names)
        )
    twice = [d for d in dims if names.count(d) > 1]
    if twice:
        raise InputError(f"{where}:{header_line}: the header names {twice[0]!r} twice")
    if len(records) == 1:
        raise InputError(f"{where} has a header but no rows")
    warn_ignored_columns(names, dims, f"{where}:{header_line}")  # the header's line
    column = {d: names.index(d) for d in dims}
    label = name_column(names)
    label_column = None if label is None else names.index(label)
    points = []
    labels = []
    for number, fields in records[1:]:
        if len(fields) != len(names):
            raise InputError(
                f"{where}:{number}: {len(fields)} field(s) where the header (line "
                f"{header_line}) has {len(names)}"
            )
        values = [fields[column[d]] for d in dims]
        try:
            # Python's float() also reads "1_0" as 10 (a literal's digit separator): in a
            # table that is more likely a typo than a number.
            if any("_" in v for v in values):
                raise ValueError
            point = {d: float(v) for d, v in zip(dims, values)}
        except ValueError:
            raise InputError(f"{where}:{number}: not a number in {values}") from None
        if not all(np.isfinite(v) for v in point.values()):
            raise InputError(f"{where}:{number}: non-finite coordinate")
        points.append(point)
        if label_column is not None:
            labels.append(fields[label_column])
    if label is None:
        return points, None
    return points, check_names(labels, lambda i: f"{where}:{records[1 + i][0]}:")


def _renamed_columns(
    names: list[str], rename: dict[str, str], where: str, header_line: int
) -> list[str]:
    """The header's column names after a ``csv:`` entry's ``rename``.

    Raises
    ------
    InputError
        For a renamed column the header does not have, or a dim (or name) the header would
        then have twice.
    """
    unknown = [column for column in rename if column not in names]
    if unknown:
        raise InputError(
            f"{where}:{header_line}: rename names {unknown}, not columns of the header, which "
            f"has {names}"
        )
    renamed = [rename.get(name, name) for name in names]
    twice = sorted({name for name in renamed if renamed.count(name) > 1} & set(rename.values()))
    if twice:
        raise InputError(
            f"{where}:{header_line}: rename {rename} gives two columns the name {twice[0]!r} "
            f"(the header has {names})"
        )
    up = [name for name, to in rename.items() if to == "z" and name.lower() in ELEVATION_NAMES]
    if up:  # (a column has no attribute to say it holds depths: warned, not refused)
        warn_input(
            f"{where}:{header_line}: rename {{{up[0]!r}: z}}: {up[0]!r} is the name of a height "
            f"measured up where raygrid's {Z_IS_DEPTH}; if the column holds elevations, give "
            "depths (-elevation) in a column named z instead, or every point lands that far "
            "below the surface"
        )
    return renamed


def csv_row_lines(path: str | os.PathLike, rows: list[int]) -> list[int]:
    """The lines of a CSV points file on which its rows ``rows`` (from 0, after the header)
    start, counting comments and blank lines as :func:`_read_csv`'s errors do; the file
    read once for all of them."""
    path = Path(os.path.expanduser(os.fspath(path)))  # as csv_points reads it
    with path.open(newline="", encoding="utf-8-sig") as handle:
        records = _records(handle.readlines(), str(path))
    return [records[1 + row][0] for row in rows]


def resolve_points(
    spec: Any, what: Literal["source", "receiver"]
) -> tuple[list[dict[str, float]], list[str] | None]:
    """The points a validated ``sources``/``receivers`` entry stands for, in order, and
    their names where a CSV file gives them (else ``None``).

    Raises
    ------
    InputError
        For a missing or malformed CSV file, or a generator whose dims disagree.
    """
    if isinstance(spec, CsvPoints):
        return _read_csv(spec.csv, what, spec.rename)
    return _generated_points(spec, what), None


def _generated_points(spec: Any, what: str) -> list[dict[str, float]]:
    """The points of a list, a line or a grid entry (:func:`resolve_points`)."""
    if isinstance(spec, list):
        return [dict(point) for point in spec]
    if isinstance(spec, LinePoints):
        start, stop, count = spec.line.start, spec.line.stop, spec.line.count
        if set(start) != set(stop):
            raise InputError(
                f"{what} line: start and stop name different dims ({sorted(start)} vs "
                f"{sorted(stop)})"
            )
        # np.linspace per dim ends exactly at stop (start + 1.0 * (stop - start) did not:
        # 1000.1 came out 1000.0999999999999, and the receiver was no longer found by the
        # position its workflow gave); one point is the start.
        axes = {
            d: np.linspace(start[d], stop[d], count) if count > 1 else [start[d]] for d in start
        }
        return [{d: float(axes[d][k]) for d in start} for k in range(count)]
    dims = [d for d in _DIM_ORDER if d in spec.grid]  # the schema took no other key
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
