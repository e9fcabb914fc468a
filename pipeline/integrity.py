"""Completion records that outlived their data: sources marked done whose chunks are gone.

A task writes ``source_done[i] = 1`` only after source ``i``'s chunks (:mod:`.store`), so a
crash never leaves a record without its data. Files deleted by hand, or a copy of the store
cut short (``rsync`` stopped, a quota hit on the copy), can: zarr then reads the missing
chunks as their fill value (NaN), and a store said to be complete would answer NaN times
without a word. :func:`lost_sources` finds such sources; a rerun of the workflow forgets
their records (:func:`forget_sources`) and solves them again, and ``raygrid info`` names them.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import zarr

__all__ = ["PER_SOURCE", "forget_sources", "listed_sources", "lost_sources"]

#: The arrays a source's completion record vouches for, chunked 1 along ``source``. Rays are
#: not among them: each source's are a whole array of its own until the store is complete.
PER_SOURCE = ("traveltime", "receiver_traveltime")


def lost_sources(path: str | Path, done: np.ndarray) -> np.ndarray:
    """Which sources have a completion record but not every chunk of theirs on disk.

    Parameters
    ----------
    path : str or Path
        A survey store (a local folder, as :func:`raygrid.pipeline.survey.run_survey`
        writes).
    done : numpy.ndarray
        The completion records, bool per source.

    Returns
    -------
    numpy.ndarray
        Bool per source. One file check per chunk of every done source: a few per source,
        since a source's field is cut into chunks only above ``CHUNK_BYTES``.
    """
    path = Path(path)
    group = zarr.open_group(path, mode="r")
    lost = np.zeros(done.shape, dtype=bool)
    for name in PER_SOURCE:
        if name not in group:  # not kept (outputs.fields: false, no receivers)
            continue
        array = group[name]
        grid = [range(-(-n // c)) for n, c in zip(array.shape[1:], array.chunks[1:])]
        pieces = list(itertools.product(*grid))  # a source's chunks, after its index
        key = array.metadata.encode_chunk_key
        for source in np.flatnonzero(done & ~lost):
            index = int(source)
            lost[index] = not all((path / name / key((index, *p))).is_file() for p in pieces)
    return lost


def forget_sources(path: str | Path, sources: np.ndarray) -> None:
    """Remove the completion records of ``sources`` (indices) and the store's ``complete``
    mark, so that a run solves them again and finishes the store anew."""
    group = zarr.open_group(Path(path), mode="r+")
    group.attrs["complete"] = False
    records = group["source_done"]
    for source in sources:
        records[int(source)] = 0


def listed_sources(sources: np.ndarray | tuple[int, ...]) -> str:
    """Source numbers for a message: the first ten, then ``...``."""
    sources = list(sources)
    return ", ".join(map(str, sources[:10])) + (" ..." if len(sources) > 10 else "")
