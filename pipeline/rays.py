"""``raypath``: the ray from the source to a receiver, following predecessors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from ..kernels import (
    EXACT,
    WEIGHT_RULES,
    mean_slowness_time_cpu,
    segment_time_cpu,
)
from .errors import InputError
from .grid import Grid, recorded_source, solved_grid
from .nodevalues import NodeValues

__all__ = ["raypath"]

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
    return RayField(
        source=source,
        times=times
        if times is not None
        else NodeValues(result["traveltime"].transpose(*grid.dims).data, client=client),
        predecessor=NodeValues(result["predecessor"].transpose(*grid.dims).data, client=client),
        slowness=slowness if slowness is not None else grid.slowness_values(),
        offsets=np.asarray(result["star_offset"].values, dtype=np.int64),
        radius=tuple(int(attrs.get(f"radius_{d}", 0)) for d in ("z", "y", "x")),  # y: 2D
        rule=WEIGHT_RULES[attrs["weights"]],
        dtype=np.dtype(attrs["precision"]),
    )


def _node_paths(field: RayField, ends: np.ndarray) -> list[np.ndarray]:
    """Nodes from the seed where each path starts to its end (inclusive), in order.

    Every path is walked back one predecessor at a time, all of them in step: each step
    reads the predecessors of all the paths' current nodes at once, so the blocks of a lazy
    field (a tiled solve's) that many rays enter together come in one round trip, not one
    per ray and block.
    """
    ends = np.asarray(ends, dtype=np.int64).reshape(-1, 3)
    paths = [[end] for end in ends]
    current = ends.copy()
    walking = np.arange(len(ends))
    steps, most = 0, int(np.prod(field.predecessor.shape3))  # no path has more nodes
    while walking.size:
        if steps == most:
            raise InputError("predecessors form a cycle: the result is corrupted")
        steps += 1
        k = np.asarray(field.predecessor.at(current), dtype=np.int64)
        going = k >= 0
        walking, current = walking[going], current[going] - field.offsets[k[going]]
        for i, node in zip(walking, current):
            paths[i].append(node)
    return [np.array(path[::-1]) for path in paths]


def _leg(grid: Grid, field: RayField, a: np.ndarray, b: np.ndarray, between_nodes: bool) -> float:
    """Time of one straight leg, by the rule the solver used for it.

    Read on the box of cells the leg crosses, shifted to its corner: the same floats as on
    the whole model (see :class:`~raygrid.pipeline.nodevalues.NodeValues`), without it.
    """
    h = grid.spacing3
    if not between_nodes:  # a first or last leg, or straight from the source: from a point
        point, end = (b, a) if Grid.on_node(a) else (a, b)  # the order Grid.leg_times uses
        return grid.segment_time(point, end, field.slowness)
    block, low = grid.leg_block(a, b, field.slowness)
    a, b = a.astype(np.int64) - low, b.astype(np.int64) - low
    if field.rule != EXACT:
        return mean_slowness_time_cpu(block, *a, *b, *h)
    return segment_time_cpu(block, *map(float, a), *map(float, b), *h)


def raypath(result: xr.Dataset, receiver: Mapping[str, float]) -> xr.Dataset:
    """The ray from the source to a receiver, as points in model coordinates.

    Parameters
    ----------
    result : xarray.Dataset
        From :func:`raygrid.pipeline.traveltime` with ``predecessors=True``.
    receiver : mapping
        Receiver position in model coordinates, e.g. ``{"z": 900.0, "x": 200.0}``; it may
        lie between nodes.

    Returns
    -------
    xarray.Dataset
        Along dim ``point``, from the source to the receiver: a data variable per model
        dim holding the points' positions (``ray["x"]``, model units) and ``time``, the
        traveltime accumulated along the ray (s).
        ``attrs["traveltime"]`` is the receiver's traveltime.

    Notes
    -----
    The path follows predecessors back from the end node to the node where the search was
    seeded; for an off-node source the source point is prepended (the first leg is the
    straight segment the source was seeded with). For an off-node receiver the last leg
    comes from the node ``n`` of the forward-star box around the receiver's cell that
    minimises ``t(n) + segment_time(n, receiver)``, or, for a receiver near an off-node
    source (their nearest nodes at most two radii apart on every axis), straight from the
    source when that is faster: a ray of two points.

    ``time`` re-adds the legs' weights in the solve's order and precision, so at an on-node
    receiver it equals the traveltime field (docs/method.md section 4, "raypath time =
    traveltime").
    """
    if not isinstance(result, xr.Dataset) or any(v not in result for v in _NEEDED):
        raise InputError("raypath needs the Dataset returned by traveltime(..., predecessors=True)")
    if "source" in result["traveltime"].dims:
        raise InputError("raypath takes one source: pass result.isel(source=i)")
    grid = solved_grid(result["velocity"])  # a lazy model read only along the ray
    field = ray_field(result, grid)
    # The ray starts at the recorded source: checked against the times first (a survey's
    # own fields and positions, traced by ray_field directly, are written together).
    grid.located_source(field.times, field.source, field.radius, field.slowness)
    return trace_rays(field, [receiver], grid)[0]


def trace_rays(
    field: RayField, receivers: list[Mapping[str, float]], grid: Grid
) -> list[xr.Dataset]:
    """:func:`raypath` to each receiver from a :class:`RayField`: a survey traces every
    receiver of a source on one field, and every source on one model, checked (and warned
    about) once. The rays are walked in step and their legs' model blocks read together, so
    a lazy field or model costs a round trip per step of the longest ray, not per block of
    every ray."""
    source3 = grid.to_index(field.source, "source")
    receivers3 = [grid.to_index(receiver, "receiver") for receiver in receivers]
    on_node = [grid.on_node(r) for r in receivers3]
    ends = []  # None: straight from the (off-node) source
    last = grid.last_legs(field.times, receivers3, field.radius, field.slowness, source3)
    for receiver, (end, time, _) in zip(receivers, last):
        if not np.isfinite(time):
            raise InputError(f"receiver {dict(receiver)} was not reached from the source")
        ends.append(end)

    walked = iter(_node_paths(field, np.array([end for end in ends if end is not None])))
    legs = []  # per ray: its points and, per leg, whether both ends are nodes
    for end, receiver3, node in zip(ends, receivers3, on_node):
        if end is None:  # straight from the source: one leg between two off-node points
            legs.append(([source3, receiver3], [False]))
            continue
        points = [p.astype(np.float64) for p in next(walked)]
        between_nodes = [True] * (len(points) - 1)
        if not grid.on_node(source3):
            points.insert(0, source3)
            between_nodes.insert(0, False)
        if not node:
            points.append(receiver3)
            between_nodes.append(False)
        legs.append((points, between_nodes))
    # A lazy model: the blocks of the rays' legs' cells, a cache-full of rays at a time.
    boxes = [
        [Grid.leg_box(a, b) for a, b in zip(points[:-1], points[1:])] if field.slowness.lazy else []
        for points, _ in legs
    ]
    rays = []
    for group in field.slowness.groups(boxes):
        field.slowness.prefetch(box for k in group for box in boxes[k])
        rays += [_ray_dataset(grid, field, *legs[k], receivers[k]) for k in group]
    return rays


def _ray_dataset(
    grid: Grid,
    field: RayField,
    points: list[np.ndarray],
    between_nodes: list[bool],
    receiver: Mapping[str, float],
) -> xr.Dataset:
    """One ray as :func:`raypath` returns it, its legs timed as the solver timed them."""
    dtype = field.dtype
    # Accumulate in the solve's precision, leg by leg, as the solver did.
    cumulative = np.zeros(len(points), dtype=dtype)
    for i, nodes_only in enumerate(between_nodes):
        leg = dtype.type(_leg(grid, field, points[i], points[i + 1], nodes_only))
        cumulative[i + 1] = cumulative[i] + leg

    coords = grid.to_coords(np.array(points))
    for d in grid.dims:  # the end points exactly as given, not round-tripped through indices
        coords[d][0] = field.source[d]
        coords[d][-1] = float(receiver[d])
    data = {d: ("point", coords[d], {"units": grid.length_unit}) for d in grid.dims}
    data["time"] = ("point", cumulative, {"units": "s", "long_name": "traveltime along the ray"})
    attrs = {"traveltime": float(cumulative[-1]), "units": "s"}
    attrs.update({f"receiver_{d}": float(receiver[d]) for d in grid.dims})
    return xr.Dataset(data, attrs=attrs)
