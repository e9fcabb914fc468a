"""A velocity model's checks: units, coordinates, values and dims, each refused or warned
about with what to do (docs/method.md section 3: what raygrid takes as a model).

:func:`~raygrid.pipeline.grid.grid_from_velocity` runs them once per model; nothing here
knows about stars, sources or solves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr

from .errors import (
    ELEVATION_NAMES,
    OTHER_DIM_NAMES,
    UP_STANDARD_NAMES,
    Z_IS_DEPTH,
    InputError,
    warn_input,
)

__all__ = [
    "LENGTH_UNITS", "SPEED_UNITS", "unit_size", "known_unit", "check_axis", "warn_elevation",
    "check_values", "check_extent", "bad_values", "dims_hint", "PLAUSIBLE_SPEEDS",
    "EXTREME_SPEEDS", "EXTENT_METRES",
]  # fmt: skip

#: Accepted length units and their size in metres.
LENGTH_UNITS = {
    "m": 1.0, "meter": 1.0, "meters": 1.0, "metre": 1.0, "metres": 1.0,
    "km": 1e3, "kilometer": 1e3, "kilometers": 1e3, "kilometre": 1e3, "kilometres": 1e3,
}  # fmt: skip
#: Accepted velocity units and their size in m/s.
SPEED_UNITS = {
    "m/s": 1.0, "m s-1": 1.0, "m.s-1": 1.0, "m/sec": 1.0,
    "km/s": 1e3, "km s-1": 1e3, "km.s-1": 1e3, "km/sec": 1e3,
    **{f"{m}/second": 1.0 for m in ("meter", "meters", "metre", "metres")},
    **{f"{m}/second": 1e3 for m in ("kilometer", "kilometers", "kilometre", "kilometres")},
}  # fmt: skip


def unit_size(unit: object, units: Mapping[str, float]) -> float | None:
    """The size of ``unit`` (metres, or metres a second) if it is one of ``units``'
    spellings, in any case and with spaces around it (``KM``, ``Kilometers``: files write
    them so), exponents written UDUNITS' other ways (``m s**-1``, ``m s^-1``) and a slash
    between spaces (``meter / second``, as pint writes units), else ``None``: a list or an
    array (an attribute written so) is not one."""
    if not isinstance(unit, str):
        return None
    spelt = " ".join(unit.split()).lower()
    return units.get(spelt, units.get(spelt.replace(" / ", "/").replace("**", "").replace("^", "")))


def known_unit(unit: object, units: Mapping[str, float]) -> bool:
    """Whether ``unit`` is one of ``units``' spellings (:func:`unit_size`)."""
    return unit_size(unit, units) is not None


#: Relative tolerance for "uniform" spacing: far
# above the rounding of coordinates written as decimals, far below any real offset.
UNIFORM_RTOL = 1e-6
#: How well stored coordinates must give the spacing (relative): the rounding of float32
#: coordinates far from 0 may not move it by more, a fifth of the method's own error at
#: radius 5 (0.5 %). UTM northings in float32 (0.5 m apart) pass from a 500 m span.
_SPACING_RTOL = 1e-3


