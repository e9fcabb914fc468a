"""One traveltime solve spread over Dask workers by domain decomposition.

The model is cut into tiles with halos (:mod:`.tiles`). Each round, every active tile is
solved by a task on the worker that holds it, seeded with the halo times its neighbours sent;
only the boundary strips that got smaller travel between tiles, and a tile is active next
round only if such a strip reached it. The solve ends when no strip changed.

Why the result equals the single-domain solve bit for bit: every value is the float sum of
edge weights along some path, so it never drops below the float shortest time ``d*``; at the
end every node satisfies ``t(v) <= min_u fl(t(u) + w(u, v))`` over all its in-edges (the halo
holds every in-neighbour of a tile's nodes), and the only such ``t >= d*`` is ``d*`` itself,
because float addition is monotone (docs/method.md section 1). Merging is ``minimum``, so order,
repetition and recomputation after a lost worker are all harmless.
"""

from __future__ import annotations

import logging
import operator
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
from dask.sizeof import sizeof
from distributed.diagnostics.plugin import SchedulerPlugin

from ..kernels import Star, dijkstra
from .errors import RunFailed, setting, spelt_for_workflows, warn_input, workflow_spelling
from .memory import device_memory_said, float32_hint
from .tiles import Box, Index, TileGrid

__all__ = ["TileState", "start_tile", "solve_tile", "solve_tiled", "TILE_PARTS"]

log = logging.getLogger("raygrid")

#: The parts of a round's time its tile tasks report, summed (``solve_tile``'s
#: ``seconds``); all but ``task`` and ``solve`` are the CUDA solver's, 0 on the CPU.
TILE_PARTS = ("task", "solve", "model", "start", "relax", "copy")


@dataclass
class TileState:
    """What a worker keeps of one tile between rounds (it never travels).

    Attributes
    ----------
    index : tuple of int
    slowness : numpy.ndarray
        The tile with its halo, 3D, s/m.
    times, predecessor : numpy.ndarray
        Current upper bounds and predecessors on the extended tile.
    sent : dict
        The last strip sent to each neighbour, to tell whether it got smaller.
    """

    index: Index
    slowness: np.ndarray
    times: np.ndarray
    predecessor: np.ndarray
    sent: dict[Index, np.ndarray] = field(default_factory=dict)


@sizeof.register(TileState)
def _sizeof_tile_state(state: TileState) -> int:
    # Dask prices a move by the size of what moves. Left to its default for objects (a few
    # dozen bytes) a tile state looks free to move, and work stealing moved solves 5x as often.
    arrays = (state.slowness, state.times, state.predecessor, *state.sent.values())
    return sum(a.nbytes for a in arrays)


def start_tile(
    index: Index,
    slowness: np.ndarray,
    dtype: np.dtype | type,
    predecessor_dtype: np.dtype | type,
) -> TileState:
    """A tile with no times yet (all ``inf``).

    Parameters
    ----------
    index : tuple of int
        The tile's position ``(iz, iy, ix)`` in the tile grid.
    slowness : numpy.ndarray
        The tile with its halo (:meth:`TileGrid.extended`), 3D ``(nz, ny, nx)``, s/m; kept
        as a C-contiguous float64 array (copied only if it is not one already).
    dtype : numpy.dtype or type
        Precision of the times, ``numpy.float32`` or ``numpy.float64``.
    predecessor_dtype : numpy.dtype or type
        Integer type of the predecessors (:attr:`Star.predecessor_dtype`).

    Returns
    -------
    TileState
        The tile's first state: times ``inf`` and predecessors ``-1`` (none) over the
        extended tile, and no strip sent yet.
    """
    slowness = np.ascontiguousarray(slowness, dtype=np.float64)
    return TileState(
        index=index,
        slowness=slowness,
        times=np.full(slowness.shape, np.inf, dtype=dtype),
        predecessor=np.full(slowness.shape, -1, dtype=predecessor_dtype),
    )


