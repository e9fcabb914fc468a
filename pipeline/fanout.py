"""Many sources' fields solved on a Dask cluster's workers: :func:`traveltimes` with ``client=``.

A survey (:mod:`raygrid.pipeline.survey`) writes each source to a Zarr store as it is done;
here the fields come back to the caller, as :func:`~raygrid.pipeline.traveltimes` returns
them without a client, and are bitwise the same (the same solver, on the same prepared
graph, built once on the client and sent once to every worker).
"""

from __future__ import annotations

import contextvars
import math
import uuid
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels import MoserGraph, Star
from .errors import InputError, RunFailed
from .grid import Grid
from .interrupts import check_interrupts
from .options import Options

__all__ = [
    "SolveTask", "solve_chunk", "solve_on_client", "chunk_size", "TASK_BYTES",
    "check_workers_gpu", "check_workers_raygrid", "workers_gpu", "unusable_reason",
    "gpu_usable", "submit_shares", "finished_in_turn", "joined_threads", "workers_left",
    "release_held", "sizing_threads", "adaptive_unused",
]  # fmt: skip

#: The most bytes of fields (and predecessors) one task returns: a worker holds them until
#: the client has read them, and a task of thousands of fields would hold gigabytes.
TASK_BYTES = 256 * 2**20


@dataclass(frozen=True)
class SolveTask:
    """What every worker needs, sent once per worker: the model, star, options, and the CPU
    solver's prepared graph (``None`` on CUDA, whose solver keeps its own device arrays)."""

    grid: Grid
    star: Star
    options: Options
    graph: MoserGraph | None
    threads: int
    predecessors: bool


def unusable_reason() -> str | None:
    """Why this worker cannot run CUDA kernels, or ``None`` (the simulator runs them)."""
    from ..kernels import cuda  # numba.cuda only where it is asked for

    return None if cuda.simulating() else cuda.unusable_reason()


def gpu_usable() -> bool:
    """Whether this worker has a GPU it can run CUDA kernels on (never the simulator)."""
    from ..kernels import cuda

    return cuda.cuda_usable()


def workers_gpu(client: Any) -> bool:
    """Whether the Dask workers joined so far all have a usable GPU: ``backend="auto"``
    on them, which, as on this machine, never picks the simulator."""
    usable = client.run(gpu_usable).values()
    return bool(usable) and all(usable)


def check_workers_gpu(client: Any) -> None:
    """Refuse CUDA solves on workers (those joined so far) that cannot run CUDA kernels,
    naming the first and why, before anything is sent: their tasks would each fail.

    Raises
    ------
    InputError
        Naming the worker and its reason (no GPU, no CUDA compiler).
    """
    _refuse_workers(
        client.run(unusable_reason), lambda reason: reason is not None,
        "backend cuda, but {n} of the {of} Dask workers cannot run CUDA kernels: worker "
        "{worker}: {said}; start the workers on GPU nodes, or use backend cpu",
    )  # fmt: skip


def _refuse_workers(found: dict, refused: Callable[[Any], bool], said: str) -> None:
    """Refuse the Dask workers whose answer in ``found`` (``client.run``'s, by worker) is
    ``refused``, with ``said`` naming how many (``{n}`` of ``{of}``), the first
    (``{worker}``) and its answer (``{said}``)."""
    them = {worker: answer for worker, answer in found.items() if refused(answer)}
    if them:
        worker, answer = next(iter(them.items()))
        raise InputError(said.format(n=len(them), of=len(found), worker=worker, said=answer))


