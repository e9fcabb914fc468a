"""Writing results to Zarr without ever leaving a half-written store behind."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import xarray as xr

from .errors import InputError

__all__ = ["write_store"]


def write_store(dataset: xr.Dataset, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``dataset`` to a Zarr (v3) store at ``path`` atomically.

    The store is written beside its destination under a temporary name and renamed into
    place only once complete, so a crash leaves either no store or the previous one.

    Raises
    ------
    InputError
        If ``path`` exists and ``overwrite`` is false.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise InputError(f"{path} already exists; choose another store or pass overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial-{uuid.uuid4().hex[:8]}")
    try:
        dataset.to_zarr(partial, mode="w", zarr_format=3, consolidated=False)
        if path.exists():
            shutil.rmtree(path)
        partial.rename(path)
    finally:
        if partial.exists():
            shutil.rmtree(partial)
    return path
