"""Where a survey store's files go on disk, and the hidden siblings beside it: a store being
made (``partial``), an old store moved aside by ``--overwrite`` (``replaced``), a picture
being drawn; each named after its writer's host and process, so that a later run tidies
what a killed one left (:func:`tidy_siblings`). And the checks of a place to write.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

from .errors import InputError

__all__ = [
    "hidden_sibling", "remove_left", "tidy_siblings", "empty_folder", "store_path", "holds",
    "check_writable", "siblings", "remove_tree",
]  # fmt: skip


def hidden_sibling(path: Path, kind: str = "partial") -> Path:
    """A hidden sibling of ``path``: a store being made (``partial``), an old store moved
    aside by ``--overwrite`` (``replaced``), a picture being drawn (``drawing``), named
    after this host and process so that :func:`tidy_siblings` and :func:`remove_left` know
    when its writer is gone."""
    return path.with_name(f".{path.name}.{kind}-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _host() -> str:
    return socket.gethostname().replace("-", "_")  # "-" separates the name's fields


def siblings(path: Path, kind: str) -> list[tuple[Path, str, bool]]:
    """``path``'s ``kind`` siblings of every host, newest first, each with its host and
    whether its process is known to be gone: on this host only (another's cannot be
    asked). One named by this very process is taken as gone: tidying comes before any
    sibling of its own, so it is a killed run's whose PID this process got again (a
    container restarted with the same host name)."""
    import psutil  # a dependency of distributed

    found = []
    prefix = f".{path.name}.{kind}-"
    for sibling in path.parent.glob(f"{glob.escape(prefix)}*"):
        try:
            host, pid, _ = sibling.name[len(prefix) :].rsplit("-", 2)
            mtime = sibling.lstat().st_mtime
        except (ValueError, OSError):  # not one of ours, or removed meanwhile
            continue
        gone = host == _host() and pid.isdigit()
        gone = gone and (int(pid) == os.getpid() or not psutil.pid_exists(int(pid)))
        found.append((mtime, sibling, host, gone))
    return [(sibling, host, gone) for _, sibling, host, gone in sorted(found, reverse=True)]


def remove_tree(path: Path) -> None:
    """Delete a file, a folder or a link (only the link: never what it names)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_left(path: Path, kind: str) -> None:
    """Delete the ``kind`` siblings of ``path`` (:func:`hidden_sibling`) that killed runs
    on this host left: of dead processes only, never another host's."""
    for sibling, _, gone in siblings(path, kind):
        if gone:
            remove_tree(sibling)


def tidy_siblings(path: Path, *, restore_foreign: bool = False) -> None:
    """Tidy what a killed run (SIGKILL, out of memory, a node lost) left beside ``path``.

    A store half made (:func:`_partial_name`) by a run on this host is deleted. An old
    store that ``--overwrite`` had moved aside is put back where no store took its place
    (the run died before its new store was made), else deleted if its run was on this host:
    either can be the size of the whole survey. With ``restore_foreign`` (a run holding the
    store's lock, :mod:`.lock`, so that no run anywhere is replacing it now), one moved
    aside by a run on another host is put back too: a batch job killed on one node and
    resubmitted to another. Siblings of live processes are left alone.
    """
    remove_left(path, "partial")
    for sibling, host, gone in siblings(path, "replaced"):
        if not (gone or (restore_foreign and host != _host())):
            continue
        # (An empty folder there, a job script's mkdir, is as none: the old store was
        # deleted in its place.)
        if (not path.exists() or empty_folder(path)) and not path.is_symlink():
            try:
                os.replace(sibling, path)
                continue
            except OSError:  # taken meanwhile: the sibling is the old store, not needed
                pass
        if gone:
            remove_tree(sibling)


def empty_folder(path: Path) -> bool:
    """Whether ``path`` is a folder with nothing in it: where a store is to be made, as if
    no file were there (an empty folder was refused as "not a Zarr store")."""
    return path.is_dir() and next(path.iterdir(), None) is None


def store_path(path: str | Path) -> Path:
    """Where a store named ``path`` is: a link to a store elsewhere (a scratch disk) stands
    for that store, so that ``--overwrite`` replaces the store, not the link (a link moved
    aside hid the old store for good)."""
    path = Path(path)
    return path.resolve() if path.is_symlink() else path


def holds(folder: str | Path, path: str | Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it, links resolved and ``.`` named."""
    folder, path = Path(folder).resolve(), Path(path).resolve()
    return path == folder or folder in path.parents


def check_writable(path: Path, what: str = "store") -> None:
    """Raise :class:`InputError` if ``what`` (a store, a picture) cannot be created at
    ``path``: its nearest existing ancestor must be a folder this process may write in
    (checked before any cluster starts; a write can still fail later, e.g. on a full
    disk)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"cannot create {what} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot create {what} {path}: {parent} is not writable")
    # Permission bits do not tell everything (root, read-only mounts, /proc): make and
    # remove an empty folder there, as the store's first write would.
    try:
        tempfile.TemporaryDirectory(dir=parent, prefix=".raygrid-probe-").cleanup()
    except OSError as error:
        raise InputError(
            f"cannot create {what} {path}: {parent} is not writable ({error.strerror or error})"
        ) from None