def check_workers_raygrid(client: Any) -> None:
    """Refuse workers (those joined so far) that do not run this raygrid: started from
    another environment, each task failed on a worker with a 30-line traceback ending in
    "No module named 'raygrid'", after the store was made.

    Raises
    ------
    InputError
        Naming how many, the first and what it has instead.
    """
    from .version import __version__, code_digest

    def installed() -> str:  # nested: sent by value, so a worker without raygrid runs it
        try:
            from raygrid.pipeline.version import __version__ as version
            from raygrid.pipeline.version import code_digest as digest
        except Exception as error:  # (ImportError, or raygrid's own failing to import)
            return f"{type(error).__name__}: {error}"
        return f"raygrid {version} (code {digest()})"

    # The code, not only the version: every development build is 0.1.0, and workers of
    # another checkout (or started before an edit) solved with other code than the store
    # records, without a word.
    here = f"raygrid {__version__} (code {code_digest()})"
    _refuse_workers(
        client.run(installed), lambda said: said != here,
        f"{{n}} of the {{of}} Dask workers do not run this raygrid, {here}: worker "
        "{worker}: {said}; start them from the environment raygrid runs in here (its "
        "Python, or one where the same raygrid is installed), or restart them after an "
        "edit (client.restart(); and this Python, if the edit came after it imported "
        "raygrid)",
    )  # fmt: skip


def solve_chunk(task: SolveTask, share: tuple[int, list]) -> tuple[np.ndarray, np.ndarray | None]:
    """Solve a share of the sources (a Dask task), ``(first source's number, seeds)``:
    times and predecessors, each ``(len(seeds), n_nodes)``, as
    :func:`~raygrid.pipeline.solve.solve_seeds` gives."""
    from .solve import solve_seeds

    _, seeds = share
    return solve_seeds(
        task.grid, task.star, task.options, seeds, task.threads, graph=task.graph,
        predecessors=task.predecessors,
    )  # fmt: skip


#: Seconds :func:`joined_threads` waits for a first worker to join a cluster that has none
#: yet (scaled up just before, a nanny's restart), and one that asks for none (workers
#: started by hand): an adaptive cluster's is waited for as long as it takes (a batch
#: queue), said once this has passed.
WORKERS_WAIT_S, ASKED_NONE_WAIT_S = 60.0, 10.0

#: Seconds a held worker (:func:`joined_threads`) is held at most, if nothing releases it.
HOLD_S = 600.0

#: For each client: what releases the tasks holding its first worker, by task
#: (:func:`joined_threads`), once a call's own tasks wait (:func:`release_held`).
_HELD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

#: The held task of the call running in this thread (or context), if any: two calls on
#: one client from two threads each release their own.
_HOLDING: contextvars.ContextVar[str | None] = contextvars.ContextVar("holding", default=None)


def joined_threads(client: Any) -> int:
    """The threads of ``client``'s workers that run tasks, once at least one has joined:
    asked before the workers are (their GPUs, their raygrid), which right after a
    cluster's ``scale()`` would ask none, and each pass. Workers Dask has paused (their
    memory past its pause fraction) run nothing: a cluster of only those is said to be so
    at once.

    With none there, a task is left waiting for a worker: an adaptive cluster
    (``cluster.adapt()``, dask-jobqueue's usual way) starts workers for tasks that wait,
    not for a client waiting for workers (the call failed after a minute). The task holds
    the first worker until :func:`release_held` (the call's own tasks submitted): idle
    while the call checked it and scattered the model, it was retired (a second queue
    wait, and the next one unchecked). It is nested, sent by value: a worker without
    raygrid runs it, and is then refused by name, not killed by its unpickling.
    """
    from .cluster import paused_said, worker_info

    workers = worker_info(client)
    if workers and not any(info.get("status") == "running" for info in workers.values()):
        paused = paused_said(workers)
        if paused:
            raise RunFailed(f"the Dask cluster's workers run nothing: {paused}")
    if not client.nthreads():
        _wait_for_one(client)
    return sum(client.nthreads().values())


