"""What a long run says while it works: the progress bar's clock, and the first run's compile."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import raygrid.pipeline as rg
from raygrid.kernels import forward_star
from raygrid.pipeline import survey
from raygrid.pipeline.grid import grid_from_velocity
from raygrid.pipeline.options import check_options
from raygrid.pipeline.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_drawn_at_once_and_its_clock_runs_before_any_source_ends():
    stream = Terminal()
    bar = Progress(total=3, done=0, enabled=True, stream=stream, tick=0.01)
    with bar.ticking():
        time.sleep(0.2)
        frames = stream.getvalue().split("\r")[1:]
        bar.update(3)
    assert frames[0].startswith("[....") and "0/3 sources" in frames[0]
    assert "ETA     ? s" in frames[0]  # no rate yet: no made-up estimate
    assert len(frames) >= 3  # redrawn while nothing finished
    clocks = {frame.split("sources")[1].split(" s")[0].strip() for frame in frames}
    assert len(clocks) >= 2  # the elapsed time moves
    output = stream.getvalue()
    assert output.endswith("3/3 sources" + output.split("3/3 sources")[-1])
    assert output.endswith("\n") and output.count("\n") == 1  # one line, ended once
    # The ticking thread is gone: nothing is drawn after the block.
    time.sleep(0.05)
    assert stream.getvalue() == output


def test_a_bar_cut_short_ends_its_line():
    stream = Terminal()
    with pytest.raises(KeyboardInterrupt):
        with Progress(total=3, done=0, enabled=True, stream=stream, tick=0.01).ticking() as bar:
            bar.update(1)
            raise KeyboardInterrupt
    assert stream.getvalue().endswith("\n") and "1/3 sources" in stream.getvalue()


def test_off_a_terminal_lines_are_written_at_the_start_and_at_the_end():
    stream = io.StringIO()
    bar = Progress(total=4, done=1, enabled=True, stream=stream, every=60.0, tick=0.01)
    with bar.ticking():
        time.sleep(0.05)  # no ticking off a terminal: a log gets no line per second
        bar.update(1)  # within `every` of the last line: not written
        bar.update(2)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    assert "1/4 sources" in lines[0] and "4/4 sources" in lines[1]


def test_off_a_terminal_lines_grow_sparser_as_the_run_goes_on(monkeypatch):
    # A batch job's log got a line every 5 s of a day's run: 17 000 lines (so submitted
    # jobs ran with --no-progress, and their logs said nothing of how far they were).
    from raygrid.pipeline import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    stream = io.StringIO()
    bar = Progress(total=100_000, done=0, enabled=True, stream=stream, every=5.0)
    with bar.ticking():
        for _ in range(86_400):  # a source finished every second, for a day
            clock[0] += 1.0
            bar.update(1)
    lines = stream.getvalue().splitlines()
    assert 150 < len(lines) < 250, len(lines)
    elapsed = [float(line.split("sources")[1].split(" s")[0]) for line in lines]
    gaps = np.diff(elapsed)
    assert gaps[:5].tolist() == [5.0] * 5  # every 5 s at first
    assert gaps.max() == progress.SPARSEST  # never more than 10 minutes apart
    steady = gaps[:-1]  # (the last: the block's end, whenever it comes)
    assert all(later >= earlier for earlier, later in zip(steady, steady[1:]))


def test_off_a_terminal_a_run_cut_short_writes_how_far_it_got():
    # Stopped between two lines, a log said "0/20" where 6 sources were done.
    stream = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        with Progress(total=4, done=0, enabled=True, stream=stream, every=60.0).ticking() as bar:
            bar.update(2)
            raise KeyboardInterrupt
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "0/4 sources" in lines[0] and "2/4 sources" in lines[1]
    # Nothing more to say when the last line already says it.
    stream = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        with Progress(total=4, done=1, enabled=True, stream=stream, every=60.0).ticking():
            raise KeyboardInterrupt
    assert len(stream.getvalue().splitlines()) == 1


def test_off_a_terminal_the_last_sources_before_a_wait_are_said(monkeypatch):
    # A burst of sources within a line's spacing, then a long wait: the log said "184/256"
    # for minutes where 248 were done (an operations review, a worker stopped).
    stream = io.StringIO()
    bar = Progress(total=4, done=0, enabled=True, stream=stream, every=0.05, tick=0.01)
    with bar.ticking():
        bar.update(1)  # within `every` of the first line: not written then
        time.sleep(0.3)
        assert stream.getvalue().splitlines()[-1].startswith("[#######") and (
            "1/4 sources" in stream.getvalue().splitlines()[-1]
        )
        lines = len(stream.getvalue().splitlines())
        time.sleep(0.1)
        assert len(stream.getvalue().splitlines()) == lines  # nothing new: nothing said


def test_a_survey_that_stops_finishing_sources_is_said_to_stall(monkeypatch):
    # A worker stopped (SIGSTOP, a hung file system) held its tasks and the run waited
    # without a word for as long as it was left (an operations review: 450 s).
    from raygrid.pipeline import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    stream = io.StringIO()
    where = "; task(s) in flight on tcp://127.0.0.1:1 (2)"
    bar = Progress(total=9, done=0, enabled=False, stream=stream, stalled=lambda: where)

    def after(seconds: float) -> list[str]:
        clock[0] += seconds
        bar._watch()  # what the ticking thread does every `tick`
        return stream.getvalue().splitlines()

    assert after(1000.0) == []  # no source finished yet: nothing to measure a wait by
    bar.update(1)  # 1000 s after the start: a stall is 5 x 1000 s
    bar.update(1)
    assert after(4999.0) == []
    said = after(2.0)
    assert len(said) == 1 and said[0].startswith("no source has finished for 5001 s (at most ")
    assert where + ": a worker may be hung" in said[0]  # said with the bar off too
    assert "Ctrl-C stops the run, keeping every source done" in said[0]
    assert len(after(4000.0)) == 1  # again only once the wait has doubled
    assert len(after(1002.0)) == 2
    bar.update(1)  # a source finished: the count starts again (with 10,003 s the longest)
    assert len(after(50_000.0)) == 2 and len(after(20.0)) == 3
    # A short run's stall: STALL_S at least.
    bar = Progress(total=9, done=0, enabled=False, stream=stream, stalled=lambda: "")
    bar.update(1)
    assert len(after(progress.STALL_S - 1)) == 3 and len(after(1.0)) == 4
    # Not watched where nothing asks (a solve on this process's threads).
    bar = Progress(total=9, done=0, enabled=False, stream=stream)
    bar.update(1)
    assert len(after(1e6)) == 4


def test_the_ticking_thread_watches_for_a_stall(monkeypatch):
    from raygrid.pipeline import progress

    monkeypatch.setattr(progress, "STALL_S", 0.2)
    monkeypatch.setattr(progress, "STALL_FACTOR", 0.0)
    stream = io.StringIO()
    with Progress(4, 0, False, stream, tick=0.01, stalled=lambda: "").ticking() as bar:
        bar.update(1)
        deadline = time.monotonic() + 30
        while not stream.getvalue():
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert stream.getvalue().startswith("no source has finished for 0 s")


def test_a_stall_names_the_workers_holding_tasks():
    from distributed import Event

    from clusters import in_process_client

    with in_process_client() as client:
        release = Event("release", client=client)

        def wait(event):
            event.wait(30)

        task = client.submit(wait, release, pure=False)
        deadline = time.monotonic() + 10
        [worker] = client.scheduler_info()["workers"]
        while not client.processing()[worker]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert survey._in_flight(client) == f"; task(s) in flight on {worker} (1)"
        release.set()
        task.result()
        assert survey._in_flight(client) == ""


def test_a_disabled_bar_writes_nothing():
    stream = Terminal()
    with Progress(total=2, done=0, enabled=False, stream=stream, tick=0.01).ticking() as bar:
        time.sleep(0.03)
        bar.update(2)
    assert stream.getvalue() == ""


COMPILE_THEN_SOLVE = """
import numpy as np
import raygrid.pipeline as rg
from raygrid.kernels import bounds, cpu, forward_star, legs
from raygrid.pipeline.grid import grid_from_velocity
from raygrid.pipeline.lookup import receiver_times
from raygrid.pipeline.options import check_options
from raygrid.pipeline.solve import compile_cpu_solver, solve_seeds, source_seeds

