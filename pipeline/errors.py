"""Errors raised for bad input: one type, so callers and the CLI can tell them apart."""

from __future__ import annotations

from pathlib import Path

__all__ = ["InputError", "InputWarning", "RunFailed", "missing_file"]


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


class InputWarning(UserWarning):
    """Input that runs but is probably not what was meant (e.g. a velocity in km/s labelled
    m/s); the CLI prints it as ``warning: ...``."""


def missing_file(path: str | Path, what: str) -> InputError:
    """The error for a file that is not there, naming the working directory a relative
    path was read from (the usual cause: a workflow run from another directory)."""
    where = "" if Path(path).is_absolute() else f" (from the working directory {Path.cwd()})"
    return InputError(f"{what} {path} does not exist{where}")
