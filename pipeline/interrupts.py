"""Ctrl-C (and SIGTERM) on a local cluster: only the client process handles it, whenever it
comes."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from multiprocessing import resource_tracker
from typing import Any

from distributed import WorkerPlugin

__all__ = [
    "IgnoreInterrupts", "interrupts_held", "interrupts_kept", "check_interrupts",
    "quiet_abandoned_gathers", "quiet_client_interrupts", "closing_uninterrupted",
    "stopping_signal", "quiet_slow_worker_close",
]  # fmt: skip

#: Ctrl-C's taken by :func:`interrupts_kept`'s handler while its block runs.
_kept: list[int] = []
#: The signal that last stopped an :func:`interrupts_kept` block (SIGINT or SIGTERM).
_stopped_by: list[int] = []
#: ``closings``: for each :func:`closing_uninterrupted` block open now in a thread
#: (innermost last), the :class:`_QuietInterruptedClose` filters of the clients connected in it.
_blocks = threading.local()


def _closings() -> list[list[_QuietInterruptedClose]]:
    return _blocks.__dict__.setdefault("closings", [])


def stopping_signal() -> int:
    """The signal that stopped the last :func:`interrupts_kept` block: ``SIGTERM`` (a batch
    system's time limit, ``kill``) or ``SIGINT`` (Ctrl-C, the default)."""
    return _stopped_by[-1] if _stopped_by else int(signal.SIGINT)


def _taken() -> list[int]:
    """The signals raygrid stops a run on: SIGINT, unless this process ignores it, SIGTERM,
    and SIGHUP unless ignored (``nohup``).

    An ignored SIGINT stays ignored: a shell starts a script's background job (``raygrid
    run ... &``) with SIGINT ignored, so that a Ctrl-C meant for the script's foreground
    command does not stop it (the job shares its process group), and Python keeps that (it
    sets no ``KeyboardInterrupt`` handler then); were it replaced here, that Ctrl-C would
    stop the background run. SIGTERM is taken whatever its handler: it is how a batch
    system's time limit and ``kill`` stop a run, background or not.
    """
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    taken = ([] if ignored else [signal.SIGINT]) + [signal.SIGTERM]
    # SIGHUP (the terminal or ssh session gone) as SIGTERM: it ended the run at once,
    # without closing its cluster. Left ignored under nohup, which is what nohup is for.
    hangup = getattr(signal, "SIGHUP", None)  # (POSIX)
    if hangup is not None and signal.getsignal(hangup) != signal.SIG_IGN:
        taken.append(hangup)
    return taken


#: A warnings filter (``PYTHONWARNINGS``'s form) for multiprocessing's resource tracker:
#: its "There appear to be 1 leaked semaphore objects to clean up at shutdown", said at the
#: exit of every run one of whose local workers was killed (the kernel's OOM killer, a
#: ``kill -9``), read as raygrid leaking; the tracker cleans them up, as it says.
QUIET_TRACKER = "ignore:resource_tracker:UserWarning:multiprocessing.resource_tracker"


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker, if it is not running yet, with
    :data:`QUIET_TRACKER` and SIGHUP ignored: a process of its own, it reads its warnings
    filters from the environment it starts with (this process's is left as it was)."""
    kept = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [kept, QUIET_TRACKER]))
    # Started with SIGHUP ignored, which it keeps (an ignored signal stays ignored across
    # exec, as under nohup): it ignores SIGINT and SIGTERM itself, but a hangup to the
    # run's process group ended it, and the one started in its place printed a KeyError
    # traceback for each semaphore the workers then let go of (a dozen, as a run stopped).
    hangup = getattr(signal, "SIGHUP", None)
    main = threading.current_thread() is threading.main_thread()
    # (A handler set outside Python, None, could not be put back: left alone.)
    settable = hangup is not None and main and signal.getsignal(hangup) is not None
    before = signal.signal(hangup, signal.SIG_IGN) if settable else None
    try:
        resource_tracker.ensure_running()
    finally:
        if before is not None:
            signal.signal(hangup, before)
        if kept is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = kept


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back while a local cluster starts; act on it when the block ends.

    Interrupted earlier, Dask's close met workers still starting (``AssertionError:
    Status.init``), and each starting worker process printed a ``KeyboardInterrupt``
    traceback of its own from the middle of its imports: it gets Ctrl-C from the terminal
    too, before :class:`IgnoreInterrupts` can be set up in it. Here, meanwhile:

    - SIGINT is blocked in this (the main) thread. The mask is inherited by the threads
      started in the block (the cluster's event loop and the process watchers that spawn
      the worker processes) and so by the worker processes, which never act on SIGINT
      (``pthread_sigmask(2)``).
    - Python's SIGINT handler only notes the signal: the kernel hands a process's signal
      to any thread that does not block it (Numba's or Dask's pool threads), and Python
      would run its handler in the main thread all the same.

    - SIGTERM (a batch system's time limit, ``kill``) is noted by the same handler but not
      blocked: a blocked SIGTERM would be inherited by the worker processes, which their
      nannies stop with SIGTERM. Acted on at once, it left Dask's exit hook closing workers
      still starting (some 40 lines of ``Status.init`` tracebacks).

    At the end the mask and the handlers are restored and the first noted signal is raised
    again, for the restored handler to act on: in :func:`interrupts_kept` the caller gets
    its ``KeyboardInterrupt`` with the cluster whole and closable. An ignored SIGINT is
    left alone (:func:`_taken`). A no-op off the main thread or without POSIX signal masks
    (Windows).
    """
    # Spawning a process starts multiprocessing's resource tracker first, if it is not
    # running yet, and that unblocks SIGINT in the spawning thread (CPython bpo-33613's
    # block-spawn-unblock): started now, it leaves the mask alone.
    if hasattr(signal, "pthread_sigmask"):  # POSIX (Windows spawns no tracker this way)
        _start_resource_tracker()
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not (
        threading.main_thread()
    ):
        yield
        return
    noted = []

    def note(signum, frame) -> None:
        if not noted:  # said once, so that a held Ctrl-C is not taken for a hang
            print("stopping once the workers have started...", file=sys.stderr, flush=True)
        noted.append(signum)

    handlers = {sig: signal.signal(sig, note) for sig in _taken()}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT} & set(handlers))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending SIGINT is noted here
        for sig, handler in handlers.items():
            if handler is not None:  # (None: one set outside Python, which cannot be put back)
                signal.signal(sig, handler)
        if noted:
            signal.raise_signal(noted[0])  # the restored handler's to act on


@contextmanager
def interrupts_kept() -> Iterator[None]:
    """Ctrl-C (and SIGTERM, which a batch system sends at its time limit) raises
    ``KeyboardInterrupt`` as usual, and is kept, so that none is lost.

    Python raises a signal's exception in whatever the main thread runs next, and drops it
    where exceptions are ignored: a gc callback (Dask's GC diagnosis), a ``__del__``, a
    weakref callback ("Exception ignored in ..."). A run interrupted there carried on to
    the end and exited with status 0. Here each Ctrl-C is kept as it is raised;
    :func:`check_interrupts` (between a survey's tasks) and the end of the block raise a
    kept one again. A no-op off the main thread.

    The traceback Python prints for a dropped one ("Exception ignored in: <bound method
    GCDiagnosis._gc_callback ...> ... KeyboardInterrupt", in about 1 of 3 interrupted runs)
    is left out, since it is raised again; every other unraisable exception is printed as
    before (:data:`sys.unraisablehook`). An ignored SIGINT is left alone (:func:`_taken`).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    unraisable_hook = sys.unraisablehook

    def drop_kept(unraisable) -> None:
        if not (_kept and unraisable.exc_type is KeyboardInterrupt):
            unraisable_hook(unraisable)

    def keep(signum, frame) -> None:
        _kept.append(signum)
        _stopped_by.append(signum)
        raise KeyboardInterrupt

    # SIGTERM ended the process at once (exit 143, a semaphore warning): the same stop as
    # Ctrl-C instead, with its message and the cluster closed. The handlers are read first
    # and go in inside the `try`: a signal as soon as one is in raises there, and both are
    # restored all the same (None: one set outside Python, which cannot be put back).
    _stopped_by.clear()
    previous = {sig: signal.getsignal(sig) for sig in _taken()}
    try:
        sys.unraisablehook = drop_kept
        for sig in previous:
            signal.signal(sig, keep)
        yield
        check_interrupts()
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)
        sys.unraisablehook = unraisable_hook
        _kept.clear()


@contextmanager
def closing_uninterrupted() -> Iterator[Callable[[], None]]:
    """Yield ``hold``: called as the block starts closing what it started (a cluster), it
    holds Ctrl-C (and SIGTERM) until the block has ended, then the handlers are restored.
    The first signal held is then raised again, to its restored handler, unless the block
    ends with an interrupt already (a Ctrl-C pressed again as it closes is dropped).

    Ctrl-C pressed again while a cluster closed broke the close midway: the rest was left
    to Dask's exit hook, which took 10 s more on timeouts and printed a traceback when a
    third Ctrl-C broke it too. The first Ctrl-C has done its work by then; the close takes
    a second. A no-op off the main thread.

    Called while a ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM in :func:`interrupts_kept`)
    is on its way out, ``hold`` also quiets, until the block ends, what the scheduler of a
    client connected in the block logs of the close (:class:`_QuietInterruptedClose`).
    """
    previous: dict[int, Any] = {}
    quiets: list[_QuietInterruptedClose] = []
    held: list[int] = []

    def keep(sig: int, frame: Any) -> None:
        held.append(sig)

    def hold() -> None:
        # SIGTERM too: a background run (SIGINT ignored, _taken) is stopped by `kill`, and
        # a second one broke the close as a second Ctrl-C did. Held, not ignored: a Ctrl-C
        # or a batch system's SIGTERM as the cluster closed after the last source was lost,
        # and the run went on to assemble its rays and exited 0.
        # An ignored SIGINT is left ignored (a background run's, _taken): held, a Ctrl-C
        # meant for the foreground would be the one raised again, and a `kill` after it
        # dropped. A handler set outside Python (None) could not be put back: left alone.
        if threading.current_thread() is threading.main_thread() and not previous:
            for sig in _taken():
                if signal.getsignal(sig) is not None:
                    previous[sig] = signal.signal(sig, keep)
        if _kept or isinstance(sys.exc_info()[1], KeyboardInterrupt):
            for quiet in quiets:
                quiet.closing = True

    _closings().append(quiets)
    leaving: BaseException | None = None  # what the block ends with (not sys.exc_info(),
    try:  # which also sees an exception the caller is handling around the block)
        yield hold
    except BaseException as error:
        leaving = error
        raise
    finally:
        # By identity: two blocks' lists can be equal (empty).
        _closings()[:] = [block for block in _closings() if block is not quiets]
        for quiet in quiets:
            logging.getLogger("distributed.scheduler").removeFilter(quiet)
        _restore(previous)
        if held and not isinstance(leaving, KeyboardInterrupt | GeneratorExit):
            # Another error on its way out is overtaken: a batch system's SIGTERM is how
            # the run ends (143, "terminated"), as it would have been a moment earlier.
            signal.raise_signal(held[0])


def _restore(handlers: dict[int, Any]) -> None:
    """Put ``handlers`` back, the signals blocked meanwhile: one that came between two
    restores raised there and left the other signal on a handler nothing reads, for good
    (a SIGTERM swallowed in a long-lived process). A signal blocked meanwhile reaches its
    restored handler."""
    mask = getattr(signal, "pthread_sigmask", None)  # (not on Windows)
    blocked = mask(signal.SIG_BLOCK, list(handlers)) if mask and handlers else None
    try:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    finally:
        if blocked is not None:
            mask(signal.SIG_SETMASK, blocked)


class _QuietInterruptedClose(logging.Filter):
    """Logging filter for ``distributed.scheduler``: once its ``closing`` is set (by
    :func:`closing_uninterrupted`'s ``hold``, after a Ctrl-C), drop "Closed comm
    <BatchedSend: closed> while trying to write ..." and its ``CommClosedError`` traceback,
    logged (as CRITICAL) by one scheduler, running in this process, for a comm to one of its
    clients.

    Ctrl-C of a tiled run closes the client first, then its local cluster; meanwhile the
    scheduler, still running, logged one of these for each message to the closed client (14
    blocks, some 100 lines before raygrid's own "interrupted: ... run the same command
    again", in 2 of about 12 interrupted runs). The client is gone on purpose. Every other
    message, and this one from any other scheduler (a user's own cluster) or without an
    interrupt, is kept.
    """

    def __init__(self, scheduler: Any) -> None:
        super().__init__()
        self.scheduler = weakref.ref(scheduler)  # not kept alive by the logger
        self.closing = False

    def filter(self, record: logging.LogRecord) -> bool:
        scheduler = self.scheduler()
        if not self.closing or scheduler is None or record.msg != _CLOSED_COMM:
            return True
        comm = record.args[0] if isinstance(record.args, tuple) and record.args else None
        # The comm is still the scheduler's when it is logged (the same event loop step).
        return not any(comm is mine for mine in list(scheduler.client_comms.values()))


#: Dask's format of the message :class:`_QuietInterruptedClose` drops (distributed 2026.8).
_CLOSED_COMM = "Closed comm %r while trying to write %s"


def check_interrupts() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C kept by :func:`interrupts_kept` was dropped
    where it was raised (nothing happens outside such a block)."""
    if _kept:
        raise KeyboardInterrupt


def _not_a_closing_cancel(record: logging.LogRecord) -> bool:
    """Logging filter: drop Dask's warning that a task running when its worker closed
    "ended with CancelledError" (what closing a cluster mid-run does to running tasks)."""
    message = record.getMessage()
    return not (message.startswith("Async instruction for") and message.endswith("CancelledError"))


def _not_a_closing_heartbeat(record: logging.LogRecord) -> bool:
    """Logging filter: drop a local worker's "Failed to communicate with scheduler during
    heartbeat" and its traceback (some 30 lines). The scheduler of a cluster raygrid
    started lives in the client's process, so it goes away only when the client closes the
    cluster (Ctrl-C); the worker is closed right after."""
    return not record.getMessage().startswith("Failed to communicate with scheduler during")


def _not_a_slow_worker_close(record: logging.LogRecord) -> bool:
    """Logging filter for ``distributed.nanny``: drop "Worker process still alive after 4.0
    seconds, killing", which a cluster raygrid started logs as it closes on a busy machine
    (3 of a reviewer's successful runs): the run is over, and the line read as a failure.
    A worker restarted for its memory is still said, by the nanny's other messages."""
    return not record.getMessage().startswith("Worker process still alive after")


@contextmanager
def log_filtered(name: str, keep: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """The logging filter ``keep`` on the logger ``name`` for the block only: raygrid
    quiets a line of Dask's while its own run makes it harmless, not for the user's other
    clusters in the same process."""
    logger = logging.getLogger(name)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def quiet_slow_worker_close() -> AbstractContextManager[None]:
    """:func:`_not_a_slow_worker_close` on ``distributed.nanny`` for the block: the life of
    a local cluster raygrid started."""
    return log_filtered("distributed.nanny", _not_a_slow_worker_close)


def _not_an_early_sync_cancel(record: logging.LogRecord) -> bool:
    """Logging filter for ``tornado.application``: drop distributed's ``sync`` cancelling,
    on Ctrl-C, a call whose coroutine had not started yet: its ``cancel`` callback reads
    ``future`` before it is assigned and logs a NameError traceback (distributed 2026.7;
    seen in 1 of about 10 CI runs of the Ctrl-C test). There was nothing to cancel."""
    error = record.exc_info[1] if record.exc_info else None
    return not (isinstance(error, NameError) and "'future'" in str(error))


def _not_a_cancelled_reconnect(record: logging.LogRecord) -> bool:
    """Logging filter for ``distributed.client``: drop the traceback of a reconnect to a
    lost scheduler that the client's close cancelled (``ConnectionRefusedError``, then
    ``CancelledError`` in ``Client._reconnect``: some 30 lines before the run's own "the
    connection to the Dask scheduler was lost ... run the same command again to resume",
    which says what happened and what to do)."""
    error = record.exc_info[1] if record.exc_info else None
    if not isinstance(error, asyncio.CancelledError):
        return True
    frame = record.exc_info[2]
    while frame is not None:
        if frame.tb_frame.f_code.co_name == "_reconnect":
            return False
        frame = frame.tb_next
    return True


def quiet_abandoned_gathers(loop, context: dict) -> None:
    """Asyncio exception handler for a client's event loop: drop what a Ctrl-C leaves.

    A ``client.gather`` cut short by Ctrl-C leaves Dask's inner wait task behind; closing the
    client then ends it with ``AllExit``, and asyncio printed "Task exception was never
    retrieved" and its traceback when the task was collected (seen in 2 of 3 interrupted
    tiled surveys). Everything else goes to asyncio's default handler.
    """
    from distributed.client import AllExit

    if isinstance(context.get("exception"), AllExit):
        return
    loop.default_exception_handler(context)


def quiet_client_interrupts(client) -> None:
    """What a Ctrl-C leaves in the client's process, kept quiet: abandoned gathers
    (:func:`quiet_abandoned_gathers`), an early ``sync`` cancel
    (:func:`_not_an_early_sync_cancel`) and, inside :func:`closing_uninterrupted`, what the
    client's own scheduler, when it runs in this process (a local cluster), logs of the
    close (:class:`_QuietInterruptedClose`); and what a lost scheduler leaves, a cancelled
    reconnect (:func:`_not_a_cancelled_reconnect`). Every other message and exception is
    kept."""
    client.loop.asyncio_loop.set_exception_handler(quiet_abandoned_gathers)
    for name, quiet in [
        ("tornado.application", _not_an_early_sync_cancel),
        ("distributed.client", _not_a_cancelled_reconnect),
    ]:
        logger = logging.getLogger(name)
        if quiet not in logger.filters:
            logger.addFilter(quiet)
    scheduler = getattr(getattr(client, "cluster", None), "scheduler", None)
    if _closings() and hasattr(scheduler, "client_comms"):  # removed when the block ends
        quiet_close = _QuietInterruptedClose(scheduler)
        _closings()[-1].append(quiet_close)
        logging.getLogger("distributed.scheduler").addFilter(quiet_close)


class IgnoreInterrupts(WorkerPlugin):
    """Worker plugin: worker processes on this machine ignore SIGINT, and close quietly.

    Ctrl-C reaches every process of the terminal's foreground group, so each local worker
    process died with a KeyboardInterrupt traceback of its own (some 70 lines for two
    workers) while the client was already closing the cluster, which stops the workers
    anyway; nothing is lost, each finished source is in the store. Workers running in the
    client's own process (``processes: false``) keep its handler. Closed mid-task, a worker
    also logged a timestamped warning per running task (``Async instruction for <Task
    cancelled ...> ended with CancelledError``), and sometimes, its scheduler gone first,
    "Failed to communicate with scheduler during heartbeat" with a traceback; those are
    filtered out of the ``distributed.worker.state_machine`` and ``distributed.worker``
    loggers, which keep every other message.

    Parameters
    ----------
    client_pid : int
        The client's process id.
    """

    def __init__(self, client_pid: int) -> None:
        self.client_pid = client_pid

    def setup(self, worker) -> None:
        logging.getLogger("distributed.worker.state_machine").addFilter(_not_a_closing_cancel)
        logging.getLogger("distributed.worker").addFilter(_not_a_closing_heartbeat)
        # Handlers can be set only from a process's main thread, where a worker process
        # runs its event loop and so this hook.
        if os.getpid() != self.client_pid and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if hasattr(signal, "SIGHUP"):  # a hangup's, as Ctrl-C's: the client closes them
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
