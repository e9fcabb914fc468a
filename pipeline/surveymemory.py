"""What a survey's workers and this machine must hold, checked before anything is queued,
started or written: a store's fields and tables, the model (and its CPU graph) on every
worker, a tiled survey's share of tiles, a batch job's memory request
(:mod:`raygrid.pipeline.memory` counts the bytes; this module compares them with the
workers a cluster file gives or a cluster has).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
from dask.utils import format_bytes

from .cluster import worker_info
from .clusterfile import (
    JobQueueConfig,
    LocalConfig,
    job_worker,
    local_workers,
)
from .errors import (
    InputError,
    for_workflows,
)
from .memory import (
    WORKER_BYTES,
    available_memory,
    check_fits,
    float32_hint,
    footprint,
    one_of,
    precompute_hint,
    tile_footprint,
    tiles_hint,
    worker_fractions,
)
from .store import (
    StoreSpec,
)
from .tiles import tile_grid
from .workflow import (
    PreparedWorkflow,
    Workflow,
    check_model_fits,
    prepare_workflow,
)

__all__ = [
    "check_survey_memory", "check_job_memory", "check_workers_memory", "check_local_workers",
    "FEWER_THREADS",
]  # fmt: skip


def _footprint(prepared: PreparedWorkflow, spec: StoreSpec) -> Any:
    """The memory a survey's solves need (:func:`~raygrid.pipeline.memory.footprint`): its
    model's graph, and per solve, predecessors included where its store keeps rays."""
    options = prepared.options
    return footprint(
        prepared.grid.shape3, prepared.star, options.dtype, backend=options.backend,
        precompute=options.precompute, predecessors=spec.keeps_rays,
    )  # fmt: skip


@for_workflows
def check_survey_memory(
    client: Any,
    prepared: PreparedWorkflow,
    spec: StoreSpec,
    *,
    local: bool = False,
    workers: dict[str, dict] | None = None,
) -> None:
    """Refuse a survey whose tasks cannot fit on the cluster's workers, or whose CPU graph
    cannot be built on this machine, before anything large is allocated.

    A worker holds the model and its graph (sent once) and runs as many tasks at once as it
    has threads, each solving ``compute.batch`` sources (``compute.threads`` at a time) and
    keeping their fields until they are written; past its memory limit's ``terminate``
    fraction its nanny kills it (which used to surface as a closed stream), and with the
    model alone past ``pause`` Dask never gives it another task (the survey stalled;
    :func:`~.memory.worker_fractions`).
    Workers that have not joined yet (a batch system's) are not checked. A tiled survey's
    workers are checked for their share of the tiles (:func:`_check_tile_shares`); no graph
    is built here then.

    Parameters
    ----------
    client : distributed.Client
        The survey's cluster; the workers that have joined it are checked.
    prepared : PreparedWorkflow
        The checked workflow: its model, forward star, solver options and ``compute``
        settings (``tiles``, ``batch``, ``threads``).
    spec : StoreSpec
        The survey's store: its number of sources, and whether rays (so predecessors) are
        kept.
    workers : dict, optional
        The workers to check, as :func:`~.cluster.worker_info` gives them (default: the
        client's): the ones a local cluster will start (:func:`_check_local_workers`).
    local : bool
        The workers are processes on this machine (a local cluster raygrid started): then
        this machine must also hold them all at once, beside the client's model and CPU
        graph. Each worker's own limit does not say so: ``memory_limit: auto`` shares the
        machine's memory out between the workers, leaving nothing for the client's copy.

    Returns
    -------
    None
        When the CPU graph (CPU backend only) fits here and every joined worker with a
        memory limit can hold the model and its tasks (and, ``local``, this machine can
        hold them all).

    Raises
    ------
    InputError
        If the CPU graph needs more memory than this machine has available, or a worker's
        model and concurrent tasks need more than its ``memory_limit`` times Dask's
        ``terminate`` fraction, or its model alone more than ``pause``'s, less what it holds
        already (at least
        :data:`WORKER_BYTES`); the message names the worker and what to change.
    """
    compute = prepared.workflow.compute
    grid, options = prepared.grid, prepared.options
    tiled = compute.tiles is not None
    cost = _footprint(prepared, spec)
    shape = " x ".join(map(str, grid.shape))
    if options.backend == "cpu" and not tiled:  # the graph is built here, sent to workers
        # Only what would lower the need: "compute.precompute: false" was said where it
        # was false.
        precompute = [precompute_hint()] if options.precompute else []
        lower = ["a smaller model", *precompute]
        check_fits(
            cost.model, available_memory(),
            f"the CPU graph of {shape} nodes (beside the model, loaded already)",
            f"use {', '.join(lower)} or {tiles_hint()}",
        )  # fmt: skip
    workers = worker_info(client) if workers is None else workers
    needs = check_workers_memory(prepared, spec, workers.items())
    if local and needs and tiled:
        check_fits(
            sum(needs), available_memory(),
            f"this machine (each of the {len(needs)} local workers' share of the tiles, "
            f"{format_bytes(max(needs))})",
            "use "
            + one_of(
                ["workers on several machines (a batch or scheduler cluster file: the "
                 "tiles are shared out between them)"]
                + ([float32_hint()] if options.precision == "float64" else [])
            ),
        )  # fmt: skip
    elif local and needs:
        hints = ["fewer workers (n_workers in the cluster file)"]
        if compute.batch > 1 and spec.n_sources > 1:
            hints.append("a smaller compute.batch")
        if options.precision == "float64":
            hints.append(float32_hint())
        graph = cost.model if options.backend == "cpu" else 0
        check_fits(
            graph + sum(needs), available_memory(),
            f"this machine (the CPU graph here, {format_bytes(graph)}, and each of the "
            f"{len(needs)} local workers' copy of the model with its tasks, "
            f"{format_bytes(max(needs))})",
            f"use {one_of([*hints, tiles_hint()])}",
        )  # fmt: skip