def check_axis(
    velocity: xr.DataArray, dim: str
) -> tuple[np.ndarray, float, float, str, float, float]:
    """A dim's coordinates checked: values (float64), origin, spacing, unit, the machine
    epsilon of the stored type (0 for integers) and the stored values' largest distance
    from the uniform grid (:attr:`Grid.deviation`)."""
    if dim not in velocity.coords:
        raise InputError(f"velocity has no coordinate for dim {dim!r}: give uniform coordinates")
    stored = np.asarray(velocity.coords[dim].values)
    if stored.dtype.kind not in "iuf":
        # Text ("0", "10") was read as numbers, and times as nanoseconds.
        raise InputError(
            f"coordinate {dim!r} must hold numbers (lengths), got dtype {stored.dtype}"
        )
    values = stored.astype(np.float64)
    unit = velocity.coords[dim].attrs.get("units")
    if unit is None:
        raise InputError(
            f"coordinate {dim!r} has no 'units' attribute (one of {sorted(LENGTH_UNITS)})"
        )
    if not known_unit(unit, LENGTH_UNITS):
        raise InputError(
            f"coordinate {dim!r} has units {unit!r}; expected one of {sorted(LENGTH_UNITS)} "
            "(in any case; a file's other spelling of m or km is corrected by loading it with "
            "length_unit=, model.length_unit in a workflow)"
        )
    attrs = velocity.coords[dim].attrs
    positive = attrs.get("positive")
    positive = positive.strip().lower() if isinstance(positive, str) else None
    standard = attrs.get("standard_name")
    # CF's standard name says it too (an elevation renamed z kept it), unless marked down.
    up = positive == "up" or (positive != "down" and standard in UP_STANDARD_NAMES)
    if dim == "z" and up:
        # The CF attribute says in so many words what a decreasing z only suggests (below):
        # an elevation, which read as depth turns the model upside down.
        said = "positive: 'up'" if positive == "up" else f"standard_name: {standard!r}"
        raise InputError(
            f"coordinate 'z' is an elevation (its attribute {said}): raygrid's "
            f"{Z_IS_DEPTH}; negate it, e.g. "
            'model.assign_coords(z=(-model.z).assign_attrs(positive="down")).sortby("z")'
            # Negated by hand, the attribute left behind: negated again, it was inverted.
            "; if it holds depths already (negated, the attribute left behind), set its "
            "attribute: "
            'model.z.attrs["positive"] = "down"'
        )
    if dim == "z" and positive not in (None, "up", "down"):  # CF allows only these two
        raise InputError(
            f"coordinate 'z' has the attribute positive: {attrs['positive']!r}, neither 'down' "
            f"(raygrid's {Z_IS_DEPTH}) nor 'up' (an elevation, to negate): set it to 'down' "
            "if z holds depths"
        )
    if values.size < 2:
        raise InputError(
            f"dim {dim!r} has {values.size} node(s); a model needs at least 2 per dim"
            + ("; a 2D model has dims ('z', 'x'): velocity.squeeze('y')" if dim == "y" else "")
        )
    if not np.all(np.isfinite(values)):
        raise InputError(f"coordinate {dim!r} has non-finite values")
    steps = np.diff(values)
    if not (np.all(steps > 0) or np.all(steps < 0)):
        if stored.dtype.kind == "f" and np.any(steps == 0):
            rounded, ulp = _rounding_of(stored, values, unit)
            moved = np.abs(steps[steps != 0])
            if moved.size and moved.min() <= 2 * ulp:  # the rest are a rounding apart too
                raise InputError(
                    f"coordinate {dim!r} is not monotonic: neighbours are equal in "
                    f"{rounded}; " + _finer(stored, dim)
                )
        raise InputError(f"coordinate {dim!r} is not monotonic")
    if steps[0] < 0:
        span = f"from {values[0] + 0.0:g} to {values[-1] + 0.0:g} {unit}"  # + 0.0: no "-0"
        if dim == "z":
            # Sorting a decreasing z is right only for depths listed deepest first; a z that
            # decreases is far more often an elevation (0 down to -40 km), which sorting
            # would accept as a model turned upside down.
            raise InputError(
                f"coordinate 'z' decreases ({span}): raygrid's {Z_IS_DEPTH}, so an "
                "elevation axis must be negated (depth = "
                "-elevation), e.g. model.assign_coords(z=(-model.z).assign_attrs("
                'positive="down")).sortby("z"); only depths '
                'listed deepest first may simply be sorted (model.sortby("z"))'
            )
        raise InputError(
            f"coordinate {dim!r} decreases ({span}); sort the model so that it increases "
            f'(model.sortby("{dim}"))'
        )
    _check_resolution(stored, values, steps, dim, unit)
    h = float(values[-1] - values[0]) / (values.size - 1)
    # Coordinates stored in float32 (common in NetCDF files) are rounded to 6e-8 of their
    # magnitude, which moves steps of 0.1 km by 2e-6 of a step: a few units in the last
    # place of the stored type are rounding, not an uneven grid.
    eps = float(np.finfo(stored.dtype).eps) if stored.dtype.kind == "f" else 0.0
    # Each step carries two roundings of up to half an ulp of the largest value: 4 eps.
    tolerance = max(UNIFORM_RTOL * h, 4 * eps * float(np.max(np.abs(values))))
    if np.max(np.abs(steps - h)) > tolerance:
        worst = int(np.argmax(np.abs(steps - h)))
        raise InputError(
            f"coordinate {dim!r} is not uniform: step {steps[worst]:.9g} between "
            f"{values[worst]:.9g} and {values[worst + 1]:.9g}, mean step {h:.9g}"
        )
    deviation = float(np.max(np.abs(values - (values[0] + h * np.arange(values.size)))))
    return values, float(values[0]), h, unit, eps, deviation


