"""A progress bar for work counted in sources: surveys and many-source solves."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

import numpy as np

__all__ = ["Progress"]

#: The longest wait, in seconds, between two lines off a terminal while sources finish.
SPARSEST = 600.0
#: A run is said to stall when no source has finished for this many seconds, and for
#: :data:`STALL_FACTOR` times the longest wait between two sources (the first counted from
#: the start) before: a worker stopped or stuck on a file system or a GPU held its tasks
#: and the run waited for it without a word.
STALL_S = 120.0
STALL_FACTOR = 5.0


class Progress:
    """A progress bar on a terminal; a line every few seconds otherwise (logs, batch jobs).

    Within :meth:`ticking` the bar is drawn at once and, on a terminal, redrawn every
    ``tick`` seconds by a background thread, so that its clock runs while the first sources
    are solved (a 3D source can take minutes); elsewhere a line is written at the start and
    then as sources finish, at most every ``every`` seconds, and at the end. Off a terminal
    the lines grow sparser as the run goes on (at most one per tenth of the time elapsed,
    and, while sources finish, one every :data:`SPARSEST` seconds at least), so a batch
    job's log of a day's run holds some hundred lines, not thousands.

    Parameters
    ----------
    total : int
        Sources in all.
    done : int
        Sources done before this run (a resumed survey); the rate counts only the others.
    enabled : bool
        Draw anything at all.
    stream : text file, optional
        Where to draw (default ``sys.stderr``); a terminal if its ``isatty()`` says so.
    every : float
        Seconds between lines off a terminal.
    tick : float
        Seconds between redraws on a terminal, and between the ticking thread's looks off
        one (a line for sources that finished since the last, once it is due: the last
        ones before a long wait were not said until the next finished).
    stalled : callable, optional
        Watch for a stall (a survey's workers): within :meth:`ticking`, once sources have
        finished and then none has for a while (:data:`STALL_S`, :data:`STALL_FACTOR`), a
        note says so, with what this returns (where the tasks in flight are); again each
        time the wait doubles.
    noted : callable, optional
        Asked by the ticking thread every tick: a note to say (a worker job ended), or
        ``None``.
    """

    def __init__(
        self, total: int, done: int, enabled: bool, stream: TextIO | None = None,
        every: float = 5.0, tick: float = 1.0, stalled: Callable[[], str] | None = None,
        noted: Callable[[], str | None] | None = None,
    ) -> None:  # fmt: skip
        self.total, self.done, self.enabled = total, done, enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.first = done
        self.every, self.tick = every, tick
        self.last = -np.inf
        self.shown = -1  # the count last drawn
        self._lock = threading.Lock()  # the ticking thread and update() both draw
        self.stalled, self.noted = stalled, noted
        self.finished_at: float | None = None  # when a source last finished (this run)
        self.first_finished: tuple[float, int] | None = None  # when and how many, first
        self.longest = 0.0  # the longest wait between two (from the start, the first)
        self.said_stall = 0.0  # the wait last said to be a stall
        self._closed = False  # the ticking block has ended: no more notes
        self._gone = False  # the stream cannot be written any more

    @contextmanager
    def ticking(self) -> Iterator[Progress]:
        """Draw the bar now and, on a terminal, keep its clock running until the block ends."""
        self.start = time.perf_counter()
        with self._lock:
            self._closed = False
            self._draw()
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.tick):
                with self._lock:
                    if self.done < self.total and (self.tty or self._due()):
                        self._draw()
                self._watch()
                said = None
                if self.noted is not None:
                    try:
                        said = self.noted()
                    except Exception:  # (a note never ends the run: it is only news)
                        said = None
                if said:
                    self.note(said)

        thread = threading.Thread(target=tick, name="raygrid-progress", daemon=True)
        if self.enabled or self.stalled is not None or self.noted is not None:
            thread.start()
        try:
            yield self
        finally:
            stop.set()
            with self._lock:
                self._closed = True
            if thread.is_alive():
                # (Not for ever: a stall's note may wait on a scheduler that does not answer.)
                thread.join(timeout=self.tick + 5.0)
            if self.enabled and self.tty and self.done < self.total:
                # Cut short (Ctrl-C, a failed task): end the bar's line, so that what is
                # said next starts a line of its own.
                self._print("")
            elif self.enabled and self.shown != self.done:
                # Off a terminal, lines come every few seconds: a run cut short between two
                # would leave its log saying fewer sources done than are.
                with self._lock:
                    self._draw()

    def update(self, n: int) -> None:
        """Count ``n`` more sources done."""
        with self._lock:
            self.done += n
            now = time.perf_counter()
            self.longest = max(self.longest, now - (self.finished_at or self.start))
            self.finished_at, self.said_stall = now, 0.0
            if self.first_finished is None:
                self.first_finished = (now, self.done)
            if self.tty or self.done >= self.total or self._due():
                self._draw()

    def _due(self) -> bool:
        """Whether a line off a terminal is due: sources finished since the last, and it
        is as far back as the lines' spacing at this point of the run."""
        now = time.perf_counter()
        sparse = min(max(self.every, (now - self.start) / 10), SPARSEST)
        return self.shown != self.done and now - self.last >= sparse

    def _watch(self) -> None:
        """Note a stall: no source finished for :data:`STALL_S` seconds and
        :data:`STALL_FACTOR` times the longest wait before (again when the wait doubles).
        Not once the block has ended (:meth:`note`): the scheduler, asked where the tasks
        are, answered slowly, and the note came after the run's last words."""
        if self.stalled is None or self.finished_at is None or self.done >= self.total:
            return  # not watched, nothing to measure a wait by, or nothing left to wait for
        waited = time.perf_counter() - self.finished_at
        if waited < max(STALL_S, STALL_FACTOR * self.longest, 2 * self.said_stall):
            return
        self.said_stall = waited
        where = self.stalled()  # (unlocked: the scheduler may take its time)
        self.note(
            f"no source has finished for {waited:.0f} s (at most {self.longest:.0f} s apart "
            f"before){where}: a worker may be hung (stopped, or stuck on a file system or a "
            "GPU), and the run waits for it. Ctrl-C stops the run, keeping every source "
            "done; the same command resumes it"
        )

    def note(self, message: str) -> None:
        """Say ``message`` on a line of its own above the bar (whether or not the bar is
        drawn: what it says matters in a batch job's log too); nothing once the
        :meth:`ticking` block has ended."""
        with self._lock:
            if self._closed:
                return
            if self.enabled and self.tty:
                self._print("\r\x1b[K" + message)  # over the bar
                self._draw()
            else:
                self._print(message)

    def _print(self, text: str, end: str = "\n") -> None:
        """Write to the stream, unless it is gone: a terminal closed (SIGHUP: writes fail
        with EIO) or a pipe whose reader left. Its failure ended a run stopped by the
        hangup with a traceback and status 1, not as stopped (129)."""
        if self._gone:
            return
        try:
            print(text, end=end, file=self.stream, flush=True)
        except OSError:  # (EIO, EPIPE: nothing can be said there any more)
            self._gone = True

    def _rate(self, now: float) -> float:
        """Sources a second: from the first that finished on, once as long again has
        passed as it took; before that, since the start.

        The start's wait counts only once: the workers start, load the kernels and solve
        a first batch before any source is counted, and a rate from the start took that
        for the pace (ETA 204 s at first for a 60 s run; 439 s for a resumed run's last 11
        s)."""
        if self.first_finished is not None:
            then, done = self.first_finished
            if self.done > done and now - then >= then - self.start:
                return (self.done - done) / (now - then)
        elapsed = now - self.start
        return (self.done - self.first) / elapsed if elapsed > 0 else 0.0

    def _draw(self) -> None:
        if not self.enabled:
            return
        now = self.last = time.perf_counter()
        self.shown = self.done
        elapsed = now - self.start
        rate = self._rate(now)
        eta = f"{(self.total - self.done) / rate:5.0f} s" if rate > 0 else "    ? s"
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        bar = "#" * filled + "." * (width - filled)
        line = (
            f"[{bar}] {self.done}/{self.total} sources  {elapsed:6.1f} s  "
            f"{rate:6.2f} sources/s  ETA {eta}"
        )
        end = "\n" if not self.tty or self.done >= self.total else ""
        self._print(("\r" if self.tty else "") + line, end=end)
