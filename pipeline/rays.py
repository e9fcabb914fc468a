"""``raypath`` and ``raypaths``: rays from the source to receivers, following predecessors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
import xarray as xr

from ..kernels import (
    EXACT,
    WEIGHT_RULES,
    mean_slowness_time_cpu,
    node_leg_times,
    segment_time_cpu,
    walk_paths,
)
from .errors import InputError
from .grid import Grid, recorded_radius, recorded_source, solved_grid
from .inspect import point_number
from .nodevalues import NodeValues
from .points import as_table, locate_points, one_point, source_list
from .store import point_names

__all__ = ["raypath", "raypaths"]

_NEEDED = ("traveltime", "predecessor", "star_offset", "velocity")


@dataclass(frozen=True)
class RayField:
    """What tracing rays reads of one source's solve (:func:`ray_field`): times,
    predecessors and slowness at nodes (in memory or read chunk by chunk), and the solve's
    star, weight rule and precision."""

    source: dict[str, float]
    times: NodeValues
    predecessor: NodeValues
    slowness: NodeValues
    offsets: np.ndarray
    radius: tuple[int, int, int]
    rule: int
    dtype: np.dtype


def ray_field(
    result: xr.Dataset,
    grid: Grid,
    slowness: NodeValues | None = None,
    client: Any = None,
    times: NodeValues | None = None,
) -> RayField:
    """The :class:`RayField` of a ``traveltime(..., predecessors=True)`` result on ``grid``.

    Lazy arrays stay lazy: a tiled solve's times and predecessors, held by the workers, are
    read only in the chunks that the rays cross. ``slowness``: the model's
    :meth:`~raygrid.pipeline.grid.Grid.slowness_values`, shared by a caller tracing the rays
    of many sources on one model (its chunks are then read once). ``client`` reads the
    chunks of lazy times and predecessors (default: dask's current scheduler); ``times``:
    the field's reader, when the caller has one already (its blocks are then read once).
    """
    attrs = result.attrs
    grid.check_field(result["traveltime"], {**attrs, **result["traveltime"].attrs})
    recorded = [f"radius_{d}" for d in grid.dims] + ["weights", "precision"]
    missing = [name for name in recorded if name not in attrs]
    source = recorded_source(result, grid.dims)
    if source is None:
        missing += [
            f"source_{d}"
            for d in grid.dims
            if f"source_{d}" not in result.coords and f"source_{d}" not in attrs
        ]
    if missing:
        # The solve's star, weights and source decide every leg: never guessed.
        raise InputError(
            f"the result does not record how it was solved (missing attrs {missing}): rays "
            "need the Dataset traveltime(..., predecessors=True) returned, attributes kept"
        )
    if attrs["weights"] not in WEIGHT_RULES:
        raise InputError(
            f"the result's weights {attrs['weights']!r} are not one of {sorted(WEIGHT_RULES)}"
        )
    return solved_ray_field(
        grid,
        attrs,
        source,
        times
        if times is not None
        else NodeValues(result["traveltime"].transpose(*grid.dims).data, client=client),
        NodeValues(result["predecessor"].transpose(*grid.dims).data, client=client),
        result["star_offset"].values,
        slowness,
    )


def solved_ray_field(
    grid: Grid,
    attrs: Mapping[str, Any],
    source: dict[str, float],
    times: NodeValues,
    predecessor: NodeValues,
    offsets: np.ndarray,
    slowness: NodeValues | None = None,
) -> RayField:
    """The :class:`RayField` of a solve made here: its times and predecessors (in the
    grid's dim order), the star's ``offsets`` and the solver's ``attrs``
    (:func:`~raygrid.pipeline.solve.solver_attrs`), unchecked. A survey's worker traces
    each source's rays from its own arrays: wrapped in a Dataset and checked as a user's
    result is, 4 of a source's 22 ms went to xarray (2D, 48 receivers)."""
    radius = recorded_radius(attrs, grid.dims)
    return RayField(
        source=source,
        times=times,
        predecessor=predecessor,
        slowness=slowness if slowness is not None else grid.slowness_values(),
        offsets=np.asarray(offsets, dtype=np.int64),
        radius=tuple(radius.get(d, 0) for d in ("z", "y", "x")),  # y: 0 in 2D
        rule=WEIGHT_RULES[attrs["weights"]],
        dtype=np.dtype(attrs["precision"]),
    )


#: What a ray walked back through broken predecessors says (a result edited or damaged).
CORRUPTED = (
    "predecessors form a cycle, name no edge of the star or lead outside the model: the "
    "result is corrupted; solve the source again"
)


def _node_paths(field: RayField, ends: np.ndarray) -> list[np.ndarray]:
    """Nodes from the seed where each path starts to its end (inclusive), in order.

    In memory, each path is walked back in compiled code (:func:`~raygrid.kernels.walk_paths`:
    400 rays of ~360 nodes in 1 ms, against 14 ms in step below). A lazy field's (a tiled
    solve's) paths are walked back one predecessor at a time, together: each step moves
    the paths whose current nodes lie in blocks already read, and only once every path
    waits for a block are the missing blocks of all of them read, in one round trip: a
    round trip per block the longest path enters, not one each time any path enters one.
    """
    ends = np.asarray(ends, dtype=np.int64).reshape(-1, 3)
    if not len(ends):
        return []
    if not field.predecessor.lazy:  # in memory: walked in compiled code, path by path
        try:
            nodes, counts = walk_paths(field.predecessor.values, field.offsets, ends)
        except ValueError:
            raise InputError(CORRUPTED) from None
        return np.split(nodes, np.cumsum(counts)[:-1])
    current = ends.copy()
    walking = np.arange(len(ends))
    # Each step's (ray, node) pairs, put in order once at the end: appended node by node
    # in Python, 400 rays of 360 nodes took a fifth of a survey's ray tracing. A ray's
    # nodes are appended in its order, whatever steps it waits through.
    rays, nodes = [walking], [current]
    steps = np.zeros(len(ends), dtype=np.int64)
    most = int(np.prod(field.predecessor.shape3))  # no path has more nodes
    shape3 = np.asarray(field.predecessor.shape3)
    while walking.size:
        moving = field.predecessor.cached(current)
        if not moving.any():  # every path waits: all their blocks in one round trip
            moving[:] = True
        k = np.asarray(field.predecessor.at(current[moving]), dtype=np.int64)
        going = k >= 0
        edges = k[going]
        moved = walking[moving][going]
        if np.any(steps[moved] == most) or np.any(edges >= len(field.offsets)):
            raise InputError(CORRUPTED)
        steps[moved] += 1
        stepped = current[moving][going] - field.offsets[edges]
        if np.any((stepped < 0) | (stepped >= shape3)):  # (a negative index would wrap)
            raise InputError(CORRUPTED)
        rays.append(moved)
        nodes.append(stepped)
        walking = np.concatenate([walking[~moving], moved])
        current = np.concatenate([current[~moving], stepped])
    ray, node = np.concatenate(rays), np.concatenate(nodes)
    step = np.concatenate([np.full(len(r), -s) for s, r in enumerate(rays)])
    order = np.lexsort((step, ray))  # by ray, and within one from its seed to its end
    counts = np.bincount(ray, minlength=len(ends))
    return np.split(node[order], np.cumsum(counts)[:-1])


def _leg(grid: Grid, field: RayField, a: np.ndarray, b: np.ndarray, between_nodes: bool) -> float:
    """Time of one straight leg, by the rule the solver used for it.

    Read on the box of cells the leg crosses, shifted to its corner: the same floats as on
    the whole model (see :class:`~raygrid.pipeline.nodevalues.NodeValues`), without it.
    """
    h = grid.spacing3
    if not between_nodes:  # a first or last leg, or straight from the source: from a point
        return grid.segment_time(*Grid.leg_ends(a, b), field.slowness)
    block, low = grid.leg_block(a, b, field.slowness)
    a, b = a.astype(np.int64) - low, b.astype(np.int64) - low
    if field.rule != EXACT:
        return mean_slowness_time_cpu(block, *a, *b, *h)
    return segment_time_cpu(block, *map(float, a), *map(float, b), *h)


def raypath(
    result: xr.Dataset,
    receiver: Mapping[str, float] | str | int,
    *,
    source: str | int | None = None,
) -> xr.Dataset:
    """The ray from the source to a receiver, as points in model coordinates.

    Parameters
    ----------
    result : xarray.Dataset
        From :func:`raygrid.pipeline.traveltime` (or :func:`~raygrid.pipeline.traveltimes`)
        with ``predecessors=True``, traced here; or a survey store opened with
        :func:`raygrid.pipeline.open_survey` and written with ``outputs.rays: true``, whose
        stored ray is read (a store keeps no predecessors: only its receivers' rays).
    receiver : mapping, str or int
        Receiver position in model coordinates, e.g. ``{"z": 900.0, "x": 200.0}``; it may
        lie between nodes. Of a store: one of its receivers, by name (where the store
        names them), number (from 0) or exact position. A name wins over the same digits
        as a number, as in ``raygrid plot --source``; an integer is a number.
    source : str or int, optional
        Which source, by name or number as ``receiver``, when ``result`` has a ``source``
        dim (a store, a ``traveltimes`` result); leave it out for one already selected
        (``store.sel(source="S1")``, ``result.isel(source=0)``).

    Returns
    -------
    xarray.Dataset
        Along dim ``point``, from the source to the receiver: a data variable per model
        dim holding the points' positions (``ray["x"]``, in the model's length unit, its
        ``units`` attribute) and ``time``, the traveltime accumulated along the ray (s).
        ``attrs["traveltime"]`` is the receiver's traveltime, ``attrs["receiver_x"]``, ...
        its position. A store's ray is the same Dataset, the same floats, as ``raypath``
        of the source's own solve, with ``attrs["receiver"]``, the receiver's name, where
        the store names its receivers.

    Raises
    ------
    InputError
        For a Dataset that is neither, a receiver outside the model or not reached; of a
        store: one without rays (``outputs.rays: false``, or not finished: rays are
        assembled once every source is done), a source or receiver it does not hold, a
        source not done, or a ray whose chunks are lost.

    Notes
    -----
    The path follows predecessors back from the end node to the node where the search was
    seeded; for an off-node source the source point is prepended (the first leg is the
    straight segment the source was seeded with). For an off-node receiver the last leg
    comes from the node ``n`` of the forward-star box around the receiver's cell that
    minimises ``t(n) + segment_time(n, receiver)``, or, for a receiver near the source
    (their nearest nodes at most two radii apart on every axis, on nodes or not), straight
    from the source when that is faster: a ray of two points.

    ``time`` re-adds the legs' weights in the solve's order and precision, so its end
    equals the receiver's time as :func:`~raygrid.pipeline.traveltime_at` and a survey's
    receiver table give it: at an on-node receiver the traveltime field's, unless the
    straight leg from a source near it is faster (docs/method.md sections 3 and 4).
    """
    receiver = as_table(receiver)  # a pandas Series is one point, as for traveltime_at
    if isinstance(result, xr.Dataset) and is_store(result):
        return _stored_ray(result, receiver, source)
    if isinstance(receiver, Mapping) and not one_point(receiver):
        raise InputError(
            "raypath traces one receiver: raypaths(result, receivers) traces a table of them "
            "at once (the model and the source checked once)"
        )
    if not isinstance(receiver, Mapping):
        _check_result(result)  # what is wrong with the result first, as before
        raise InputError(
            f"receiver must be a position, a mapping from dim name to coordinate, got "
            f"{receiver!r}: receivers by name or number are a survey store's (open_survey)"
        )
    return _traced(result, [receiver], source)[0]


def raypaths(
    result: xr.Dataset, receivers: Any, *, source: str | int | None = None
) -> list[xr.Dataset]:
    """:func:`raypath` to many receivers at once: what a tomography's rays need.

    The result, its model and its source are checked once for all the rays, not once a ray
    (a :func:`raypath` call costs milliseconds even for a short ray on a 401^2 model, most
    of it the model's check), and the rays are walked together.

    Parameters
    ----------
    result : xarray.Dataset
        As for :func:`raypath`: a ``predecessors=True`` result, or a survey store written
        with rays.
    receivers : sequence of mappings, or a table
        Receiver positions in model coordinates, as :func:`traveltime_at` takes points: a
        sequence of mappings, a mapping of columns (``{"z": zs, "x": xs}``), a pandas
        DataFrame, a NumPy structured array or a CSV file's path. Of a store, also a
        sequence of its receivers' names or numbers.
    source : str or int, optional
        As for :func:`raypath`.

    Returns
    -------
    list of xarray.Dataset
        One ray per receiver, in their order, each the Dataset :func:`raypath` returns (the
        same floats); where the receivers are named (a ``name`` or ``station`` column or
        key, or a store's receivers named by its workflow, asked for by name, number or
        position), each ray's ``attrs["receiver"]`` is its receiver's name.

    Raises
    ------
    InputError
        As :func:`raypath`, naming the receiver; for a table it cannot read.
    """
    stored = isinstance(result, xr.Dataset) and is_store(result)
    if _by_name_or_number(receivers):
        if not stored:
            _check_result(result)
            raise InputError(
                f"receivers must be positions, mappings from dim name to coordinate, got "
                f"{receivers!r}: receivers by name or number are a survey store's (open_survey)"
            )
        # As given: a list's 1 stays a number (an array of names and numbers reads it "1").
        listed = receivers.tolist() if hasattr(receivers, "tolist") else list(receivers)
        return _stored_rays(result, listed, source)
    if not stored:
        _check_result(result)
    listed, names = source_list(receivers, model_dims(result), "receivers")
    rays = (
        _stored_rays(result, listed, source)
        if stored
        else _traced(result, listed, source, numbered=True)
    )
    for ray, name in zip(rays, names or []):  # a list of rays says whose each is
        ray.attrs["receiver"] = name
    return rays


def model_dims(result: xr.Dataset) -> tuple[str, ...]:
    """The dims of the model a result or store holds (its ``velocity``), in raygrid's
    order; refused for a part of a store without it."""
    if "velocity" not in result.variables:
        raise InputError(
            "this part of the store has no 'velocity' (the model), which says the ray's dims "
            "and length unit: pass the store, or a .sel/.isel of it, not a subset of its "
            "variables"
        )
    return tuple(d for d in ("z", "y", "x") if d in result["velocity"].dims)


def _by_name_or_number(receivers: Any) -> bool:
    """Receivers given as a sequence of names or numbers (a list, a NumPy array or a pandas
    Series of them), not of positions."""
    if isinstance(receivers, str | bytes | Mapping) or not hasattr(receivers, "__len__"):
        return False
    values = np.asarray(getattr(receivers, "values", receivers))
    if values.ndim != 1 or not len(values):
        return False
    return values.dtype.kind in "iuU" or all(
        isinstance(r, str | int | np.integer) and not isinstance(r, bool) for r in values
    )


def _traced(
    result: xr.Dataset,
    receivers: list[Mapping[str, float]],
    source: str | int | None,
    numbered: bool = False,
) -> list[xr.Dataset]:
    """Rays to ``receivers`` from a ``predecessors=True`` result's source (``source``: which,
    of a ``traveltimes`` result), the result and its model checked once; ``numbered``: a
    table's, every receiver outside the model named by its number first."""
    field, grid = checked_field(result, source, "raypaths" if numbered else "raypath")
    if numbered:
        locate_points(grid, receivers, "receiver")
    return trace_rays(field, receivers, grid)


def checked_field(
    result: xr.Dataset, source: str | int | None, called: str, stores: bool = True
) -> tuple[RayField, Grid]:
    """The :class:`RayField` of a ``predecessors=True`` result's source (``source``: which,
    of a ``traveltimes`` result) and its model's grid, the result, the model and the
    source's position checked once; ``called``: the function the errors name, ``stores``:
    whether it takes a survey store too (said in the refusals)."""
    _check_result(result, called, stores)
    if "source" in result["traveltime"].dims:
        if source is None:
            raise InputError(
                f"{called} takes one source: pass source= (its name or number) or "
                "result.isel(source=i)"
            )
        result = result.isel(source=point_number(result, source, "source", "the result"))
    elif source is not None:
        raise InputError("the result holds one source already: leave source= out")
    grid = solved_grid(result["velocity"])  # a lazy model read only along the rays
    field = ray_field(result, grid)
    # The rays start at the recorded source: checked against the times first (a survey's
    # own fields and positions, traced by ray_field directly, are written together).
    grid.located_source(
        field.times, field.source, field.radius, field.slowness, exact=field.rule == EXACT
    )
    return field, grid


def _check_result(result: Any, called: str = "raypath", stores: bool = True) -> None:
    """Refuse what is neither a ``predecessors=True`` result nor (``stores``) a store,
    naming what ``called`` takes."""
    # Where the message sends one who has neither a predecessors result nor (a store).
    needs = f"{called} needs the Dataset returned by traveltime(..., predecessors=True)" + (
        ", or a survey store opened with open_survey(path) and written with outputs.rays: true"
        if stores
        else " or traveltimes(..., predecessors=True)"
    )
    if isinstance(result, xr.DataArray):
        # traveltime(...) without predecessors returns the field alone, as store["traveltime"]
        # is: neither says how to walk back from a receiver.
        store = ", and of a store pass the store itself" if stores else ""
        raise InputError(
            f"{needs}; got a DataArray ({result.name!r}): a traveltime field alone has no "
            f"predecessors to follow (solve with predecessors=True){store}"
        )
    if not isinstance(result, xr.Dataset):
        raise InputError(f"{needs}; got {type(result).__name__}")
    missing = [v for v in _NEEDED if v not in result]
    if "predecessor" in missing and "traveltime" in result:  # solved without them
        raise InputError(
            f"{needs}; this result has no predecessors: solve it again with predecessors=True"
        )
    if missing:
        raise InputError(f"{needs}; this Dataset has no {', '.join(map(repr, missing))}")


def is_store(dataset: xr.Dataset) -> bool:
    """A survey store (or part of one): every store holds its completion records."""
    return "source_done" in dataset.variables or "ray_start" in dataset.variables


def _stored_ray(
    store: xr.Dataset, receiver: Mapping[str, float] | str | int, source: str | int | None
) -> xr.Dataset:
    """A survey store's ray from ``source`` to ``receiver``, as :func:`raypath` gives it
    (:func:`_stored_rays` of one)."""
    return _stored_rays(store, [receiver], source)[0]


def _stored_rays(
    store: xr.Dataset, receivers: list[Mapping[str, float] | str | int], source: str | int | None
) -> list[xr.Dataset]:
    """A survey store's rays from ``source`` to each of ``receivers``, as :func:`raypath`
    gives them.

    Read from the ragged arrays (``ray_start``/``ray_count`` index ``ray_time`` and
    ``ray_<dim>``): the index and the source's records once, then the points of every ray
    asked for in one read, of only the chunks holding them (one read a ray, with the
    source's checks, cost ~50 ms a ray). The store wrote them from :func:`traced_points`'
    arrays, time in the solve's precision and positions in float64, so the floats come
    back as traced.
    """
    if "source" in store.dims:
        if source is None:
            count = store.sizes["source"]
            raise InputError(
                f"the store holds {count} sources{_named(store, 'source')}: pass source= (a "
                "name or number), or store.sel(source=NAME) / store.isel(source=i)"
            )
        store = store.isel(source=point_number(store, source, "source"))
    elif source is not None:
        raise InputError(
            f"this part of the store holds one source already{_named(store, 'source')}: "
            "leave source= out"
        )
    if "ray_start" not in store.variables:
        raise InputError(_no_rays(store, _source_label(store)))
    model_dims(store)  # a subset of the variables (store[["ray_x", ...]]) has none
    grid = solved_grid(store["velocity"])  # the dims' order and length unit, as raypath's
    # A store's parts a user kept (store[["ray_x", ...]]) may lack the completion records.
    records = ["source_done"] if "source_done" in store.variables else []
    starts, counts, *at = _read(
        store, ["ray_start", "ray_count", *(f"receiver_{d}" for d in grid.dims), *records]
    )
    done = at[len(grid.dims) :]  # [] or [the completion record]
    at = at[: len(grid.dims)]
    if done and not int(done[0]):
        # Rays assembled, then the source forgotten (its chunks were lost): a rerun redoes it.
        raise InputError(
            f"{_source_label(store)} is not done in the store (its completion record is 0: "
            "its chunks were lost and it waits to be solved again): rerun the store's workflow"
        )
    positions = dict(zip(grid.dims, at))
    numbers = [_receiver_number(store, receiver, positions) for receiver in receivers]
    spans = [(int(starts[r]), int(counts[r])) for r in numbers]
    wanted = np.concatenate([np.arange(start, start + count) for start, count in spans] or [[]])
    wanted = wanted.astype(np.int64)
    read = _read(
        store.isel(ray_point=wanted), ["ray_time", *(f"ray_{d}" for d in grid.dims)]
    ) if wanted.size else [np.empty(0)] * (1 + len(grid.dims))  # fmt: skip
    ends = np.cumsum([count for _, count in spans])
    named = point_names(store, "receiver")
    rays = []
    for r, (_, count), end in zip(numbers, spans, ends):
        time, *coords = (values[end - count : end] for values in read)
        points = dict(zip(grid.dims, coords))
        receiver = {d: float(positions[d][r]) for d in grid.dims}
        whole = count > 0 and all(np.isfinite(v).all() for v in (time, *coords))
        if not whole or any(points[d][-1] != receiver[d] for d in grid.dims):
            # Chunks lost on disk read as NaN (points) or 0 (counts); raygrid info names them.
            raise InputError(
                f"the ray from {_source_label(store)} to receiver {r} is damaged in the store "
                "(its points read as NaN or none, chunks lost on disk): `raygrid info` names "
                "what is lost; rerun its workflow with --overwrite"
            )
        rays.append(_ray(grid, points, time, receiver))
        if named is not None:  # whether asked for by name, number or position
            rays[-1].attrs["receiver"] = named[r]
    return rays


def _read(store: xr.Dataset, names: list[str]) -> list[np.ndarray]:
    """The values of a store's ``names``, read together on this process's threads.

    A ray is a few points: not worth a round trip each through the scheduler of a Dask
    client the caller holds (a dozen such reads took half a second with one in-process
    client).
    """
    data = [store[name].data for name in names]
    return [np.asarray(v) for v in dask.compute(*data, scheduler="threads")]


def _named(store: xr.Dataset, what: str) -> str:
    """``" (named A ... B)"`` for a store's sources or receivers where it names them."""
    if what not in store.coords:
        return ""
    names = [str(n) for n in np.atleast_1d(store[what].values)]
    return f" (named {names[0]!r}" + (f" ... {names[-1]!r})" if len(names) > 1 else ")")


def _source_label(store: xr.Dataset) -> str:
    """The selected source, for messages: ``source 'S1'``, or its position."""
    if "source" in store.coords:
        return f"source {str(store['source'].values)!r}"
    dims = [d for d in ("z", "y", "x") if f"source_{d}" in store.variables]
    where = ", ".join(f"{d}={float(store[f'source_{d}'].values):g}" for d in dims)
    return f"the source at {where}" if where else "the source"


def _no_rays(store: xr.Dataset, which: str) -> str:
    """Why a store holds no rays: not finished, written without them, or lost."""
    if "receiver" not in store.dims:
        return "the store has no receivers, so no rays: its workflow gave none"
    attrs = store.attrs
    if attrs.get("rays_assembled", False):
        return (
            "the store's rays are lost (its ray arrays are gone): `raygrid info` says what "
            "else is; rerun its workflow with --overwrite"
        )
    if not attrs.get("complete", False):
        done = bool(store["source_done"].values) if "source_done" in store.variables else False
        return (
            f"the store is not finished: its rays are assembled once every source is done "
            f"({which} is {'done' if done else 'not done yet'}); rerun its workflow to "
            "finish it (rg.traveltime_at reads the fields of the sources done so far)"
        )
    return (
        "the store holds no rays: its workflow has outputs.rays: false; rerun it with "
        "outputs.rays: true (and --overwrite), or solve the source with "
        "traveltime(..., predecessors=True) and call raypath on that"
    )


def _receiver_number(
    store: xr.Dataset,
    receiver: Mapping[str, float] | str | int,
    positions: dict[str, np.ndarray],
) -> int:
    """A store's receiver by name, number or exact position (``positions``: the store's
    ``receiver_<dim>`` values)."""
    if not isinstance(receiver, Mapping):
        return point_number(store, receiver, "receiver")
    if set(receiver) != set(positions):
        raise InputError(
            f"receiver must give a coordinate for exactly the dims {tuple(positions)}, got "
            f"{sorted(receiver)}"
        )
    match = np.ones(store.sizes["receiver"], dtype=bool)
    for d, at in positions.items():
        match &= at == receiver[d]
    if not match.any():
        raise InputError(
            f"receiver {dict(receiver)} is none of the store's receivers: a store keeps the "
            "rays to its receivers only (no predecessors to trace others); give one's name, "
            "number or exact position, or solve the source with "
            "traveltime(..., predecessors=True)"
        )
    return int(np.flatnonzero(match)[0])


def trace_rays(
    field: RayField, receivers: list[Mapping[str, float]], grid: Grid
) -> list[xr.Dataset]:
    """:func:`raypath` to each receiver from a :class:`RayField` (:func:`traced_points`,
    each ray made the Dataset :func:`raypath` returns)."""
    traced = traced_points(field, receivers, grid)
    return [_ray(grid, coords, time, r) for (coords, time), r in zip(traced, receivers)]


def traced_points(
    field: RayField,
    receivers: list[Mapping[str, float]],
    grid: Grid,
    receivers3: np.ndarray | None = None,
) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """Each receiver's raypath from a :class:`RayField` as its points' coordinates (by dim)
    and times: a survey traces every receiver of a source on one field, and every source on
    one model, checked (and warned about) once, and stores the arrays (a Dataset a ray cost
    0.4 ms, most of a survey's rays). The rays are walked in step and their legs' model
    blocks read together, so a lazy field or model costs a round trip per step of the
    longest ray, not per block of every ray. ``receivers3``: the receivers' positions in
    node units (:meth:`~raygrid.pipeline.grid.Grid.to_index`), where the caller has them
    (a survey, for every source)."""
    source3, last, legs, walked = ray_legs(field, receivers, grid, receivers3)
    # A lazy model: the blocks of the rays' legs' cells, a cache-full of rays at a time.
    boxes = [
        [Grid.leg_box(a, b) for a, b in zip(points[:-1], points[1:])] if field.slowness.lazy else []
        for points, _ in legs
    ]
    inner = _inner_legs(grid, field, legs)
    _end_legs(grid, field, inner, legs, walked, [leg for _, _, leg in last], source3)
    rays = []
    for group in field.slowness.groups(boxes):
        field.slowness.prefetch(box for k in group for box in boxes[k])
        rays += [_ray_points(grid, field, *legs[k], receivers[k], inner[k]) for k in group]
    return rays


def ray_legs(
    field: RayField,
    receivers: list[Mapping[str, float]],
    grid: Grid,
    receivers3: np.ndarray | None = None,
) -> tuple[np.ndarray, list[tuple], list[tuple[np.ndarray, np.ndarray]], list[bool]]:
    """The legs of each receiver's raypath, in node units: ``(source3, last, legs,
    walked)``, the source's position, each receiver's last leg
    (:meth:`~raygrid.pipeline.grid.Grid.last_legs`), per ray its points (rows, from the
    source) and whether each leg joins two nodes (a star's edge), and whether the ray was
    walked through the predecessors (not straight from an off-node source).
    ``receivers3`` as for :func:`traced_points`."""
    source3 = grid.to_index(field.source, "source")
    if receivers3 is None:
        receivers3 = [grid.to_index(receiver, "receiver") for receiver in receivers]
    else:
        receivers3 = list(np.asarray(receivers3, dtype=np.float64).reshape(-1, 3))
    on_node = [grid.on_node(r) for r in receivers3]
    ends = []  # None: straight from the (off-node) source
    last = grid.last_legs(
        field.times, receivers3, field.radius, field.slowness, source3, field.rule == EXACT
    )
    for receiver, (end, time, _) in zip(receivers, last):
        if not np.isfinite(time):
            raise InputError(f"receiver {dict(receiver)} was not reached from the source")
        ends.append(end)

    walked = iter(_node_paths(field, np.array([end for end in ends if end is not None])))
    legs = []  # per ray: its points (rows) and, per leg, whether both ends are nodes
    first = [] if grid.on_node(source3) else [source3[None]]  # off-node: a leg from it
    for end, receiver3, node in zip(ends, receivers3, on_node):
        if end is None:  # straight from the source: one leg between two off-node points
            same = np.array_equal(source3, receiver3)  # no leg: one point, as on a node
            points = source3[None] if same else np.stack([source3, receiver3])
            legs.append((points, np.zeros(len(points) - 1, dtype=bool)))
            continue
        path = next(walked).astype(np.float64)
        points = np.concatenate([*first, path, *([] if node else [receiver3[None]])])
        between_nodes = np.ones(len(points) - 1, dtype=bool)
        if len(between_nodes):  # (none: a receiver on the source's node)
            between_nodes[0] &= not first  # from the off-node source
            between_nodes[-1] &= node  # to the off-node receiver
        legs.append((points, between_nodes))
    return source3, last, legs, [end is not None for end in ends]


def _inner_legs(grid: Grid, field: RayField, legs: list[tuple]) -> list[np.ndarray | None]:
    """Per ray, the times of its legs between nodes (NaN for the others), all computed in
    one compiled call where the model is in memory (a ray's legs one Python call each cost
    most of a 500-ray call); ``None`` per ray for a lazy model, read leg by leg."""
    if field.slowness.lazy or not legs:
        return [None] * len(legs)
    # All rays' legs in one array (a ray's own fancy indexing cost 12 us of 400 rays each).
    between = np.concatenate([between for _, between in legs])
    starts = np.concatenate([points[:-1] for points, _ in legs])[between]
    ends = np.concatenate([points[1:] for points, _ in legs])[between]
    times = np.full(len(between), np.nan)
    times[between] = node_leg_times(
        field.slowness.values, grid.spacing3, starts, ends, exact=field.rule == EXACT
    )
    return np.split(times, np.cumsum([len(b) for _, b in legs])[:-1])


def _end_legs(
    grid: Grid,
    field: RayField,
    inner: list[np.ndarray | None],
    legs: list[tuple],
    walked: list[bool],
    last: list[float],
    source3: np.ndarray,
) -> None:
    """Fill in, in place, each walked ray's legs from an off-node source and to an
    off-node receiver where ``inner`` holds its times (a model in memory): the last legs as
    :meth:`~raygrid.pipeline.grid.Grid.last_legs` timed them (``last``) when it chose the
    ray's end, the first once per seed node the rays start from. Each leg one Python call
    took a third of a survey's ray tracing (400 off-node receivers a source); these are the
    same floats, timed by the same compiled segment on the whole model."""
    from_source = not grid.on_node(source3)
    rays = [k for k, ray in enumerate(inner) if ray is not None and walked[k] and len(ray)]
    if from_source and rays:  # a walked ray's second point is its seed node
        seeds = np.array([legs[k][0][1] for k in rays], dtype=np.int64)
        nodes, which = np.unique(seeds, axis=0, return_inverse=True)
        first = grid.leg_times(source3, nodes, field.slowness)[which.ravel()]
    for j, k in enumerate(rays):
        ray, between = inner[k], legs[k][1]
        if from_source:
            ray[0] = first[j]
        # To an off-node receiver (a ray of one leg from an off-node source ends on a node).
        if not between[-1] and (len(ray) > 1 or not from_source):
            ray[-1] = last[k]


def _ray_points(
    grid: Grid,
    field: RayField,
    points: np.ndarray,
    between_nodes: np.ndarray,
    receiver: Mapping[str, float],
    inner: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One ray's coordinates (by dim) and times, its legs timed as the solver timed them
    (``inner``: its legs between nodes timed already, NaN for the others,
    :func:`_inner_legs`); ``points`` in rows of node units."""
    dtype = field.dtype
    legs = np.full(len(between_nodes), np.nan) if inner is None else inner.copy()
    for i in np.flatnonzero(np.isnan(legs)):  # a first or last leg, or a lazy model's
        legs[i] = _leg(grid, field, points[i], points[i + 1], bool(between_nodes[i]))
    # Accumulated in the solve's precision, leg by leg, as the solver did (add.accumulate
    # is sequential: the same floats as a loop).
    cumulative = np.zeros(len(points), dtype=dtype)
    cumulative[1:] = np.cumsum(legs.astype(dtype), dtype=dtype)

    coords = grid.to_coords(points)
    for d in grid.dims:  # the end points exactly as given, not round-tripped through indices
        coords[d][0] = field.source[d]
        coords[d][-1] = float(receiver[d])
    return coords, cumulative


def _ray(
    grid: Grid, points: Mapping[str, np.ndarray], time: np.ndarray, receiver: Mapping[str, float]
) -> xr.Dataset:
    """The Dataset :func:`raypath` returns, traced or read from a store: one place, so
    both are the same (the variables' units included)."""
    data = {d: ("point", points[d], {"units": grid.length_unit}) for d in grid.dims}
    data["time"] = ("point", time, {"units": "s", "long_name": "traveltime along the ray"})
    attrs = {"traveltime": float(time[-1]), "units": "s"}
    attrs.update({f"receiver_{d}": float(receiver[d]) for d in grid.dims})
    return xr.Dataset(data, attrs=attrs)