def solve_tile(
    state: TileState | tuple,
    geometry: TileGrid,
    star: Star,
    spacing: np.ndarray,
    rule: int,
    backend: str,
    seeds: tuple[np.ndarray, np.ndarray] | None,
    *strips: dict[Index, tuple[Box, np.ndarray]],
    workflow: bool = False,
) -> tuple[TileState, dict[Index, tuple[Box, np.ndarray]], dict]:
    """One round of one tile: merge incoming strips, relax, and emit the strips that changed.

    Parameters
    ----------
    state : TileState or tuple
        The tile's state, or the tile's last :func:`solve_tile` result whose state it is.
    geometry : TileGrid
    star, spacing, rule
        As for :func:`raygrid.kernels.dijkstra`.
    backend : {"cpu", "cuda"}
        The tile solver: the CPU Dijkstra, or the CUDA pull kernel on the worker's GPU.
    seeds : (nodes, times) or None
        Source seeds inside this tile's interior, as global ``(k, 3)`` node indices.
    *strips : dict
        What neighbours sent (each an ``outgoing`` of their :func:`solve_tile`): this tile's
        boundary strips ``(box, values)`` (global boxes) that got smaller.
    workflow : bool
        The solve is a workflow's: a refusal names the settings to change as its file
        spells them (:func:`raygrid.pipeline.errors.spelt_for_workflows`, which the
        caller's thread was in).

    Returns
    -------
    state : TileState
        The new state (the old one is not modified, so a recomputed task sees the same input).
    outgoing : dict
        For each neighbour whose strip got smaller, ``(box, values)``.
    summary : dict
        ``changed`` (neighbours sent to), ``bytes`` (strip bytes sent), ``improved``
        (nodes), ``seconds``: wall seconds of the task (``task``), of its solver
        (``solve``) and, on CUDA, of the parts of the solve (:data:`TILE_PARTS`): the
        solver's model setup (``model``: padding and uploading the tile's slowness), the
        starting times and seeds going up (``start``), the relaxation (``relax``) and the
        results coming back (``copy``).

    Notes
    -----
    Only nodes whose time improved are pushed; every other node keeps its time, which the
    previous round already propagated, so a round costs what changed, not the whole tile.
    """
    started = time.perf_counter()
    seconds = dict.fromkeys(TILE_PARTS, 0.0)
    state = _state(state)
    index = state.index
    times = state.times.copy()
    predecessor = state.predecessor.copy()
    origin = np.array([s.start for s in geometry.extended(index)])
    nodes, values = [], []
    for sent in strips:
        box, strip = sent[index]
        local = geometry.local(box, index)
        better = strip < times[local]
        if better.any():
            where = np.argwhere(better) + [s.start for s in local]
            nodes.append(np.ravel_multi_index(tuple(where.T), times.shape))
            values.append(strip[better])
    if seeds is not None and len(seeds[0]):
        local_nodes = np.asarray(seeds[0]) - origin
        nodes.append(np.ravel_multi_index(tuple(local_nodes.T), times.shape))
        values.append(np.asarray(seeds[1], dtype=times.dtype))
    improved = 0
    if nodes:
        nodes = np.concatenate(nodes)
        values = np.concatenate(values).astype(times.dtype)
        flat_times = times.reshape(-1)
        before = state.times.reshape(-1)
        clock = time.perf_counter()
        if backend == "cuda":
            from ..kernels.cuda.pull_solver import solve_pull

            solver_stats: dict = {}
            with spelt_for_workflows(workflow):
                hints = [setting("smaller tiles=", "smaller compute.tiles")]
                if times.dtype == np.float64:
                    hints.append(float32_hint())
            shape = " x ".join(map(str, times.shape))
            with device_memory_said(f"a tile ({shape} nodes with its halo)", hints):
                new_times, new_predecessor = solve_pull(
                    state.slowness, spacing, star, [(nodes, values)], rule=rule,
                    dtype=times.dtype, times=flat_times[np.newaxis],
                    predecessor=predecessor.reshape(1, -1), stats=solver_stats,
                )  # fmt: skip
            flat_times[:] = new_times[0]
            predecessor.reshape(-1)[:] = new_predecessor[0]
            seconds["model"] = solver_stats["setup_model_s"]
            # The tile's starting times and seeds up (a batch's reset), and its times and
            # predecessors back: with the model and the relaxation, what a CUDA tile solve
            # is made of (the rest is host copies; benchmarks/tiled_decomposition.py).
            seconds["start"] = solver_stats["setup_s"] - solver_stats["setup_model_s"]
            seconds["relax"] = solver_stats["passes_s"]
            seconds["copy"] = solver_stats["copy_s"]
        else:
            # The heap only takes a seed below the node's current time: clear seeds first.
            flat_times[nodes] = np.inf
            dijkstra(
                state.slowness, spacing, star, nodes, values, rule=rule,
                times=flat_times, predecessor=predecessor.reshape(-1),
            )  # fmt: skip
        seconds["solve"] = time.perf_counter() - clock
        improved = int((flat_times < before).sum())

    outgoing, sent, moved = {}, dict(state.sent), 0
    for neighbour in geometry.neighbours(index):
        box = geometry.strip(index, neighbour)
        strip = times[geometry.local(box, index)].copy()
        previous = sent.get(neighbour)
        changed = np.isfinite(strip).any() if previous is None else (strip < previous).any()
        if changed:
            outgoing[neighbour] = (box, strip)
            sent[neighbour] = strip
            moved += strip.nbytes
    new_state = TileState(index, state.slowness, times, predecessor, sent)
    seconds["task"] = time.perf_counter() - started
    summary = {"changed": list(outgoing), "bytes": moved, "improved": improved, "seconds": seconds}
    return new_state, outgoing, summary