def _wait_for_one(client: Any) -> None:
    """:func:`joined_threads`' wait for a first worker, with a held task."""
    import time

    from distributed import Event

    from .errors import warn_input

    cluster = getattr(client, "cluster", None)
    adaptive = _adapting(cluster)
    asks_none = not adaptive and getattr(cluster, "worker_spec", None) == {}
    name = f"raygrid-hold-a-worker-{uuid.uuid4().hex[:8]}"
    event = Event(name, client=client)

    def hold(name: str, most: float) -> None:  # nested: sent by value (see above)
        from distributed import Event, secede

        # Out of the worker's thread pool, still a task under way: the worker is busy to
        # the cluster's scaling, while its thread runs the call's own reads (a lazy
        # model's, through this client) instead of waiting out the hold.
        secede()
        Event(name).wait(timeout=most)

    _HELD.setdefault(client, {})[name] = (event, None)  # (a Ctrl-C between: released)
    _HOLDING.set(name)
    _HELD[client][name] = (event, client.submit(hold, name, HOLD_S, key=name, pure=False))
    limit = ASKED_NONE_WAIT_S if asks_none else WORKERS_WAIT_S
    start, warned = time.monotonic(), False
    try:
        while not client.nthreads():
            check_interrupts()
            try:
                client.wait_for_workers(1, timeout=1.0)
            except TimeoutError:
                pass
            waited = time.monotonic() - start
            if waited < limit or client.nthreads():
                continue
            if adaptive:  # queued batch jobs: waited for, as Dask's own computations do
                if not warned:
                    warn_input(
                        f"no worker has joined the client's adaptive cluster within "
                        f"{WORKERS_WAIT_S:g} s (its jobs queued?): still waiting for one; "
                        "Ctrl-C stops the call"
                    )
                    warned = True
                continue
            if asks_none:  # (waited for a minute before: ASKED_NONE_WAIT_S now)
                raise RunFailed(
                    f"the client's cluster ({type(cluster).__name__}) has no workers and asks "
                    f"for none (none joined within {limit:g} s): scale it first (cluster."
                    "scale(n), then client.wait_for_workers(n)), or make it adaptive "
                    "(cluster.adapt(...)), or leave client out to solve here"
                )
            raise RunFailed(
                f"no Dask worker joined the client's cluster within {limit:g} s: start some "
                "(cluster.scale(n), then client.wait_for_workers(n)), or leave client out "
                "to solve here"
            )
    except BaseException:
        release_held(client)
        raise


def release_held(client: Any) -> None:
    """End the task :func:`joined_threads` left holding ``client``'s first worker for the
    call running in this thread, if any: once the call's own tasks wait (an adaptive
    cluster keeps its workers for them), or as the call ends."""
    name = _HOLDING.get()
    if name is None:
        return
    _HOLDING.set(None)
    try:
        held = _HELD.get(client, {}).pop(name, None)
    except TypeError:  # not a client (refused by the caller): nothing held
        return
    if held is None:
        return
    event, future = held
    try:
        event.set()
        if future is not None:
            future.cancel()
    except Exception:  # noqa: BLE001 - the cluster gone: nothing left to hold
        pass


def _adapting(cluster: Any) -> bool:
    """Whether ``cluster`` (a client's, if any) scales itself to the tasks waiting
    (``cluster.adapt()``, not stopped by a ``scale()`` since)."""
    adaptive = getattr(cluster, "_adaptive", None)
    return adaptive is not None and getattr(adaptive, "periodic_callback", None) is not None


def adaptive_unused(client: Any, workers: int) -> str | None:
    """What to say when a tiled solve starts on an adaptive cluster with fewer workers than
    it may grow to: its tiles are dealt to the ``workers`` there (they keep their tiles to
    the end), the others get none; ``None`` otherwise."""
    most = _adaptive_maximum(getattr(client, "cluster", None))
    if most is None or workers >= most:
        return None
    return (
        f"the client's cluster is adaptive and has {workers} worker(s) as this tiled solve "
        "starts: its tiles are dealt to those alone, to the end (tiles spread a model over "
        "the workers there, and a model too large for them will not fit): scale it first "
        "(cluster.scale(n), then client.wait_for_workers(n))"
    )


