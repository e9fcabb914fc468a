"""Errors raised for bad input: one type, so callers and the CLI can tell them apart."""

from __future__ import annotations

import errno
import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import ParamSpec, TypeVar

__all__ = [
    "InputError",
    "InputWarning",
    "RunFailed",
    "as_path",
    "for_workflows",
    "full_disk",
    "missing_file",
    "other_case",
    "run_again",
    "RESUME_ENV",
    "setting",
    "spelt_for_workflows",
    "warn_input",
    "workflow_spelling",
]


class InputError(ValueError):
    """Bad input (model, source, receiver, option or file), with a message naming the problem.

    Checked before anything is computed or written wherever the input can be seen whole
    first; a lazy model's values are also checked block by block where they are read
    (the legs of rays and receivers), so a bad value there may stop a survey part-way,
    its finished sources kept. Results that do not hold what they should (a result
    without its solve's attributes, predecessors forming a cycle) are refused with it too.
    """


class RunFailed(RuntimeError):
    """A run that stopped part-way for a reason other than its input: a worker lost with
    the work it held, a task that failed. What was finished is kept; the message says so,
    and how to go on."""


#: The environment variable through which a batch job (``raygrid submit``'s script) tells
#: the ``raygrid run`` inside it what resumes it: the job's own command names a scheduler
#: that ends with the job.
RESUME_ENV = "RAYGRID_RESUME"


def run_again() -> str:
    """What to do to resume a stopped run: run the same command again, or inside a submitted
    job what its script says (:data:`RESUME_ENV`)."""
    return os.environ.get(RESUME_ENV) or "run the same command again"


def full_disk(error: BaseException | None) -> str:
    """What to do about ``error`` if it is a full disk or quota (``ENOSPC``, ``EDQUOT``),
    as a parenthesis to append to its message, else ``""``: zarr's chunk writes name no
    file, so the error alone says what failed, not what to do."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f" (the disk or quota is full: free some space, then {run_again()}; a run "
            "keeps what it finished and resumes)"
        )
    return ""


P = ParamSpec("P")
R = TypeVar("R")

#: Whether refusals name settings as a workflow file spells them (:func:`setting`).
_WORKFLOW_SPELLING: ContextVar[bool] = ContextVar("raygrid_workflow_spelling", default=False)


@contextmanager
def spelt_for_workflows(on: bool = True) -> Iterator[None]:
    """Refusals raised in the block (in this thread or task) name the settings they offer to
    change as a workflow file spells them (:func:`setting`); ``on=False``: as the Python API
    does. A workflow's checks and runs, and the Dask tasks they start, run inside it (a task
    is told by an argument: the context stays in the thread that set it)."""
    token = _WORKFLOW_SPELLING.set(on)
    try:
        yield
    finally:
        _WORKFLOW_SPELLING.reset(token)


def for_workflows(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` run inside :func:`spelt_for_workflows`: a workflow's entry points.

    Not contextlib's own decorator, whose frame (outside raygrid) :func:`warn_input` would
    take for the user's line.
    """

    @functools.wraps(function)
    def spelt(*args: P.args, **kwargs: P.kwargs) -> R:
        with spelt_for_workflows():
            return function(*args, **kwargs)

    return spelt


def workflow_spelling() -> bool:
    """True inside :func:`spelt_for_workflows`: for a task started from there to be told."""
    return _WORKFLOW_SPELLING.get()


def setting(api: str, workflow: str) -> str:
    """A setting a refusal offers to change, spelt as its reader writes it: ``api`` for the
    Python API (``'precision="float32"'``), ``workflow`` inside
    :func:`spelt_for_workflows` (``"grid.precision: float32"``). The same checks refuse
    both (a GPU's memory, a block's shared memory), so only the words differ."""
    return workflow if _WORKFLOW_SPELLING.get() else api


class InputWarning(UserWarning):
    """Input that runs but is probably not what was meant (e.g. a velocity in km/s labelled
    m/s); the CLI prints it as ``warning: ...``."""


# raygrid's own source folders (the package maps kernels/ and pipeline/ as its modules):
# frames there are never the user's line.
_PACKAGE_FOLDERS = tuple(
    {
        str(root / folder) + os.sep
        for root in (Path(__file__).parent.parent, Path(__file__).resolve().parent.parent)
        for folder in ("kernels", "pipeline")
    }
)


def warn_input(message: str) -> None:
    """Issue an :class:`InputWarning` at the first frame outside raygrid: the user's line
    that passed the input, however deep in raygrid it was found (a count of frames per
    call site, as ``stacklevel`` wants, went stale as calls moved)."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: warn_input's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_FOLDERS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, InputWarning, stacklevel=level)


#: Said with every hint about a dim given in another case (``Z`` for ``z``).
#: What raygrid's z is, in every hint about depths and elevations. Not "below the model's
#: top": a model may reach above sea level (a z from -2 km), and its points are placed on
#: that axis as given.
Z_IS_DEPTH = (
    "z is depth, positive down, on the model's own z axis (negative above sea level if the "
    "model reaches there)"
)
LOWER_CASE_DIMS = f"dim names are lower case; raygrid's {Z_IS_DEPTH}"
#: Names other tools give raygrid's z, y and x (a model's axes, a table's columns), lower
#: case: named in the hints to rename them. (Geographic ones must be projected first.)
#: Names of a vertical axis measured up (of a model's axis, a table's column): raygrid's z
#: negated, not renamed.
ELEVATION_NAMES = ("elev", "elevation", "height", "altitude")
#: CF standard names of a vertical coordinate measured up (CF's ``height`` is above the
#: surface, positive up by definition).
UP_STANDARD_NAMES = (
    "altitude", "height", "height_above_mean_sea_level", "height_above_reference_ellipsoid",
    "height_above_geopotential_datum", "surface_altitude",
)  # fmt: skip

OTHER_DIM_NAMES = {
    "depth": "z", "lat": "y", "latitude": "y", "lon": "x", "long": "x", "longitude": "x",
    "northing": "y", "easting": "x", "north": "y", "east": "x",
}  # fmt: skip


def other_case(given: list, missing: list[str]) -> str:
    """The hint for missing dims given in another case (``Z`` for ``z``), or ``""``: dim
    names are lower case, as a CSV file's header is told (``Z`` often means elevation)."""
    cased = [
        (name, name.lower())
        for name in given
        if isinstance(name, str) and name != name.lower() and name.lower() in missing
    ]
    if not cased:
        return ""
    meant = ", ".join(f"{lower!r} for {name!r}" for name, lower in cased)
    return f"; did you mean {meant}? ({LOWER_CASE_DIMS})"


def missing_file(path: str | Path, what: str) -> InputError:
    """The error for a file that is not there, naming the working directory a relative
    path was read from (the usual cause: a workflow run from another directory)."""
    where = "" if Path(path).is_absolute() else f" (from the working directory {Path.cwd()})"
    return InputError(f"{what} {path} does not exist{where}")


def as_path(path: object, what: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it is text or a path, a leading ``~`` the home
    folder (as a workflow's paths read it: a store a workflow wrote to ``~/s.zarr`` was
    "does not exist" to ``open_survey("~/s.zarr")``); anything else (``None``, a number,
    bytes) is an :class:`InputError` naming ``what``, not a ``TypeError`` from
    :class:`~pathlib.Path`."""
    if not isinstance(path, (str, os.PathLike)):  # bytes are neither
        raise InputError(f"{what} must be a path (text or pathlib.Path), got {path!r}")
    return Path(path).expanduser()