@for_workflows
def check_job_memory(prepared: PreparedWorkflow, spec: StoreSpec, config: JobQueueConfig) -> None:
    """Refuse a survey that cannot fit in a batch system's workers as its cluster
    file gives them (:func:`~.clusterfile.job_worker`), before any job is queued: its workers
    would be stopped by Dask's nanny once the jobs started (`raygrid submit`, `raygrid run
    --cluster`, `raygrid validate`). See :func:`check_workers_memory`."""
    check_workers_memory(
        prepared, spec, [(f"each of the {config.workers} batch worker(s)", job_worker(config))],
        more=f"more memory_per_worker than {config.memory_per_worker} in the cluster file",
        count=config.workers,
    )  # fmt: skip


def check_local_workers(workflow: Workflow, config: LocalConfig) -> None:
    """:func:`check_survey_memory` for the workers a local cluster of ``config`` will
    start, from the model's shape: a 561^3 model was built (15 s, 3 GB) and the cluster
    started before its workers were found too small for it. Their memory limits are
    distributed's own reading of ``memory_limit`` (``auto``: this machine's memory shared
    by threads); checked again once they have joined."""
    from distributed.worker_memory import parse_memory_limit

    with warnings.catch_warnings():  # said by the full preparation that follows
        warnings.simplefilter("ignore")
        shaped = prepare_workflow(workflow, values=False)
    try:  # a model this process cannot hold: the preparation says so, at the model's line
        sizes = dict(zip(shaped.grid.dims, shaped.grid.shape))
        check_model_fits(workflow, sizes, shaped.options.backend == "cpu")
    except InputError:
        return
    threads = config.threads_per_worker
    count = local_workers(config)
    limit = (
        parse_memory_limit(config.memory_limit, threads, logger=logging.getLogger(__name__))
        if config.memory_limit is not None
        else None
    )
    workers = {
        f"local worker {i}": {"memory_limit": limit, "nthreads": threads} for i in range(count)
    }
    from .survey import store_spec  # (survey imports this module)

    check_survey_memory(None, shaped, store_spec(shaped), local=True, workers=workers)


