"""Pictures of a survey store: traveltime contours over the model with rays, and gathers."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.colors
import matplotlib.patheffects
import matplotlib.ticker
import numpy as np
import xarray as xr

# Figures made as objects, never through pyplot: raygrid only writes files, and leaves the
# caller's backend and figures alone (it switched a notebook's backend to Agg on import).
from matplotlib.figure import Figure

from .errors import InputError
from .inspect import point_number
from .store import point_names
from .storepaths import hidden_sibling, remove_left

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis

__all__ = ["plot_field", "plot_gathers", "plot_store", "unwritable", "DPI"]

#: Dots per inch of the pictures written (raster formats; in PDF and SVG, of the model's
#: image, drawn as a raster inside them).
DPI = 120

#: The most stations labelled with their names (on the model, and on the gathers' table):
#: more would be a smear of overlapping text.
MOST_NAMED = 30

#: A white halo under dark marks and text: it keeps them readable on any colour of the
#: model, from viridis' darkest purple to its yellow.
HALO = [matplotlib.patheffects.withStroke(linewidth=2.5, foreground="white")]


def _cut(
    dataset: xr.Dataset, name: str, source: int, through: str, at: float | None = None
) -> xr.DataArray:
    """A 2D cut of a variable: the ``(z, x)`` section (``through="y"``; 2D models are one)
    or, of a 3D model, the ``(y, x)`` map (``through="z"``), through the node plane nearest
    ``at`` (default: the source's)."""
    values = dataset[name]
    if "source" in values.dims:
        values = values.isel(source=source)
    if through in values.dims:
        if at is None:
            at = float(dataset[f"source_{through}"][source])
        values = values.sel({through: at}, method="nearest")
    return values.transpose(*(("y", "x") if through == "z" else ("z", "x")))


def _rays_of(
    dataset: xr.Dataset, source: int, dims: tuple[str, str] = ("x", "z")
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The source's rays, each as its coordinates along ``dims`` (``("x", "y")``: a map)."""
    if "ray_start" not in dataset:
        return []
    starts = dataset["ray_start"].isel(source=source).values
    counts = dataset["ray_count"].isel(source=source).values
    if not len(starts):
        return []
    # Only this source's stretch of the survey's ragged ray table is read.
    first, end = int(starts.min()), int((starts + counts).max())
    across, down = (dataset[f"ray_{d}"][first:end].values for d in dims)
    return [(across[s - first : s - first + c], down[s - first : s - first + c])
            for s, c in zip(starts, counts)]  # fmt: skip


def unwritable(kind: str, shown: str | None = None) -> str | None:
    """Why matplotlib cannot write pictures of format ``kind`` (a suffix without its dot,
    any case), naming it as ``shown`` (default ``kind``); ``None`` if it can. Checked
    before anything is solved or drawn (a workflow's ``outputs.plot``, ``raygrid plot
    --format``)."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    if kind.lower() in kinds:
        return None
    return f"matplotlib cannot write {shown or kind!r} pictures; use one of " + ", ".join(
        sorted(kinds)
    )


def plot_field(
    dataset: xr.Dataset,
    path: str | Path | None = None,
    source: int | str = 0,
    *,
    map_z: float | None = None,
    dpi: float = DPI,
) -> Path | Figure:
    """One source: traveltime contours over the velocity model, its rays and receivers.

    Parameters
    ----------
    dataset : xarray.Dataset
        A survey store, as opened by ``raygrid.pipeline.open_survey``.
    path : str or Path, optional
        The picture to write (its suffix picks the format). Without it the figure is
        returned, to change and save, or show: a notebook shows it as a cell's value once
        pyplot is imported (or ``%matplotlib inline`` run), as for any matplotlib figure.
    source : int or str
        Which source to draw: its number, or its name where the store names its sources
        (:func:`~raygrid.pipeline.inspect.point_number`, as ``raygrid plot --source``).
    map_z : float, optional
        3D models: the depth of the map (in the model's length unit), drawn on the node
        plane nearest it. Default: the receivers' depth where they all lie within half a
        node of one plane (a surface spread, an ocean-bottom array), else the source's.
    dpi : float
        Dots per inch (:data:`DPI` by default).

    Returns
    -------
    Path or matplotlib.figure.Figure
        ``path``, or the figure where no path is given.

    Raises
    ------
    InputError
        For a source the store does not have (a number out of range, a name it does not
        hold, or neither: ``True`` was source 1), or ``map_z`` on a 2D model, or outside
        the model's ``z``.

    Notes
    -----
    3D models are drawn on the ``y`` section through the source (rays and receivers
    projected onto it; receivers more than half a node off the section drawn hollow) and,
    beside it, on a map: the ``z`` plane through the source, with the survey's sources,
    the receivers and rays projected onto it and a dashed line where the section is.
    Receivers are named where the store names them and has at most :data:`MOST_NAMED`. A
    store written with ``outputs.fields: false`` has no traveltime field: the picture then
    says so and shows the model, rays and receivers only. The contours of the section and
    the map are at the same times, their spacing in the title. The model is drawn as a
    raster image in every format (in a PDF or SVG a vector cell each made files of 15 MB).
    """
    _check_store(dataset, "plot_field")
    source = point_number(dataset, source, "source")
    n_sources = dataset.sizes["source"]
    three_d = "y" in dataset["velocity"].dims
    _check_map_z(dataset, map_z, three_d)
    map_at, map_why = (map_z, "asked") if map_z is not None else _map_depth(dataset, source)
    velocity = _cut(dataset, "velocity", source, "y")
    plane = _cut(dataset, "velocity", source, "z", map_at) if three_d else None
    # "compressed", not "constrained": with an equal-aspect axes narrower than its slot,
    # constrained layout pushes it against the colorbar, off-centre; compressed centres the pair.
    # Each panel's slot as wide as it is drawn at one height; the figure is sized to them
    # once the title's lines are known (below).
    fig = Figure(layout="compressed")
    if three_d:
        boxes = [_box(velocity, "z"), _box(plane, "y")]
        ax, plan = fig.subplots(1, 2, width_ratios=boxes)
    else:
        boxes = [_box(velocity, "z")]
        ax = fig.subplots()
    # One colour scale for the section and the map, so that one colorbar reads both.
    cuts = [velocity] if plane is None else [velocity, plane]
    norm = matplotlib.colors.Normalize(
        min(float(c.min()) for c in cuts), max(float(c.max()) for c in cuts)
    )
    image = ax.pcolormesh(
        velocity["x"], velocity["z"], velocity, cmap="viridis", norm=norm, shading="auto",
        rasterized=True,
    )  # fmt: skip
    fig.colorbar(
        image, ax=fig.axes[-1], shrink=0.8, label=f"velocity ({velocity.attrs.get('units', '')})"
    )
    times = []
    if "traveltime" in dataset:
        times = [_cut(dataset, "traveltime", source, "y").load()]
        if three_d:
            times.append(_cut(dataset, "traveltime", source, "z", map_at).load())
    # One set of levels for the section and the map, so that a line means one time on both.
    levels, decimals = _round_levels(max((_top(t) for t in times), default=0.0))
    if times:
        _contours(ax, times[0], levels, decimals)
    rays = _rays_of(dataset, source)
    _draw_rays(ax, rays)
    has_receivers = "receiver_x" in dataset
    off_section = np.zeros(dataset.sizes.get("receiver", 0), dtype=bool)
    if has_receivers:
        if three_d:
            # Receivers farther than half a node from the section are drawn hollow: their
            # projection is not where they are.
            half = _half_node(dataset, "y", np.inf)
            off_section = np.abs(dataset["receiver_y"].values - float(velocity["y"])) > half
        # Names only of receivers on the section: projected ones run into each other
        # there (receivers far apart in y, near in x); the map names them all.
        _receivers(ax, dataset, "z", off_section, named=~off_section)
    _source(ax, float(dataset["source_x"][source]), float(dataset["source_z"][source]))
    unit = _unit(dataset)
    names = _shown_names(dataset, "source")
    which = f"source {source} of {n_sources}" + (f" ({names[source]})" if names else "")
    if "traveltime" in dataset:
        every = (
            f" (contours every {_seconds(levels[1] - levels[0], decimals)})"
            if len(levels) > 1 else ""
        )  # fmt: skip
        lines = [f"raygrid: first-arrival traveltimes, {which}{every}"]
    else:
        drawn = ["velocity model", "rays" if rays else "", "receivers" if has_receivers else ""]
        lines = [
            f"raygrid: {_listed([d for d in drawn if d])}, {which}",
            "no traveltime contours: the store holds no traveltime fields (outputs.fields: false)",
        ]
    if three_d:
        projected = [
            name for name, shown in (("rays", rays), ("receivers", has_receivers)) if shown
        ]
        section, source_y = float(velocity["y"]), float(dataset["source_y"][source])
        lines.append(
            f"section y = {section:.10g} {unit} {_through(dataset, 'y', section, source_y)}"
            + (f"; {_listed(projected)} projected onto it" if projected else "")
            + ("; hollow: receivers off the section" if off_section.any() else "")
        )
    unfinished = "source_done" in dataset and not dataset.attrs.get("complete", False)
    if not rays and "receiver_x" in dataset and unfinished:
        done = int(dataset["source_done"].sum())
        lines.append(
            f"store not complete ({done} of {n_sources} sources done): rays are drawn once "
            "the run has finished"
        )
    aspect, stretched = _aspect(velocity, "z")
    if stretched:
        lines.append(stretched)
    if plane is not None:
        contours = (times[1], levels, decimals) if times else None
        lines.extend(
            _plan(plan, dataset, source, plane, norm, float(velocity["y"]), map_at, map_why,
                  contours)
        )  # fmt: skip
    # As wide as the panels drawn side by side at one height, and as high as they and the
    # title's lines: a fixed size left wide gaps beside square models and a long section a
    # strip across a tall page. Panels lower where that would make the figure wider than
    # its bound (a model a few nodes thick in y), rather than wide and mostly empty.
    widest, tallest, least = (18.0, 3.9, 9.0) if plane is not None else (9.0, 5.0, 4.5)
    high = min(tallest, (widest - 2.6) / sum(boxes))
    width = max(high * sum(boxes) + 2.6, least)
    lines = _wrapped(lines, width)
    fig.set_size_inches(width, high + 1.1 + 0.2 * len(lines))
    # A figure title, not the axes': a model deeper than it is wide gives an axes narrower
    # than these lines, and an axes title centred on it would run off the figure.
    fig.suptitle("\n".join(lines), fontsize="medium")
    ax.set(xlabel=f"x ({unit})", ylabel=f"z ({unit})")
    ax.invert_yaxis()  # z is positive down
    ax.set_aspect(aspect)
    return fig if path is None else _save(fig, path, dpi)


#: Characters of the title's font (``medium``, 10 pt) to an inch of figure, with a margin:
#: a longer line ran off both sides of a 3D map's figure.
TITLE_CHARACTERS_PER_INCH = 11.5


#: Characters of a station's or event's name drawn on a picture: a 300-character name ran
#: off the figure and collapsed its layout (matplotlib's "constrained_layout not applied").
SHOWN_NAME = 32


def _shown_names(dataset: xr.Dataset, what: str) -> list[str] | None:
    """The store's names of its ``what`` (:func:`~raygrid.pipeline.store.point_names`), as
    drawn: cut to :data:`SHOWN_NAME` characters, the cut marked."""
    names = point_names(dataset, what)
    if names is None:
        return None
    return [
        name if len(name) <= SHOWN_NAME else name[: SHOWN_NAME - 1] + "\u2026" for name in names
    ]


def _check_store(dataset: object, function: str) -> None:
    """Refuse what is not a survey store: a ``traveltime()`` result was told "source
    number 0 is out of range: the store has 0 sources"."""
    if isinstance(dataset, xr.Dataset) and "source" in dataset.dims and "velocity" in dataset:
        return
    raise InputError(
        f"{function} draws a survey store, as open_survey opens it (sources, the model and "
        f"the store's records), got {_kind(dataset)}: draw a traveltime() result's field "
        "(the result, or its 'traveltime' with predecessors=True) with xarray: "
        "field.plot.contourf(yincrease=False).axes.set_aspect('equal') in 2D (to scale), of "
        "a section in 3D (field.sel(y=..., method='nearest'))"
    )


def _kind(value: object) -> str:
    """What ``value`` is, for a message: an xarray object by its variables or name."""
    if isinstance(value, xr.Dataset):
        return f"a Dataset of {', '.join(map(str, value.data_vars)) or 'no variables'}"
    if isinstance(value, xr.DataArray):
        return f"a DataArray ({value.name or 'unnamed'})"
    return f"a {type(value).__name__}"


def _wrapped(lines: list[str], width: float) -> list[str]:
    """The title's lines, each broken at spaces to fit a figure ``width`` inches wide."""
    columns = max(int(width * TITLE_CHARACTERS_PER_INCH), 40)
    return [part for line in lines for part in textwrap.wrap(line, columns) or [""]]


def _plan(
    plan: Axes,
    dataset: xr.Dataset,
    source: int,
    plane: xr.DataArray,
    norm: matplotlib.colors.Normalize,
    section: float,
    map_z: float | None,
    why: str,
    contours: tuple[xr.DataArray, np.ndarray, int] | None,
) -> list[str]:
    """Draw a 3D survey's map beside its section: the model and traveltimes
    (``contours``: the cut, its levels and their decimals) on the ``z`` plane ``plane``
    (through the source, or nearest ``map_z``, chosen as ``why`` says: ``"asked"``,
    ``"receivers"``), all sources, the receivers and this source's rays projected onto it,
    and a dashed line along the section. Returns the title's lines it needs."""
    # The section alone stacks every ray and receiver of a 3D survey onto one plane, a
    # tangle for many receivers; seen from above they fan out to where they are.
    plan.pcolormesh(
        plane["x"], plane["y"], plane, cmap="viridis", norm=norm, shading="auto", rasterized=True
    )
    if contours is not None:
        _contours(plan, *contours)
    rays = _rays_of(dataset, source, ("x", "y"))
    _draw_rays(plan, rays)
    plan.axhline(section, color="white", ls="--", lw=1)
    has_receivers = "receiver_x" in dataset
    depth = float(plane["z"])
    off_map = np.zeros(dataset.sizes.get("receiver", 0), dtype=bool)
    others = np.arange(dataset.sizes["source"]) != source
    if others.any():
        # Under the receivers' triangles, larger: a source at a receiver's place shows
        # round it (they are often laid out at the same stations).
        plan.plot(
            dataset["source_x"].values[others], dataset["source_y"].values[others], "*",
            color="0.75", markeredgecolor="black", mew=0.5, ms=11, ls="none", clip_on=False,
            zorder=2.9,
        )  # fmt: skip
    if has_receivers:  # on a map every receiver is named; hollow where off its plane
        off_map = np.abs(dataset["receiver_z"].values - depth) > _half_node(dataset, "z", np.inf)
        _receivers(plan, dataset, "y", off_map, named=np.ones(off_map.size, bool))
    _source(plan, float(dataset["source_x"][source]), float(dataset["source_y"][source]))
    unit = _unit(dataset)
    source_z = float(dataset["source_z"][source])
    plan.set(xlabel=f"x ({unit})", ylabel=f"y ({unit})")
    plan.set_title("map (dashed: the section)", fontsize="small")
    aspect, stretched = _aspect(plane, "y")
    plan.set_aspect(aspect)
    projected = [name for name, shown in (("rays", rays), ("receivers", has_receivers)) if shown]
    if why == "asked":  # the depth asked for: say where the source is, and the plane drawn
        asked = "as asked" if depth == map_z else f"the node plane nearest {map_z:.10g} {unit}"
        where = f"({asked}; the source at z = {source_z:.10g} {unit})"
    elif why == "receivers":
        where = f"(the receivers' depth; the source at z = {source_z:.10g} {unit})"
    else:
        where = _through(dataset, "z", depth, source_z)
    lines = [
        f"map z = {depth:.10g} {unit} {where}"
        + ("; other sources grey" if others.any() else "")
        + (f"; {_listed(projected)} projected onto it" if projected else "")
        + ("; hollow: receivers off the map" if off_map.any() else "")
    ]
    return lines + ([stretched] if stretched else [])


def _map_depth(dataset: xr.Dataset, source: int) -> tuple[float | None, str]:
    """A 3D map's depth when none is asked for, and why: the receivers' where they all lie
    within half a node of one node plane and it is not the source's (a map through
    surface sources over buried receivers showed only the top layer and every receiver
    hollow), else the source's (``None``)."""
    if "receiver_z" not in dataset or not dataset.sizes.get("receiver", 0):
        return None, "source"
    depths = dataset["receiver_z"].values
    plane = float(dataset["z"].sel(z=float(np.median(depths)), method="nearest"))
    half = _half_node(dataset, "z", np.inf)
    source_plane = float(dataset["z"].sel(z=float(dataset["source_z"][source]), method="nearest"))
    if np.all(np.abs(depths - plane) <= half) and plane != source_plane:
        return plane, "receivers"
    return None, "source"


def _check_map_z(dataset: xr.Dataset, map_z: float | None, three_d: bool) -> None:
    """Refuse a map depth a picture cannot have: on a 2D model (no map), not a number, or
    beyond half a node outside the model's ``z``."""
    if map_z is None:
        return
    if not three_d:
        raise InputError("map_z (--map-z) draws a 3D model's map: this model is 2D")
    z = dataset["z"].values
    half = _half_node(dataset, "z", 0.0)
    low, high = float(z.min()) - half, float(z.max()) + half
    unit = _unit(dataset)
    if not (isinstance(map_z, Real) and not isinstance(map_z, bool) and np.isfinite(map_z)):
        raise InputError(f"map_z (--map-z) must be a depth in {unit}, got {map_z!r}")
    if not low <= map_z <= high:
        raise InputError(
            f"map_z (--map-z) = {map_z!r} is outside the model's z, {float(z.min()):g} to "
            f"{float(z.max()):g} {unit}: give a depth in {unit} inside it (or within half a "
            "node of its top or bottom, drawn there)"
        )


def _half_node(dataset: xr.Dataset, dim: str, lone: float) -> float:
    """Half the smallest step of ``dim``'s nodes: how far a point may be from a node plane
    and still be drawn on it; ``lone`` for a dim of one node."""
    values = dataset[dim].values
    return 0.5 * float(np.abs(np.diff(values)).min()) if values.size > 1 else lone


def _through(dataset: xr.Dataset, dim: str, plane: float, at: float) -> str:
    """Whether the node plane ``dim = plane`` passes through the source (at ``at``)."""
    spacing = float(dataset[dim][1] - dataset[dim][0]) if dataset.sizes[dim] > 1 else 1.0
    # A source between node planes is drawn on the nearest: say so, not "through" it.
    # The tolerance is the grid's snapping scale, not a relative one (UTM northings).
    if abs(plane - at) <= 1e-6 * abs(spacing):
        return "through the source"
    return f"nearest the source (at {dim} = {at:.10g} {_unit(dataset)})"


def _top(field: xr.DataArray) -> float:
    """The latest finite time of a cut (0 if none)."""
    finite = np.isfinite(field.values)
    return float(field.values[finite].max()) if finite.any() else 0.0


def _seconds(value: float, decimals: int) -> str:
    """``0.6 s``: a contour's time, without the zeros its level's decimals leave."""
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".") + " s"


def _contours(ax: Axes, field: xr.DataArray, levels: np.ndarray, decimals: int) -> None:
    """White traveltime contours of a loaded cut at ``levels``, every other one labelled."""
    down = field.dims[0]
    shown = levels[levels <= _top(field)]
    if shown.size:
        contours = ax.contour(
            field["x"], field[down], field, levels=shown, colors="white", linewidths=0.8
        )
        # Every other level labelled: neighbours' labels ran into each other.
        ax.clabel(contours, shown[1::2], fmt=lambda t: _seconds(t, decimals), fontsize=7)


#: Rays drawn opaque at full width in a picture; more are drawn thinner and see-through.
CLEAR_RAYS = 30


def _draw_rays(ax: Axes, rays: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """The rays in red, over the receivers' triangles and unclipped: a ray along the
    surface ran under the triangles of the receivers it passed, out of sight, and one
    along the model's top edge was half cut off by the frame. The source's star and the
    names stay on top. Beyond :data:`CLEAR_RAYS` rays, thinner and see-through in
    proportion: 400-1000 opaque rays hid the model, its layers and the receivers."""
    crowd = min(1.0, CLEAR_RAYS / max(len(rays), 1))
    width, alpha = max(0.3, 1.2 * np.sqrt(crowd)), max(0.1, crowd)
    for along, down in rays:
        ax.plot(along, down, color="red", lw=width, alpha=alpha, zorder=3.5, clip_on=False)


def _receivers(
    ax: Axes, dataset: xr.Dataset, down: str, hollow: np.ndarray, named: np.ndarray
) -> None:
    """The receivers at their ``x`` and ``down`` coordinates: black triangles, hollow where
    ``hollow``; those ``named`` named, where the store names a few (:data:`MOST_NAMED`)."""
    x, y = dataset["receiver_x"].values, dataset[f"receiver_{down}"].values
    # Smaller beyond MOST_NAMED: 150 triangles on a line merged into a black band and 400
    # covered the section.
    crowd = min(1.0, MOST_NAMED / max(x.size, 1))
    size = max(3.0, 7.0 * np.sqrt(crowd))
    halo = [matplotlib.patheffects.withStroke(linewidth=2.5 * size / 7.0, foreground="white")]
    for off, face in ((False, "black"), (True, "none")):
        chosen = hollow == off
        if chosen.any():
            # Unclipped: a receiver on the surface (the top edge) is drawn whole, and above
            # the axes' frame. The halo keeps black and hollow triangles visible on the
            # darkest colours of the model.
            ax.plot(
                x[chosen], y[chosen], "v", color="black", markerfacecolor=face, ms=size,
                ls="none", clip_on=False, zorder=3, path_effects=halo,
            )  # fmt: skip
    names = _shown_names(dataset, "receiver")
    if names and len(names) <= MOST_NAMED:
        for name, at in zip(np.array(names)[named], zip(x[named], y[named])):
            # Above the triangle on the page (whichever way the axis runs), where a surface
            # receiver's name sits in the margin, clear of the model.
            ax.annotate(
                name, at, xytext=(0, 5), textcoords="offset points", ha="center",
                va="bottom", fontsize=6, annotation_clip=False, path_effects=HALO, zorder=5,
            )  # fmt: skip


def _source(ax: Axes, x: float, y: float) -> None:
    """The drawn source: a gold star, unclipped (a source on the surface is drawn whole)."""
    ax.plot(
        x, y, "*", color="gold", ms=15, markeredgecolor="black", clip_on=False, zorder=4,
        path_effects=HALO,
    )  # fmt: skip


#: The most a model's picture is wider than high, or higher than wide, before it is
#: stretched (and the title says by how much): a 3 x 200 node model drawn to scale is a
#: sliver with a colour bar too short to read.
MOST_ELONGATED = 5.0


def _aspect(values: xr.DataArray, down: str) -> tuple[float, str]:
    """The axes' aspect (1: to scale) and, when a cut is too elongated to draw to scale,
    the title's line saying which way it is stretched: as geologists' sections say it for a
    section (``down="z"``), naming the stretched axis for a map (``down="y"``)."""
    width = float(np.ptp(values["x"].values)) or 1.0
    height = float(np.ptp(values[down].values)) or 1.0
    words = ("vertical", "horizontal") if down == "z" else ("map: y", "map: x")
    if width / height > MOST_ELONGATED:
        factor = width / height / MOST_ELONGATED
        return factor, f"{words[0]} exaggeration x{factor:.3g}"
    if height / width > MOST_ELONGATED:
        factor = height / width / MOST_ELONGATED
        return 1 / factor, f"{words[1]} exaggeration x{factor:.3g}"
    return 1.0, ""


def _box(values: xr.DataArray, down: str) -> float:
    """The width over height of a cut as drawn, stretched as :func:`_aspect` says."""
    width = float(np.ptp(values["x"].values)) or 1.0
    height = float(np.ptp(values[down].values)) or 1.0
    return width / (height * _aspect(values, down)[0])


def _round_levels(top: float) -> tuple[np.ndarray, int]:
    """Contour levels at round times (0.05, 0.1, 0.15 s ...) up to ``top``, about 15 of
    them, and the decimals that print them exactly (none for ``top`` 0)."""
    if not top > 0:
        return np.empty(0), 0
    ticks = matplotlib.ticker.MaxNLocator(nbins=15, steps=[1, 2, 2.5, 5, 10]).tick_values(0, top)
    levels = ticks[(ticks > 0) & (ticks <= top)]
    step = float(ticks[1] - ticks[0])
    decimals = max(0, int(np.ceil(-np.log10(step) - 1e-9)))
    while round(step, decimals) != round(step, decimals + 3):  # 0.025: three decimals
        decimals += 1
    return levels, decimals


def plot_gathers(
    dataset: xr.Dataset,
    path: str | Path | None = None,
    receivers: Sequence[int | str] = (),
    *,
    dpi: float = DPI,
) -> Path | Figure:
    """Receiver gathers at a few receivers, and the whole ``receiver_traveltime`` table.

    Parameters
    ----------
    dataset : xarray.Dataset
        A finished survey store with a ``receiver_traveltime`` table.
    path : str or Path, optional
        The picture to write; without it the figure is returned.
    receivers : sequence of int or str
        The receivers whose gathers are drawn, by number or name (default: up to 5, spread
        over the table).
    dpi : float
        Dots per inch (:data:`DPI` by default).

    Returns
    -------
    Path or matplotlib.figure.Figure
        ``path``, or the figure where no path is given.

    Notes
    -----
    Sources whose horizontal position varies along one coordinate only (``x`` in 2D, ``x``
    or ``y`` in 3D; ``z`` for sources down a borehole) are plotted against it, joined in
    order where no two share a position nor lie at different depths. Sources spread over
    the horizontal plane (a ``y``-``x`` grid, or a diagonal line in 3D) are plotted against
    their horizontal offset from the receiver, as unjoined points.
    """
    _check_store(dataset, "plot_gathers")
    if "receiver_traveltime" not in dataset:
        raise InputError(
            "plot_gathers draws a survey store's receiver table, and this store has none "
            "(no receivers, or outputs.receiver_table: false)"
        )
    table = dataset["receiver_traveltime"].load()
    n_receivers = table.sizes["receiver"]
    # Checked as everywhere a point is chosen: 99 of 7 was an IndexError, -1 the last.
    receivers = [point_number(dataset, r, "receiver") for r in receivers]
    if not receivers:
        receivers = sorted(set(np.linspace(0, n_receivers - 1, min(5, n_receivers)).astype(int)))
    unit = _unit(dataset)
    along = _source_line(dataset)
    # Sources along x at several depths (shots at the surface and in a borehole): one line
    # through them would read as one moveout curve. A line that slopes or follows the
    # topography stays joined: only depths jumping by more than the step along x part it.
    depths = _depth_jumps(dataset, along)
    fig = Figure(figsize=(12, 5), layout="constrained")
    left, right = fig.subplots(1, 2)
    names = _shown_names(dataset, "receiver")
    for r in receivers:
        # A station's name where the store has them, else its number.
        label = f"{names[r] if names else f'receiver {r}'} ({_position(dataset, r, unit)})"
        times = table.isel(receiver=r).values
        if along:
            position = dataset[f"source_{along}"].values
            order = np.argsort(position, kind="stable")
            # Joined only if no two sources share a position: a segment standing up between
            # two of them (up a slope, say) would look like a jump in time.
            joined = np.unique(position).size == position.size and not depths
            style = ".-" if joined else "."
            left.plot(position[order], times[order], style, ms=3, label=label)
        else:
            # Offset, not source number: numbers follow the grid row by row, a sawtooth that
            # looks like structure. Against offset a laterally uniform model gives one
            # moveout curve and lateral change shows as spread. Unjoined: sources next to
            # each other in offset need not be next to each other on the ground.
            left.plot(_offsets(dataset, r), times, "o", ms=3, ls="none", label=label)
    xlabel = f"source {along} ({unit})" if along else f"horizontal source-receiver offset ({unit})"
    if depths:
        xlabel += f"; sources at {depths} depths, not joined"
    left.set(xlabel=xlabel, ylabel="traveltime (s)", title="receiver gathers")
    left.invert_yaxis()  # seismic convention: time grows downwards
    # What the labels leave out: how many are drawn, and the coordinates all receivers share
    # (their depth on a surface spread), which still place them.
    said = [f"{len(receivers)} of {n_receivers}"] if len(receivers) < n_receivers else []
    if common := _common_position(dataset, unit):
        said.append(f"all at {common}")
    title = f"receivers: {', '.join(said)}" if said else None
    left.legend(fontsize=7, title=title, title_fontsize=7)
    image = right.imshow(table.values, aspect="auto", cmap="magma_r", interpolation="nearest")
    fig.colorbar(image, ax=right, label="traveltime (s)")
    right.set(
        xlabel="receiver", ylabel="source", title="traveltime of every source at every receiver"
    )
    _name_ticks(right.xaxis, _shown_names(dataset, "receiver"))
    _name_ticks(right.yaxis, _shown_names(dataset, "source"))
    return fig if path is None else _save(fig, path, dpi)


def _depth_jumps(dataset: xr.Dataset, along: str | None) -> int:
    """The sources' depths (how many) where they lie along a horizontal coordinate and
    their depth jumps between neighbours along it by more than their distance along it
    (two lines of sources interleaved); 0 for one line, however it slopes."""
    if along in (None, "z"):
        return 0
    position, depth = dataset[f"source_{along}"].values, dataset["source_z"].values
    order = np.argsort(position, kind="stable")
    steep = np.abs(np.diff(depth[order])) > np.abs(np.diff(position[order]))
    return int(np.unique(depth).size) if steep.any() else 0


def _name_ticks(axis: Axis, names: list[str] | None) -> None:
    """Tick a table's rows or columns with the stations' or events' names where the store
    has a few (:data:`MOST_NAMED`); else with their numbers, at whole numbers."""
    if names is None or len(names) > MOST_NAMED:
        axis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        return
    # Names side by side along x turned upright when they would run into each other.
    crowded = axis.axis_name == "x" and len(names) * max(map(len, names)) > 60
    axis.set_ticks(range(len(names)), names, fontsize=7, rotation=90 if crowded else 0)


def plot_store(
    dataset: xr.Dataset, path: str | Path, source: int | str = 0, *, dpi: float = DPI
) -> list[Path]:
    """The workflow's plots: ``path`` (one source's field and rays) and, for a survey with a
    receiver table and several sources, ``<path stem>-gathers<path suffix>``."""
    path = Path(path)
    written = [plot_field(dataset, path, source, dpi=dpi)]
    if "receiver_traveltime" in dataset and dataset.sizes["source"] > 1:
        gathers = path.with_name(f"{path.stem}-gathers{path.suffix}")  # as the field's kind
        written.append(plot_gathers(dataset, gathers, dpi=dpi))
    return written


def _save(fig: Figure, path: str | Path, dpi: float = DPI) -> Path:
    """Write ``fig`` to ``path`` whole or not at all: drawn beside it under a hidden name
    (:func:`~raygrid.pipeline.storepaths.hidden_sibling`, as stores are made) and renamed, so
    that a full disk or an interrupt never leaves a picture cut short under its name, nor
    spoils the one a rerun would replace. What killed drawings left is removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_left(path, "drawing")
    drawing = hidden_sibling(path, "drawing")
    try:
        # The format named, so that matplotlib appends no suffix to a name without one.
        suffix = path.suffix[1:] or matplotlib.rcParams["savefig.format"]
        try:
            fig.savefig(drawing, dpi=dpi, format=suffix)
        except RuntimeError as error:  # a format whose tool is missing (pgf: xelatex)
            raise InputError(f"matplotlib could not write {path}: {error}") from None
        os.replace(drawing, path)
    finally:
        drawing.unlink(missing_ok=True)
    return path


def _unit(dataset: xr.Dataset) -> str:
    return dataset["source_x"].attrs.get("units") or dataset["x"].attrs.get("units", "")


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]


def _varying(dataset: xr.Dataset, kind: str) -> list[str]:
    """The model dims along which the sources (``kind="source"``) or receivers differ."""
    return [d for d in dataset["velocity"].dims if np.ptp(dataset[f"{kind}_{d}"].values) > 0]


def _source_line(dataset: xr.Dataset) -> str | None:
    """The coordinate the sources lie along (``x`` on a 2D line), or None when they
    spread over the horizontal plane: ``x`` or ``y`` when only that one varies
    horizontally, ``z`` for sources down a borehole."""
    varying = _varying(dataset, "source")
    horizontal = [d for d in varying if d != "z"]
    if len(horizontal) > 1:
        return None
    return horizontal[0] if horizontal else ("z" if "z" in varying else "x")


def _offsets(dataset: xr.Dataset, receiver: int) -> np.ndarray:
    """Each source's horizontal distance from ``receiver``."""
    horizontal = [d for d in dataset["velocity"].dims if d != "z"]
    return np.sqrt(
        sum(
            (dataset[f"source_{d}"].values - float(dataset[f"receiver_{d}"][receiver])) ** 2
            for d in horizontal
        )
    )


def _common_position(dataset: xr.Dataset, unit: str) -> str:
    """``z=0 m``: the coordinates every receiver shares, when there are several receivers
    (a lone receiver's label names all of its coordinates), x first; ``""`` if none."""
    if dataset.sizes["receiver"] < 2:
        return ""
    varying = _varying(dataset, "receiver")
    return ", ".join(
        f"{d}={float(dataset[f'receiver_{d}'][0]):g} {unit}".rstrip()
        for d in sorted(dataset["velocity"].dims, key=("x", "y", "z").index)
        if d not in varying
    )


def _position(dataset: xr.Dataset, receiver: int, unit: str) -> str:
    """``x=500 m, y=1200 m``: the receiver's coordinates that differ between receivers
    (all of them for a lone receiver), x first, as on a map."""
    dims = _varying(dataset, "receiver") or list(dataset["velocity"].dims)
    return ", ".join(
        f"{d}={float(dataset[f'receiver_{d}'][receiver]):g} {unit}".rstrip()
        for d in sorted(dims, key=("x", "y", "z").index)
    )
