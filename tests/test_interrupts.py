"""Ctrl-C while a local cluster starts: held back, then a clean stop (no worker tracebacks)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import yaml

from raygrid.pipeline.interrupts import (
    check_interrupts,
    closing_uninterrupted,
    interrupts_held,
    interrupts_kept,
    stopping_signal,
)

from clusters import LOCAL_CLUSTER_FILE, ctrl_c_taken

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")


@pytest.fixture(autouse=True)
def _ctrl_c_taken():
    """Each test runs (and starts its runs) with SIGINT handled, as from a terminal: the
    suite started in a script's background has it ignored (tests/clusters.ctrl_c_taken)."""
    with ctrl_c_taken():
        yield


def blocked_signals(pid: int | str = "self", thread: int | None = None) -> int:
    """The SigBlk mask of a process (its main thread) or one of its threads (Linux)."""
    where = f"/proc/{pid}" + (f"/task/{thread}" if thread is not None else "")
    for line in Path(where, "status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigBlk line")


SIGINT_BIT = 1 << (signal.SIGINT - 1)
linux_only = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc")


def test_a_ctrl_c_inside_is_raised_when_the_block_ends():
    reached_end = False
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a handled SIGINT would have raised by now
            reached_end = True
    assert reached_end
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, set()) & {signal.SIGINT}  # restored


def test_a_run_started_with_ctrl_c_ignored_leaves_it_ignored():
    # A script's background job (`raygrid run ... &`) starts with SIGINT ignored, so that
    # a Ctrl-C meant for the script's foreground command does not stop it; Python keeps
    # that, and so does raygrid. SIGTERM (a batch system's) is still taken.
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as the shell sets it (fixture restores)
    terminate = signal.getsignal(signal.SIGTERM)
    with interrupts_kept():
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) != terminate
        signal.raise_signal(signal.SIGINT)  # nothing happens
    with interrupts_held():
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert not signal.pthread_sigmask(signal.SIG_BLOCK, set()) & {signal.SIGINT}
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == terminate
    # A hangup ignored (nohup) stays ignored; taken otherwise, as SIGTERM.
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts_kept():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with pytest.raises(KeyboardInterrupt), interrupts_kept():
            signal.raise_signal(signal.SIGHUP)
        assert stopping_signal() == signal.SIGHUP
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, hangup)
    # `kill` (SIGTERM) still stops it, also while its cluster starts (held, then raised).
    with pytest.raises(KeyboardInterrupt), interrupts_kept():
        with interrupts_held():
            signal.raise_signal(signal.SIGTERM)
            reached = True
    assert reached and stopping_signal() == signal.SIGTERM


def test_what_the_tests_start_takes_ctrl_c_even_when_they_were_started_ignoring_it():
    # Started in a script's background, the suite has SIGINT ignored, and so would every
    # raygrid it starts: tests/clusters.ctrl_c_taken hands them SIGINT at its default.
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the autouse fixture restores)
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    run = [sys.executable, "-c", code]
    assert subprocess.run(run, capture_output=True, text=True).stdout == "False\n"
    with ctrl_c_taken():
        assert subprocess.run(run, capture_output=True, text=True).stdout == "True\n"
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def ctrl_c_in_a_gc_callback() -> None:
    """Ctrl-C as the garbage collector runs a callback (Dask's GC diagnosis has one): the
    handler raises there, and Python drops the exception."""
    import gc

    def callback(phase, info):
        if phase == "start":
            signal.raise_signal(signal.SIGINT)

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_drops_is_raised_again():
    # Seen on `raygrid run`: Ctrl-C landed in Dask's gc callback, where Python prints
    # "Exception ignored in ..." and goes on; the run finished with status 0.
    went_on = []
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with interrupts_kept():
            ctrl_c_in_a_gc_callback()
            went_on.append("after the drop")
            with pytest.raises(KeyboardInterrupt):
                check_interrupts()  # what a survey checks between tasks
            went_on.append("at the end")
    assert went_on == ["after the drop", "at the end"]  # then the block's end raised it
    assert signal.getsignal(signal.SIGINT) is previous
    check_interrupts()  # nothing kept once the block is over


