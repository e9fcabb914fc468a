"""The Dask client of a cluster file (:mod:`raygrid.pipeline.clusterfile`): a cluster started
(local, local-cuda, dask-jobqueue's worker jobs) or joined (an existing scheduler), its
workers waited for, and batch jobs watched (through :mod:`raygrid.pipeline.batchjobs`: their
states, why one cannot start, workers lost) so that a run says what happened instead of
waiting out its timeout.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from .batchjobs import (
    SUBMIT_COMMANDS,
    Echo,
    answers_kept,
    jobs_ended,
    jobs_lost,
    log_ending,
    refusal_hint,
)
from .clusterfile import (
    ClusterConfig,
    JobQueueConfig,
    LocalConfig,
    LocalCUDAConfig,
    SchedulerConfig,
    memory_bytes,
)
from .errors import InputError

__all__ = ["SCHEDULER_CONFIG", "connect", "scheduler_security", "worker_info"]


#: Scheduler settings of every cluster raygrid starts itself (a user's scheduler keeps its
#: own; the functions that use these say what that costs there).
SCHEDULER_CONFIG = {
    # Tile tasks are placed on their owners (raygrid.pipeline.decompose); stealing would
    # only move tile states between workers.
    "distributed.scheduler.work-stealing": False,
    # A survey broadcasts its model (and weights) to every worker once. The active memory
    # manager's ReduceReplicas drops a replica that no task assigned to that worker names
    # yet (queued tasks are not assigned), and the worker then fetches it again: seen as a
    # second copy of the model arriving late in a run.
    "distributed.scheduler.active-memory-manager.start": False,
}


@contextmanager
def connect(config: ClusterConfig, *, echo: Echo | None = None) -> Iterator[Any]:
    """Start (or join) the cluster a config describes; yield a connected ``Client``.

    Prints the dashboard URL through ``echo`` when there is one. Everything raygrid started
    is closed on exit.

    Raises
    ------
    InputError
        When the cluster cannot be had: dask-cuda or dask-jobqueue missing, no GPU for
        ``local-cuda``, no scheduler at the address, no worker within the timeout.
    """
    from distributed import Client

    from .interrupts import closing_uninterrupted

    echo = echo or (lambda message: print(message, file=sys.stderr))
    with closing_uninterrupted() as hold, ExitStack() as stack:
        if isinstance(config, SchedulerConfig):
            client = stack.enter_context(_scheduler_client(config, echo))
        elif isinstance(config, (LocalConfig, LocalCUDAConfig)):
            from .interrupts import IgnoreInterrupts, interrupts_held, quiet_slow_worker_close

            stack.enter_context(quiet_slow_worker_close())  # left after the cluster closes
            # Ctrl-C reaches local worker processes too: held back until they are set to
            # ignore it, then raised here, with the cluster whole and closable.
            with interrupts_held():
                client = stack.enter_context(Client(_started_in(stack, config)))
                client.register_plugin(IgnoreInterrupts(os.getpid()), name="raygrid-sigint")
        else:
            cluster = _started_in(stack, config)
            client = stack.enter_context(Client(cluster))
            if isinstance(config, JobQueueConfig):
                from .interrupts import quiet_client_interrupts

                stack.callback(_workers_closed_first, client)  # before the jobs are cancelled

                quiet_client_interrupts(client)  # Ctrl-C while the jobs are awaited
                _wait_for_jobs(client, config, cluster.job_cls, echo)
                _GONE[client] = jobs_ended(config, cluster.job_cls.submitted)
                _LOST[client] = jobs_lost(config, cluster.job_cls.submitted)
        from .interrupts import quiet_client_interrupts

        quiet_client_interrupts(client)
        wanted = getattr(config, "dashboard_address", "") is not None  # null: none asked for
        link = client.dashboard_link if wanted and _has_dashboard(client) else None
        if link and isinstance(config, SchedulerConfig) and not _serves_dashboard(link):
            link = None  # started with --no-dashboard (raygrid submit's scheduler can be)
        if link:
            echo(f"dashboard: {link}")
        try:
            yield client
        finally:
            hold()  # what was started closes whole, however often Ctrl-C is pressed


def _started_in(stack: ExitStack, config):
    """The cluster of ``config``, started and closed with ``stack``."""
    with warnings.catch_warnings():
        # Dask warns in four lines when the dashboard's port is taken (another run) and
        # serves it on a free one; the link connect prints names that one.
        warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
        return stack.enter_context(_start(config))


def worker_info(client: Any) -> dict[str, dict]:
    """The scheduler's record of each worker (memory limit, threads, metrics), by address.

    Asked of the scheduler, not read from ``client.scheduler_info()``: that returns the
    client's cache, which its periodic refresh replaces with one holding no workers, and
    could between the fetch and the read (seen in CI: a cluster of two workers read as
    none).
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def _has_dashboard(client) -> bool:
    try:
        return bool(client.scheduler_info().get("services", {}).get("dashboard"))
    except Exception:
        return False


