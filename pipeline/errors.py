"""Errors raised for bad input: one type, so callers and the CLI can tell them apart."""

from __future__ import annotations

__all__ = ["InputError", "InputWarning"]


class InputError(ValueError):
    """Bad input (model, source, receiver, option or file), with a message naming the problem.

    Raised before anything is computed or written.
    """


class InputWarning(UserWarning):
    """Input that runs but is probably not what was meant (e.g. a velocity in km/s labelled
    m/s); the CLI prints it as ``warning: ...``."""