@linux_only
def test_threads_and_processes_started_inside_never_see_sigint():
    # As a cluster starts its workers: a thread started in the block spawns the process.
    context = multiprocessing.get_context("spawn")
    native_ids, children = [], []
    ready, done = threading.Event(), threading.Event()

    def watcher() -> None:
        native_ids.append(threading.get_native_id())
        child = context.Process(target=time.sleep, args=(30,), daemon=True)
        child.start()
        children.append(child)
        ready.set()
        done.wait(30)

    with interrupts_held():
        thread = threading.Thread(target=watcher, daemon=True)
        thread.start()
        ready.wait(30)
    try:
        assert blocked_signals(os.getpid(), native_ids[0]) & SIGINT_BIT
        assert blocked_signals(children[0].pid) & SIGINT_BIT
        assert not blocked_signals(os.getpid(), threading.get_native_id()) & SIGINT_BIT
    finally:
        done.set()
        for child in children:
            child.kill()
            child.join()


SURVEY = {
    "model": {"synthetic": "gradient", "shape": {"z": 61, "x": 81}, "spacing": 10.0},
    "grid": {"radius": 3},
    "sources": [{"z": 0.0, "x": 100.0}, {"z": 0.0, "x": 700.0}],
    "receivers": [{"z": 500.0, "x": 400.0}],
    "outputs": {"store": "out/survey.zarr"},
    "compute": {"batch": 1, "cluster": "cluster.yaml"},
}
CLUSTER = LOCAL_CLUSTER_FILE


