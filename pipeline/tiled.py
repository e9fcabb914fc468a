"""``traveltime(..., tiles=...)``: one source solved by domain decomposition on Dask."""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr

from ..kernels import Star, forward_star
from .cluster import connect
from .clusterfile import LocalConfig
from .decompose import solve_tiled
from .errors import InputError, setting, warn_input
from .fanout import release_held
from .grid import Grid, grid_from_velocity, in_memory
from .options import Options
from .solve import (
    check_launchable,
    held_model,
    model_coords,
    solver_attrs,
    source_coords,
    source_seeds,
    warn_star,
    with_predecessors,
)
from .tiles import TileGrid, tile_grid

__all__ = ["traveltime_tiled", "tiled_geometry", "chunked_lazily", "cluster_client", "LAZY_BLOCK"]


@contextlib.contextmanager
def cluster_client(client: Any = None) -> Iterator[tuple[Any, bool]]:
    """``(client, owned)``: the given client, the current one, or one on a LocalCluster
    started (and closed) here like every cluster raygrid starts (:func:`connect`: its
    scheduler settings, Ctrl-C handling and clear errors), its dashboard link on stderr."""
    from distributed import get_client

    if client is None:
        try:
            client = get_client()
        except ValueError:  # no current client
            client = None
    if client is not None:
        yield client, False
        return
    if _importing_the_script_again():
        # A worker process of the cluster the script's first run is starting: ends here,
        # in one line (a traceback each, or a cluster of its own each, drowned the reason).
        raise SystemExit(f"raygrid: {UNGUARDED}")
    config = LocalConfig(cluster="local", dashboard_address=":0")
    echo = partial(print, "raygrid started a Dask cluster;", file=sys.stderr, flush=True)
    with contextlib.ExitStack() as stack:
        try:
            own = stack.enter_context(connect(config, echo=echo))
        except InputError as error:
            if not _unguarded_script():
                raise
            # Said as the cause it is, not as a host or port "in the cluster file".
            raise InputError(UNGUARDED) from error
        yield own, True


#: Why a tiled solve's own cluster cannot start from a script's top level.
UNGUARDED = (
    "a script that calls raygrid with tiles= at its top level, without client=, must do so "
    'under `if __name__ == "__main__":`: the local Dask cluster raygrid starts for it runs '
    "worker processes that import the script first, and so ran the call again in each (or "
    "pass client= a cluster of your own)"
)


def _unguarded_script() -> bool:
    """Whether Python runs a script whose text never tests ``__name__ == "__main__"``."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    try:
        return script is not None and "__main__" not in Path(script).read_text()
    except (OSError, UnicodeDecodeError):
        return False


def _importing_the_script_again() -> bool:
    """Whether this process is one multiprocessing spawned, still importing the parent's
    script (as ``__mp_main__``) before it starts: a Dask worker of the parent's cluster.
    The test multiprocessing itself makes before it refuses to start a process then."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


#: Nodes per dim of the blocks a lazily indexed model (NetCDF, ``.npy``) is read in by a
#: tiled solve, by number of dims: about a million nodes (8 MiB of float64) a block, the
#: same whatever the tiles, so that its fingerprint (hashed block by block) does not change
#: with them (a workflow that changed its tiles was refused for "the model's values").
LAZY_BLOCK = {2: 1024, 3: 128}


def chunked_lazily(velocity: xr.DataArray) -> xr.DataArray:
    """A lazily opened model that is not dask-backed, as a dask array of fixed blocks.

    ``xr.open_dataset`` of a NetCDF file, ``xr.open_zarr(..., chunks=None)`` or a ``.npy``
    file give a lazily indexed array that ``.data`` or ``.values`` would read whole, on the
    client. Chunked (nothing is read yet), validation runs as dask reductions and each
    worker reads only its tile with the halo: the slices of a tile fuse into reads of just
    those nodes of the blocks it overlaps. Models in memory or already dask-backed are
    returned as they are.

    Parameters
    ----------
    velocity : xarray.DataArray
        The velocity model as opened, dims ``("z", "x")`` or ``("z", "y", "x")``.

    Returns
    -------
    xarray.DataArray
        ``velocity`` in blocks of :data:`LAZY_BLOCK` nodes per dim, with nothing read; or
        ``velocity`` itself when it is in memory, dask-backed already, not a DataArray, or
        of another number of dims (:func:`~raygrid.pipeline.grid.grid_from_velocity`
        reports those).
    """
    if not isinstance(velocity, xr.DataArray) or velocity.chunks is not None:
        return velocity
    if in_memory(velocity) or velocity.ndim not in LAZY_BLOCK:
        return velocity
    side = LAZY_BLOCK[velocity.ndim]
    return velocity.chunk({d: min(side, n) for d, n in velocity.sizes.items()})