def _serves_dashboard(link: str) -> bool:
    """Whether a scheduler's dashboard link answers. A scheduler started without its
    dashboard still serves HTTP (health, metrics) and names it "dashboard" to clients, so
    its link gave 404. Where the link cannot be reached from here (a firewall), it is
    printed anyway: it may well work from the user's browser."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(link, timeout=2):
            return True
    except urllib.error.HTTPError as error:
        return error.code != 404
    except (OSError, ValueError):
        return True


#: Set by ``raygrid submit``'s job script for the ``raygrid run`` inside it: a file its
#: worker launcher (``srun``, ``pbsdsh``) writes its exit status into when it ends, all the
#: workers with it, and the launcher's log; so that workers that all stopped at start are
#: said at once, with their log, not after the whole timeout. (A file, not a process id: a
#: run in a container with its own process namespace sees no process of the job's shell.)
WORKERS_ENDED_ENV, WORKERS_LOG_ENV = "RAYGRID_WORKERS_ENDED", "RAYGRID_WORKERS_LOG"
#: The same for the job's Dask scheduler: said at once if it stops before it has written
#: its scheduler file (an interface its node lacks), not after the whole timeout.
SCHEDULER_ENDED_ENV, SCHEDULER_LOG_ENV = "RAYGRID_SCHEDULER_ENDED", "RAYGRID_SCHEDULER_LOG"


#: For the clients of worker jobs (``raygrid run --cluster`` with dask-jobqueue): what says
#: the jobs have ended (:func:`jobs_ended`), for :func:`workers_gone`.
_GONE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: For the same clients: what says a worker job ended while others run (:func:`jobs_lost`),
#: for :func:`workers_lost`.
_LOST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def workers_lost(client: Any) -> Callable[[], str | None]:
    """For a run on ``client``: what says, once, that some of its workers have gone and
    others run (the run goes on with fewer, and said nothing: a cancelled job or a lost
    node went unnoticed), or ``None``: its worker jobs' states where dask-jobqueue
    submitted them (:func:`jobs_lost`), else its workers counted from now on
    (:func:`_workers_dropped`: a submitted job's, a scheduler's, a local cluster's)."""
    return _LOST.get(client) or _workers_dropped(client)


#: Seconds :func:`_workers_dropped` lets a worker be gone before it is said (a nanny
#: restarts its worker within seconds, under the same name), and asks at most every.
WORKERS_BACK_S, WORKERS_ASKED_S = 30.0, 10.0


def _workers_dropped(client: Any) -> Callable[[], str | None]:
    """What to say when fewer of ``client``'s workers are there than have been, for
    :data:`WORKERS_BACK_S` s; each loss said once. A worker of a submitted job on a lost
    node, or one of an existing scheduler's stopped, left the run going on with fewer,
    without a word. Counted (the names of those gone are said where known): a nanny's
    restarted worker may come back under another name (its new address). None left at
    all is said otherwise (the survey waits for one to join, :func:`workers_gone`)."""
    import time

    seen = {"most": 0, "names": set(), "asked": float("-inf"), "since": None}

    def dropped() -> str | None:
        now = time.monotonic()
        if now - seen["asked"] < WORKERS_ASKED_S:
            return None
        seen["asked"] = now
        try:
            workers = worker_info(client)
        except Exception:  # the scheduler gone: said otherwise
            return None
        names = {str(info.get("name", address)) for address, info in workers.items()}
        if len(names) >= seen["most"] or not names:  # all back (or more); or none: not this
            if len(names) >= seen["most"]:
                seen.update(most=len(names), names=names)
            seen["since"] = None
            return None
        if seen["since"] is None:
            seen["since"] = now
        if now - seen["since"] < WORKERS_BACK_S:
            return None
        lost, was, gone = seen["most"] - len(names), seen["most"], sorted(seen["names"] - names)
        seen.update(most=len(names), names=names, since=None)  # the next loss said anew
        named = f" ({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''})" if gone else ""
        return (
            f"{lost} of the {was} Dask workers left{named} and have not come back within "
            f"{WORKERS_BACK_S:g} s: the run goes on with {len(names)} (the tasks they held "
            "run again elsewhere)"
        )

    return dropped


def workers_gone(client: Any) -> str | None:
    """Why no worker will join ``client``'s cluster any more, as a clause ("the worker job
    12 ended (TIMEOUT): see ..."), or ``None`` when one may: the worker jobs dask-jobqueue
    submitted for it have all ended (none is submitted again), or a submitted job's
    workers' launcher has. A survey whose workers all died then stops at once instead of
    waiting for one to join."""
    return (_GONE.get(client) or _nothing)()


def _wait(
    client,
    n: int,
    timeout: float,
    what: str,
    stopped: Callable[[], str | None] | None = None,
    late: str = "",
    limit: float | None = None,
    job: bool = True,
) -> None:
    """Wait up to ``timeout`` s for ``n`` workers; ``stopped`` says why none can come any
    more (the workers' launcher or jobs ended), or ``None``: by default,
    :func:`_launcher_ended`. ``late`` is said after the timeout's message, which names
    ``limit`` s (the whole wait, of which ``timeout`` is what is left), or ``timeout``.
    ``job=False``: a scheduler that is not this run's job's own (:func:`_the_jobs_own`):
    the job script's variables, if any are set, say nothing of it."""
    import time

    stopped_now = stopped or (_launcher_ended if job else _nothing)
    if n <= 0:
        return
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            # In steps: the job's workers may all have stopped meanwhile.
            client.wait_for_workers(n, timeout=max(min(left, 1.0), 0.001))
            return
        except TimeoutError:
            pass
        ended = stopped_now()
        if ended or left <= 1.0:
            break
    try:
        workers = worker_info(client)
    except Exception:  # the scheduler gone meanwhile: the timeout is the news
        workers = {}
    arrived = sum(info.get("status") == "running" for info in workers.values())
    paused = paused_said(workers)
    if paused:  # joined, but Dask runs nothing on them: counted as absent, said why
        late = f"; {len(workers) - arrived} more joined but {paused}{late}"
    said = f"only {arrived} of the {n} Dask workers asked for" if arrived else "no Dask worker"
    if ended:
        raise InputError(f"{said} joined ({what}), and {ended}")
    limit = timeout if limit is None else limit
    raise InputError(
        f"{said} arrived within {limit:g} s ({what}){late or (_see_log() if job else '')}"
    )


def paused_said(workers: dict[str, dict]) -> str:
    """``"Dask has paused them (...): restart them, or ..."`` for the paused workers of
    :func:`worker_info`'s record, or ``""``: a worker past its memory's pause fraction
    joined, but runs nothing (it counts as not arrived, and takes no scattered data)."""
    paused = sorted(w for w, info in workers.items() if info.get("status") == "paused")
    if not paused:
        return ""
    return (
        f"Dask has paused them (their memory is past its pause fraction: "
        f"{', '.join(paused[:3])}): restart them, or give them more memory"
    )


def _nothing() -> None:
    """No reason a cluster's workers cannot come (a scheduler not this run's job's own)."""
    return None


def _launcher_ended() -> str | None:
    """What to say once the job's worker launcher has ended (:data:`WORKERS_ENDED_ENV`),
    or ``None`` while it runs (or outside such a job)."""
    ended = os.environ.get(WORKERS_ENDED_ENV)
    if not ended:
        return None
    try:
        status = Path(ended).read_text(errors="replace").strip()
    except OSError:  # not yet written: the launcher runs
        return None
    where = _see_log(tail=True) or ": see the job's log"
    return f"the job's workers have all stopped (their launcher exited with status {status}){where}"


def _see_log(tail: bool = False) -> str:
    """Where the job's workers wrote what they said (:data:`WORKERS_LOG_ENV`), with its last
    lines when ``tail``; ``""`` outside a submitted job."""
    log = os.environ.get(WORKERS_LOG_ENV)
    if not log:
        return ""
    said = f": see {log}"
    if Path(log).with_name("node.sh").exists():  # PBS: each worker has its own log
        said += " and the worker-*.log beside it"
    return said + (log_ending(Path(log)) if tail else "")


def _wait_for_jobs(client, config: JobQueueConfig, jobs: type, echo: Echo) -> None:
    """Wait for the batch system's answer to every worker job dask-jobqueue submitted
    (:func:`answers_kept`), say it, then wait for the first worker.

    Refused jobs are said with the batch system's words; all refused, at once: the
    submission runs in Dask's event loop, and a refusal surfaced as tracebacks there, then
    the whole ``wait_timeout`` of silence, then an ``AssertionError`` from Dask's close.
    """
    import time

    command = SUBMIT_COMMANDS[config.cluster]
    deadline = time.monotonic() + config.wait_timeout
    while len(jobs.submitted) + len(jobs.refused) < config.nodes:
        if time.monotonic() > deadline:  # the command itself hangs (a controller down)
            raise InputError(
                f"{command} did not answer for the worker jobs within {config.wait_timeout:g} s"
            )
        time.sleep(0.05)
    if jobs.refused:
        some = f"{len(jobs.refused)} of the {config.nodes}" if jobs.submitted else "the"
        said = f"{command} refused {some} worker job(s) of the cluster file: {jobs.refused[0]}"
        if not jobs.submitted:
            hint = refusal_hint(jobs.refused[0], gpus=config.gpus_per_worker > 0)
            raise InputError(f"{said} ({hint})")
        echo(said)
    # In the order submitted (job ids count up), not the order the answers came in.
    ids = ", ".join(sorted(jobs.submitted, key=lambda job: (len(job), job)))
    n = len(jobs.submitted)
    echo(f"submitted {n} {config.cluster} worker job(s) (job{'s' * (n > 1)} {ids})")
    queue = "squeue" if config.cluster == "slurm" else "qstat"
    late = f"; are they still queued ({queue})? Their logs go to {config.log_directory}"
    _wait(
        client, 1, max(deadline - time.monotonic(), 0.001), "from the worker jobs",
        jobs_ended(config, jobs.submitted, echo), late=late, limit=config.wait_timeout,
    )  # fmt: skip


@contextmanager
def _scheduler_client(config: SchedulerConfig, echo: Echo):
    import dask
    from distributed import Client

    address = config.address
    own = _the_jobs_own(config)  # else the job script's variables, if set, say nothing of it
    default_scheduler = dask.config.get("scheduler", None)  # (restored after a shutdown)
    try:
        if config.scheduler_file is not None:
            if not config.scheduler_file.exists():
                echo(f"waiting up to {config.timeout:g} s for {config.scheduler_file} to appear")
                _wait_for_file(config.scheduler_file, config.timeout, job=own)
            # A file left behind by a scheduler that has stopped names an address nothing
            # answers at: said at once, as for an address, not after the whole timeout.
            address = _address_in(config.scheduler_file)
            if address is None:  # Dask's client failed on it with a JSON or key traceback
                raise InputError(
                    f"{config.scheduler_file} is not a Dask scheduler file (JSON with the "
                    "scheduler's 'address', as dask scheduler --scheduler-file writes it)"
                )
            if address.startswith("inproc://"):  # a ValueError traceback from Dask
                raise InputError(
                    f"{config.scheduler_file} names an in-process address ({address}), which "
                    "only the process that started that cluster can reach"
                )
            security = scheduler_security(config, address)
            if address:
                _say_if_silent(
                    address, config.timeout, echo,
                    f", the address in {config.scheduler_file} (left by a scheduler that has "
                    "stopped?)", security=security,
                )  # fmt: skip
            client = Client(
                scheduler_file=str(config.scheduler_file), timeout=config.timeout,
                security=security,
            )  # fmt: skip
        else:
            security = scheduler_security(config, address)
            _say_if_silent(config.address, config.timeout, echo, security=security)
            client = Client(config.address, timeout=config.timeout, security=security)
    except (OSError, TimeoutError) as error:
        where = address or config.scheduler_file
        if config.scheduler_file is not None and address:
            where = f"{address} (from {config.scheduler_file})"
        raise InputError(f"cannot reach the Dask scheduler at {where}: {error}") from None
    with client:
        whose = "the job's" if own else "the existing"
        # A survey's watch of lost workers (workers_gone): the job's launcher, where it
        # is this run's job's own scheduler; nothing of the variables otherwise.
        _GONE[client] = _launcher_ended if own else _nothing
        _wait(client, config.wait_for_workers, config.timeout, f"at {whose} scheduler", job=own)
        if not config.wait_for_workers and not worker_info(client):
            # A run then failed at its first task with Dask's "No valid workers found".
            raise InputError(
                f"no Dask worker has joined the scheduler at {client.scheduler.address}, and "
                "wait_for_workers: 0 waits for none: a run needs at least one (start them, "
                "e.g. dask worker --scheduler-file FILE, or set wait_for_workers: 1 to wait "
                "for them)"
            )
        try:
            yield client
        finally:
            if own:
                _close_the_jobs_cluster(client, before=default_scheduler)


def scheduler_security(config: SchedulerConfig, address: str | None) -> Any:
    """The ``Security`` a client of the scheduler at ``address`` presents: the cluster
    file's ``tls`` files, else Dask's configuration's (``None``: Dask reads it itself).

    A ``tls://`` scheduler without credentials anywhere is refused here, saying what to
    give: Dask's client failed with a TypeError about an ``ssl_context``. Credentials for
    a scheduler that does not speak TLS (a scheduler file naming ``tcp://``) are refused
    too: the client would refuse to speak to it unencrypted, after its timeout.
    """
    import dask

    from .credentials import files_security, unusable

    tls = (address or "").startswith("tls://")
    where = address if config.scheduler_file is None else f"{address} (in {config.scheduler_file})"
    if config.tls is not None:
        if address and not tls:
            raise InputError(
                f"the cluster file gives tls: credentials, but the scheduler at {where} does "
                "not speak TLS: remove the tls: section, or start the scheduler with them"
            )
        return files_security(
            config.tls.ca_file, config.tls.cert, config.tls.key or config.tls.cert
        )
    if not tls:
        return None
    configured = {
        name: dask.config.get(f"distributed.comm.tls.{name}", None)
        for name in ("ca-file", "client.cert", "client.key")
    }
    missing = [name for name in ("ca-file", "client.cert") if not configured[name]]
    if len(missing) == 2:
        raise InputError(
            f"the scheduler at {where} speaks TLS, and no credentials are given: add "
            "tls: {ca_file: ..., cert: ..., key: ...} to the cluster file (the files its "
            "scheduler was started with, or ones its certificate authority signed), or set "
            "them in Dask's configuration (distributed.comm.tls)"
        )
    if missing:  # Dask's client failed with a TypeError about an ssl_context
        names = " and ".join(f"distributed.comm.tls.{name}" for name in missing)
        raise InputError(
            f"the scheduler at {where} speaks TLS, and Dask's configuration gives part of "
            f"its credentials: {names} is not set (or give them all as the cluster file's "
            "tls: {ca_file: ..., cert: ..., key: ...})"
        )
    said = unusable(configured["ca-file"], configured["client.cert"], configured["client.key"])
    if said:
        raise InputError(f"Dask's configured TLS credentials (distributed.comm.tls): {said}")
    return None


def _the_jobs_own(config: SchedulerConfig) -> bool:
    """Whether this run is the one a submitted job started for the scheduler ``config``
    names: its job script's variables are set, and name the folder of that scheduler's
    file (the job's own). The variables alone (copied into a shell from a job script to
    debug) made a run close an existing scheduler and its workers it had not started."""
    ended = os.environ.get(WORKERS_ENDED_ENV)
    if not ended or config.scheduler_file is None:
        return False
    return Path(ended).resolve().parent == Path(config.scheduler_file).resolve().parent


def _close_the_jobs_cluster(client, timeout: float = 10.0, before: str | None = None) -> None:
    """Close a submitted job's workers, then its scheduler, once its run has ended.

    Each worker's nanny is told to close while the scheduler still listens: it stops its
    worker as it would itself, the worker removes its scratch folder, and the worker's
    process ends with status 0. Closed by the scheduler's own close (or stopped by the job
    script), the workers wrote tracebacks of a lost connection into the job's log and left
    their scratch folders; asked to close themselves, they often logged "Worker process
    died unexpectedly" (their nanny's queue closed under its reader); retired, the last
    kept data no other worker could take. Whatever has not closed within ``timeout`` s, or
    a scheduler gone meanwhile, is left to the job script, which stops it. ``before``:
    Dask's default scheduler before the client was made (:func:`_default_scheduler_kept`)."""
    try:
        _workers_closed_first(client, timeout)
        client.shutdown()
    except Exception:  # noqa: BLE001 - the job script stops what is left
        pass
    finally:
        _default_scheduler_kept(client, before)


def _workers_closed_first(client, timeout: float = 10.0) -> None:
    """Tell ``client``'s workers to close through their nannies (:func:`_close_workers`)
    and wait up to ``timeout`` s for them to go, before their scheduler or their batch
    jobs are stopped: each then exits of itself, with no traceback of a lost connection in
    its log. dask-jobqueue's worker jobs, closed by the scheduler's close and then
    SIGTERM, logged four tracebacks each."""
    import time

    try:
        client.run_on_scheduler(_close_workers)
        deadline = time.monotonic() + timeout
        while worker_info(client) and time.monotonic() < deadline:
            time.sleep(0.1)
    except Exception:  # noqa: BLE001 - what is left is stopped by the caller's close
        pass


def _default_scheduler_kept(client, before: str | None) -> None:
    """Dask's default scheduler as it was before ``client`` was made its default, once the
    client is shut down: ``Client.shutdown()`` (distributed 2026.8) left it set to the
    closed client's ("dask.distributed"), and the run's next computation (a submitted job
    drawing its ``outputs.plot`` from the finished store) failed with "Requested
    dask.distributed scheduler but no Client active": the job ended FAILED."""
    import dask
    from distributed.client import default_client

    try:
        if default_client().status == "running":
            return  # another client is the default now: its setting stands
    except ValueError:  # none (the shut-down one stays the default, closed, until collected)
        pass
    if dask.config.get("scheduler", None) != "dask.distributed" or before == "dask.distributed":
        return
    if before is None:
        dask.config.config.pop("scheduler", None)
    else:
        dask.config.set(scheduler=before)


async def _close_workers(dask_scheduler) -> None:
    """Tell every worker of ``dask_scheduler`` to close (run on the scheduler): through
    its nanny, which closes its connection before it can answer (not an error here), or
    itself where it has none."""
    import asyncio
    import contextlib

    async def close(worker) -> None:
        if worker.nanny is None:
            dask_scheduler.close_worker(worker.address)
            return
        with contextlib.suppress(Exception):
            await dask_scheduler.rpc(worker.nanny).terminate(reason="raygrid-run-ended")

    await asyncio.gather(*(close(worker) for worker in list(dask_scheduler.workers.values())))


def _say_if_silent(
    address: str, timeout: float, echo: Echo, whence: str = "", security: Any = None
) -> None:
    """Say at once that nothing answers at a scheduler's address: Dask retries a refused
    connection until the timeout (a scheduler may still be starting), two minutes of
    silence by default. Refuse an address where something accepts connections but does not
    speak as a Dask scheduler within the timeout (:func:`_probe`): Dask's client waited for
    its handshake forever, whatever its timeout, or read an HTTP server's (or an SSH
    server's) bytes as a message of exabytes ("out of memory: the model is too large")."""
    silent, mute = _probe(address, timeout, security)
    if silent:
        echo(
            f"nothing answers at {address} yet ({silent}){whence}; waiting up to "
            f"{timeout:g} s (the cluster file's timeout)"
        )
    elif mute:
        dashboard = (
            " (8787 is usually a Dask dashboard's port: a scheduler's is usually 8786)"
            if address.rstrip("/").endswith(":8787")
            else ""
        )
        raise InputError(
            f"something at {address}{whence} accepts connections but did not answer as a "
            f"Dask scheduler: {mute}{dashboard}; give the scheduler's own address (its log's "
            '"Scheduler at:" line; tls:// for one that speaks TLS), or try again once a '
            "busy or stopped scheduler answers"
        )


#: The largest first message (bytes) a Dask server's handshake may announce: its length
#: prefix is a small number (58 bytes seen with distributed 2026.8); another service's
#: first bytes read as one ("SSH-2.0-" is 3.3e18) are what Dask tried to allocate.
HANDSHAKE_BYTES = 2**20


def _probe(address: str, timeout: float, security: Any = None) -> tuple[str | None, str | None]:
    """``(silent, mute)`` of a plain TCP scheduler address, in one connection (each is a
    line in the scheduler's log): why it cannot be reached right now ("Connection
    refused"), else why what listens is not a Dask scheduler answering; ``(None, None)``
    where it is one, or where it cannot be told (another protocol, a malformed address:
    Dask says those itself).

    A Dask server writes its handshake as soon as a connection opens, before it reads
    anything (``distributed.comm.core``), as a message whose 8-byte length comes first, in
    the machine's byte order (``struct`` ``"Q"`` in ``distributed.comm.tcp``; little-endian
    on every platform Dask runs on, as read here); an HTTP server (a dashboard), a scheduler
    stopped (SIGSTOP) or hung writes nothing, an SSH server its banner. Nothing is sent, so
    no service is asked to parse a stranger's bytes."""
    import socket
    import struct

    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location, 8786)  # Dask's default scheduler port
    except Exception:
        return None, None
    if scheme not in ("tcp", "tls"):
        return None, None
    try:
        probe = socket.create_connection((host, port), timeout=2)
    except OSError as error:
        return error.strerror or type(error).__name__, None
    if scheme == "tls":  # its client speaks first: what listens is left to Dask's handshake
        _tls_hello(probe, security)
        return None, None
    first = b""
    with probe:
        # Silent for a moment: a TLS scheduler waits for its client's hello (said at once,
        # not after the whole timeout: "tcp://" given for a "tls://" scheduler).
        probe.settimeout(min(timeout, TLS_GUESS_S))
        asked = False
        while len(first) < 8:
            try:
                more = probe.recv(8 - len(first))
            except TimeoutError:
                if first or asked:
                    if not first:
                        return None, (
                            f"it sent nothing within {timeout:g} s (the cluster file's "
                            "timeout): a web server (a dashboard), or a scheduler stopped or "
                            "busy"
                        )
                    break
                asked = True
                if _speaks_tls(host, port, min(TLS_GUESS_S, timeout)):
                    return None, (
                        f"it speaks TLS: give its address as tls://{location} (with the "
                        "cluster file's tls: credentials)"
                    )
                probe.settimeout(max(timeout - TLS_GUESS_S, 0.001))
                continue
            except OSError:
                return None, None  # reset: Dask's client says so itself
            if not more:
                break
            first += more
    if not first:
        return None, "it closed the connection without a word"
    if len(first) < 8 or struct.unpack("<Q", first)[0] > HANDSHAKE_BYTES:
        return None, f"its first bytes ({first!r}) are not a Dask message's"
    return None, None


