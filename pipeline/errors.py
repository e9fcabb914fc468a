"""Errors raised for bad input: one type, so callers and the CLI can tell them apart."""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad input (model, source, receiver, option or file), with a message naming the problem.

    Raised before anything is computed or written.
    """