def _state(state: TileState | tuple) -> TileState:
    """A tile's state, from :func:`start_tile` or from the last :func:`solve_tile`'s whole
    result: the next solve takes that result itself, on the same worker, so no task per
    tile and round only takes its state out (one scheduling hop fewer)."""
    return state[0] if isinstance(state, tuple) else state


def _interior(state: TileState | tuple, geometry: TileGrid, name: str) -> np.ndarray:
    state = _state(state)
    return getattr(state, name)[geometry.local(geometry.interior(state.index), state.index)]


def _outgoing(solved: tuple) -> dict[Index, tuple[Box, np.ndarray]]:
    """The strips a solved tile sends its neighbours (from :func:`solve_tile`'s result)."""
    return solved[1]


def _key(prefix: str, round_: int, index: Index) -> str:
    # Keys read well on the dashboard: the prefix groups them, the suffix says which tile.
    # A random token keeps them unique (a tile sends one strip task per neighbour in a round,
    # and several solves may share a scheduler); a clock did not on coarse-clock platforms.
    return f"raygrid-{prefix}-r{round_}-{index[0]}.{index[1]}.{index[2]}-{uuid.uuid4().hex}"


def _deferred(incoming: dict[Index, list[tuple[Index, object]]]) -> set[Index]:
    """Tiles to leave for a later round: reached only through corners or edges while a face
    neighbour is being solved.

    Such a tile would be solved from a few corner nodes and then almost wholly again once the
    face neighbour's strip arrives; waiting costs nothing (its strips stay pending and are
    merged with ``minimum``) and saves that solve, which also balances the round.
    """

    def face(a: Index, b: Index) -> bool:
        return sum(x != y for x, y in zip(a, b)) == 1

    face_driven = {t for t, strips in incoming.items() if any(face(t, s) for s, _ in strips)}
    return {
        t for t in incoming if t not in face_driven and any(face(t, other) for other in face_driven)
    }


