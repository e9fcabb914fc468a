"""Ctrl-C on a local cluster: only the client process handles it."""

from __future__ import annotations

import os
import signal
import threading

from distributed import WorkerPlugin

__all__ = ["IgnoreInterrupts"]


class IgnoreInterrupts(WorkerPlugin):
    """Worker plugin: worker processes on this machine ignore SIGINT.

    Ctrl-C reaches every process of the terminal's foreground group, so each local worker
    process died with a KeyboardInterrupt traceback of its own (some 70 lines for two
    workers) while the client was already closing the cluster, which stops the workers
    anyway; nothing is lost, each finished source is in the store. Workers running in the
    client's own process (``processes: false``) keep its handler.

    Parameters
    ----------
    client_pid : int
        The client's process id.
    """

    def __init__(self, client_pid: int) -> None:
        self.client_pid = client_pid

    def setup(self, worker) -> None:
        # Handlers can be set only from a process's main thread, where a worker process
        # runs its event loop and so this hook.
        if os.getpid() != self.client_pid and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