def _tls_hello(probe: Any, security: Any) -> None:
    """Finish a TLS probe's connection with the client's credentials (``security``, else
    Dask's configuration's), then close it: closed without a handshake, it left a "TLS
    handshake failed" WARNING in the scheduler's log at every run (a submitted job's
    too). Whatever fails is left to Dask's client, which says it."""
    import ssl

    from distributed.security import Security

    try:
        context = (security or Security()).get_connection_args("client")["ssl_context"]
        if context is None:
            probe.close()
            return
        with context.wrap_socket(probe):
            pass
    except (OSError, ValueError, ssl.SSLError):
        probe.close()


#: Seconds a plain scheduler address may stay silent before :func:`_probe` asks whether a
#: TLS server listens there.
TLS_GUESS_S = 2.0


def _speaks_tls(host: str, port: int, wait: float = TLS_GUESS_S) -> bool:
    """Whether a TLS server answers a client's hello at ``host:port`` within ``wait`` s: a
    Dask TLS scheduler completes it, then asks for a certificate; a plain Dask server has
    already written its own handshake (not TLS), a web server waits for a request."""
    import socket
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # only asked if TLS
    try:
        with socket.create_connection((host, port), timeout=wait) as raw:
            with context.wrap_socket(raw):
                return True
    except (OSError, ValueError):  # ssl.SSLError and timeouts are OSErrors
        return False


