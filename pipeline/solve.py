"""``traveltime``: the traveltime field of one source on a velocity model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from ..kernels import WEIGHT_RULES, Star, dijkstra, forward_star, point_box, point_leg_times
from .errors import InputError
from .grid import Grid, grid_from_velocity
from .version import __version__

__all__ = ["traveltime", "Options", "check_options", "source_seeds"]

BACKENDS = ("cpu", "cuda", "auto")
PRECISIONS = {"float64": np.float64, "float32": np.float32}

METHOD = "shortest-path ray tracing (Moser 1991): multi-seeded binary-heap Dijkstra"


@dataclass(frozen=True)
class Options:
    """Validated solver options shared by every entry point (API, CLI, workflows)."""

    rule: int
    weights: str
    backend: str
    precision: str

    @property
    def dtype(self) -> type:
        return PRECISIONS[self.precision]


def check_options(weights: str, backend: str, precision: str) -> Options:
    """Validate the option strings; raise :class:`InputError` naming the bad one."""
    if weights not in WEIGHT_RULES:
        raise InputError(f"weights must be one of {sorted(WEIGHT_RULES)}, got {weights!r}")
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if backend == "cuda":
        raise InputError(
            "backend='cuda' is not available in this version of raygrid yet; "
            "use backend='cpu' (or 'auto', which picks the CPU)"
        )
    return Options(
        rule=WEIGHT_RULES[weights],
        weights=weights,
        backend="cpu",  # "auto" resolves to the only backend available
        precision=precision,
    )


def source_seeds(grid: Grid, star: Star, source3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seed nodes and times for a source at fractional node index ``source3``.

    A source on a node seeds that node with time 0. A source between nodes seeds every node
    of the forward-star box around the cell that holds it with the exact straight-segment
    time from the source (:func:`raygrid.kernels.point_leg_times`): the source behaves like
    an extra node joined to its neighbourhood by the same kind of edges as every other node.
    """
    if np.all(source3 == np.round(source3)):
        node = source3.astype(np.int64)
        return grid.flat(node)[np.newaxis], np.zeros(1)
    nodes = point_box(source3, star.radius, grid.slowness.shape)
    times = point_leg_times(grid.slowness, grid.spacing3, source3, nodes)
    return grid.flat(nodes), times


def _attrs(grid: Grid, star: Star, options: Options, source: Mapping[str, Any]) -> dict:
    radius = dict(zip(("z", "y", "x"), star.radius))
    attrs = {
        "long_name": "first-arrival traveltime",
        "units": "s",
        "method": METHOD,
        "weights": options.weights,
        "precision": options.precision,
        "backend": options.backend,
        "star_offsets": star.size,
        "raygrid_version": __version__,
    }
    attrs.update({f"radius_{d}": radius[d] for d in grid.dims})
    attrs.update({f"source_{d}": float(source[d]) for d in grid.dims})
    return attrs


def traveltime(
    velocity: xr.DataArray,
    source: Mapping[str, float],
    *,
    radius: int | Mapping[str, int] = 4,
    weights: str = "exact",
    backend: str = "cpu",
    precision: str = "float64",
    predecessors: bool = False,
) -> xr.DataArray | xr.Dataset:
    """First-arrival traveltimes from one source to every node of a velocity model.

    Parameters
    ----------
    velocity : xarray.DataArray
        Dims ``("z", "x")`` or ``("z", "y", "x")``, uniform increasing coordinates with a
        length ``units`` attribute (``m`` or ``km``, the same on every axis), values finite and
        positive with a speed ``units`` attribute (``m/s`` or ``km/s``). ``z`` is positive down.
    source : mapping
        Source position in model coordinates, e.g. ``{"z": 0.0, "x": 1500.0}``. It may lie
        between nodes (see Notes).
    radius : int or mapping, default 4
        Forward-star radius in nodes, one for all dims or per dim (``{"z": 3, "x": 5}``).
    weights : {"exact", "mean"}
        ``"exact"``: traveltime along the straight segment through each cell it crosses;
        ``"mean"``: mean of the end-node slownesses times the length (Moser 1991).
    backend : {"cpu", "cuda", "auto"}
    precision : {"float64", "float32"}
    predecessors : bool, default False
        Also return each node's predecessor, for :func:`raygrid.pipeline.raypath`.

    Returns
    -------
    xarray.DataArray or xarray.Dataset
        ``traveltime`` (s) on the velocity's grid; with ``predecessors=True`` a Dataset with
        ``traveltime``, ``predecessor`` (index into ``star_offset``, -1 at seeds),
        ``star_offset`` and the ``velocity``. Attributes record the method, radius, weight
        rule, precision, backend, source and package version.

    Raises
    ------
    InputError
        For a bad model, source or option, before anything is computed.

    Notes
    -----
    Every node is a graph node joined to the nodes of its forward star (Moser 1991); edge
    weights are bitwise symmetric, and the result equals any correct shortest-path solver on
    the same graph exactly (DESIGN.md section 1).

    A source between nodes is joined by straight segments, integrated cell by cell like any
    edge, to every node of the forward-star box around the cell that holds it; those nodes
    start with these times and the search goes on from there.
    """
    options = check_options(weights, backend, precision)
    grid = grid_from_velocity(velocity)
    star = forward_star(grid.radius3(radius))
    source3 = grid.to_index(source, "source")

    seed_nodes, seed_times = source_seeds(grid, star, source3)
    times, predecessor = dijkstra(
        grid.slowness,
        grid.spacing3,
        star,
        seed_nodes,
        seed_times,
        rule=options.rule,
        dtype=options.dtype,
    )
    attrs = _attrs(grid, star, options, source)
    field = xr.DataArray(
        times.reshape(grid.shape),
        dims=grid.dims,
        coords={d: velocity.coords[d] for d in grid.dims},
        name="traveltime",
        attrs=attrs,
    )
    if not predecessors:
        return field
    return xr.Dataset(
        {
            "traveltime": field,
            "predecessor": xr.DataArray(
                predecessor.reshape(grid.shape),
                dims=grid.dims,
                attrs={
                    "long_name": "last edge of the shortest path",
                    "description": "index into star_offset: the previous node is this node "
                    "minus star_offset[predecessor]; -1 where the path starts (seeds)",
                },
            ),
            "star_offset": xr.DataArray(
                star.offsets, dims=("offset", "axis"), coords={"axis": ["z", "y", "x"]}
            ),
            "velocity": velocity.transpose(*grid.dims),
        },
        attrs=attrs,
    )