def sizing_threads(client: Any, threads: int) -> int:
    """The worker threads to size a call's shares for: those joined (``threads``), or on
    an adaptive cluster those it may grow to (its ``maximum`` workers of the joined ones'
    threads each; without a maximum, :data:`ADAPTIVE_GROWTH` times those joined), so that
    its tasks are enough to make it grow (sized for its first worker, 20 sources went out
    in 2 tasks, to 2 workers)."""
    most = _adaptive_maximum(getattr(client, "cluster", None))
    if most is None:
        return threads
    if most == math.inf:  # (a task a source was 10^5 tasks)
        return threads * ADAPTIVE_GROWTH
    workers = max(len(client.nthreads()), 1)
    return max(threads, math.ceil(threads / workers * most))


def _adaptive_maximum(cluster: Any) -> float | None:
    """The most workers an adaptive ``cluster`` may grow to (``math.inf`` without a
    bound); ``None`` for one that is not adaptive (:func:`_adapting`)."""
    if not _adapting(cluster):
        return None
    return getattr(cluster._adaptive, "maximum", math.inf)


#: How many times its joined workers an adaptive cluster without a maximum is taken to
#: grow to, for sizing shares (:func:`sizing_threads`).
ADAPTIVE_GROWTH = 16


def workers_left(error: BaseException, client: Any) -> RunFailed:
    """What a call stops with when the cluster's workers left as it started (scaled down,
    their jobs ended), or Dask paused them all (they take no scattered data): Dask said "No
    valid workers found" after 30 s, or "Stream is closed"."""
    from .cluster import paused_said, worker_info

    try:
        paused = paused_said(worker_info(client))
    except Exception:  # (the scheduler gone too)
        paused = ""
    if paused:
        return RunFailed(f"the Dask cluster's workers run nothing: {paused}")
    return RunFailed(
        f"the Dask cluster's workers left as the call started ({type(error).__name__}: "
        f"{error}); nothing was solved: call again once the cluster has workers "
        "(client.wait_for_workers(n))"
    )


def _lost(error: BaseException, start: int, count: int, client: Any) -> RunFailed:
    """What a call stops with when the task of sources ``start`` to ``start + count - 1``
    lost its worker: killed by its own solve (memory, a crash: Dask's ``KilledWorker``),
    or cancelled with every worker holding the model (or the scheduler gone)."""
    from distributed import KilledWorker

    which = f"sources {start}-{start + count - 1}" if count > 1 else f"source {start}"
    if isinstance(error, KilledWorker):
        return RunFailed(
            f"the Dask workers solving {which} died each time it was tried "
            f"({error.allowed_failures + 1} workers, the last "
            f"{getattr(error.last_worker, 'address', error.last_worker)}): killed "
            "for memory (each task holds its sources' fields: fewer per call, or more memory "
            "a worker) or a crash (see the workers' logs); nothing was kept"
        )
    gone = "every worker holding the model died"
    if client.status != "running":
        gone = "the scheduler went away"
    return RunFailed(
        f"{gone} while {which} {'were' if count > 1 else 'was'} being solved: killed for "
        "memory, a crash (see the workers' logs) or their batch jobs ended (cancelled, or "
        "their walltime); nothing was kept: call again once the cluster has workers, with "
        "fewer sources per call if they ran out of memory"
    )