def _address_in(scheduler_file: Path) -> str | None:
    """The scheduler's address a scheduler file names, or ``None`` if it cannot be read
    (Dask's client then reports what is wrong with it)."""
    import json

    try:
        address = json.loads(scheduler_file.read_text()).get("address")
    except (OSError, ValueError, AttributeError):
        return None
    return address if isinstance(address, str) else None


def _wait_for_file(path: Path, timeout: float, job: bool = True) -> None:
    """Wait for a scheduler file; ``job``: the file of this run's job's own scheduler, whose
    end its job script's variables say (:func:`_the_jobs_own`)."""
    import time

    deadline = time.monotonic() + timeout
    ended = os.environ.get(SCHEDULER_ENDED_ENV) if job else None
    log = os.environ.get(SCHEDULER_LOG_ENV) if job else None
    see = f": see {log}" if log else ""
    while not path.exists():
        if ended and Path(ended).exists():  # a submitted job's scheduler has stopped
            status = Path(ended).read_text(errors="replace").strip()
            raise InputError(
                f"the job's Dask scheduler stopped (exit status {status}) before it wrote "
                f"{path}{see}{log_ending(Path(log)) if log else ''}"
            )
        if time.monotonic() > deadline:
            raise InputError(f"scheduler file {path} did not appear within {timeout:g} s{see}")
        time.sleep(0.2)


