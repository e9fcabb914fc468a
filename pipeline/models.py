"""Synthetic velocity models for tests, demos and benchmarks, and their analytic traveltimes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from .errors import InputError, warn_input
from .grid import grid_from_velocity

__all__ = [
    "constant_model",
    "gradient_model",
    "layered_model",
    "checkerboard",
    "gradient_traveltime",
]


def per_dim(
    value: float | Mapping[str, float], dims: Sequence[str], what: str, default: float | None = None
) -> dict[str, float]:
    """One value for every dim: a number for all, or a mapping by dim name.

    A mapping must name only ``dims``, and every one of them unless a ``default`` fills in
    the rest: a spacing given for ``z`` alone is a mistake, not a grid to guess.
    """
    if isinstance(value, np.ndarray) and not value.ndim:
        value = value.item()  # a 0-d array (np.float64 arithmetic on arrays) is a number
    if isinstance(value, (list, tuple, np.ndarray)):
        # Other tools' per-axis tuples (fteikpy's gridsize, pykonal's node_intervals) come
        # in their own axis orders: by name, nothing is guessed.
        example = ", ".join(f"{d!r}: ..." for d in dims)
        raise InputError(
            f"{what} must be one number for every dim or a mapping by dim name, e.g. "
            f"{{{example}}}, got {type(value).__name__} {value!r}"
        )
    if not isinstance(value, Mapping):
        return {d: value for d in dims}
    unknown = sorted(set(value) - set(dims))
    missing = [d for d in dims if d not in value]
    if unknown or (missing and default is None):
        raise InputError(
            f"{what} is given per dim as {dict(value)}, but the model's dims are {tuple(dims)}"
            + (f": unknown {unknown}" if unknown else "")
            + (f": missing {missing}" if missing and default is None else "")
        )
    return {d: value.get(d, default) for d in dims}


def is_number(value: object) -> bool:
    """A real number, not text and not yes/no (``True`` is no speed)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def real_number(value: object, what: str, *, positive: bool = False) -> float:
    """``value`` as a float if it is a finite real number (and positive if asked); text
    and yes/no are refused, not converted (``"10"`` and ``True`` are no spacing)."""
    number = float(value) if is_number(value) else np.nan
    if not np.isfinite(number) or (positive and number <= 0):
        kind = "a finite positive number" if positive else "a finite number"
        raise InputError(f"{what} must be {kind}, got {value!r}")
    return number


#: Most nodes a synthetic model may have: 2^50 (8 PiB of float64 slowness), far beyond any
#: machine; above it a size is a typo (2^63 nodes overflowed to an axis of 0 nodes).
MOST_NODES = 2**50


def _coords(shape: Mapping[str, int], spacing: float | Mapping[str, float], unit: str) -> dict:
    if set(shape) not in ({"z", "x"}, {"z", "y", "x"}):
        raise InputError(f"shape must be keyed by z, x or z, y, x; got {tuple(shape)}")
    dims = ("z", "y", "x") if "y" in shape else ("z", "x")  # canonical order, any key order
    step = per_dim(spacing, dims, "spacing")
    counts = []
    for d in dims:
        n = real_number(shape[d], f"shape {d}")
        if n < 2 or not n.is_integer():  # 5.9 nodes was 5
            raise InputError(f"shape {d}: need a whole number of nodes, at least 2, got {n:g}")
        # (An integer as written: through a float 2^63 - 1 would read 2^63.)
        counts.append(shape[d] if isinstance(shape[d], int) else int(n))
    nodes = math.prod(counts)
    if nodes > MOST_NODES:  # a typo's extra digits: NumPy's raw errors, or 0 nodes (overflow)
        said = " x ".join(f"{n:,}" for n in counts)
        raise InputError(
            f"shape: {said} nodes is {nodes:.3g} nodes, more than any machine holds (at most "
            f"{MOST_NODES:.3g}): is a size mistyped?"
        )
    coords = {}
    for d, n in zip(dims, counts):
        h = real_number(step[d], f"spacing {d}", positive=True)  # nan and inf were taken
        # z says it is depth (CF's positive: down), as a file's z should: carried into files
        # the model is saved to and read by other tools.
        attrs = {"units": unit, "positive": "down"} if d == "z" else {"units": unit}
        coords[d] = xr.DataArray(np.arange(n) * h, dims=d, attrs=attrs)
    return coords