kernels = (cpu._dijkstra, cpu._precompute, bounds._moving_min, legs._best_last_legs)
velocity = rg.layered_model({"z": 13, "y": 6, "x": 9}, 10.0, [40.0], [1500.0, 3000.0])
grid = grid_from_velocity(velocity)
star = forward_star(grid.radius3(2))
nodes, seed_times = source_seeds(grid, star, np.array([0.0, 2.5, 3.3]))
seeds = [(grid.flat(nodes), seed_times)]
for weights, precision, precompute in [("exact", "float64", False), ("mean", "float32", True)]:
    options = check_options(weights, "cpu", precision, None, 1, precompute)
    compile_cpu_solver(grid.dims, star, options)
    compiled = sum(len(kernel.signatures) for kernel in kernels)
    for targets in (None, np.array([grid.flat(np.array([[12, 5, 8]]))[0]])):
        times, _ = solve_seeds(grid, star, options, seeds, threads=1, targets=targets)
        assert np.isfinite(times).any()
        field = times.reshape(len(seeds), -1)[0]  # and a receiver between nodes read on it
        receiver_times(grid, star, field, np.array([[3.3, 2.5, 4.1]]), options.dtype)
    print(weights, precision, precompute, compiled, sum(len(k.signatures) for k in kernels))