def warn_elevation(z: xr.DataArray, values: np.ndarray, unit: str) -> None:
    """Warn about a z axis that is probably an elevation: wholly at or above 0 and not
    marked ``positive: down``. Listed bottom up (-2 km to 0) an elevation increases like a
    depth: read as one it put the model upside down, a "surface" source at z = 0 on its
    deepest plane, without a word. Said with the model's other warnings, where its values
    are checked (once per model, not at each use of one checked already)."""
    positive = z.attrs.get("positive")
    if isinstance(positive, str) and positive.strip().lower() == "down":
        return  # said to be a depth: a model wholly above sea level is then meant
    if values[0] < 0 and values[-1] <= 0:
        warn_input(
            f"coordinate 'z' runs from {values[0]:g} to {values[-1] + 0.0:g} {unit}, all at "
            f"or above z = 0: raygrid's {Z_IS_DEPTH}; if this axis is an elevation, negate "
            'it: model.assign_coords(z=(-model.z).assign_attrs(positive="down")).sortby("z") '
            '(a depth axis marked positive: "down" is not warned about)'
        )


def _rounding_of(stored: np.ndarray, values: np.ndarray, unit: str) -> tuple[str, float]:
    """What a narrow float type does to coordinates, ``"float32, which rounds values near
    4.2e+06 m to 0.5 m"``, and that rounding (an ulp at the largest value)."""
    largest = float(np.max(np.abs(values)))
    ulp = float(np.spacing(stored.dtype.type(largest)))
    return f"{stored.dtype}, which rounds values near {largest:g} {unit} to {ulp:g} {unit}", ulp


def _check_resolution(stored: np.ndarray, values: np.ndarray, steps: np.ndarray, dim: str,
                      unit: str) -> None:  # fmt: skip
    """Refuse increasing coordinates whose stored type is too coarse for their steps:
    float32 far from the origin (UTM northings, 0.5 m apart at 4e6 m) passes the rounding
    tolerance of the uniformity check while the spacing, read from the two ends, is off by
    a few percent. Steps all equal as stored are exact, whatever the type."""
    if stored.dtype.kind != "f" or np.all(steps == steps[0]):
        return
    span = float(values[-1] - values[0])
    rounded, ulp = _rounding_of(stored, values, unit)
    # Each end is rounded by up to half an ulp: the spacing is known to ulp / span.
    if ulp / span <= _SPACING_RTOL:
        return
    raise InputError(
        f"coordinate {dim!r} is stored as {rounded}: too coarse for steps of about "
        f"{span / (values.size - 1):.6g} {unit} (the spacing is known only to "
        f"{ulp / span:.2%}); {_finer(stored, dim)}"
    )


def _finer(stored: np.ndarray, dim: str) -> str:
    """How to store coordinates that their float type cannot resolve: in float64, or
    (already float64: an origin of 1e20 m rounds to 16 km) relative to a nearer origin."""
    if stored.dtype.itemsize < 8:
        return _IN_FLOAT64.format(dim=dim)
    return f"give {dim!r} coordinates relative to a nearer origin"


#: How to store coordinates a narrow float type cannot resolve.
_IN_FLOAT64 = (
    "store the coordinates in float64, as origin + step * np.arange(n) "
    "(model.assign_coords({dim}=...)), or relative to a nearer origin"
)