def tiled_geometry(tiles: Mapping[str, int], grid: Grid, star: Star, options: Options) -> TileGrid:
    """The tiles of a tiled solve, or an :class:`InputError` for tiles or options it cannot
    take (a tile smaller than the halo, Near-Far, a radius the CUDA pull solver cannot
    launch); a workflow is checked with this before anything runs.

    Parameters
    ----------
    tiles : mapping of str to int
        Tile size in nodes per dim, e.g. ``{"z": 256, "x": 256}``; dims left out are not
        cut.
    grid : Grid
        The model's grid; a lazy one (``load=False``) will do: only its dims and shape are
        read.
    star : Star
        The forward star; its radius ``(rz, ry, rx)`` is the halo width.
    options : Options
        The solver options; the algorithm, backend and precision decide what can run.

    Returns
    -------
    TileGrid
        The tiles over the kernel grid ``(nz, ny, nx)``, each with a halo of the star's
        radius.

    Raises
    ------
    InputError
        For ``algorithm="near-far"``; a radius whose smallest CUDA pull tiles, one source at
        a time in ``options``' precision, exceed a block's shared memory
        (:func:`~raygrid.pipeline.solve.check_launchable`); or tiles that
        :func:`~raygrid.pipeline.tiles.tile_grid` refuses (unknown dims, sizes that are not
        positive integers, a tile smaller than the halo).
    """
    if options.algorithm == "near-far":
        near_far = setting("algorithm='near-far'", "compute.algorithm: near-far")
        raise InputError(
            f"tiled solves use the pull tile solver on CUDA; {near_far} runs single-domain only"
        )
    check_launchable(grid, star, options, batch=1)  # tiles are solved one source at a time
    return tile_grid(tiles, grid.dims, grid.shape3, star.radius)


def traveltime_tiled(
    velocity: xr.DataArray,
    source: Mapping[str, float],
    *,
    tiles: Mapping[str, int],
    client: Any,
    radius: int | Mapping[str, int],
    options: Options,
    predecessors: bool,
    grid: Grid | None = None,
    kept: dict | None = None,
) -> xr.DataArray | xr.Dataset:
    """See :func:`raygrid.pipeline.traveltime`; the model is never gathered to the client.

    ``grid``: the lazy grid of ``velocity`` (``grid_from_velocity(velocity, load=False)``),
    when the caller has checked it already: a survey's sources would otherwise each scan the
    whole model again for bad values, and each repeat the workflow's warning of a lopsided
    forward star. ``kept``: the tiles' slowness kept on the workers across a survey's
    sources (:func:`~raygrid.pipeline.decompose.solve_tiled`).
    """
    checked = grid is not None
    if not checked:
        velocity = chunked_lazily(velocity)
        grid = grid_from_velocity(velocity, load=False)
    star = forward_star(grid.radius3(radius))
    if not checked:
        warn_star(grid, star)
    geometry = tiled_geometry(tiles, grid, star, options)
    small = None if checked else geometry.small_tiles(grid.dims)
    if small is not None:
        warn_input(small)
    seed_nodes, seed_times = source_seeds(grid, star, grid.to_index(source, "source"))
    data = grid.velocity.data

    def slowness_tiles(index):
        values = data[grid.model_box(geometry.extended(index))]
        if not isinstance(values, da.Array):
            values = da.from_array(np.ascontiguousarray(values), chunks=-1)
        return grid.slowness_of(values)

    stats: dict = {}
    with cluster_client(client) as (active, owned):
        try:
            times, predecessor = solve_tiled(
                active, geometry, slowness_tiles, star, grid.spacing3, options.rule,
                options.dtype, seed_nodes, seed_times.astype(options.dtype), stats=stats,
                backend=options.backend, kept=kept,
            )  # fmt: skip
        finally:
            release_held(active)  # (released as its tasks were submitted, unless it failed)
        times, predecessor = times.reshape(grid.shape), predecessor.reshape(grid.shape)
        if owned and predecessors:  # the cluster closes with this block: results home
            times, predecessor = active.compute([times, predecessor], sync=True)
        elif owned:  # not the predecessors, as large again, for nothing
            times = active.compute(times, sync=True)

    attrs = solver_attrs(grid, star, options)
    if grid.velocity.chunks is None:
        # A model in memory is checked on its lattice for nothing, as an untiled solve's
        # (traveltime_at refused a Vs model given for this field only when solved untiled).
        # A lazy one is not: its lattice touches every block of a big cube, a second read
        # of the whole model on the client.
        attrs["model_check"] = grid.model_check()
    attrs.update(
        {f"tiles_{d}": t for d, t in zip(("z", "y", "x"), geometry.tile) if d in grid.dims}
    )
    attrs.update(rounds=stats["rounds"], strip_bytes=stats["bytes"])
    field = xr.DataArray(
        times,
        dims=grid.dims,
        coords={**model_coords(velocity, grid), **source_coords(grid, source)},
        name="traveltime",
        attrs=attrs,
    )
    if not predecessors:
        return field
    # The caller's model, copied if in memory (a survey's is its store's copy, lazy).
    model = velocity if checked else held_model(velocity)
    return with_predecessors(field, predecessor, star, model, grid)