@contextmanager
def raygrid_run(directory: Path, survey: dict, *options: str, env: dict | None = None):
    """A ``raygrid run`` of ``survey`` on a local cluster, in a session of its own (so that
    the test can send Ctrl-C to it and its workers as a terminal does); killed with them
    if it is still running when the block ends."""
    (directory / "survey.yaml").write_text(yaml.safe_dump(survey))
    (directory / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    exe = shutil.which("raygrid", path=str(Path(sys.executable).parent)) or "raygrid"
    process = subprocess.Popen(
        [exe, "run", "survey.yaml", *options], cwd=directory, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, env=env,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


#: A survey long enough to be stopped mid-run.
LONG_SURVEY = {**SURVEY, "sources": [{"z": 0.0, "x": 10.0 * i} for i in range(60)]}


def mid_run(process: subprocess.Popen, directory: Path) -> float:
    """Wait until the run in ``directory`` has a source done (mid-run, or ended); return
    the deadline it waited up to, for more waiting."""
    records = directory / "out" / "survey.zarr" / "source_done" / "c"
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if records.exists() and any(records.iterdir()):
            break
        time.sleep(0.05)
    return deadline


@linux_only
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_while_the_workers_start_stops_cleanly(tmp_path, stop):
    # SIGTERM (a batch system's time limit) was acted on at once: Dask's exit hook then
    # closed workers still starting, some 40 lines of Status.init tracebacks.
    # Workers that take 3 s more to start (a preload that sleeps), so that the Ctrl-C below
    # lands while the cluster starts whatever the machine's speed.
    slow_start = tmp_path / "slow_start.py"
    slow_start.write_text("import time\n\ntime.sleep(3)\n")
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PRELOAD": f'["{slow_start}"]'}
    with raygrid_run(tmp_path, SURVEY, env=env) as process:
        client = psutil.Process(process.pid)
        spawned = []
        deadline = time.monotonic() + 120
        while not spawned and time.monotonic() < deadline and process.poll() is None:
            try:
                spawned = [
                    child for child in client.children(recursive=True)
                    if "spawn_main" in " ".join(child.cmdline())
                ]  # fmt: skip
            except psutil.Error:
                pass
            time.sleep(0.005)
        assert spawned, "no worker process was spawned"
        # Ctrl-C (to the whole process group, as a terminal sends it) while the first
        # worker process imports its modules: before it can be told to ignore SIGINT. (At
        # the very moment of its spawn, SIGINT's default action ends it silently.)
        time.sleep(0.5)
        os.killpg(process.pid, stop)
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + stop, stdout + stderr
    assert "stopping once the workers have started" in stderr
    how = "interrupted" if stop == signal.SIGINT else "terminated (SIGTERM)"
    assert f"{how}: nothing was written" in stderr
    assert "Traceback" not in stdout + stderr and "KeyboardInterrupt" not in stdout + stderr, (
        stdout + stderr
    )
    assert "dashboard:" not in stdout  # it was stopped while the cluster started
    assert not (tmp_path / "out").exists()
    deadline = time.monotonic() + 30
    while any(child.is_running() for child in spawned) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(child.is_running() for child in spawned)


def test_a_close_under_way_holds_ctrl_c_until_it_ends():
    before = signal.getsignal(signal.SIGINT)
    closed = False
    with pytest.raises(KeyboardInterrupt):
        with closing_uninterrupted() as hold:
            assert signal.getsignal(signal.SIGINT) is before  # untouched until closing starts
            hold()
            signal.raise_signal(signal.SIGINT)  # held: nothing raised while the close runs
            signal.raise_signal(signal.SIGINT)
            closed = True
    # Then raised once: a Ctrl-C as the cluster closed after the last source was dropped,
    # and the run went on to assemble its rays and exited 0.
    assert closed and signal.getsignal(signal.SIGINT) is before


def test_a_kill_while_a_close_ends_by_itself_reaches_its_handler_after_it():
    # A second `kill` is held too (a background run's only way to be stopped), and the
    # one that came while the run was ending well is acted on once the close is done.
    seen = []
    before = signal.signal(signal.SIGTERM, lambda sig, frame: seen.append(sig))
    try:
        with closing_uninterrupted() as hold:
            hold()
            signal.raise_signal(signal.SIGTERM)
            assert not seen
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_background_runs_kill_after_a_ctrl_c_meant_for_the_foreground_is_not_dropped():
    # SIGINT ignored (a shell's background job): held, the Ctrl-C was the one raised again
    # (to "ignore") and the SIGTERM after it dropped: the run exited 0.
    seen = []
    before = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda sig, frame: seen.append(sig)),
    }
    try:
        with closing_uninterrupted() as hold:
            hold()
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # left as it was
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_held_ctrl_c_is_raised_whatever_else_ends_the_block_but_an_interrupt():
    # Dropped whenever sys.exc_info() showed an exception: also one the caller was
    # handling around the block, and any error leaving it.
    try:
        raise ValueError("handled around the block")
    except ValueError:
        with pytest.raises(KeyboardInterrupt):
            with closing_uninterrupted() as hold:
                hold()
                signal.raise_signal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt) as raised:
        with closing_uninterrupted() as hold:
            hold()
            signal.raise_signal(signal.SIGINT)
            raise RuntimeError("the run failed as it closed")
    assert isinstance(raised.value.__context__, RuntimeError)


def test_a_ctrl_c_held_while_an_interrupt_is_on_its_way_out_is_dropped():
    with pytest.raises(KeyboardInterrupt, match="first"):
        with closing_uninterrupted() as hold:
            try:
                raise KeyboardInterrupt("first")
            finally:
                hold()
                signal.raise_signal(signal.SIGINT)  # pressed again: the close is not broken


@linux_only
def test_ctrl_c_pressed_again_while_a_run_stops_prints_no_traceback(tmp_path):
    # Pressed three times mid-run, Ctrl-C broke Dask's close of the cluster at exit:
    # "Exception ignored in atexit callback: close_clusters" and a 25-line traceback.
    with raygrid_run(tmp_path, LONG_SURVEY, "--no-progress") as process:
        deadline = mid_run(process, tmp_path)
        while process.poll() is None and time.monotonic() < deadline:
            os.killpg(process.pid, signal.SIGINT)  # again and again until it has stopped
            time.sleep(0.1)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert " of 60 sources finished so far are in out/survey.zarr" in stderr
    for noise in ("Traceback", "Exception ignored", "KeyboardInterrupt"):
        assert noise not in stdout + stderr, stdout + stderr