#: Speeds (m/s) outside which a whole model is probably in the wrong unit: nothing that
#: carries seismic waves is slower than the lower (air: 343 m/s) or faster than the upper
#: (the deepest mantle: about 14 km/s).
PLAUSIBLE_SPEEDS = (30.0, 30_000.0)


def bad_values(values: Any) -> Any:
    """Where velocities are not finite and positive (NumPy or dask arrays). A subnormal
    speed (below 2.2e-308) counts as zero: its slowness overflows to inf."""
    return ~np.isfinite(values) | (values < np.finfo(np.float64).tiny)


#: Speeds (m/s) no medium has, air and diamond included: a model any part of which lies
#: outside is warned about (:func:`check_values`).
EXTREME_SPEEDS = (1.0, 1e5)


def check_values(
    velocity: xr.DataArray, axes: dict, order: tuple[str, ...], speed_factor: float
) -> None:
    """Every velocity finite and positive; lazy arrays are checked where they live. A model
    whose every speed lies outside :data:`PLAUSIBLE_SPEEDS`, or any outside
    :data:`EXTREME_SPEEDS`, gets an :class:`InputWarning`."""
    values = velocity.data
    # Two reductions (one pass over a dask array's blocks), a few numbers back from the
    # workers: a NaN makes both NaN and fails the test. Only a model that fails builds the
    # mask (three model-sized temporaries: 8 of the 16 ms the pipeline added to a 60 ms GPU
    # solve at 1601^2).
    lowest, highest = dask.compute(values.min(), values.max())
    # As Python floats: a float16 model's 65504 at most overflowed the checks' products
    # ("RuntimeWarning: overflow encountered in cast").
    lowest, highest = float(lowest), float(highest)
    tiny = np.finfo(np.float64).tiny
    if lowest >= tiny and highest < np.inf:
        unit = velocity.attrs.get("units")
        if not (float(lowest) * speed_factor >= tiny and float(highest) * speed_factor < np.inf):
            # 1e306 km/s is inf m/s: a zero slowness, free edges, times silently 0.
            raise InputError(
                f"velocities from {float(lowest):g} to {float(highest):g} {unit} leave "
                "float64's range in m/s (inf or subnormal): no model is that fast or slow"
            )
        slow, fast = PLAUSIBLE_SPEEDS
        if highest * speed_factor < slow or lowest * speed_factor > fast:
            warn_input(
                f"velocities from {float(lowest):g} to {float(highest):g} {unit}: no rock is "
                f"that {'slow' if highest * speed_factor < slow else 'fast'}; is the model's "
                "'units' attribute right (m/s or km/s)?"
            )
        elif (
            lowest * speed_factor < EXTREME_SPEEDS[0] or highest * speed_factor > EXTREME_SPEEDS[1]
        ):
            # Some of the model only: a fill value (1e-20 for "no data") took the solve's
            # times to 1e301 s, or beyond float32's slowness (inf: nodes "not reached").
            warn_input(
                f"velocities from {float(lowest):g} to {float(highest):g} {unit}: part of "
                f"the model is slower than {EXTREME_SPEEDS[0]:g} m/s or faster than "
                f"{EXTREME_SPEEDS[1]:g} m/s, which no medium is (a fill value for no data?)"
            )
        return
    bad = bad_values(values)
    (count,) = dask.compute(bad.sum())
    first = _first_bad(bad)
    value = float(np.asarray(values[first]))
    where = ", ".join(f"{d}={axes[d][0][i]:g}" for d, i in zip(order, first))
    raise InputError(
        f"velocity must be finite and positive: {count} bad value(s) "
        f"(NaN, inf, zero, negative or subnormal); the first found is {value!r} at {where}"
    )


#: Spacing and model extent, in metres, inside which edge lengths (a square root of a sum
#: of squares) and their times are plain float64 numbers.
EXTENT_METRES = (1e-100, 1e100)