def _model(
    profile: np.ndarray,
    coords: dict,
    name: str,
    description: str,
    broadcast: bool,
) -> xr.DataArray:
    """The model whose values are ``profile`` (a depth profile shaped to broadcast against
    the dims, or one value) at every node: an array of the model's shape, or ``broadcast``,
    a read-only view of the profile."""
    # Broadcasting adds no values: checking the profile checks every node.
    if not (np.all(np.isfinite(profile)) and profile.min() > 0):
        raise InputError(f"a {description} model: velocities must be finite and positive")
    values = np.broadcast_to(profile, tuple(len(c) for c in coords.values()))
    if not broadcast:
        values = values.copy()
    return xr.DataArray(
        values,
        dims=tuple(coords),
        coords=coords,
        name="velocity",
        attrs={
            "units": "m/s",
            "long_name": "P-wave velocity",
            "model": name,
            "description": description,
        },
    )


def _depth(coords: dict) -> np.ndarray:
    """Depth broadcast against the model's dims."""
    shape = [1] * len(coords)
    shape[0] = -1
    return np.asarray(coords["z"].values).reshape(shape)


def constant_model(
    shape: Mapping[str, int],
    spacing: float | Mapping[str, float] = 10.0,
    velocity: float = 2000.0,
    *,
    broadcast: bool = False,
) -> xr.DataArray:
    """Constant velocity (m/s) on a grid with coordinates in metres from 0.

    Parameters
    ----------
    shape : mapping
        Nodes per dim, e.g. ``{"z": 101, "x": 201}``.
    spacing : float or mapping
        Node spacing (m), one for all dims or per dim.
    velocity : float
        Velocity (m/s).
    broadcast : bool, default False
        Give the values as a read-only broadcast of the model's depth profile
        (``numpy.broadcast_to``) instead of an array of its shape: no memory for them
        however large the model, e.g. to check a workflow's model on a login node. Every
        model here varies with depth only, so one column holds all its values.
    """
    coords = _coords(shape, spacing, "m")
    velocity = real_number(velocity, "velocity", positive=True)  # True was 1 m/s
    profile = np.full((1,) * len(coords), velocity)
    return _model(profile, coords, "constant", f"constant {velocity:g} m/s", broadcast)


def gradient_model(
    shape: Mapping[str, int],
    spacing: float | Mapping[str, float] = 10.0,
    top: float = 500.0,
    bottom: float = 4000.0,
    *,
    broadcast: bool = False,
) -> xr.DataArray:
    """Velocity linear in depth, ``top`` at z = 0 and ``bottom`` at the deepest node.

    The GPU study's test model (0.5 to 4 km/s, as in the shortest-path papers it
    follows; ``benchmarks/gpu_study.py``); its analytic traveltime is
    :func:`gradient_traveltime`.

    Parameters
    ----------
    shape, spacing, broadcast
        As for :func:`constant_model`.
    top, bottom : float
        Velocity (m/s) at z = 0 and at the deepest node.

    Returns
    -------
    xarray.DataArray
        The model, coordinates in m from 0, values in m/s.
    """
    coords = _coords(shape, spacing, "m")
    top = real_number(top, "top", positive=True)
    bottom = real_number(bottom, "bottom", positive=True)
    z = _depth(coords)
    profile = top + (bottom - top) * z / z.max()
    description = f"linear in z from {top:g} to {bottom:g} m/s"
    return _model(profile, coords, "gradient", description, broadcast)