def test_workers_drop_only_the_closing_cancel_warning_and_heartbeat_error(caplog):
    from raygrid.pipeline.interrupts import (
        IgnoreInterrupts,
        _not_a_closing_cancel,
        _not_a_closing_heartbeat,
    )

    logger = logging.getLogger("distributed.worker.state_machine")
    worker_logger = logging.getLogger("distributed.worker")
    IgnoreInterrupts(client_pid=os.getpid()).setup(worker=None)  # as in the client's process
    try:
        with caplog.at_level(logging.WARNING, logger="distributed.worker"):
            task = "<Task cancelled name=\"execute('raygrid-sources-0-7-ab12cd34')\">"
            logger.warning(f"Async instruction for {task} ended with CancelledError")
            logger.warning("Async instruction for <Task> ended with ValueError")
            # Seen once in CI after a Ctrl-C, with its traceback (the scheduler had closed).
            worker_logger.error("Failed to communicate with scheduler during heartbeat.")
            worker_logger.error("Compute Failed")
        assert [r.getMessage() for r in caplog.records] == [
            "Async instruction for <Task> ended with ValueError",
            "Compute Failed",
        ]
    finally:
        logger.removeFilter(_not_a_closing_cancel)
        worker_logger.removeFilter(_not_a_closing_heartbeat)


LEAKS_A_SEMAPHORE = """
import multiprocessing, os, sys
if sys.argv[1] == "held":
    from raygrid.pipeline import interrupts
    with interrupts.interrupts_held():  # as a local cluster starts
        pass
    assert os.environ.get("PYTHONWARNINGS") == sys.argv[2]  # left as it was
lock = multiprocessing.get_context("spawn").Lock()  # held by the tracker
os._exit(0)  # as a killed worker ends: never released
"""


@pytest.mark.parametrize("before", ["", "default"])
def test_the_resource_tracker_a_local_cluster_starts_keeps_quiet_of_a_killed_worker(before):
    # A run one of whose local workers was killed (the OOM killer, kill -9) ended with
    # multiprocessing's "UserWarning: resource_tracker: There appear to be 1 leaked
    # semaphore objects to clean up at shutdown", read as raygrid leaking.
    env = {**os.environ, "PYTHONWARNINGS": before}
    said = {
        how: subprocess.run(
            [sys.executable, "-c", LEAKS_A_SEMAPHORE, how, before],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        for how in ("plain", "held")
    }
    assert "leaked semaphore" in said["plain"].stderr  # what the tracker says unless told
    assert said["held"].returncode == 0, said["held"].stderr
    assert "leaked semaphore" not in said["held"].stderr


def test_a_gather_abandoned_by_ctrl_c_is_not_reported_but_other_errors_are():
    import asyncio

    from distributed.client import AllExit

    from raygrid.pipeline.interrupts import quiet_abandoned_gathers

    reported = []
    loop = asyncio.new_event_loop()
    try:
        loop.default_exception_handler = reported.append  # what asyncio would print
        quiet_abandoned_gathers(loop, {"message": "never retrieved", "exception": AllExit()})
        other = {"message": "never retrieved", "exception": ValueError("a real one")}
        quiet_abandoned_gathers(loop, other)
    finally:
        loop.close()
    assert reported == [other]


@linux_only
def test_sigterm_mid_run_stops_as_ctrl_c_does_with_its_own_status(tmp_path):
    # What a batch system sends at its time limit: the run ended at once (status 143, a
    # semaphore warning), saying nothing of the store. Now it stops as Ctrl-C does.
    stop = signal.SIGTERM
    with raygrid_run(tmp_path, LONG_SURVEY, "--no-progress") as process:
        mid_run(process, tmp_path)
        os.kill(process.pid, stop)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + stop, stdout + stderr
    assert f"terminated ({signal.Signals(stop).name}): the " in stderr
    assert " of 60 sources finished so far are in out/survey.zarr; run the same command" in stderr
    for noise in ("Traceback", "Exception ignored", "KeyboardInterrupt", "leaked"):
        assert noise not in stdout + stderr, stdout + stderr


@linux_only
@pytest.mark.parametrize("bar", [True, False], ids=["bar", "no-progress"])
def test_a_hangup_with_its_terminal_gone_stops_the_run_as_sigterm_does(tmp_path, bar):
    # An ssh session dropped: SIGHUP ended the run at once, its cluster not closed; taken,
    # its last words to the closed terminal (EIO) then ended it with a traceback and
    # status 1 (a review of the change), the progress bar's first.
    import pty

    (tmp_path / "survey.yaml").write_text(yaml.safe_dump(LONG_SURVEY))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    exe = shutil.which("raygrid", path=str(Path(sys.executable).parent)) or "raygrid"
    terminal, side = pty.openpty()
    options = [] if bar else ["--no-progress"]
    process = subprocess.Popen(
        [exe, "run", "survey.yaml", *options], cwd=tmp_path, stdin=side, stdout=side,
        stderr=side, start_new_session=True,
    )  # fmt: skip
    os.close(side)
    try:
        reading = threading.Thread(target=_drain, args=(terminal,), daemon=True)
        reading.start()  # (a full terminal would block the run)
        mid_run(process, tmp_path)
        workers = psutil.Process(process.pid).children(recursive=True)
        os.close(terminal)  # the terminal is gone, then its hangup comes
        os.kill(process.pid, signal.SIGHUP)
        assert process.wait(timeout=90) == 128 + signal.SIGHUP
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    deadline = time.monotonic() + 30
    while any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers):
        assert time.monotonic() < deadline, "workers left running"
        time.sleep(0.1)