def chunk_size(n_sources: int, worker_threads: int, node_bytes: int, batch: int) -> int:
    """Sources a task solves: about two tasks per worker thread (a slow worker then holds
    back less of the end), at most :data:`TASK_BYTES` of results, and a whole number of
    GPU batches (``batch`` sources relaxed together). A batch wins over the byte bound:
    at least one whole batch a task, however large its fields."""
    most = max(TASK_BYTES // max(node_bytes, 1), 1)
    size = max(min(math.ceil(n_sources / max(2 * worker_threads, 1)), most), 1)
    whole = math.ceil(size / batch) * batch  # whole batches: up, unless past the bytes
    if whole > most:
        whole = max(size // batch * batch, batch)
    return min(whole, n_sources)


def submit_shares(
    client: Any, shared: Any, function: Callable, shares: list[tuple[Any, Any]], name: str
) -> dict[str, tuple[Any, Any]]:
    """Send ``shared`` (the model and what goes with it: the large inputs) to every worker
    once, then submit ``function(shared, share)`` for each ``(share, (first, last))``:
    ``{key: (future, share)}``, keys ``raygrid-<name>-<first>-<last>-<run>``.

    Scattered data is not recomputable: a worker started since (a nanny's restart, a batch
    system's new job) fetches it from one that holds it, so when every holder has died the
    tasks left are cancelled (:func:`finished_in_turn`'s caller decides what then).
    """
    scattered = client.scatter(shared, broadcast=True, hash=False)
    run = uuid.uuid4().hex[:8]
    tasks = {}
    for share, (first, last) in shares:
        key = f"raygrid-{name}-{first}-{last}-{run}"
        tasks[key] = (client.submit(function, scattered, share, key=key, pure=False), share)
    release_held(client)  # the tasks wait now: they keep an adaptive cluster's workers
    return tasks


def finished_in_turn(client: Any, tasks: dict[str, tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """``(future, share)`` of :func:`submit_shares`' tasks as each finishes (or fails),
    taken out of ``tasks`` as they come; whatever is left when the caller stops (an error,
    Ctrl-C) is cancelled, and ``tasks`` emptied, once the generator is closed (the callers
    hold it in ``contextlib.closing``: not left to the garbage collector).

    A future the client still holds is one the scheduler recomputes when the worker holding
    its result dies: taken out as read, a finished task is not run again.
    """
    from distributed import as_completed

    running = as_completed([future for future, _ in tasks.values()], loop=client.loop)
    try:
        for future in running:
            check_interrupts()  # a Ctrl-C Python dropped (in a gc callback, say)
            _, share = tasks.pop(future.key)
            yield future, share
    finally:
        client.cancel([future for future, _ in tasks.values() if not future.done()])
        tasks.clear()


def solve_on_client(
    client: Any,
    task: SolveTask,
    seeds: list[tuple[np.ndarray, np.ndarray]],
    solved: Callable[[int], None],
) -> tuple[np.ndarray, np.ndarray | None]:
    """Solve ``seeds`` (one ``(nodes, times)`` pair a source) on ``client``'s workers.

    The task (model, graph) is scattered to every worker once; the sources go out in
    chunks (:func:`chunk_size`) and their fields are copied into the result as each chunk
    finishes, ``solved(n)`` counting them. A task that fails stops the call with its error
    (the others are cancelled); the workers that held the model all dying stops it with
    :class:`RunFailed` (nothing is kept: unlike a survey's store, the result is this call's).
    Called within :func:`~raygrid.pipeline.interrupts.interrupts_kept` (as
    :func:`~raygrid.pipeline.traveltimes` calls it), a Ctrl-C dropped where Python ignores
    exceptions is raised again between shares.
    """
    from distributed import KilledWorker

    options = task.options
    n_nodes = math.prod(task.grid.shape3)
    times = np.empty((len(seeds), n_nodes), dtype=options.dtype)
    predecessor = (
        np.empty((len(seeds), n_nodes), dtype=task.star.predecessor_dtype)
        if task.predecessors
        else None
    )
    node_bytes = n_nodes * (times.itemsize + (predecessor.itemsize if task.predecessors else 0))
    threads = sizing_threads(client, joined_threads(client))
    size = chunk_size(len(seeds), threads, node_bytes, options.batch)
    shares = [
        ((start, seeds[start : start + size]), (start, min(start + size, len(seeds)) - 1))
        for start in range(0, len(seeds), size)
    ]
    try:
        tasks = submit_shares(client, task, solve_chunk, shares, "traveltimes")
    except (OSError, TimeoutError) as error:  # (CommClosedError is an OSError)
        raise workers_left(error, client) from None
    with closing(finished_in_turn(client, tasks)) as finished:
        for future, (start, share) in finished:
            try:
                share_times, share_predecessor = future.result()
            except (CancelledError, KilledWorker) as error:
                raise _lost(error, start, len(share), client) from None
            stop = start + len(share_times)
            times[start:stop] = share_times
            if predecessor is not None:
                predecessor[start:stop] = share_predecessor
            future.release()  # the worker's copy goes now, not at the end
            solved(stop - start)
    return times, predecessor