def _owners(geometry: TileGrid, workers: list[str]) -> dict[Index, str]:
    """Contiguous runs of tiles per worker, so most strips stay on one worker."""
    tiles = list(geometry)
    per = -(-len(tiles) // len(workers))
    return {index: workers[i // per] for i, index in enumerate(tiles)}


class FreeOrphanedTasks(SchedulerPlugin):
    """Scheduler plugin: when a worker joins, tasks waiting for a worker (``no-worker``)
    whose loose restrictions name only workers that have left lose those restrictions, so
    the new worker can run them.

    distributed (2026.8) wakes such tasks on a new worker only if it is among their allowed
    workers, loose restrictions or not (``bulk_schedule_unrunnable_after_adding_worker``):
    a tiled solve whose workers had all died (a nanny's restart, batch jobs at their time
    limit, ``dask worker`` processes restarted) waited for them forever, its new workers
    idle. This hook runs just before that wake-up. A task with no worker alive to prefer
    may run anywhere: what ``allow_other_workers`` asked for.
    """

    name = "raygrid-free-orphaned-tasks"
    idempotent = True  # installed once per scheduler, however many solves ask

    def add_worker(self, scheduler: Any, worker: str) -> None:
        for task in list(getattr(scheduler, "unrunnable", ())):
            allowed = task.worker_restrictions
            if (
                task.loose_restrictions
                and allowed
                and not any(address in scheduler.workers for address in allowed)
            ):
                task.worker_restrictions = None
                task.loose_restrictions = False


def free_orphaned_tasks(client: Any) -> None:
    """Install :class:`FreeOrphanedTasks` on the client's scheduler, unless it is there
    already (by name). A scheduler that cannot take it (one without raygrid installed, to
    unpickle it) is noted in the log: its tiled solves then wait for lost workers as
    distributed does."""
    try:
        client.register_plugin(FreeOrphanedTasks())
    except Exception as error:  # any failure to install leaves distributed's own behaviour
        log.warning("could not install %s on the scheduler: %s", FreeOrphanedTasks.name, error)


def _on(worker: str) -> dict:
    """Restrictions that keep a tile's tasks on the worker that owns it.

    Loose (``allow_other_workers``): a lost worker's tasks are recomputed elsewhere instead of
    waiting for an address that never comes back. Every task of a tile carries them, not only
    the solve: an unrestricted task taking the summary or the strips out of the solve's
    output could run on another worker and pull the whole tile state there.
    """
    return {"workers": [worker], "allow_other_workers": True}


def solve_tiled(
    client: Any,
    geometry: TileGrid,
    slowness_tiles: Callable[[Index], da.Array | np.ndarray],
    star: Star,
    spacing: np.ndarray,
    rule: int,
    dtype: np.dtype | type,
    seed_nodes: np.ndarray,
    seed_times: np.ndarray,
    stats: dict | None = None,
    backend: str = "cpu",
    kept: dict | None = None,
) -> tuple[da.Array, da.Array]:
    """Exchange loop: rounds of tile solves until no boundary strip changes.

    Parameters
    ----------
    client : distributed.Client
    geometry : TileGrid
    slowness_tiles : callable
        ``slowness_tiles(index)`` gives the tile's extended slowness as a dask array (read by
        a worker; the client never holds the model) or a NumPy array.
    star, spacing, rule, dtype
        Solver settings.
    backend : {"cpu", "cuda"}
        Tile solver (CUDA workers: one per GPU, e.g. dask-cuda's ``LocalCUDACluster``).
    seed_nodes, seed_times : numpy.ndarray
        Global ``(k, 3)`` node indices of the source seeds and their times.
    stats : dict, optional
        Filled with ``rounds``, ``tasks`` and ``bytes`` (strip bytes moved). Where the
        time goes is in each round's log record (``tile_seconds``: the round's wall time
        and its tile tasks' summed seconds, see :func:`solve_tile`).
    kept : dict, optional
        The tiles' slowness as read by their owners, by tile index (futures), kept by the
        caller across solves on one model and grid of tiles (a survey's sources): filled on
        the first, read by the next, so each tile is read and converted once, not once per
        source. A tile's state holds the same array (:func:`start_tile` copies none), so
        keeping it costs the slowness between solves, not during them. A kept tile its
        owner no longer holds (the workers changed) is read again there.

    Returns
    -------
    times, predecessor : dask.array.Array
        Lazy ``(nz, ny, nx)`` arrays whose chunks are the tile interiors, held by the workers.

    Notes
    -----
    Every task of a tile (reading its slowness, starting, solving, taking its summary and
    its strips, and its share of the result) is restricted to the tile's owner, loosely so
    that a lost worker's tiles are recomputed elsewhere. Loose restrictions do not stop
    distributed's work stealing, which honours only strict ones (no per-task annotation turns
    it off): on a cluster with stealing on, an idle worker may take a queued solve and pull
    that tile's state over. That costs a move, never a float (merging is ``minimum``);
    the cluster raygrid starts itself runs without stealing.
    """
    # Asked of the scheduler, not read from client.scheduler_info(), whose cache can hold
    # no workers (cluster.worker_info; CI: a ZeroDivisionError in _owners below).
    from .fanout import adaptive_unused, joined_threads, release_held

    joined_threads(client)  # a first one waited for (an adaptive cluster's: asked for)
    workers = sorted(client.nthreads())
    if not workers:  # left again meanwhile
        raise RunFailed("the cluster has no workers: a tiled solve needs at least one")
    unused = adaptive_unused(client, len(workers))
    if unused and not kept:  # a survey's next sources (its tiles kept): said once
        warn_input(unused)
    free_orphaned_tasks(client)
    workflow = workflow_spelling()  # (a context of this thread: the tasks are told)
    owner = _owners(geometry, workers)
    states = {}
    kept = {} if kept is None else kept
    if kept:
        # Owners dealt out again (a worker lost, one joined: addresses change) would take a
        # copy of a kept tile from its old owner, both kept for the rest of the run (the
        # active memory manager is off): the tile is read again by its new owner instead.
        holders = client.who_has(list(kept.values()))
        for index, future in list(kept.items()):
            if owner.get(index) not in holders.get(future.key, ()):
                del kept[index]
    for index in geometry:
        values = kept.get(index)
        if values is None:
            values = slowness_tiles(index)
            if isinstance(values, da.Array):  # read by the owner: every task is placed
                values = client.compute(values, **_on(owner[index]))
                kept[index] = values
        states[index] = client.submit(
            start_tile, index, values, dtype, star.predecessor_dtype,
            key=_key("start-tile", 0, index), **_on(owner[index]),
        )  # fmt: skip
    release_held(client)  # the tiles' tasks wait on their owners now

    seed_owner = [tuple(o) for o in geometry.owner(seed_nodes)]
    seeds = defaultdict(lambda: ([], []))
    for node, value, index in zip(seed_nodes, seed_times, seed_owner):
        seeds[index][0].append(node)
        seeds[index][1].append(value)
    seeds = {k: (np.array(v[0]), np.array(v[1])) for k, v in seeds.items()}

    # Pending strips per tile, each with the tile it came from.
    incoming: dict[Index, list] = {index: [] for index in seeds}
    round_, tasks, moved = 0, 0, 0
    solve_started = time.perf_counter()
    while incoming:
        started = time.perf_counter()
        waiting = _deferred(incoming)
        solved = {}
        for index, strips in incoming.items():
            if index in waiting:
                continue
            solved[index] = client.submit(
                solve_tile, states[index], geometry, star, spacing, rule, backend,
                seeds.get(index) if round_ == 0 else None, *(f for _, f in strips),
                workflow=workflow, key=_key("solve-tile", round_, index), **_on(owner[index]),
            )  # fmt: skip
            states[index] = solved[index]  # the next solve takes its state out
        summaries = client.gather(
            [
                client.submit(
                    operator.getitem, f, 2, key=_key("summary", round_, i), **_on(owner[i])
                )
                for i, f in solved.items()
            ]
        )
        incoming = defaultdict(list, {index: incoming[index] for index in waiting})
        changed = 0
        round_bytes = 0
        # Where the round's time goes (its log record): tile tasks against its wall time
        # tell the solvers' share from the exchange's, and on CUDA the model's setup
        # (repeated every round) from the relaxation.
        round_seconds = dict.fromkeys(TILE_PARTS, 0.0)
        for (index, future), summary in zip(solved.items(), summaries):
            round_bytes += summary["bytes"]
            for part, value in summary["seconds"].items():
                round_seconds[part] += value
            if not summary["changed"]:
                continue
            # Strips are cut where the tile was solved: only they travel to the neighbours,
            # all of a tile's in one task (a worker fetches it once for all its tiles that
            # need it), not one task per strip: in 3D a tile has 26 neighbours, and one
            # task per strip made most of a round's tasks and its time.
            sent = client.submit(
                _outgoing, future, key=_key("strips", round_, index), **_on(owner[index])
            )
            for neighbour in summary["changed"]:
                changed += 1
                incoming[neighbour].append((index, sent))
        tasks += len(solved)
        moved += round_bytes
        wall = time.perf_counter() - started
        log.info(
            "round %d: %d active tiles (%d waiting), %d strips changed, %.3g MB moved, %.2f s "
            "(tile tasks %.2f s, solvers %.2f s)",
            round_, len(solved), len(waiting), changed, round_bytes / 1e6, wall,
            round_seconds["task"], round_seconds["solve"],
            extra={"tile_seconds": {**round_seconds, "round": wall}},
        )  # fmt: skip
        incoming = dict(incoming)
        round_ += 1

    log.info(
        "solved in %d rounds: %d tile solves of %d tiles, %.3g MB of strips moved, %.2f s",
        round_, tasks, len(geometry), moved / 1e6, time.perf_counter() - solve_started,
    )  # fmt: skip
    if stats is not None:
        stats.update(rounds=round_, tasks=tasks, bytes=moved, tiles=len(geometry))

    def assemble(name, dtype_):
        blocks = np.empty(geometry.counts, dtype=object)
        for index in geometry:
            shape = tuple(s.stop - s.start for s in geometry.interior(index))
            part = client.submit(
                _interior, states[index], geometry, name, key=_key(name, 0, index),
                **_on(owner[index]),
            )  # fmt: skip
            blocks[index] = da.from_delayed(part, shape, dtype=dtype_)
        return da.block(blocks.tolist())

    return assemble("times", np.dtype(dtype)), assemble("predecessor", star.predecessor_dtype)