def layers_problem(interfaces: Sequence[float], velocities: Sequence[float]) -> str | None:
    """What is wrong with flat layers' ``interfaces`` and ``velocities``, or ``None``."""
    for name, values in (("interfaces", interfaces), ("velocities", velocities)):
        if isinstance(values, (str, bytes)) or not all(is_number(v) for v in values):
            return f"layer {name} must be a list of numbers, got {values!r}"
    if len(velocities) != len(interfaces) + 1:
        return (
            "a layered model needs velocities, one more than interfaces (one for the top "
            f"layer and one below each interface); velocities has {len(velocities)} "
            f"value(s), interfaces {len(interfaces)}"
        )
    if not np.isfinite(np.asarray(interfaces, dtype=np.float64)).all():
        # NaN compares false both ways: it passed the order check below and dropped a layer.
        return f"layer interfaces must be finite depths, got {list(interfaces)}"
    if any(upper >= lower for upper, lower in zip(interfaces, interfaces[1:])):
        # Two equal depths make a layer of no thickness: its velocity was dropped unseen.
        return f"layer interfaces must increase strictly with depth, got {list(interfaces)}"
    return None


def layered_model(
    shape: Mapping[str, int],
    spacing: float | Mapping[str, float],
    interfaces: Sequence[float],
    velocities: Sequence[float],
    *,
    broadcast: bool = False,
) -> xr.DataArray:
    """Flat layers: ``velocities[i]`` between ``interfaces[i-1]`` and ``interfaces[i]``.

    Parameters
    ----------
    shape, broadcast
        As for :func:`constant_model`.
    spacing : float or mapping
        As for :func:`constant_model`, but given: it comes before the layers, which have
        no default (``layered_model(shape, 10.0, [300.0], [1500.0, 3000.0])``).
    interfaces : sequence of float
        Depths (m) of the layer boundaries, strictly increasing; a node at an interface's depth
        belongs to the layer below it. Each node's slowness fills the cell around it
        (docs/method.md, section 3), so the solver's boundary lies half-way between the
        last node above and the first below: half a cell above an interface on a node row
        (10 m spacing, 100 m: at 95 m, head waves 12 ms early against the analytic 100 m),
        exactly where given for one half-way between rows (105 m).
    velocities : sequence of float
        Velocity (m/s) of each layer from the top, one more than ``interfaces``.

    Returns
    -------
    xarray.DataArray
        The model, coordinates in m from 0, values in m/s.

    Raises
    ------
    InputError
        For a count of velocities other than ``len(interfaces) + 1``, or interfaces that are
        not finite or do not increase strictly (:func:`layers_problem`). An interface
        outside the model's depths is warned about (:class:`~.errors.InputWarning`): the
        layer it bounds is absent.
    """
    problem = layers_problem(interfaces, velocities)
    if problem:
        raise InputError(problem)
    coords = _coords(shape, spacing, "m")
    z = _depth(coords)
    outside = [depth for depth in interfaces if not z.min() < depth <= z.max()]
    if outside:
        warn_input(
            f"layer interface(s) at {outside} m leave a layer no node (the model's nodes run "
            f"from {z.min():g} to {z.max():g} m; a node on an interface lies in the layer "
            "below it): the layers they bound are absent"
        )
    layer = np.searchsorted(np.asarray(interfaces, dtype=float), z, side="right")
    profile = np.asarray(velocities, dtype=float)[layer]
    return _model(profile, coords, "layered", f"{len(velocities)} flat layers", broadcast)


