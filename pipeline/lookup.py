"""Traveltimes at any point of a solved field: receivers, and hypocentres in a table.

A traveltime table for earthquake location holds each station's field (a source at the
station, by reciprocity); locating an event reads the fields at trial hypocentres that
fall between nodes. Here a point between nodes gets the time the method itself gives it:
the node ``n`` of the forward-star box around its cell minimising ``t(n) + leg(n, point)``,
the leg integrated exactly through the cells it crosses (docs/method.md section 3), or the
straight leg from a source joined to it (near it, on a node or not); the same rule and the
same floats as a survey's receiver table and a raypath's last leg.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import xarray as xr

from ..kernels import Star, forward_star
from .errors import InputError, warn_input
from .grid import MODEL_CHECK_RTOL, Grid, recorded_radius, recorded_source, solved_grid
from .integrity import listed_sources
from .labelled import labelled_points
from .nodevalues import NodeValues
from .options import check_flag
from .points import as_table, given_path, locate_points, one_point, source_list
from .solve import solving_threads

__all__ = ["TraveltimeTable", "traveltime_at", "receiver_times"]


def receiver_times(
    grid: Grid,
    star: Star,
    times: np.ndarray | NodeValues,
    receiver_index: np.ndarray,
    dtype: Any,
    slowness: NodeValues | None = None,
    source3: np.ndarray | None = None,
    exact: bool = True,
) -> np.ndarray:
    """First-arrival time at each receiver from one source's field ``times``.

    ``times`` is the flat field, or a :class:`~raygrid.pipeline.nodevalues.NodeValues` (a
    tiled solve's field, read only in the chunks that hold receivers); ``slowness`` the
    model's, kept by a caller reading many sources (see :meth:`Grid.leg_times`).

    A receiver on a node reads its node; one between nodes takes the node ``n`` of the
    forward-star box around its cell minimising ``t(n) + leg(n, receiver)`` and adds that
    leg in the solve's precision: the same choice and the same floats as
    :func:`raygrid.pipeline.raypath`'s last leg. ``source3``, the source's position in
    node units, lets a receiver near the source (on a node or not) be reached straight
    from it (:meth:`Grid.last_legs`; ``exact``: the solve's weights were exact crossings).
    """
    if not isinstance(times, NodeValues):
        times = NodeValues(np.reshape(times, grid.shape3))
    dtype = np.dtype(dtype)
    model = slowness if slowness is not None or times.lazy else grid.slowness_values()
    if not times.lazy and not model.lazy:  # in memory: arrays, not a tuple a point
        _, time, leg = grid.last_leg_arrays(
            times, receiver_index, star.radius, model, source3, exact
        )
        return time.astype(dtype) + leg.astype(dtype)
    legs = grid.last_legs(times, receiver_index, star.radius, slowness, source3, exact)
    time = np.array([t for _, t, _ in legs], dtype=dtype).reshape(-1)
    leg = np.array([g for _, _, g in legs], dtype=dtype).reshape(-1)
    # Plus the last leg, in the solve's precision: a node's own time has none (+ 0.0 keeps
    # it), and the straight leg from the source (joined) comes after a time of 0.
    return time + leg


#: The most a lazy field of one source and its model may take in memory to be read whole
#: (:func:`_read_whole`).
LOAD_BYTES = 256 * 2**20


def _read_whole(field: xr.DataArray, grid: Grid, star: Star, points: int) -> bool:
    """Whether to read a lazy field (a survey store's) whole, one source at a time, and its
    model once, rather than block by block around the points: when the points' boxes
    cover it several times over anyway (a grid search's thousands of trial hypocentres)
    and it fits :data:`LOAD_BYTES`; or when a source's field is one chunk (an untiled
    survey store's), which every block around a point would read and decompress whole
    again (100 points on 400 fields of 201 x 801 took 20 s, 0.35 s read whole). The
    compiled box search then runs on it: 7 us a point and station at 3D radius 3, against
    0.3 ms point by point through lazy blocks. The same floats either way."""
    if field.chunks is None:
        return False
    nodes = int(np.prod(grid.shape))
    box = int(np.prod([2 * r + 1 for r in star.radius]))
    size = nodes * (field.dtype.itemsize + (8 if grid.slowness is None else 0))
    chunks = dict(zip(field.dims, field.chunks))  # the field's own (its coords may differ)
    one_chunk = all(len(chunks[d]) == 1 for d in grid.dims)
    return (points * box >= nodes or one_chunk) and size <= LOAD_BYTES


def check_model(grid: Grid, recorded: Any) -> None:
    """Refuse a model given apart from a field that is not the one it was solved on, by
    the field's ``model_check`` record (:meth:`~raygrid.pipeline.Grid.model_check`).

    Raises
    ------
    InputError
        If the two differ beyond :data:`~raygrid.pipeline.grid.MODEL_CHECK_RTOL`.
    """
    now = grid.model_check()
    recorded = np.asarray(recorded, dtype=np.float64).reshape(-1)
    if recorded.size == len(now) and np.allclose(now, recorded, rtol=MODEL_CHECK_RTOL, atol=0):
        return
    ratio = recorded[0] / now[0] if recorded.size and now[0] else float("nan")
    raise InputError(
        "velocity is not the model the field was solved on: its slowness on a lattice of "
        f"nodes averages {now[0]:.6g} s/m against the field's {recorded[0]:.6g} (a ratio of "
        f"{ratio:.4g}); pass the model it was solved on (a Vs model read with a Vp table "
        "gives times late by their ratio, silently)"
    )


def _positions_along_source(field: xr.DataArray, dims: tuple[str, ...]) -> bool:
    """Whether a field records its sources' positions as ``source_<dim>`` coordinates
    along ``source`` (raygrid's results and stores), one per source."""
    return all(
        f"source_{d}" in field.coords and field[f"source_{d}"].dims == ("source",) for d in dims
    )


def _warn_unsolved(times: np.ndarray) -> None:
    """Warn of sources whose times read NaN: a field no solve wrote (a survey store still
    running or stopped part-way keeps NaN for the sources it has not finished; a solve
    gives inf, never NaN, where nothing arrives). A grid search summing with ``nansum``
    located with the stations that happened to be done, silently."""
    unsolved = np.atleast_2d(np.isnan(times)).any(axis=-1)  # per source
    if not unsolved.any():
        return
    if times.ndim == 1:
        said = "the field has no times (NaN) at the points"
    else:
        sources = np.flatnonzero(unsolved)
        said = (
            f"{len(sources)} of the {len(unsolved)} sources have no times (NaN) at the points "
            f"(numbered from 0 along 'source': {listed_sources(sources)})"
        )
    warn_input(
        f"{said}: not solved (a survey store still running, or stopped part-way: its "
        "source_done says which are done); run its workflow again to finish it, or leave "
        "them out (store.isel(source=...))"
    )


def _recorded_sources(field: xr.DataArray, dims: tuple[str, ...]) -> list[dict | None]:
    """:func:`~raygrid.pipeline.grid.recorded_source` of each source of a field with a
    ``source`` dim, from its ``source_<dim>`` coordinates along it (every raygrid result
    and store).

    Raises
    ------
    InputError
        If several sources share one recorded position (a scalar coordinate or an
        attribute): ``xr.concat`` of single-source results keeps the first one's for all
        (attributes always, scalar coordinates under its newer defaults), and a point near
        another source, not joined to the recorded one, was then 2.6x late, unchecked.
    """
    n = field.sizes["source"]
    if _positions_along_source(field, dims):
        values = {d: field.coords[f"source_{d}"].values for d in dims}
        return [{d: float(values[d][s]) for d in dims} for s in range(n)]
    columns = [f"source_{d}" for d in dims]
    shared = [c for c in columns if c in field.attrs or (c in field.coords and field[c].ndim == 0)]
    if n > 1 and shared:
        raise InputError(
            f"the field's {n} sources share one recorded position ({', '.join(shared)}: a "
            "scalar coordinate or attribute, not one value per source). xr.concat or merge "
            "of several traveltime() results keeps the first one's for all: solve many "
            "sources with raygrid.pipeline.traveltimes, or stack them with "
            "xr.concat(fields, dim='source', coords='all'), which keeps each one's position"
        )
    return [recorded_source(field.isel(source=s), dims) for s in range(n)]


def traveltime_at(
    field: xr.DataArray | xr.Dataset,
    points: Any,
    *,
    velocity: xr.DataArray | None = None,
    radius: int | Mapping[str, int] | None = None,
    outside: Literal["raise", "nan"] = "raise",
) -> xr.DataArray:
    """Traveltimes at points anywhere in the model, from solved fields.

    Parameters
    ----------
    field : xarray.DataArray or xarray.Dataset
        ``traveltime`` from :func:`raygrid.pipeline.traveltime` or
        :func:`~raygrid.pipeline.traveltimes` (with or without a ``source`` dim), or a
        Dataset holding it and the ``velocity`` (``predecessors=True`` results, a survey
        store opened with :func:`raygrid.pipeline.open_survey`). A lazy field and model (a
        store's) are read only in the chunks around the points, one source at a time
        (but for the model's check, ``model_check``: a lattice of up to 17 nodes per axis,
        which may touch every chunk of a model given apart with ``velocity=``).
    points : mapping, sequence of mappings, a table, or a CSV file's path
        Positions in model coordinates, e.g. ``{"z": 9870.0, "y": 1234.5, "x": 15012.3}``;
        a table has a column per dim (a dict of sequences, a DataFrame, a Dataset, a CSV
        file). A
        ``name`` (or ``station``) key or column names them: the ``point`` coordinate. A
        Dataset (or a mapping of DataArrays) whose coordinates lie along dims of their own
        is read the xarray way (as ``interp`` reads DataArrays): stations along
        ``station`` give a result along ``station`` with the Dataset's coordinates, and a
        lattice ``xr.Dataset(coords={"z": zs, "x": xs})`` a grid search's cube along ``z``
        and ``x``.
    velocity : xarray.DataArray, optional
        The model the field was solved on, when ``field`` does not hold it.
    radius : int or mapping, optional
        The forward-star radius of the solve, for a field that does not record it; by
        default read from the field's attributes (``radius_z``, ...), which every raygrid
        result and store records, and it must equal them.
    outside : {"raise", "nan"}, optional
        A point outside the model (or with a NaN coordinate, a catalogue's missing depth)
        is refused, naming it (the default), or reads NaN: for an optimiser or a grid
        search that may step past the model's edges.

    Returns
    -------
    xarray.DataArray
        Dims ``("source", "point")`` (``source`` only if the field has it; ``point`` only
        for several points; a Dataset's points: its own dims instead of ``point``),
        seconds, with coordinates ``point_<dim>`` (in the model's length unit) and
        ``point`` (the points' names, if given; a Dataset's own coordinates), and the
        field's source coordinates (``source_<dim>``, ``source``: along ``source``, or
        scalars for one source's field).

    Raises
    ------
    InputError
        For a point outside the model, a field without its model or radius, or a field and
        model on different grids. For a recorded source position its times do not start
        at (:meth:`~raygrid.pipeline.grid.Grid.located_source`: another field's position,
        times changed since the solve, such as an origin time added, or a faster model):
        each position is checked before any point is read from its field (one along
        ``source`` of a field read lazily, only where a point uses it). For several
        sources sharing one scalar position
        (``xr.concat`` of single-source results under xarray's newer defaults).

    Notes
    -----
    A point on a node reads the node. A point between nodes takes the node ``n`` of the
    forward-star box around its cell minimising ``t(n) + leg(n, point)``, the leg
    integrated exactly cell by cell: a global minimum over the paths of the solve's graph
    extended by one straight leg, not an interpolation, so it is never earlier than the
    graph allows and is exact in a constant-velocity model along the star's directions.
    Near the source (nearest nodes at most two radii apart on every axis), the straight
    leg from it counts too (``Grid.direct_leg``), for points and sources on nodes or
    between them alike; the source is read from the field's ``source_*`` coordinates or
    attributes, and a field without them is warned about (points near the source are then
    reached through nodes). The same rule gives a
    survey's ``receiver_traveltime`` (bitwise) and a raypath's time.

    Each call checks and converts a model held in memory whole (milliseconds for a small
    model, growing with its size): to read the same fields at many points one call at a
    time (an event located after another), build a :class:`TraveltimeTable` once.
    """
    table = TraveltimeTable(field, velocity=velocity, radius=radius, load=False)
    return table.at(points, outside=outside)


class TraveltimeTable:
    """Solved fields ready to be read at any points, the model checked and converted once.

    ``TraveltimeTable(field, velocity=..., radius=...).at(points)`` is
    :func:`traveltime_at`'s result, the same floats; building the table does the per-field
    work (checking and converting the whole model, matching the field to it, the radius and
    the star) that a call of :func:`traveltime_at` repeats every time. For locating events
    one after another against a station table.

    Parameters
    ----------
    field : xarray.DataArray or xarray.Dataset
        As for :func:`traveltime_at`.
    velocity : xarray.DataArray, optional
        As for :func:`traveltime_at`.
    radius : int or mapping, optional
        As for :func:`traveltime_at`.
    load : bool, optional
        Read a lazy field and model (a survey store's) into memory once, so that each call
        searches them in memory (a store read lazily costs tens of ms a call, its chunks
        read again each time). Default: where the fields and the model's slowness fit
        :data:`LOAD_BYTES`; :func:`traveltime_at` reads them lazily, around the points.

    Attributes
    ----------
    grid : Grid
        The model's grid (its slowness in memory, or read lazily from a store's model).
    star : raygrid.kernels.Star
        The forward star the fields were solved with.
    field : xarray.DataArray
        The ``traveltime`` fields read: in memory (a store's loaded copy), or lazy and read
        per call.

    Raises
    ------
    InputError
        As :func:`traveltime_at`, for the field, model and radius, when built; for the
        points, from :meth:`at`.

    Notes
    -----
    The table keeps the model's slowness as it was when built; a lazy store's model, not
    loaded (``load=False``, or too big), is loaded whole at the first call that reads the
    fields whole (a grid search), and then kept. Edit a model in place afterwards and the
    table does not see it: build a new one. Fields in memory are read as they are at each
    call (a store's loaded fields are a copy), but each source's position is checked
    against its field at its first call only: fields edited in place afterwards (an origin
    time added) are not refused, as a new table's would be.

    Calls from several threads run one at a time: they share the model's blocks read so
    far (a lazy store's), whose cache is not made for concurrent use.
    """

    def __init__(
        self,
        field: xr.DataArray | xr.Dataset,
        *,
        velocity: xr.DataArray | None = None,
        radius: int | Mapping[str, int] | None = None,
        load: bool | None = None,
    ) -> None:
        if not isinstance(field, (xr.DataArray, xr.Dataset)):
            raise InputError(
                f"field must be an xarray.DataArray or Dataset (a raygrid result, or a survey "
                f"store opened with open_survey), got {type(field).__name__}: its coordinates "
                "and attributes say where and how it was solved"
            )
        given = velocity is not None  # apart from the field: checked against its record
        if isinstance(field, xr.Dataset):
            if "traveltime" not in field:
                stored = (
                    ": a survey store written with outputs.fields: false keeps its receivers' "
                    "times only (receiver_traveltime)"
                    if "receiver_traveltime" in field
                    else ""
                )
                raise InputError(
                    "reading times off a field (traveltime_at, TraveltimeTable) needs a "
                    f"traveltime field (no 'traveltime' in it){stored}"
                )
            own = field["velocity"] if "velocity" in field else None
            if velocity is None:
                velocity = own
            attrs = {**field.attrs, **field["traveltime"].attrs}
            if given and own is not None and "model_check" not in attrs:
                # A tiled survey's store records no check of its model (it never held it
                # whole), but holds the model: a Vs model given for its Vp fields was read
                # silently. The check of the model it holds, read on its lattice.
                attrs["model_check"] = solved_grid(own).model_check()
            field = field["traveltime"]
        else:
            attrs = dict(field.attrs)
        if velocity is None:
            raise InputError(
                "reading times off a field (traveltime_at, TraveltimeTable) needs the model: "
                "pass velocity=, or a Dataset holding 'velocity'"
            )
        units = field.attrs.get("units")
        if units is not None and str(units).strip().lower() not in SECONDS:
            # Said so, not as a source check failing on times 1000 times too large.
            raise InputError(
                f"the field's times are in {units!r}: lookups read the solve's own times, in "
                "seconds (s); read them off that field, then convert what they give"
            )
        lazy = field.chunks is not None or velocity.chunks is not None
        if load is not None:
            check_flag("load", load)  # "no" read as true: a store loaded whole
        else:
            load = lazy and field.nbytes + velocity.size * 8 + velocity.nbytes <= LOAD_BYTES
        if load and lazy:  # computed copies: the caller's Dataset stays as it was
            field, velocity = field.compute(), velocity.compute()
        grid = solved_grid(velocity)
        slowness = grid.slowness_values()
        grid.check_field(field, attrs)
        if given and "model_check" in attrs:
            check_model(grid, attrs["model_check"])
        elif given:
            warn_input(
                "the field records no check of the model it was solved on (model_check: a "
                "tiled solve of a model read lazily, or a field not solved by raygrid; for a "
                "survey store, pass rg.open_survey(store), which holds its model), so "
                "velocity= is taken for that model unchecked; a Vs model given for a Vp field "
                "gives times late by their ratio"
            )
        recorded = recorded_radius(attrs, grid.dims)
        if radius is None:
            if len(recorded) < len(grid.dims):
                raise InputError(
                    "the field records no radius (attrs radius_z, ...): pass radius=, or the "
                    "Dataset whose attributes record it (a survey store from open_survey, or "
                    "a predecessors=True result), not its 'traveltime' alone"
                )
            radius = recorded
        star = forward_star(grid.radius3(radius))
        given = dict(zip(("z", "y", "x"), star.radius))
        wrong = {d: r for d, r in recorded.items() if r != given[d]}
        if wrong:
            # Another star picks other nodes for the last leg: a time no solve of this field
            # gives, silently.
            raise InputError(
                f"radius {dict((d, given[d]) for d in wrong)} is not the radius the field was "
                f"solved with {wrong}: leave radius= out"
            )
        self.grid, self.star, self.field = grid, star, field
        self._velocity, self._slowness = velocity, slowness
        # Exact weights make an on-node source's box checkable (Grid.located_source).
        self._exact = attrs.get("weights") == "exact"
        # Joined straight within the box too where the edges are mean slowness, not legs
        # (a field without the record: as exact, the default).
        self._exact_edges = attrs.get("weights") != "mean"
        if "source" in field.dims:
            # Sliced from one transposed array, not selected source by source through
            # xarray (its bookkeeping cost 2 ms a source, most of a call for one point).
            self._values = field.transpose("source", *grid.dims).data
            self._sources = _recorded_sources(field, grid.dims)
        else:
            self._values = field.transpose(*grid.dims).data
            self._sources = [recorded_source(field, grid.dims)]
        # Each source's position is checked against its field once per table, before any
        # point is read from it: a single field's scalar one (which xr.concat or a selection
        # may have carried from another field), since a point near the real source is not
        # joined to a wrong one and was read late; and any position where the fields are in
        # memory (0.2 ms a source in 3D at radius 3), so that times changed since the solve
        # (an origin time added) are refused wherever the points lie, not only near the
        # source. A lazily read field's position along "source" (a big survey store's) is
        # checked only where a point uses it: the check would read a chunk no point needs.
        along = _positions_along_source(field, grid.dims)
        checked = not along or field.chunks is None
        self._unchecked = set(range(len(self._sources))) if checked else set()
        self._checked: set[int] = set()  # sources whose position has passed the check
        self._whole_grid: tuple[Grid, NodeValues] | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        # Pickled (to Dask workers locating events in parallel) without its lock.
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        sources = self.field.sizes.get("source")
        shape = " x ".join(str(n) for n in self.grid.shape)
        radius = ", ".join(f"{d}={r}" for d, r in zip(("z", "y", "x"), self.star.radius)
                           if d in self.grid.dims)  # fmt: skip
        held = "one field" if sources is None else f"{sources} sources"
        lazy = ", read lazily from a store" if self.field.chunks is not None else ""
        unit = self.grid.length_unit
        return f"<TraveltimeTable: {held} on a {shape} model ({unit}), radius {radius}{lazy}>"

    def _model_for(self, whole: bool) -> tuple[Grid, NodeValues]:
        """The grid and slowness a call reads with: a lazy model is loaded (once, then
        kept) where the fields are read whole, for the compiled box search."""
        if not whole or self.grid.slowness is not None:
            return self.grid, self._slowness
        if self._whole_grid is None:
            grid = solved_grid(self._velocity.compute())
            self._whole_grid = (grid, grid.slowness_values())
        return self._whole_grid

    def at(self, points: Any, *, outside: Literal["raise", "nan"] = "raise") -> xr.DataArray:
        """Traveltimes at ``points``, as :func:`traveltime_at` returns them.

        Parameters
        ----------
        points : mapping, sequence of mappings, a table, or a CSV file's path
            As for :func:`traveltime_at`.
        outside : {"raise", "nan"}, optional
            As for :func:`traveltime_at`.

        Returns
        -------
        xarray.DataArray
            As for :func:`traveltime_at`.

        Raises
        ------
        InputError
            For a point outside the model, a malformed table, or (a lazy store's model)
            a bad velocity where a leg reads it.

        Warns
        -----
        InputWarning
            For a field that records no source position, with points between nodes.
        """
        if outside not in ("raise", "nan"):
            raise InputError(f'outside must be "raise" or "nan", got {outside!r}')
        with self._lock:
            return self._at(points, outside)

    def _at(self, points: Any, outside: Literal["raise", "nan"]) -> xr.DataArray:
        field, star = self.field, self.star
        source_names = {k for k in field.coords if k == "source" or k.startswith("source_")}
        taken = {"source", "traveltime", *source_names, *(f"point_{d}" for d in self.grid.dims)}
        labelled = labelled_points(points, self.grid.dims, taken)
        if labelled is not None:  # along dims of their own (a Dataset): flat, then reshaped
            points = labelled.columns
        points = as_table(points)  # a pandas Series is one point, as a mapping of numbers
        single = one_point(points)
        # The same tables as traveltimes' sources, checked the same way.
        listed, names = source_list([points] if single else points, self.grid.dims, "points")
        located = locate_points(self.grid, listed, "point", names, given_path(points), outside)
        inside = np.isfinite(located).all(axis=1)  # all but outside="nan"'s outside points
        index = located[inside]
        whole = _read_whole(field, self.grid, star, len(index))
        grid, slowness = self._model_for(whole)

        unrecorded = False  # a field without its source's position: said once, at the end
        checking = threading.Lock()  # the checks and their records, one source at a time

        def read(s: int, values: Any, source: dict[str, float] | None) -> np.ndarray:
            # A lazy field (a survey store's) is read only in the chunks around the points,
            # or whole where the points cover it anyway (_read_whole).
            times = NodeValues(np.asarray(values) if whole else values)
            with checking:
                source3 = _checked_source(s, times, source)
            out = np.full(len(located), np.nan, dtype=field.dtype)
            out[inside] = receiver_times(
                grid, star, times, index, field.dtype, slowness, source3, self._exact_edges
            )
            return out

        def _checked_source(s: int, times: NodeValues, source: dict[str, float] | None):
            source3 = None if source is None else grid.to_index(source, "source")
            if source3 is not None and (
                s in self._unchecked
                or s not in self._checked
                and grid.joined_points(source3, index, star.radius, self._exact_edges).any()
            ):
                # The position is used (a straight leg from it), or not yet known to be this
                # field's: checked against the field first, once a table. Only then, as it
                # may read a chunk no point needs (a survey store).
                source3 = grid.located_source(
                    times, source, star.radius, slowness, exact=self._exact
                )
                self._unchecked.discard(s)
                self._checked.add(s)
            if source is None:
                nonlocal unrecorded
                unrecorded = True
            return source3

        if "source" in field.dims:
            # One source's field at a time: a survey store's fields need not fit in memory.
            # Sources spread over threads where the model is in memory (a lazy one's block
            # cache is not made for concurrent use) and there is enough to share: the
            # compiled search runs without the GIL.
            jobs = list(enumerate(self._sources))
            in_memory = (whole or field.chunks is None) and not slowness.lazy
            # A lazy field read whole is read by each thread: as many held at once.
            held = field.nbytes // max(field.sizes["source"], 1) if field.chunks else 0
            threads = _lookup_threads(len(jobs), len(index), in_memory, held)
            if threads == 1:
                times = np.stack([read(s, self._values[s], src) for s, src in jobs])
            else:
                with ThreadPoolExecutor(threads) as pool:
                    rows = pool.map(lambda job: read(job[0], self._values[job[0]], job[1]), jobs)
                    times = np.stack(list(rows))
            lead = ("source",)
            sources = {k: v for k, v in field.coords.items() if "source" in v.dims}
        else:
            times, lead = read(0, self._values, self._sources[0]), ()
            # One source's field (a traveltime() result, a table's .sel(source=...)): its
            # name and position, as the fields of several sources give them along "source".
            sources = {k: field.coords[k] for k in source_names if not field.coords[k].dims}
        if unrecorded:  # (here, not in a thread: the warning points at the caller's line)
            # Points on nodes are joined to the source too.
            warn_input(
                "the field records no source position (source_z, ... coordinates or "
                "attributes): points near the source are reached through nodes, not "
                "straight from it"
            )
        _warn_unsolved(times[..., inside])
        unit = {"units": grid.length_unit}
        if labelled is None:
            result = xr.DataArray(times, dims=(*lead, "point"))
            for d in grid.dims:
                given = [np.nan if p[d] is None else float(p[d]) for p in listed]  # (None: missing)
                result.coords[f"point_{d}"] = ("point", given, unit)
            if names is not None:
                result.coords["point"] = ("point", np.array(names, dtype=object))
        else:
            result = labelled.unflat(times, lead)
            for d in grid.dims:
                result.coords[f"point_{d}"] = (
                    labelled.dims,
                    labelled.columns[d].reshape(labelled.shape),
                    unit,
                )
        result = result.assign_coords(sources).rename("traveltime")
        result.attrs.update(units="s", long_name="first-arrival traveltime at the points")
        return result.isel(point=0) if single else result


#: Spellings of a field's ``units`` read as seconds.
SECONDS = ("s", "sec", "secs", "second", "seconds")


#: Points times sources below which a lookup runs on one thread (threads cost more than
#: they share out: a single event against a dozen stations takes ~1.6 ms).
THREADED_LOOKUP = 20_000


def _lookup_threads(sources: int, points: int, shareable: bool, field_bytes: int = 0) -> int:
    """Threads for a lookup of ``points`` in ``sources`` fields: as many as a solve of them
    takes (:func:`~.solve.solving_threads`), and no more than :data:`LOAD_BYTES` of
    fields each thread reads whole (``field_bytes`` each) at once; one where ``not
    shareable``, the lookup is small, or it is called from another thread than the main
    one (a Dask worker's task, a caller's own pool: their threads are the parallelism)."""
    if not shareable or sources * points < THREADED_LOOKUP:
        return 1
    if threading.current_thread() is not threading.main_thread():
        return 1
    fit = LOAD_BYTES // field_bytes if field_bytes else sources
    return max(1, min(solving_threads(sources, None), fit))