def check_extent(dim: str, n: int, spacing: float, unit: str) -> None:
    """Refuse a spacing or an extent whose edge lengths float64 cannot hold: a spacing of
    1e200 m made every time inf, one of 1e-200 m every time 0 (their squares overflow or
    underflow), silently."""
    low, high = EXTENT_METRES
    metres = spacing * unit_size(unit, LENGTH_UNITS)
    if not (metres >= low and metres * (n - 1) <= high):
        raise InputError(
            f"coordinate {dim!r}: a spacing of {spacing:g} {unit} over {n} nodes is outside "
            f"what edge lengths and times can hold in float64 ({low:g} to {high:g} m)"
        )


def _first_bad(bad: Any) -> tuple[int, ...]:
    """Index of the first ``True`` of ``bad``, in C order of its blocks for a dask array.

    A dask array is searched block by block (one flag per block, then the first flagged
    block alone): flattening it for ``argmax`` made Dask rechunk the whole array across the
    cluster's workers (a peer-to-peer shuffle, logged as warnings) to name one node.
    """
    if not isinstance(bad, da.Array):
        return np.unravel_index(int(np.asarray(bad).reshape(-1).argmax()), bad.shape)
    flags = bad.map_blocks(
        lambda block: np.array(block.any()).reshape((1,) * block.ndim),
        chunks=tuple((1,) * n for n in bad.numblocks),
        dtype=bool,
    ).compute()
    block = np.unravel_index(int(flags.reshape(-1).argmax()), flags.shape)
    local = np.asarray(bad.blocks[block].compute())
    inside = np.unravel_index(int(local.reshape(-1).argmax()), local.shape)
    starts = [sum(sizes[:k]) for sizes, k in zip(bad.chunks, block)]
    return tuple(int(start + i) for start, i in zip(starts, inside))


def dims_hint(velocity: xr.DataArray) -> str:
    """How to make a model's dims raygrid's: a one-node axis dropped, an axis renamed."""
    hints = []
    if "source" in velocity.dims:
        # Results stacked with xr.concat(..., coords="all") stack their model too.
        hints.append(
            "a model stacked along source (xr.concat of predecessors=True results stacks "
            "every variable: give it data_vars=['traveltime', 'predecessor']), or pick one "
            "with velocity.isel(source=0)"
        )
    single = [d for d in velocity.dims if velocity.sizes[d] == 1]
    if single:
        names = ", ".join(repr(d) for d in single)
        hints.append(f"drop the one-node {names} with velocity.squeeze({names})")
    renamed = {d: OTHER_DIM_NAMES[d.lower()] for d in velocity.dims if d.lower() in OTHER_DIM_NAMES}
    if {renamed.get(d, d) for d in velocity.dims} == {"z", "y"}:
        # A 2D section along y (a north-south profile, northing) is raygrid's (z, x).
        renamed.update({d: "x" for d in velocity.dims if renamed.get(d, d) == "y"})
    renamed = {d: to for d, to in renamed.items() if to != d and to not in velocity.dims}
    if renamed:
        pairs = ", ".join(f"{d!r}: {to!r}" for d, to in renamed.items())
        hints.append(
            f"rename axes with velocity.rename({{{pairs}}}) (load_velocity(..., rename=...), "
            "model.rename in a workflow)"
        )
    if set(velocity.dims) == {"y", "x"}:
        # A map (a surface-wave group-velocity map): shortest paths in a plane do not care
        # which plane, but raygrid's 2D models are (z, x) sections.
        hints.append(
            "a 2D map (y, x) is solved as a section: velocity.rename({'y': 'z'}), sources "
            "and receivers given z for their y (depth checks then read y as depth)"
        )
    # An elevation axis was left out of the renames (its rename alone would turn the model
    # upside down): negated into depth, then named z.
    up = [d for d in velocity.dims if d.lower() in ELEVATION_NAMES and "z" not in velocity.dims]
    if up:
        hints.append(
            f"{up[0]!r} measures up where raygrid's {Z_IS_DEPTH}: make it z with "
            f"velocity.assign_coords({{{up[0]!r}: (-velocity[{up[0]!r}]).assign_attrs("
            f"positive='down')}}).rename({{{up[0]!r}: 'z'}}).sortby('z')"
        )
    return ": " + "; ".join(hints) if hints else ""