@contextmanager
def _start(config):
    import dask

    with dask.config.set(SCHEDULER_CONFIG), _new_cluster(config) as cluster:
        yield cluster


@contextmanager
def _new_cluster(config):
    if isinstance(config, LocalConfig):
        from distributed import LocalCluster

        # Workers in this process without a host talk in memory (inproc): no port to guard.
        tls = config.tls and (config.processes or bool(config.host))
        with _started("local", config, LocalCluster,
            n_workers=config.n_workers,
            threads_per_worker=config.threads_per_worker,
            processes=config.processes,
            memory_limit=config.memory_limit,
            host=config.host,
            # Workers in this process talk in memory (inproc), which has no host: one given
            # failed to start ("not enough values to unpack"); TCP (or TLS) serves it.
            **({"protocol": "tls://" if tls else "tcp://"}
               if config.host and not config.processes else {}),
            **_security(tls),
            **_dashboard(config.dashboard_address, config.host),
        ) as cluster:  # fmt: skip
            yield cluster
    elif isinstance(config, LocalCUDAConfig):
        with _local_cuda(config) as cluster:
            yield cluster
    else:
        with _jobqueue(config) as cluster:
            yield cluster


@contextmanager
def _local_cuda(config: LocalCUDAConfig):
    from ..kernels.cuda import cuda_usable, unusable_reason

    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        raise InputError(
            "cluster local-cuda needs dask-cuda, which is not installed: "
            'pip install "raygrid[cuda]" (on a machine with an NVIDIA GPU)'
        ) from None
    if not cuda_usable():
        raise InputError(
            f"cluster local-cuda starts one worker per NVIDIA GPU, but {unusable_reason()}; "
            "use configs/local.yaml (CPU workers) or run on a GPU node"
        )
    devices = config.CUDA_VISIBLE_DEVICES
    if isinstance(devices, int):
        devices = [devices]
    if isinstance(devices, list):
        devices = ",".join(str(d) for d in devices)
    with _started("local-cuda", config, LocalCUDACluster,
        CUDA_VISIBLE_DEVICES=devices,
        threads_per_worker=config.threads_per_worker,
        rmm_pool_size=config.rmm_pool_size,
        host=config.host,
        **_security(config.tls),
        **_dashboard(config.dashboard_address, config.host),
    ) as cluster:  # fmt: skip
        yield cluster