"""


def test_compiling_first_leaves_the_solve_nothing_to_compile(tmp_path):
    # A survey compiles the solver on the client so that its workers load it from Numba's
    # cache; that holds only if the tiny model needs every specialisation the real one does.
    # In a fresh process with an empty cache: in this one, earlier tests compiled them all.
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", COMPILE_THEN_SOLVE], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines()]
    assert len(rows) == 2
    for *options, compiled, after in rows:
        assert int(compiled) > 0 and after == compiled, options


def test_a_slow_compile_is_announced_and_a_fast_one_is_not(monkeypatch):
    grid = grid_from_velocity(rg.constant_model({"z": 5, "x": 5}, 1.0))
    star = forward_star(grid.radius3(1))
    options = check_options("exact", "cpu", "float64", None, 1, False)
    said: list[str] = []
    survey._compile_cpu_solver(grid, star, options, said.append, after=60.0)
    assert said == []

    def slow(*args) -> float:
        time.sleep(0.3)
        return 0.3

    monkeypatch.setattr(survey, "compile_cpu_solver", slow)
    survey._compile_cpu_solver(grid, star, options, said.append, after=0.05)
    assert said[0].startswith("compiling raygrid's CPU solver for this machine")
    assert said[1] == "compiled in 0.3 s"


def test_traveltimes_counts_its_sources_on_stderr_when_asked(capsys):
    velocity = rg.gradient_model({"z": 21, "x": 31}, 10.0)
    sources = [{"z": 0.0, "x": x} for x in (0.0, 100.0, 200.0)]
    quiet = rg.traveltimes(velocity, sources, radius=2, threads=2)
    assert capsys.readouterr().err == ""  # no bar unless asked
    shown = rg.traveltimes(velocity, sources, radius=2, threads=2, progress=True)
    lines = capsys.readouterr().err.splitlines()  # not a terminal: a line at start and end
    assert "0/3 sources" in lines[0] and "3/3 sources" in lines[-1]
    assert shown.identical(quiet)


def test_the_rate_leaves_out_the_wait_before_the_first_source(monkeypatch):
    # Workers start and load the kernels before a first batch ends: a rate counted from the
    # start took that wait for the pace (ETA 204 s at first for a 60 s run).
    from raygrid.pipeline import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])

    def last(stream: Terminal) -> str:
        return stream.getvalue().split("\r")[-1]

    stream = Terminal()
    bar = Progress(total=100, done=0, enabled=True, stream=stream, tick=60.0)
    with bar.ticking():
        clock[0] = 20.0  # the first batch of 8 after 20 s, then 8 every 2 s
        bar.update(8)
        for _ in range(5):
            clock[0] += 2.0
            bar.update(8)  # 10 s after the first: too soon to trust the pace alone
        assert "48/100 sources" in last(stream) and "1.60 sources/s" in last(stream)
        for _ in range(5):
            clock[0] += 2.0
            bar.update(8)
        assert "88/100 sources" in last(stream)
        assert "4.00 sources/s  ETA     3 s" in last(stream)
    # A resumed run's rate counts only this run's sources, from its first.
    stream = Terminal()
    bar = Progress(total=100, done=90, enabled=True, stream=stream, tick=60.0)
    clock[0] = 0.0
    with bar.ticking():
        clock[0] = 4.0
        bar.update(2)
        clock[0] = 8.0
        bar.update(2)
        assert "94/100 sources" in last(stream)
        assert "0.50 sources/s  ETA    12 s" in last(stream)