@linux_only
def test_the_resource_tracker_outlives_a_hangup():
    # A hangup to the run's process group ended multiprocessing's resource tracker (it
    # ignores SIGINT and SIGTERM only); the one started in its place printed a KeyError
    # traceback for each semaphore the stopping workers let go of.
    code = (
        "import signal\n"
        "from multiprocessing import resource_tracker\n"
        "from raygrid.pipeline.interrupts import _start_resource_tracker\n"
        "_start_resource_tracker()\n"
        "pid = resource_tracker._resource_tracker._pid\n"
        "status = open(f'/proc/{pid}/status').read()\n"
        "ignored = int(status.split('SigIgn:')[1].split()[0], 16)\n"
        "print(bool(ignored >> (signal.SIGHUP - 1) & 1), signal.getsignal(signal.SIGHUP))\n"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert said.stdout.split() == ["True", str(signal.SIG_DFL)], said.stdout + said.stderr


def _drain(terminal: int) -> None:
    """Read a pseudo-terminal until it is closed."""
    try:
        while os.read(terminal, 65536):
            pass
    except OSError:
        pass


def test_an_early_sync_cancel_is_not_logged_as_a_traceback(caplog):
    # Ctrl-C before a client call's coroutine started: distributed's sync() cancel callback
    # read `future` unassigned and tornado logged a NameError traceback (CI, 2026-11-24).
    import logging

    from raygrid.pipeline.interrupts import quiet_client_interrupts

    from clusters import in_process_client

    application = logging.getLogger("tornado.application")
    with in_process_client() as client:
        quiet_client_interrupts(client)
        quiet_client_interrupts(client)  # once is enough: not a second filter
        early = NameError(
            "cannot access free variable 'future' where it is not associated with a value"
        )

        def logged() -> list:
            return [r for r in caplog.records if r.name == "tornado.application"]

        with caplog.at_level(logging.ERROR, logger="tornado.application"):
            application.error("Exception in callback", exc_info=(NameError, early, None))
            assert not logged()
            other = NameError("name 'x' is not defined")  # any other error is kept
            application.error("Exception in callback", exc_info=(NameError, other, None))
            assert len(logged()) == 1
    assert sum(f.__name__ == "_not_an_early_sync_cancel" for f in application.filters) == 1


def test_a_dropped_ctrl_c_prints_no_traceback_but_other_unraisables_do(monkeypatch):
    # "Exception ignored in: <bound method GCDiagnosis._gc_callback ...>" and a
    # KeyboardInterrupt traceback came before the run's own message in 1 of 3 Ctrl-Cs.
    import sys

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_type))

    class Broken:
        def __del__(self):
            raise RuntimeError("a real bug, still reported")

    with pytest.raises(KeyboardInterrupt):
        with interrupts_kept():
            ctrl_c_in_a_gc_callback()
            Broken()  # collected at once: its error is unraisable, and not a Ctrl-C
    assert reported == [RuntimeError]
    assert sys.unraisablehook is not None and sys.unraisablehook.__name__ == "<lambda>"