def _check_tile_shares(
    prepared: PreparedWorkflow, workers: list[tuple[str, dict]], more: str, count: int | None
) -> list[int]:
    """Refuse a tiled survey whose tiles cannot fit in its workers, or return what each
    worker will need: its share of the tiles (they are dealt out in runs of
    ``ceil(tiles / workers)``, :func:`~.decompose._owners`), each tile's state kept between
    rounds, and as many tile solves at once as it has threads
    (:func:`~.memory.tile_footprint`). Nothing was checked before: a tiled solve is for a
    model that does not fit one machine, and one that did not fit its workers either was
    stopped by their nannies."""
    grid, options, star = prepared.grid, prepared.options, prepared.star
    geometry = tile_grid(prepared.workflow.compute.tiles, grid.dims, grid.shape3, star.radius)
    extended = tuple(min(t + 2 * r, n) for t, r, n in zip(geometry.tile, star.radius, grid.shape3))
    cost = tile_footprint(extended, star, options.dtype, backend=options.backend)
    share = -(-len(geometry) // max(count or len(workers), 1))
    pause, terminate = worker_fractions()
    per_node = 8 + np.dtype(options.dtype).itemsize + star.predecessor_dtype.itemsize
    hints = [more, f"more workers (the tiles, about {per_node} bytes a node of the model "
             "with their halos, are shared out between them)"]  # fmt: skip
    if options.precision == "float64":
        hints.append(float32_hint())
    tile = " x ".join(map(str, (e for e, d in zip(extended, "zyx") if d in grid.dims)))
    needs = []
    for address, worker in workers:
        at_once = min(max(int(worker.get("nthreads", 1)), 1), share)
        need = share * cost.per_result + at_once * cost.per_solve
        needs.append(need)
        limit = worker.get("memory_limit") or 0
        if not limit:
            continue
        held = max(int(worker.get("metrics", {}).get("memory") or 0), WORKER_BYTES)
        shared = f"{share} of the {len(geometry)} tiles of up to {tile} nodes with their halos"
        # At its peak (its tiles' states, its solves under way) under terminate; at rest
        # (the states kept between rounds) under pause, or it never runs a solve again.
        for need_here, fraction, what, does in [
            (need, terminate, f"{shared}, {format_bytes(cost.per_result)} each, and "
             f"{at_once} tile solve(s) at once, {format_bytes(cost.per_solve)} each", "stops"),
            (share * cost.per_result, pause, f"{shared}, kept between rounds", "pauses"),
        ]:  # fmt: skip
            check_fits(
                need_here,
                int(limit * fraction) - held,
                f"each worker's share of the tiles ({what})",
                f"{address} has a memory_limit of {format_bytes(limit)} and Dask {does} it at "
                f"{fraction:.0%} of that, less {format_bytes(held)} held; " + one_of(hints),
            )
    return needs


#: What a worker running several tasks at once can lower (its threads, in the cluster file).
FEWER_THREADS = "fewer threads per worker (threads_per_worker in the cluster file)"


@for_workflows
def check_workers_memory(
    prepared: PreparedWorkflow,
    spec: StoreSpec,
    workers: Iterable[tuple[str, dict]],
    more: str = "give workers more memory (memory_limit in the cluster file)",
    count: int | None = None,
) -> list[int]:
    """Refuse a survey whose model and concurrent tasks (or, tiled, whose share of the
    tiles) cannot fit in a worker, or return what each worker will need for them:
    ``workers`` pairs a name with the scheduler's record of a worker (``memory_limit``,
    ``nthreads``, ``metrics``; :func:`~raygrid.pipeline.cluster.worker_info`), or with
    what a batch job's workers will have (``raygrid submit``, before the queue wait);
    ``more`` is how to give them more memory; ``count``: how many workers there will be
    (a batch job's, given as one), by default as many as given. The model's values need
    not be loaded (its bytes are counted from its shape). A tiled survey's workers each
    hold their share of the tiles (:func:`_check_tile_shares`). See
    :func:`check_survey_memory`."""
    compute = prepared.workflow.compute
    if compute.tiles is not None:
        return _check_tile_shares(prepared, list(workers), more, count)
    grid, options = prepared.grid, prepared.options
    cost = _footprint(prepared, spec)
    shape = " x ".join(map(str, grid.shape))
    needs = []
    # The velocity as given, and the float64 slowness (Grid.slowness_at).
    nodes = int(np.prod(grid.shape))
    model = nodes * (grid.velocity.dtype.itemsize + 8) + cost.model
    sources = min(compute.batch, spec.n_sources)  # in one task
    task = cost.total(sources, compute.threads) - cost.model  # (no working arrays on a GPU)
    pause, terminate = worker_fractions()
    # Named as what it is: with precomputed weights those are most of it (749 of 841 MiB
    # at 1001 x 2001 radius 6), and "the model" alone sent users to shrink the wrong thing.
    held_once = "the model" + (" and its CPU graph" if options.backend == "cpu" else "")
    if options.precompute:
        held_once += " with precomputed weights"
    # Only what would lower the need here: a smaller batch did not, without precompute.
    hints = [more]
    if options.precompute:
        hints.append(precompute_hint())
    if sources > 1:
        hints.append("a smaller compute.batch")
    if options.precision == "float64":
        hints.append(float32_hint())
    tiles = [] if options.algorithm == "near-far" else [tiles_hint()]  # (Near-Far: untiled)
    for address, worker in workers:
        tasks = min(max(int(worker.get("nthreads", 1)), 1), -(-spec.n_sources // sources))
        needs.append(model + tasks * task)
        limit = worker.get("memory_limit") or 0
        if not limit:
            continue
        # What the worker process holds already (the interpreter, Dask, data it keeps), or
        # will once its first task has loaded raygrid's code, whichever is more.
        held = int(worker.get("metrics", {}).get("memory") or 0)
        code, least = "raygrid, Numba and the solver's code", format_bytes(WORKER_BYTES)
        holds = (
            f"worker {address} holds {format_bytes(held)} already (a worker that has run a "
            f"task holds at least {least}: {code})"
            if "metrics" in worker
            else f"{address} will hold {least} before any data ({code})"  # a batch job's
        )
        # At its peak (the model, its tasks under way) under terminate; at rest (the model,
        # kept for every task) under pause, or it never runs a task again.
        for need_here, fraction, what, does, lower in [
            (model + tasks * task, terminate, f"{held_once} {format_bytes(model)}, then "
             f"{tasks} task(s) at once, each of {sources} source(s) on {shape} nodes", "stops",
             hints + ([FEWER_THREADS] if tasks > 1 else []) + tiles),
            (model, pause, f"{held_once} {format_bytes(model)}, kept between its tasks",
             "pauses", [more, *hints[1:], *tiles]),
        ]:  # fmt: skip
            check_fits(
                need_here,
                int(limit * fraction) - max(held, WORKER_BYTES),
                f"each worker ({what})",
                f"{holds}, has a memory_limit of {format_bytes(limit)} and Dask {does} it at "
                f"{fraction:.0%} of that; " + one_of(lower),
            )
    return needs
