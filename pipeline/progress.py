"""A progress bar for work counted in sources: surveys and many-source solves."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import numpy as np

__all__ = ["Progress"]

#: The longest wait, in seconds, between two lines off a terminal while sources finish.
SPARSEST = 600.0


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
        Seconds between redraws on a terminal.
    """

    def __init__(
        self, total: int, done: int, enabled: bool, stream: TextIO | None = None,
        every: float = 5.0, tick: float = 1.0,
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

    @contextmanager
    def ticking(self) -> Iterator[Progress]:
        """Draw the bar now and, on a terminal, keep its clock running until the block ends."""
        self.start = time.perf_counter()
        with self._lock:
            self._draw()
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.tick):
                with self._lock:
                    if self.done < self.total:
                        self._draw()

        thread = threading.Thread(target=tick, name="raygrid-progress", daemon=True)
        if self.enabled and self.tty:
            thread.start()
        try:
            yield self
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()
            if self.enabled and self.tty and self.done < self.total:
                # Cut short (Ctrl-C, a failed task): end the bar's line, so that what is
                # said next starts a line of its own.
                print(file=self.stream, flush=True)
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
            since = now - self.last
            sparse = min(max(self.every, (now - self.start) / 10), SPARSEST)
            if self.tty or self.done >= self.total or since >= sparse:
                self._draw()

    def note(self, message: str) -> None:
        """Say ``message`` on a line of its own above the bar (whether or not the bar is
        drawn: what it says matters in a batch job's log too)."""
        with self._lock:
            if self.enabled and self.tty:
                print("\r\x1b[K" + message, file=self.stream, flush=True)  # over the bar
                self._draw()
            else:
                print(message, file=self.stream, flush=True)

    def _draw(self) -> None:
        if not self.enabled:
            return
        now = self.last = time.perf_counter()
        self.shown = self.done
        elapsed = now - self.start
        solved = self.done - self.first
        rate = solved / elapsed if elapsed > 0 else 0.0
        eta = f"{(self.total - self.done) / rate:5.0f} s" if rate > 0 else "    ? s"
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        bar = "#" * filled + "." * (width - filled)
        line = (
            f"[{bar}] {self.done}/{self.total} sources  {elapsed:6.1f} s  "
            f"{rate:6.2f} sources/s  ETA {eta}"
        )
        end = "\n" if not self.tty or self.done >= self.total else ""
        print(("\r" if self.tty else "") + line, end=end, file=self.stream, flush=True)