def checkerboard(velocity: xr.DataArray, size: float, amplitude: float = 0.05) -> xr.DataArray:
    """A model multiplied by ``1 +- amplitude`` in alternating cubes (squares in 2D).

    The usual resolution test of tomography; here, a heterogeneous model whose rays bend.

    Parameters
    ----------
    velocity : xarray.DataArray
        Any model (:func:`raygrid.pipeline.grid_from_velocity`'s rules).
    size : float
        Edge of a cube, in the unit of the model's coordinates; cubes start at coordinate 0.
    amplitude : float, default 0.05
        Relative change, in [0, 1).

    Returns
    -------
    xarray.DataArray
        The perturbed model, in the dims order of ``velocity``, its attributes kept and a
        ``checkerboard`` attribute added.

    Notes
    -----
    Nodes are assigned: a node on a cube's face is the next cube's. The model's cells are
    centred on the nodes (docs/method.md section 1), so in cells a face lies half a cell
    before the cube's: 100 m cubes on a 10 m grid change at 95 m, 195 m, ... For a
    resolution test compare a recovered model with this one node by node, not with cubes
    drawn from ``size``.
    """
    amplitude = real_number(amplitude, "checkerboard amplitude")
    if not 0 <= amplitude < 1:
        raise InputError(f"checkerboard amplitude must be in [0, 1), got {amplitude}")
    size = real_number(size, "checkerboard size", positive=True)
    grid = grid_from_velocity(velocity, load=False, check_values=False)  # dims, units, spacing
    extent = {d: float(c[-1] - c[0]) for d, c in grid.coords.items()}
    unit = grid.length_unit
    if size >= max(extent.values()) or size < min(grid.spacing):
        # A size in metres on a model in km (or the reverse) made one or two cubes, or
        # cubes finer than the nodes, without a word.
        spans = ", ".join(f"{d} {extent[d]:g}" for d in grid.dims)
        said = (
            "larger than the model along every axis"
            if size >= max(extent.values())
            else (f"smaller than every node spacing ({', '.join(f'{h:g}' for h in grid.spacing)})")
        )
        warn_input(
            f"checkerboard cubes of {size:g} {unit} are {said} (the model spans {spans} "
            f"{unit}): is the size in the model's length unit, {unit}?"
        )
    # Which cube a node is in, rounded first: a node on a cube's face in km read as the cube
    # before it (0.06 / 0.02 = 2.9999999999999996).
    parity = sum(np.floor((velocity[d] / size).round(9)).astype(int) for d in velocity.dims) % 2
    out = velocity * (1 + amplitude * (2 * parity - 1))
    out.attrs = dict(velocity.attrs, checkerboard=f"{size:g} {unit}, +-{amplitude:g}")
    return out.transpose(*velocity.dims)


def gradient_traveltime(
    source: Mapping[str, float], points: Mapping[str, np.ndarray], top: float, gradient: float
) -> np.ndarray:
    """Analytic first-arrival time in ``v(z) = top + gradient * z`` (SI units).

    ``t = arccosh(1 + g^2 d^2 / (2 v_s v_r)) / |g|`` with ``d`` the distance between source
    and receiver and ``v_s``, ``v_r`` the velocities there: the rays are circular arcs
    (the classical result for a linear velocity, e.g. Slotnick 1959, *Lessons in Seismic
    Computing*). A velocity that decreases with depth (``g < 0``) is the same result.

    Parameters
    ----------
    source : mapping
        The source's coordinates (m), ``z`` among them.
    points : mapping of arrays
        Receivers' coordinates (m), one array per dim, broadcast against each other.
    top : float
        Velocity at z = 0 (m/s).
    gradient : float
        ``dv/dz`` (1/s), of either sign; 0 gives the straight-ray time ``d / top``.

    Returns
    -------
    numpy.ndarray
        Times (s), shaped as the broadcast ``points``.

    Raises
    ------
    InputError
        If the source and points do not give the same dims, ``z`` among them, or the
        velocity is not positive at the source or at a point (no time there).
    """
    if "z" not in source or set(source) != set(points):
        raise InputError(
            f"the source and the points must give the same coordinates, z among them: "
            f"got {sorted(source)} and {sorted(points)}"
        )
    v_source = top + gradient * source["z"]
    v_receiver = top + gradient * np.asarray(points["z"])
    for where, speed in (("the source", v_source), ("a point", v_receiver)):
        if not np.all(np.asarray(speed) > 0):
            raise InputError(
                f"v(z) = {top:g} {'-' if gradient < 0 else '+'} {abs(gradient):g} z is not "
                f"positive at {where}: no traveltime"
            )
    d2 = sum((np.asarray(points[d]) - source[d]) ** 2 for d in points)
    if gradient == 0:
        return np.sqrt(d2) / top
    x = gradient**2 * d2 / (2 * v_source * v_receiver)
    # arccosh(1 + x) = log(1 + x + sqrt(x (x + 2))), through log1p: 1 + x rounds away a
    # small x (a gentle gradient gave 0 s at g = 1e-9 1/s, 1 % late at 1e-7). Divided by
    # |g|: the arc's time is even in g (a negative g gave negative times).
    return np.log1p(x + np.sqrt(x * (x + 2))) / abs(gradient)