def test_a_signal_as_the_handlers_go_in_leaves_the_previous_handlers(monkeypatch):
    # A SIGTERM just after the handlers went in raised KeyboardInterrupt before the
    # block's `try`: the process kept raygrid's handlers for good, so a later Ctrl-C at a
    # prompt raised where nothing expected it.
    import raygrid.pipeline.interrupts as interrupts

    installed = []
    install = signal.signal

    def install_then_signal(sig, handler):
        before = install(sig, handler)
        installed.append(sig)
        if installed == [signal.SIGINT, signal.SIGTERM]:  # both in, and not yet restored
            signal.raise_signal(signal.SIGTERM)
        return before

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(interrupts.signal, "signal", install_then_signal)
    with pytest.raises(KeyboardInterrupt):
        with interrupts_kept():
            pass
    monkeypatch.undo()
    assert installed[:2] == [signal.SIGINT, signal.SIGTERM]
    assert {sig: signal.getsignal(sig) for sig in previous} == previous
    assert interrupts.stopping_signal() == signal.SIGTERM
    check_interrupts()  # nothing kept once the block is over


@contextmanager
def closed_client_comm(scheduler, name: str):
    """A client of ``scheduler`` whose comm has closed, as a client's is once it has closed
    and its scheduler (still running) has yet to hear of it."""
    from types import SimpleNamespace

    from distributed.batched import BatchedSend

    comm = BatchedSend(interval="10ms")
    comm.comm = SimpleNamespace(closed=lambda: True)  # "<BatchedSend: closed>"
    scheduler.client_comms[name] = comm
    try:
        yield
    finally:
        del scheduler.client_comms[name]  # not for the cluster's close to close


def test_a_closed_client_comm_is_quiet_only_as_raygrid_closes_its_cluster_after_ctrl_c():
    # A Ctrl-C'd tiled run printed 14 blocks of "distributed.scheduler - CRITICAL - Closed
    # comm <BatchedSend: closed> while trying to write ..." with CommClosedError tracebacks
    # (some 100 lines) before "interrupted: ...", in 2 of about 12 tries: connect closes the
    # client, then the cluster, whose scheduler meanwhile reports finished tasks to it.
    from raygrid.pipeline.interrupts import quiet_client_interrupts

    from clusters import in_process_client

    logger = logging.getLogger("distributed.scheduler")
    filters = list(logger.filters)
    records: list[logging.LogRecord] = []
    collect = logging.Handler(logging.WARNING)
    collect.emit = records.append  # after the logger's own filters, as any handler

    def logged(scheduler, client: str) -> list[str]:
        """What ``scheduler`` logs (Dask's own code) sending a message to ``client``."""
        records.clear()
        scheduler.client_send(client, {"op": "key-in-memory", "key": "x"})
        return [r.getMessage() for r in records if r.levelno == logging.CRITICAL]

    logger.addHandler(collect)
    try:
        with in_process_client() as users:  # a user's own cluster in the same process
            theirs = users.cluster.scheduler
            with (
                closing_uninterrupted() as hold,
                in_process_client() as client,  # one raygrid started (connect)
                closed_client_comm(client.cluster.scheduler, "raygrid-client"),
                closed_client_comm(theirs, "users-client"),
            ):
                quiet_client_interrupts(client)
                ours = client.cluster.scheduler
                assert logged(ours, "raygrid-client")  # no Ctrl-C: kept, it may be real
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt:
                    hold()  # as connect starts closing its cluster after Ctrl-C
                assert not logged(ours, "raygrid-client")
                assert logged(theirs, "users-client")  # not raygrid's to quiet
                records.clear()
                logger.critical("Closed comm %r while trying to write %s", object(), "msg")
                logger.warning("Removing worker 'tcp://127.0.0.1:1' caused the cluster to lose")
                assert len(records) == 2  # not the scheduler's own client comm; another message
        assert logger.filters == filters  # gone with the block
    finally:
        logger.removeHandler(collect)