def _security(tls: bool) -> dict:
    """A started cluster's ``security`` keyword: new credentials of its own where ``tls``
    (:mod:`.credentials`), else none (Dask's configuration's, plain TCP by default)."""
    from .credentials import temporary_security

    return {"security": temporary_security()} if tls else {}


def _dashboard(address: str | None, host: str | None) -> dict:
    """A local cluster's dashboard settings: on the cluster's ``host`` when the address names
    only a port (Dask would listen on every interface, though the workers and scheduler keep
    to loopback); for ``null``, no dashboard, and the scheduler's HTTP endpoints (health,
    metrics), which Dask always serves, on a free port of that host rather than on 8787."""
    if address is None:
        return {
            "dashboard_address": f"{host or '127.0.0.1'}:0",
            "scheduler_kwargs": {"dashboard": False},
        }
    if address.startswith(":") and host:
        address = f"{host}{address}"
    return {"dashboard_address": address}


def _started(kind: str, config, start: Callable, **kwargs):
    """``start(**kwargs)``, a cluster on this machine, or an :class:`InputError` that says
    why it did not start (Dask's own error ends in "Cluster failed to start" and hides the
    reason two exceptions down)."""
    try:
        return start(**kwargs)
    except Exception as error:  # whatever stopped it, the user's file is the likely cause
        reason = error
        while reason.__cause__ is not None or reason.__context__ is not None:
            reason = reason.__cause__ or reason.__context__
        if isinstance(config, JobQueueConfig):  # its scheduler runs here
            settings = f"interface {config.interface!r}"
            question = "is the interface one of this machine's (the scheduler runs here)"
        else:
            settings = f"host {config.host!r}"
            question = "is the host an address of this machine"
        raise InputError(
            f"the {kind} cluster did not start: {type(reason).__name__}: {reason} ({settings}, "
            f"dashboard_address {config.dashboard_address!r} in the cluster file: {question}, "
            "is the port free?)"
        ) from error


