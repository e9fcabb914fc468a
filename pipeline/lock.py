"""One run writes a survey store at a time.

Two runs of one workflow on one store would both solve the pending sources and race in
the store's final steps: one of them failed with a bare ``[Errno 39] Directory not empty``
as the other removed the raypath parts it was reading. A run therefore holds an OS file
lock (``flock``, via filelock) on a hidden file beside the store, ``.<store>.lock``, from
before it reads the store until the store is complete. The kernel releases the lock when
its process ends, however it ends, so a crashed or killed run never leaves a stale lock to
remove by hand. The empty lock file itself stays: removing it while another run may be
opening it would let two runs lock two different files.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import InputError
from .storepaths import check_writable

__all__ = ["is_locked", "lock_path", "store_lock"]


def lock_path(store: Path) -> Path:
    """The lock file of the store at ``store``: a hidden sibling, so it outlives the store's
    replacement (``--overwrite``) and is never mistaken for part of it. Beside the real
    path (links resolved, ``.`` named), so two names of one store share one lock."""
    store = Path(store).resolve()
    return store.with_name(f".{store.name}.lock")


@contextmanager
def store_lock(store: str | Path) -> Iterator[None]:
    """Hold the lock of the store at ``store`` for the ``with`` block, or refuse at once.

    Raises
    ------
    InputError
        If another run (in this process or any other on a machine sharing the file system)
        holds it, or the store's folder cannot be written.
    """
    store = Path(store)
    check_writable(store)
    path = lock_path(store)
    made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]  # innermost first
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise InputError(
            f"{store} is being written by another raygrid run (it holds the lock {path}); "
            "wait for that run to finish and rerun this one to find its results, or choose "
            "another outputs.store"
        ) from None
    refused = False
    try:
        yield
    except InputError:
        refused = True
        raise
    finally:
        lock.release()
        if new and (refused or not store.exists()):
            # A refused run (--overwrite of a folder raygrid did not make, another
            # workflow's store) left its lock file beside data it said it left untouched;
            # so did a run that failed, however, before it made its store (a cluster that
            # could not be had). Safe because the lock is tried once (timeout=0): a run
            # that opened the file while this one held it was refused, so only one opening
            # it between the release and the unlink (microseconds) could lock a removed file.
            path.unlink(missing_ok=True)
        if made and not store.exists():
            # A run stopped before it made its store (a cluster refused, Ctrl-C) leaves no
            # folder behind. Only a run that took the lock between the release and the
            # unlink (microseconds, in folders this run made) could lock a removed file.
            path.unlink(missing_ok=True)
            for folder in made:
                try:
                    folder.rmdir()
                except OSError:  # no longer empty: someone else's now
                    break


def is_locked(store: str | Path) -> bool:
    """Whether a run holds the lock of the store at ``store`` now. Reads only: a store
    without a lock file (never run by raygrid, or copied) is not locked, and none is made;
    nor is one whose lock file this process cannot open (a read-only copy)."""
    path = lock_path(Path(store))
    if not path.exists():
        return False
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:
        return False
    lock.release()
    return False
