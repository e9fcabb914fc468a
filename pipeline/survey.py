"""Surveys: many sources fanned out over a Dask cluster into one resumable Zarr store.

The client prepares everything (model, options, every source and receiver checked), checks
an existing store without touching it, starts the cluster if anything is left to solve (so a
cluster that cannot be had leaves no store behind), creates or reopens the store
(:mod:`raygrid.pipeline.store`), sends the model (and precomputed edge weights) to every
worker once with ``Client.scatter(..., broadcast=True)``, and submits the unfinished sources
in batches. Each task solves its batch with the backend's solver (the
same :func:`raygrid.pipeline.solve.solve_seeds` dispatch as :func:`traveltimes`: the Dask
layer ships the kernels, it never re-implements them), writes each source's chunks and then
its completion record, and returns a small summary. A worker that dies mid-task loses only
that task, which the scheduler runs again elsewhere: its writes are idempotent. When every
worker holding the model has died (a nanny's restart, batch jobs reaching their time
limit), the model is sent again to the workers there are and the sources left go on
(:data:`RESENDS` times in a row at most).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import CancelledError
from contextlib import ExitStack, closing
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..kernels import MoserGraph, Star
from .cluster import connect, workers_gone, workers_lost
from .clusterfile import (
    JobQueueConfig,
    LocalConfig,
    SchedulerConfig,
    cluster_notes,
    workers_back_s,
)
from .errors import (
    InputError,
    InputWarning,
    RunFailed,
    for_workflows,
    full_disk,
    run_again,
    warn_input,
)
from .fanout import (
    check_workers_gpu,
    check_workers_raygrid,
    finished_in_turn,
    joined_threads,
    release_held,
    submit_shares,
)
from .fingerprint import model_digest
from .grid import Grid, grid_from_velocity, in_memory
from .integrity import listed_sources
from .interrupts import check_interrupts, log_filtered
from .lock import store_lock
from .lookup import receiver_times
from .nodevalues import NodeValues
from .options import Options
from .progress import Progress
from .rays import RayField, ray_field, solved_ray_field, traced_points
from .solve import compile_cpu_solver, cpu_graph, solve_seeds, solver_attrs, source_seeds
from .store import (
    StoreSpec,
    check_store,
    create_store,
    field_chunks,
    point_names,
    prepare_store,
    version_attrs,
)
from .storepaths import store_path, tidy_siblings
from .storewrite import SourceResult, SourceWriter, finish_store, write_field, write_source
from .surveymemory import check_job_memory, check_local_workers, check_survey_memory
from .workflow import (
    PreparedWorkflow,
    Workflow,
    plot_source_number,
    prepare_workflow,
    workflow_cluster,
)

__all__ = ["run_survey", "solve_batch", "SurveyTask", "OVERWRITTEN_ENV"]

log = logging.getLogger("raygrid")

#: A file a run with ``--overwrite`` touches once its new store has taken the store's name:
#: ``raygrid submit``'s job script passes ``--overwrite`` only while that file is absent, so
#: a job started again (requeued) resumes the store instead of replacing it, yet one stopped
#: before the replacement still replaces it.
OVERWRITTEN_ENV = "RAYGRID_OVERWRITTEN"

Echo = Callable[[str], None]


@dataclass(frozen=True)
class SurveyTask:
    """What every worker needs, sent once per worker: the model and the survey's geometry.

    ``graph`` is the CPU solver's prepared graph (padded model, crossing tables, lower
    bounds, precomputed weights if asked): built once on the client, so no task rebuilds
    it; ``None`` on the GPU, whose solver prepares its own device arrays. ``targets``: the
    nodes the receivers read (:func:`receiver_nodes`) when no field is stored, so a solve
    may stop once they are settled; ``None`` when whole fields are written.
    """

    grid: Grid
    star: Star
    options: Options
    graph: MoserGraph | None
    source_index: np.ndarray  # (n, 3) fractional node indices
    sources: list[dict[str, float]]  # as given: a ray ends exactly there
    receivers: list[dict[str, float]]
    receiver_index: np.ndarray  # (m, 3)
    store: StoreSpec
    threads: int
    attrs: dict
    targets: np.ndarray | None = None


def receiver_nodes(grid: Grid, star: Star, receiver_index: np.ndarray) -> np.ndarray:
    """Flat indices of every node a receiver's time is read from (:func:`receiver_times`):
    its node, or the forward-star box around the cell of one between nodes.

    Parameters
    ----------
    grid : Grid
        The model's grid.
    star : Star
        The forward star; its radius sizes the box around a receiver between nodes.
    receiver_index : numpy.ndarray
        ``(m, 3)`` receiver positions in fractional node indices ``(iz, iy, ix)``.

    Returns
    -------
    numpy.ndarray
        Sorted, unique flat indices (int64) into the kernel grid ``(nz, ny, nx)``; empty
        when there are no receivers.
    """
    nodes = [grid.flat(grid.reach_nodes(r, star.radius)) for r in receiver_index]
    return np.unique(np.concatenate(nodes)) if nodes else np.empty(0, dtype=np.int64)


def _rays(task: SurveyTask, index: int, times: np.ndarray, predecessor: np.ndarray):
    """Raypaths from source ``index`` to every receiver: points (time, *dims) and counts."""
    grid = task.grid
    source = task.sources[index]  # not from its node index: that rounds (2.8 -> 2.8000...03)
    field = solved_ray_field(
        grid, task.attrs, {d: float(source[d]) for d in grid.dims},
        NodeValues(times.reshape(grid.shape)), NodeValues(predecessor.reshape(grid.shape)),
        task.star.offsets,
    )  # fmt: skip
    return _ray_points(field, task.receivers, task.receiver_index, grid)


def _ray_table(
    result: xr.Dataset,
    receivers: list[dict[str, float]],
    receivers3: np.ndarray,
    grid: Grid,
    slowness: NodeValues | None = None,
    client: Any = None,
    times: NodeValues | None = None,
):
    """Every receiver's raypath in one ragged table: points (time, *dims) and counts;
    ``receivers3``: their positions in node units."""
    field = ray_field(result, grid, slowness, client, times)
    return _ray_points(field, receivers, receivers3, grid)


def _ray_points(
    field: RayField, receivers: list[dict[str, float]], receivers3: np.ndarray, grid: Grid
):
    """:func:`_ray_table` of a :class:`~raygrid.pipeline.rays.RayField`."""
    pieces, counts = [], []
    for coords, along in traced_points(field, receivers, grid, receivers3):
        columns = [along.astype(np.float64), *(coords[d].astype(np.float64) for d in grid.dims)]
        pieces.append(np.stack(columns, axis=1))
        counts.append(len(along))
    return np.concatenate(pieces), counts


def _source_result(
    spec: StoreSpec,
    index: int,
    table: Callable[[], np.ndarray],
    rays: Callable[[], tuple[np.ndarray, list[int]]],
    field: np.ndarray | None = None,
) -> SourceResult:
    """What the store keeps of source ``index``, plain and tiled surveys alike: its
    receivers' times (``table()``) and rays (``rays()``), each computed only if the store
    keeps it, and ``field`` (``None``: not kept, or written already)."""
    table_kept = table() if spec.keeps_table else None
    points, counts = rays() if spec.keeps_rays else (None, None)
    return SourceResult(int(index), field, table_kept, points, counts)


@for_workflows
def solve_batch(task: SurveyTask, indices: list[int]) -> dict:
    """Solve sources ``indices``, write their results and completion records (a Dask task).

    Returns a small summary: the sources written, the seconds spent and where.

    Parameters
    ----------
    task : SurveyTask
        The model, its graph, the solver settings, the sources, receivers and store, sent
        once to every worker.
    indices : list of int
        The sources to solve: their numbers (indices into ``task.sources``, rows of the
        store).

    Returns
    -------
    dict
        ``sources`` (the numbers written, as ints), ``seconds`` (the whole task, wall
        clock), ``solve_seconds`` (the solve alone) and ``pid`` (the worker's process id).
    """
    start = time.perf_counter()
    grid, spec = task.grid, task.store
    seeds = []
    for i in indices:
        nodes, seed_times = source_seeds(grid, task.star, task.source_index[i])
        seeds.append((grid.flat(nodes), seed_times))
    # Without fields only the receivers' nodes are read: the CPU Dijkstra and Near-Far stop
    # once those are settled (their paths, hence rays, are complete by then).
    times, predecessor = solve_seeds(
        grid, task.star, task.options, seeds, task.threads, graph=task.graph,
        predecessors=spec.keeps_rays, targets=task.targets,
    )  # fmt: skip
    solved = time.perf_counter()
    writer = SourceWriter(spec.path)
    for k, i in enumerate(indices):
        table = partial(
            receiver_times, grid, task.star, times[k], task.receiver_index, spec.dtype,
            source3=task.source_index[i], exact=task.options.weights == "exact",
        )  # fmt: skip
        rays = partial(_rays, task, i, times[k], None if predecessor is None else predecessor[k])
        field = times[k].reshape(grid.shape) if spec.fields else None
        writer.write(_source_result(spec, i, table, rays, field))
    return {
        "sources": [int(i) for i in indices],
        "seconds": time.perf_counter() - start,
        "solve_seconds": solved - start,
        "pid": os.getpid(),
    }


def store_spec(prepared: PreparedWorkflow) -> StoreSpec:
    """What the workflow's store holds (:class:`~raygrid.pipeline.store.StoreSpec`): its
    path, sizes, dims, the outputs asked for and the solve's precision."""
    outputs = prepared.workflow.outputs
    return StoreSpec(
        path=store_path(outputs.store),
        n_sources=len(prepared.sources),
        n_receivers=len(prepared.receivers),
        dims=prepared.grid.dims,
        fields=outputs.fields,
        receiver_table=outputs.receiver_table,
        rays=outputs.rays,
        dtype=prepared.options.precision,
    )


def _store_attrs(prepared: PreparedWorkflow) -> dict:
    attrs = solver_attrs(prepared.grid, prepared.star, prepared.options)
    for key in ("long_name", "units"):
        attrs.pop(key, None)
    attrs |= version_attrs()
    attrs |= {
        "title": "raygrid survey: first-arrival traveltimes by shortest-path ray tracing",
        "workflow": prepared.workflow_json,
        "workflow_sha256": prepared.fingerprint,
        # As JSON text, as the workflow: a dict attribute kept the store's datasets from
        # NetCDF (store[["receiver_traveltime"]].to_netcdf raised "Invalid value for attr").
        "workflow_sha256_parts": json.dumps(prepared.fingerprint_parts, sort_keys=True),
        # 0/1, not a boolean, for the same reason (the netCDF4 library refuses them).
        "complete": 0,
    }
    return attrs


@for_workflows
def run_survey(
    workflow: Workflow,
    *,
    overwrite: bool = False,
    client: Any = None,
    cluster: str | Path | None = None,
    progress: bool = False,
    echo: Echo | None = None,
) -> xr.Dataset:
    """Run a workflow into its store, resuming it if it exists, and return it (opened lazily).

    Parameters
    ----------
    workflow : Workflow
        From :func:`raygrid.pipeline.workflow.read_workflow`.
    overwrite : bool
        Replace an existing store instead of resuming it.
    client : distributed.Client, optional
        Run on this client; by default the cluster file decides (``cluster``, else the
        workflow's ``compute.cluster``, else a LocalCluster), started and closed here.
        The model reaches each worker once on a cluster raygrid starts
        (:data:`raygrid.pipeline.cluster.SCHEDULER_CONFIG`); on a scheduler that runs
        distributed's active memory manager, a worker may fetch it again after the manager
        dropped its copy (a transfer, never a different result).
    cluster : path, optional
        A cluster file overriding the workflow's ``compute.cluster``.
    progress : bool
        Show a progress bar (stderr).
    echo : callable, optional
        Where status lines go (the dashboard URL among them); default: nowhere.

    Returns
    -------
    xarray.Dataset
        The store, opened with :func:`xarray.open_zarr`.

    Raises
    ------
    InputError
        For a bad workflow, model, source, receiver or cluster file, or a cluster that cannot
        be started or reached (all before any store is created or touched), or a store at
        ``outputs.store`` that belongs to another workflow.
    """
    echo = echo or (lambda message: None)
    start = time.perf_counter()
    config = workflow_cluster(workflow, cluster)
    if client is None and isinstance(config, LocalConfig) and config.processes:
        check_local_workers(workflow, config)  # from the model's shape, before it is built
    if client is None and isinstance(config, JobQueueConfig):
        # A job `raygrid submit` queued for this store holds no lock while it waits: worker
        # jobs queued behind it waited their whole wait_timeout (submit refuses as this).
        from .submit import refuse_if_queued

        refuse_if_queued(config, Path.cwd(), Path(workflow.outputs.store), again="run again")
    prepared = prepare_workflow(workflow, workers_gpu=_workers_gpu(config, workflow, client))
    compute = workflow.compute
    backend = prepared.options.backend
    for note in [] if client else cluster_notes(config, backend, compute):
        warn_input(f"{cluster or compute.cluster}: {note}")
    spec = store_spec(prepared)
    attrs = _store_attrs(prepared)
    chunks = field_chunks(
        prepared.grid.shape, np.dtype(spec.dtype).itemsize, compute.tiles, prepared.grid.dims
    )

    def create() -> None:
        create_store(
            spec, prepared.velocity, prepared.sources, prepared.receivers, attrs, chunks,
            names=prepared.names,
            check_copy=partial(_check_model_copy, prepared),
        )  # fmt: skip

    # The cluster starts before the store is created or touched, so one that cannot be had
    # (a scheduler out of reach, a refused batch configuration) leaves no store behind; and
    # only once the existing store, read without touching it, is known to need solving, so a
    # refused or finished store costs no cluster.
    # Workers on this machine load what the client compiles from Numba's cache; elsewhere
    # (a scheduler, batch jobs) they compile it themselves, so the client would only wait.
    compile_here = client is None and isinstance(config, LocalConfig)
    local_workers = compile_here and config.processes  # each a process holding the model
    # Held until the store is complete: a second run on it is refused at once.
    with store_lock(spec.path):
        tidy_siblings(spec.path, restore_foreign=True)  # under the lock: see its docstring
        found = check_store(
            spec, prepared.fingerprint, overwrite=overwrite, workflow=prepared.workflow_json,
            parts=prepared.fingerprint_parts,
        )  # fmt: skip
        with ExitStack() as stack:
            found_client = client is not None  # the caller's: its workers are its own
            if found is None or not found.done.all():
                if client is None:
                    if isinstance(config, JobQueueConfig):  # before its jobs are queued
                        check_job_memory(prepared, spec, config)
                    client = stack.enter_context(connect(config, echo=echo))
                    if prepared.options.backend == "cuda" and not local_workers:
                        check_workers_gpu(client)  # not checked here: see _workers_gpu
                if found_client:  # a first worker waited for (an adaptive cluster's: asked)
                    stack.callback(release_held, client)  # (released once tasks wait)
                    joined_threads(client)
                if not local_workers:  # (a local cluster's run this Python)
                    check_workers_raygrid(client)
                # Before the store is touched; a local cluster's workers, with the client,
                # on this machine.
                check_survey_memory(client, prepared, spec, local=local_workers)
            state = prepare_store(
                spec, prepared.fingerprint, overwrite=overwrite, create=create,
                workflow=prepared.workflow_json, parts=prepared.fingerprint_parts,
                checked=found,  # under the lock since: not listed again
            )  # fmt: skip
            replaced = os.environ.get(OVERWRITTEN_ENV)
            if overwrite and replaced:  # a submitted job's later starts resume this store
                Path(replaced).touch()
            pending = np.flatnonzero(~state.done)
            n = spec.n_sources
            if state.lost:
                echo(
                    f"{spec.path}: {len(state.lost)} source(s) marked done have chunks missing "
                    f"on disk ({listed_sources(state.lost)}): solving them again"
                )
            if not pending.size and state.complete:
                echo(f"{spec.path} is complete already: its {n} source(s) are done")
            elif not pending.size:  # stopped in its last step (the rays' assembly)
                echo(f"{spec.path}: its {n} source(s) are done; finishing the store")
            elif pending.size < n:
                echo(f"resuming {spec.path}: {n - pending.size} of {n} sources already done")
            if pending.size:
                _solve_pending(
                    client, prepared, spec, pending, progress, echo, compile_here,
                    workers_back=None if found_client else workers_back_s(config),
                )  # fmt: skip
        finish_store(spec)
    dataset = xr.open_zarr(spec.path, consolidated=False)
    # Said before the pictures are drawn: the store is complete whatever plotting does.
    shape = " x ".join(str(n) for n in dataset["velocity"].shape)
    echo(
        f"done: {dataset.sizes['source']} source(s) on {shape} nodes (radius "
        f"{workflow.grid.radius}, {dataset.attrs['star_offsets']} star offsets); this run "
        f"took {time.perf_counter() - start:.2f} s"  # a resumed run solved only those left
    )
    echo(f"store: {workflow.outputs.store}")
    if workflow.outputs.plot is not None:
        from .plot import plot_store  # matplotlib only when a plot is asked for

        chosen = plot_source_number(
            workflow.outputs, dataset.sizes["source"], point_names(dataset, "source")
        )
        for written in plot_store(dataset, workflow.outputs.plot, chosen):
            echo(f"plot: {written}")
    return dataset


def _check_model_copy(prepared: PreparedWorkflow, copy: xr.DataArray) -> None:
    """Refuse a store whose copy of a lazy model is not the model that was fingerprinted.

    A lazy model file is checked and fingerprinted when the workflow is prepared, and copied
    into the store only once the cluster is up, seconds later: a file edited in between
    would leave a store whose values are not those its fingerprint names, and every later
    run (which compares fingerprints with the file) would resume it. The copy is hashed as
    the file was, and must give the same digest: loaded, as its slowness, for an untiled
    run (which loads the model); block by block in the file's chunking for a tiled one.
    """
    grid = prepared.grid
    if prepared.fingerprint_parts is None:
        return
    if grid.slowness is not None:
        copied = grid_from_velocity(copy, check_values=False)
    else:
        chunks = dict(zip(grid.velocity.dims, grid.velocity.chunks, strict=True))
        copied = grid_from_velocity(copy.chunk(chunks), load=False, check_values=False)
    if model_digest(copied) != prepared.fingerprint_parts["model"]:
        raise InputError(
            f"the model file {prepared.workflow.model.path} changed while the run was starting:"
            " the store's copy of it differs from the values that were checked; no store was"
            " made, run again once the file is final"
        )


def _workers_gpu(config: Any, workflow: Any, client: Any) -> bool | None:
    """Whether the workers of ``config`` have GPUs, where they solve elsewhere than here,
    for :func:`~raygrid.pipeline.workflow.prepare_workflow`; ``None``: this machine's
    hardware decides (local clusters, a client given, ``auto`` on a scheduler).

    Worker jobs dask-jobqueue submits from here (a login node, often without a GPU) have
    the GPUs their cluster file asks for: the backend is checked, and ``auto`` resolved,
    for them. An existing scheduler's workers may have GPUs this machine lacks: ``cuda`` is
    not refused here, and is checked on the workers once they have joined
    (:func:`check_workers_gpu`).
    """
    if client is not None:
        return None
    if isinstance(config, JobQueueConfig):
        return config.gpus_per_worker > 0
    if isinstance(config, SchedulerConfig) and workflow.compute.backend == "cuda":
        return True
    return None


def _solve_pending(
    client, prepared: PreparedWorkflow, spec: StoreSpec, pending, progress: bool, echo: Echo,
    compile_here: bool = False, workers_back: float | None = None,
) -> None:  # fmt: skip
    """Solve the ``pending`` sources into the store; ``workers_back``: how long to wait for
    a worker after every one died (:func:`_await_workers`)."""
    compute = prepared.workflow.compute
    # Workers open the store by this path, each from its own working directory (a scheduler
    # file's workers started elsewhere): a relative path would write their chunks there.
    spec = replace(spec, path=spec.path.resolve())
    bar = Progress(
        spec.n_sources, spec.n_sources - len(pending), progress,
        stalled=partial(_in_flight, client), noted=workers_lost(client),
    )  # fmt: skip
    if compute.tiles is not None:
        with bar.ticking():
            _solve_tiled(client, prepared, spec, pending, bar)
        return
    grid = prepared.grid
    if not in_memory(grid.velocity):  # a lazily opened file: workers get it in memory
        grid = replace(grid, velocity=grid.velocity.compute())
    options = prepared.options
    if options.backend == "cpu" and compile_here:
        _compile_cpu_solver(grid, prepared.star, options, echo)
    task = SurveyTask(
        grid=grid,
        star=prepared.star,
        options=options,
        graph=cpu_graph(grid, prepared.star, options) if options.backend == "cpu" else None,
        source_index=prepared.source_index,
        sources=prepared.sources,
        receivers=prepared.receivers,
        receiver_index=prepared.receiver_index,
        store=spec,
        threads=compute.threads,
        attrs=solver_attrs(grid, prepared.star, options),
        targets=None
        if spec.fields or not spec.n_receivers
        else receiver_nodes(grid, prepared.star, prepared.receiver_index),
    )
    remaining = [int(i) for i in pending]
    losses = 0  # in a row, with no task finished in between
    with (
        bar.ticking(),
        log_filtered("distributed.scheduler", _not_the_lost_model),
        log_filtered("distributed.scheduler", _not_a_result_lost_with_its_worker),
        log_filtered("distributed.client", _not_a_result_lost_with_its_worker),
    ):
        while remaining:
            finished: set[int] = set()
            try:
                _collect(client, _submit(client, task, remaining, compute.batch), bar, finished)
                return
            except SharedDataLost as lost:
                losses = 1 if finished else losses + 1
                if losses > RESENDS or client.status != "running":  # the scheduler gone
                    raise lost.failure from None
                remaining = [i for i in remaining if i not in finished]
                started = (
                    " (those started since had not fetched it yet)" if client.nthreads() else ""
                )
                bar.note(
                    f"the workers that held the model died{started}; sending it again for the "
                    f"{len(remaining)} source(s) left"
                )
                _await_workers(client, bar, workers_back)


#: Seconds a survey whose every worker died waits for one to join (a nanny's restart)
#: before it stops, its finished sources kept, where no cluster file says longer
#: (:func:`raygrid.pipeline.clusterfile.workers_back_s`).
WORKERS_BACK_S = 120.0


def _await_workers(client, bar: Progress, wait: float | None = None) -> None:
    """Return once the cluster has a worker, waiting up to ``wait`` seconds (default
    :data:`WORKERS_BACK_S`): the model cannot be sent again to no worker (Dask's scatter
    raised "No valid workers found", which stopped the run as if its input were wrong)."""
    if client.nthreads():
        return
    wait = WORKERS_BACK_S if wait is None else wait
    bar.note(f"no worker is left: waiting up to {wait:g} s for one to join")
    kept = f"the finished sources are kept in the store: {run_again()} to resume"
    deadline = time.monotonic() + wait
    while True:
        try:
            # In steps: batch jobs that ended (their walltime) bring no worker back.
            client.wait_for_workers(1, timeout=max(min(deadline - time.monotonic(), 1.0), 0.01))
            return
        except TimeoutError:
            pass
        gone = workers_gone(client)
        if gone:
            raise RunFailed(f"every worker died, and {gone}; {kept}")
        if time.monotonic() >= deadline:
            raise RunFailed(
                f"every worker died and none joined within {wait:g} s (killed for "
                f"memory, or their batch jobs' walltime? see the workers' logs); {kept} once "
                "workers can start"
            )


def _not_the_lost_model(record: logging.LogRecord) -> bool:
    """Logging filter for ``distributed.scheduler``: drop "Removing worker ... caused the
    cluster to lose scattered data, which can't be recovered: {'SurveyTask-...'}", an
    ERROR a local cluster's scheduler logs when every worker holding a survey's model died:
    the survey sends it again and says so itself (the line read as the run failing)."""
    message = record.getMessage()
    return not ("lose scattered data" in message and f"'{SurveyTask.__name__}-" in message)


def _not_a_result_lost_with_its_worker(record: logging.LogRecord) -> bool:
    """Logging filter for ``distributed.scheduler`` and ``distributed.client``: drop
    "Couldn't gather keys: {'raygrid-sources-...': 'queued'}" (an ERROR) and "Couldn't
    gather 1 keys, rescheduling", logged when a worker died holding a finished task's
    result: Dask solves it again elsewhere, as its "Removing worker ... will be recomputed
    elsewhere" line (kept) says, and the run goes on; the ERROR read as the run failing."""
    message = record.getMessage()
    return not ("Couldn't gather" in message and "'raygrid-sources-" in message)


#: How many times in a row a survey sends its model again after every worker holding it
#: died (no task finishing in between), before it stops, its finished sources kept.
RESENDS = 3


class SharedDataLost(Exception):
    """The model and graph a survey scattered to its workers were lost: every worker that
    held them died (:func:`_collect`). ``failure`` is what the run stops with if they are
    not sent again."""

    def __init__(self, failure: Exception) -> None:
        super().__init__(str(failure))
        self.failure = failure


def _submit(client, task: SurveyTask, sources: list[int], batch: int) -> dict[str, tuple]:
    """Send ``task`` (the model, its graph, any precomputed weights: the large inputs) to
    every worker once (:func:`~raygrid.pipeline.fanout.submit_shares`), then submit
    ``sources`` in batches: ``{key: (future, sources)}``. When every worker holding it has
    died, the tasks left are cancelled, and :func:`_solve_pending` sends it again."""
    chunks = [sources[k : k + batch] for k in range(0, len(sources), batch)]
    shares = [(chunk, (chunk[0], chunk[-1])) for chunk in chunks]
    return submit_shares(client, task, solve_batch, shares, "sources")


def _compile_cpu_solver(grid: Grid, star, options, echo: Echo, after: float = 1.0) -> None:
    """Compile the CPU solver here, before the workers start (they then load it from Numba's
    cache), saying so if it takes longer than ``after`` seconds: on a machine's first run
    the bar would otherwise stand still for 6-13 s, which looks like a hang."""
    note = threading.Timer(
        after,
        echo,
        (
            f"compiling raygrid's CPU solver for this machine, in {options.precision} (once "
            "for each precision and kind of star: Numba caches it)",
        ),
    )
    note.daemon = True
    note.start()
    try:
        seconds = compile_cpu_solver(grid.dims, star, options)
    finally:  # interrupted (Ctrl-C) or failed: nothing more is said about compiling
        note.cancel()
    if seconds > after:
        echo(f"compiled in {seconds:.1f} s")


def _in_flight(client: Any) -> str:
    """``"; task(s) in flight on tcp://10.0.0.5:4321 (2), ..."``: where a stalled survey's
    tasks are (:class:`~.progress.Progress`'s note), or ``""`` if the scheduler does not
    say."""
    try:
        processing = client.processing()
    except Exception:  # (busy or gone: the note says the rest)
        return ""
    held = {worker: len(keys) for worker, keys in processing.items() if keys}
    if not held:
        return ""
    return "; task(s) in flight on " + ", ".join(f"{w} ({n})" for w, n in sorted(held.items()))


def _collect(
    client, tasks: dict[str, tuple], bar: Progress, finished: set[int] | None = None
) -> None:
    """Wait for the survey's tasks (``{key: (future, sources)}``), counting their sources
    (and adding them to ``finished``); the first that fails stops the run (the others are
    cancelled) with an :class:`InputError` it raised, else a :class:`RunFailed` saying
    which sources, why, and that a rerun resumes. A task cancelled by the scheduler (its
    scattered inputs lost with every worker that held them) raises :class:`SharedDataLost`
    instead, carrying that ``RunFailed``, once the tasks already finished are counted.

    ``tasks`` is emptied as their results are read: a future the client still holds is one
    the scheduler recomputes when the worker holding its result dies, so a survey would
    solve again every finished source that worker had run (their chunks are already in the
    store, so that is only time lost).
    """
    with closing(finished_in_turn(client, tasks)) as finished_tasks:
        for future, sources in finished_tasks:
            if _counted(future, bar, finished):
                continue
            which = f"source(s) {', '.join(map(str, sources))}"
            # Not an error: cancelled by the scheduler, its data lost.
            error = future.exception() if future.status == "error" else None
            if error is None or isinstance(error, CancelledError):
                for other, _ in list(tasks.values()):  # done already: not solved again
                    if other.status == "finished" and _counted(other, bar, finished):
                        tasks.pop(other.key)
                raise SharedDataLost(_failure(which, error, client))
            raise _failure(which, error, client) from error


def _counted(future, bar: Progress, finished: set[int] | None) -> bool:
    """Whether a survey task's result was read (its sources counted), or it has none: not
    finished, or its worker died between finishing and this read."""
    if future.status != "finished":
        return False
    try:
        sources = future.result()["sources"]
    except CancelledError:
        return False
    bar.update(len(sources))
    if finished is not None:
        finished.update(int(i) for i in sources)
    return True


def _failure(which: str, error: BaseException | None, client: Any = None) -> Exception:
    """What a run stops with when the task solving ``which`` (``"source(s) 3, 4"``) failed
    with ``error``, or was lost with its worker (``error`` None): an :class:`InputError` or
    :class:`RunFailed` as raised, else a :class:`RunFailed` saying which sources, why, and
    that a rerun resumes. One wording for plain and tiled surveys; with the run's
    ``client``, a scheduler it lost is said as such (every task is cancelled then)."""
    if isinstance(error, InputError | RunFailed):
        return error
    resume = f"finished sources are kept in the store: {run_again()} to resume"
    if client is not None and client.status != "running":
        # The scheduler went away (stopped, its node lost): every task is cancelled at
        # once, which is not a worker dying of memory. No source named: the task that
        # reports it first is any of them, finished or not (sources 86, 87 were named with
        # 0 to 89 done).
        return RunFailed(
            "the connection to the Dask scheduler was lost mid-run (the scheduler stopped, "
            f"or its machine or network failed); the {resume} once a scheduler is up again"
        )
    if error is None or isinstance(error, CancelledError):
        return RunFailed(
            f"the cluster lost the task solving {which}: a worker died (killed for memory? "
            f"see the workers' logs) holding data it needed; the {resume}, with more memory "
            "per worker if that was the cause"
        )
    failed = f"the task solving {which} failed: {type(error).__name__}: {error}"
    disk = full_disk(error)
    if disk:  # which says that a rerun resumes
        return RunFailed(failed + disk)
    hint = ""
    if type(error).__name__ == "KilledWorker":
        hint = " (every worker that ran it died: too little memory per worker?)"
    return RunFailed(f"{failed}{hint}; the {resume}")


def _solve_tiled(client, prepared: PreparedWorkflow, spec: StoreSpec, pending, bar) -> None:
    """Sources one after another, each by domain decomposition over the cluster's workers."""
    # The model the store was made with, copied into it once (chunk by chunk): not the
    # workflow's model file, which workers would read again for each source (and the
    # receivers' legs here), so that a file edited during the run mixed two models in one
    # store. Stored in the grid's dim order, with its units. The copy was made after the
    # file was checked and fingerprinted (once the cluster is up) and had to hash as the
    # file did (_check_model_copy); its values are still checked here, once per run, since
    # the file's check and its hash are two reads.
    velocity = xr.open_zarr(spec.path, consolidated=False)["velocity"]
    with warnings.catch_warnings():
        # Its warnings (velocities no rock has, an elevation axis) were said as the
        # workflow was prepared, at their lines: only errors are new here.
        warnings.simplefilter("ignore", InputWarning)
        grid = grid_from_velocity(velocity, load=False)
    # Nothing the size of the model comes to the client: fields are written where their
    # tiles are (the workers), receivers' times and rays read the chunks of the field, the
    # predecessors and the model (kept across sources) that hold their nodes.
    slowness = grid.slowness_values(client)
    kept: dict = {}  # each tile's slowness, read once by its owner for every source
    for i in pending:
        check_interrupts()  # a Ctrl-C Python dropped (in a gc callback, say)
        i = int(i)
        try:
            _solve_tiled_source(client, prepared, spec, i, velocity, grid, slowness, kept)
        # On a worker (a CUDA error, KilledWorker, a lost worker's data: CancelledError, no
        # Exception) or here (a full disk): said as a plain survey's task failure is.
        except (Exception, CancelledError) as error:
            raise _failure(f"source {i}", error, client) from error
        bar.update(1)


def _solve_tiled_source(
    client, prepared: PreparedWorkflow, spec: StoreSpec, i: int, velocity: xr.DataArray,
    grid: Grid, slowness, kept: dict,
) -> None:  # fmt: skip
    """Source ``i`` of a tiled survey, written into the store with its completion record."""
    from .tiled import traveltime_tiled

    workflow = prepared.workflow
    need_rays = spec.keeps_rays
    # Which source the rounds that follow in the log are of (raygrid -v).
    log.info("source %d of %d: a tiled solve", i, spec.n_sources)
    # The grid checked once above: not the whole model again per source.
    result = traveltime_tiled(
        velocity, prepared.sources[i], tiles=workflow.compute.tiles, client=client,
        radius=workflow.grid.radius, options=prepared.options,
        predecessors=bool(need_rays), grid=grid, kept=kept,
    )  # fmt: skip
    field = result["traveltime"] if need_rays else result
    if spec.fields:
        write_field(spec.path, i, field.transpose(*grid.dims), client)
    times = NodeValues(field.transpose(*grid.dims).data, client=client)  # read lazily
    table = partial(
        receiver_times, grid, prepared.star, times, prepared.receiver_index, spec.dtype,
        slowness, prepared.source_index[i], prepared.options.weights == "exact",
    )  # fmt: skip
    rays = partial(
        _ray_table, result, prepared.receivers, prepared.receiver_index, grid, slowness,
        client, times,
    )  # fmt: skip
    # The completion record last, after the field's chunks.
    write_source(spec.path, _source_result(spec, i, table, rays))