def _unquoted(value: object, what: str) -> str | None:
    """``value`` as dask-jobqueue writes it into a job script, unquoted: refused with
    whitespace, which would cut it (a job named "survey" writing its logs to "my")."""
    if value is None:
        return None
    text = str(value)
    if any(c.isspace() for c in text):
        raise InputError(
            f"{what} {text!r} holds whitespace, which dask-jobqueue writes into its job "
            "scripts unquoted (`raygrid run --cluster`): choose one without, or run the "
            "workflow with `raygrid submit`, which quotes it"
        )
    return text


def jobqueue_kwargs(config: JobQueueConfig) -> dict:
    """Keyword arguments of dask-jobqueue's ``SLURMCluster``/``PBSCluster`` for a config.

    A GPU worker runs one thread, as under ``raygrid submit``: its sources go to the GPU
    one batch after another, and more threads would only hold more of them in memory.
    """
    per_job = config.workers_per_node
    directives = list(config.job_directives)
    gpus = config.gpus_per_worker * per_job
    if gpus and config.cluster == "slurm":
        directives.insert(0, f"--gres=gpu:{gpus}")
    kwargs = {
        "cores": config.cores_per_worker * per_job,
        "processes": per_job,
        "memory": f"{memory_bytes(config.memory_per_worker, per_job)}B",  # plain bytes parse
        "queue": config.queue,
        "account": config.account,
        "walltime": config.walltime,
        "job_name": _unquoted(config.job_name, "job_name"),
        "job_extra_directives": directives,
        # A failing line stops the job, as in `raygrid submit`'s (set -e there): here the
        # workers started without the environment it was to set up, and the run went on.
        "job_script_prologue": ["set -e", *config.prologue, "set +e"] if config.prologue else [],
        "log_directory": _unquoted(config.log_directory, "log_directory"),
        "local_directory": _unquoted(config.local_directory, "local_directory"),
        "scheduler_options": (
            {"dashboard_address": "127.0.0.1:0", "dashboard": False}  # HTTP: loopback only
            if config.dashboard_address is None
            else {"dashboard_address": config.dashboard_address}
        ),
    }
    if config.cluster == "pbs" and gpus:
        kwargs["resource_spec"] = (
            f"select=1:ncpus={kwargs['cores']}:ngpus={gpus}:mem={kwargs['memory']}"
        )
    if gpus:  # after dask-jobqueue's own --nthreads (cores / processes): the last one holds
        import dask

        # Given, the argument replaces the site's configured extra arguments: kept first.
        site = dask.config.get(f"jobqueue.{config.cluster}.worker-extra-args", None) or []
        kwargs["worker_extra_args"] = [*site, "--nthreads", "1"]
    if config.interface:
        kwargs["interface"] = config.interface
    if config.python:
        kwargs["python"] = config.python
    return kwargs


def _import_jobqueue(config: JobQueueConfig) -> Any:
    """``dask_jobqueue``, imported with this process's Ctrl-C handler kept.

    Its ``runner`` module sets SIGINT to ``sys.exit()`` when imported (for its own runner
    processes): Ctrl-C of `raygrid run --cluster` then left the run with exit status 0 and
    no word, as if it had finished, the store part-written.
    """
    import signal

    kept = signal.getsignal(signal.SIGINT)
    try:
        import dask_jobqueue
    except ImportError:
        raise InputError(
            f'cluster {config.cluster} needs dask-jobqueue: pip install "raygrid[hpc]"'
        ) from None
    finally:
        if kept is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, kept)
    return dask_jobqueue


@contextmanager
def _jobqueue(config: JobQueueConfig):
    if config.gpus_per_worker and config.workers_per_node > 1:
        raise InputError(
            f"`raygrid run` does not start this {config.cluster} cluster: its GPU workers share "
            f"jobs (workers_per_node: {config.workers_per_node}) and with dask-jobqueue every "
            "worker of a job sees all the job's GPUs. Run the workflow with `raygrid submit "
            "WORKFLOW --cluster FILE` (one batch job that gives each worker its own GPU), or "
            "set workers_per_node: 1 in the cluster file (one GPU job per worker)"
        )
    dask_jobqueue = _import_jobqueue(config)
    kind = dask_jobqueue.SLURMCluster if config.cluster == "slurm" else dask_jobqueue.PBSCluster
    command = SUBMIT_COMMANDS[config.cluster]
    if shutil.which(command) is None:  # else found out in Dask's event loop
        raise InputError(
            f"{command} not found: cluster {config.cluster} submits its workers as batch jobs "
            f"from a {config.cluster.upper()} login node"
        )
    config.log_directory.mkdir(parents=True, exist_ok=True)  # (not made for a refusal)
    job = answers_kept(kind.job_cls, config.cluster)
    security = _security(config.tls)
    if security:
        # dask-jobqueue writes the workers' credentials there (mode 0600, deleted when the
        # cluster closes), for the job scripts to name: where the jobs' nodes see it (the
        # logs go there too), by its whole path (a PBS job starts in the home folder).
        security["shared_temp_directory"] = str(config.log_directory.resolve())
    kwargs = jobqueue_kwargs(config)
    with _started(config.cluster, config, kind, job_cls=job, **kwargs, **security) as cluster:
        cluster.scale(jobs=config.nodes)
        yield cluster
