"""Completion records that outlived their data: sources marked done whose chunks are gone.

A task writes ``source_done[i] = 1`` only after source ``i``'s chunks (:mod:`.store`), so a
crash never leaves a record without its data. Files deleted by hand, or a copy of the store
cut short (``rsync`` stopped, a quota hit on the copy), can: zarr then reads the missing
chunks as their fill value (NaN), and a store said to be complete would answer NaN times
without a word; a lost ray part would stop the run's last step. :func:`lost_sources` finds
such sources; a rerun of the workflow forgets their records (:func:`forget_sources`) and
solves them again, and ``raygrid info`` names them.
"""

from __future__ import annotations

import itertools
import json
import os
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import zarr

from .storenames import PER_SOURCE, RAY_PARTS, ray_arrays, ray_part

__all__ = [
    "chunks_whole",
    "completion_records",
    "damage",
    "damaged_message",
    "forget_sources",
    "listed_sources",
    "lost_arrays",
    "lost_sources",
    "missing_arrays",
    "unreadable_arrays",
]


def _files(folder: Path) -> set[str]:
    """The files under ``folder``, as ``/``-separated relative paths (chunk keys): one
    listing of the folder, rather than a file check per chunk, which costs a round trip
    each on a cluster's shared file system."""
    found = set()
    for root, _, names in os.walk(folder):
        prefix = Path(root).relative_to(folder).as_posix()
        found.update(name if prefix == "." else f"{prefix}/{name}" for name in names)
    return found


#: The bytes of Zarr's crc32c codec at the end of a chunk (:func:`~.store.field_compressors`).
CHECKSUM_BYTES = 4


def _cut_short(file: Path, blosc: bool) -> bool:
    """Whether a chunk file is shorter than what was written: empty (zarr writes no chunk
    of fill values only, so an empty file is no chunk), or, Blosc-compressed, not the
    length its header gives (bytes 12-16: the compressed size, header included).

    A crash leaves no such file (zarr writes each chunk under a temporary name and renames
    it); a copy cut short (``cp -r`` interrupted) leaves its last file so.
    """
    try:
        size = file.stat().st_size
        if size == 0 or not blosc:
            return size == 0
        with open(file, "rb") as handle:
            header = handle.read(16)
    except OSError:  # gone since the listing, or unreadable: not a chunk to trust
        return True
    # With Zarr's crc32c codec after Blosc (stores from 2026-12-05) the chunk ends with a
    # 4-byte checksum: either length is whole (a store resumed across that day mixes them),
    # and a chunk cut by exactly those 4 bytes fails its checksum when read.
    framed = int.from_bytes(header[12:16], "little")
    return len(header) < 16 or size not in (framed, framed + CHECKSUM_BYTES)


def _intact_chunks(array: zarr.Array, folder: Path) -> set[str]:
    """The chunk keys of ``array`` (at ``folder``) whose files are whole (:func:`_cut_short`),
    from one listing of the folder: a chunk file cut short counts as missing. Costs a small
    read per chunk file of a Blosc-compressed array (0.24 s for 32,000 files on a local
    disk; more on a cluster's shared file system)."""
    blosc = _blosc(array)
    keys = _files(folder) - {"zarr.json", ".zarray", ".zattrs"}  # metadata, not chunks
    return {key for key in keys if not _cut_short(folder / key, blosc)}


def _metadata_reads(folder: Path) -> bool:
    """Whether the metadata of the array or group at ``folder`` (its ``zarr.json``) reads,
    or is not there (an array lost whole, named by :func:`missing_arrays`). A copy cut
    short or a disk that filled leaves it empty or torn, and zarr then fails with a
    ``JSONDecodeError`` on every listing of the store."""
    try:
        json.loads((folder / "zarr.json").read_bytes())
    except FileNotFoundError:
        return True
    except (OSError, ValueError):  # unreadable, not JSON (UnicodeDecodeError is one)
        return False
    return True


def unreadable_arrays(path: str | Path) -> tuple[str, ...]:
    """The store's arrays and groups whose metadata does not read (:func:`_metadata_reads`),
    sorted: no rerun writes it again, and nothing lists the store while it is so."""
    folders = (meta.parent for meta in Path(path).glob("*/zarr.json"))
    return tuple(sorted(folder.name for folder in folders if not _metadata_reads(folder)))


def _chunk_keys(array: zarr.Array) -> set[str]:
    """The keys of every chunk of ``array`` (its chunk grid, encoded as zarr does)."""
    grid = [range(-(-n // c)) for n, c in zip(array.shape, array.chunks)]
    return {array.metadata.encode_chunk_key(index) for index in itertools.product(*grid)}


def chunks_whole(array: zarr.Array, folder: Path) -> bool:
    """Whether every chunk of ``array`` (at ``folder``) is on disk and whole: by key, so a
    stray file beside them (zarr's ``*.partial``) does not stand for a missing one."""
    return _chunk_keys(array) <= _intact_chunks(array, folder)


def completion_records(path: str | Path) -> np.ndarray:
    """A store's completion records, bool per source (``source_done == 1``).

    A record whose chunk file is cut short (a copy interrupted) or changed on disk (its
    checksum does not match) reads as not done, not as an error from the decompressor: its
    source is solved again and the record written anew, as for a record lost.
    """
    array = zarr.open_array(store=str(path), path="source_done", mode="r")
    try:
        return np.asarray(array[:]) == 1
    except Exception:  # a chunk that does not decode (Blosc's RuntimeError, a checksum's
        # ValueError): read the others
        intact = _intact_chunks(array, Path(path) / "source_done")
        done = np.zeros(array.shape, dtype=bool)
        (size,) = array.chunks
        for block in range(-(-array.shape[0] // size)):
            if array.metadata.encode_chunk_key((block,)) in intact:
                rows = slice(block * size, (block + 1) * size)
                try:
                    done[rows] = np.asarray(array[rows]) == 1
                except Exception:  # whole, but not what was written: not done
                    pass
        return done


def _blosc(array: zarr.Array) -> bool:
    """Whether the array's chunks are Blosc frames (whose header gives their length)."""
    metadata = array.metadata
    if metadata.zarr_format == 2:
        return type(metadata.compressor).__name__ == "Blosc"
    return any(type(codec).__name__ == "BloscCodec" for codec in metadata.codecs)


def _lost_chunks(group: zarr.Group, path: Path, done: np.ndarray) -> np.ndarray:
    """Done sources missing a chunk of a :data:`PER_SOURCE` array (bool per source)."""
    lost = np.zeros(done.shape, dtype=bool)
    for name in PER_SOURCE:
        if name not in group:  # not kept (outputs.fields: false, no receivers)
            continue
        array = group[name]
        grid = [range(-(-n // c)) for n, c in zip(array.shape[1:], array.chunks[1:])]
        pieces = list(itertools.product(*grid))  # a source's chunks, after its index
        key = array.metadata.encode_chunk_key
        present = _intact_chunks(array, path / name)
        for source in np.flatnonzero(done & ~lost):
            index = int(source)
            lost[index] = not all(key((index, *piece)) in present for piece in pieces)
    return lost


def _rays_kept(group: zarr.Group) -> bool:
    """Whether the store keeps rays: its workflow asked for them and it has receivers."""
    try:
        asked = json.loads(group.attrs["workflow"])["outputs"]["rays"]
    except (KeyError, TypeError, ValueError):  # not a survey's workflow: nothing to say
        return False
    receivers = [group[name] for name in group.array_keys() if name.startswith("receiver_")]
    return bool(asked) and any(array.shape[-1] for array in receivers)


def _lost_rays(group: zarr.Group, path: Path, done: np.ndarray) -> np.ndarray:
    """Done sources whose ray part is missing, while the parts are not assembled yet."""
    lost = _missing_parts(group, path, done)
    # A run that finished meanwhile assembled the parts and deleted them: none is lost
    # (every done source looked so to an open_survey during a run's last step).
    if lost.any() and zarr.open_group(path, mode="r").attrs.get("rays_assembled", False):
        return np.zeros(done.shape, dtype=bool)
    return lost


def _missing_parts(group: zarr.Group, path: Path, done: np.ndarray) -> np.ndarray:
    """:func:`_lost_rays` as the store was when ``group`` was opened."""
    lost = np.zeros(done.shape, dtype=bool)
    if group.attrs.get("rays_assembled", False):
        return lost
    if RAY_PARTS not in group:  # the whole group lost, or no rays kept
        return done.copy() if _rays_kept(group) else lost
    present = _files(path / RAY_PARTS)
    parts = group[RAY_PARTS]
    chunk = None  # the key of a part's one chunk, from any part there (zarr's default)
    for source in np.flatnonzero(done):
        name = ray_part(int(source))
        if f"{name}/zarr.json" not in present or not _metadata_reads(path / RAY_PARTS / name):
            lost[source] = True  # written again (it is replaced whole)
            continue
        if chunk is None:
            chunk = parts[name].metadata.encode_chunk_key((0, 0))
            blosc = _blosc(parts[name])  # (parts of stores before 2026-11-24 are not)
        # A part of rays that are all one point at the origin with time 0 is all fill
        # value, which zarr did not write before parts were written with empty chunks
        # (2026-12-05): such a part of an older store is counted lost (solved once more).
        key = f"{name}/{chunk}"
        lost[source] = key not in present or _cut_short(path / RAY_PARTS / key, blosc)
    return lost


def lost_sources(path: str | Path, done: np.ndarray) -> np.ndarray:
    """Which sources have a completion record but not all their data on disk.

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
        Bool per source: a chunk of ``traveltime`` or ``receiver_traveltime`` is missing,
        or, before the rays are assembled, its ray part. Each array's folder is listed
        once, whatever its number of chunks per source (tiled stores have one per tile).
    """
    path = Path(path)
    group = zarr.open_group(path, mode="r")
    return _lost_chunks(group, path, done) | _lost_rays(group, path, done)


def lost_arrays(path: str | Path) -> tuple[str, ...]:
    """The store's arrays written once, not per source, that miss a chunk on disk.

    The model, its coordinates, the source and receiver positions (written when the store
    was made) and, once assembled, the rays: no completion record vouches for them, and
    no rerun writes them again. Their fill value (NaN for floats) is no value they hold, so
    zarr wrote every chunk of them; ``ray_count`` (0 fill) counts at least one point, and
    ``ray_start`` (0 fill) is written whole as one chunk that, with two rays or more, holds
    a start after the first ray's points.

    Parameters
    ----------
    path : str or Path
        A survey store.

    Returns
    -------
    tuple of str
        The names of the arrays with chunks missing, sorted.
    """
    group = zarr.open_group(Path(path), mode="r")
    assembled = group.attrs.get("rays_assembled", False)
    lost = []
    with _listing():
        arrays = list(group.arrays())
    for name, array in arrays:
        if name in PER_SOURCE or (name.startswith("ray_") and not assembled):
            continue  # records vouch for them; or an assembly cut short, redone
        written = (
            name == "ray_count"
            or (name == "ray_start" and array.size > 1 and array.nchunks == 1)
            or (array.dtype.kind == "f" and np.isnan(array.fill_value))
        )
        if written and not chunks_whole(array, Path(path) / name):
            lost.append(name)
    return tuple(sorted(lost))


@contextmanager
def _listing():
    """Listing a store's arrays without zarr's warning for a folder that lost its
    ``zarr.json``: such an array is what is being looked for, and is named."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Object at .* is not recognized as a component")
        yield


def _arrays(path: str | Path) -> list[zarr.Array]:
    """Every array of a store, those of its groups (the ray parts) included."""
    group = zarr.open_group(Path(path), mode="r")
    with _listing():
        return [a for _, a in group.members(max_depth=None) if isinstance(a, zarr.Array)]


def unreadable_chunks(path: str | Path) -> list[str]:
    """The chunk files of a store that do not read: a checksum that does not match (the
    chunk changed on disk since it was written, :func:`~.store.field_compressors`), or a
    frame that does not decompress. Found by reading every chunk of every array, as long
    as reading the whole store (``raygrid info --verify``); the other checks here read a
    few bytes a chunk.

    Returns
    -------
    list of str
        Their paths in the store (``traveltime/c/5/0/0``), sorted.
    """
    path = Path(path)
    failed = []
    for array in _arrays(path):
        present = _files(path / array.path)
        for block in np.ndindex(*array.cdata_shape):
            key = array.metadata.encode_chunk_key(block)
            if key not in present:  # not written (fill values), or lost: said elsewhere
                continue
            try:
                array.get_block_selection(block)
            except Exception:  # (checksum: ValueError; Blosc: RuntimeError; ...)
                failed.append(f"{array.path}/{key}")
    return sorted(failed)


def unchecked_arrays(path: str | Path) -> list[str]:
    """The arrays of a store whose chunks carry no checksum (made before 2026-12-05, or
    Zarr v2): a change on disk reads as other values there, which :func:`unreadable_chunks`
    cannot see."""
    return sorted(
        a.path
        for a in _arrays(path)
        if a.metadata.zarr_format == 2
        or not any(type(c).__name__ == "Crc32cCodec" for c in a.metadata.codecs)
    )


def unreadable_message(failed: list[str]) -> str:
    """What ``raygrid info --verify`` says of :func:`unreadable_chunks` ``failed``: those
    of a source's own arrays are solved again once deleted (a rerun finds them lost), the
    others (written once) need ``--overwrite``."""
    shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
    # (A completion record deleted: its sources are solved again too.)
    per_source = all(f.split("/")[0] in (*PER_SOURCE, RAY_PARTS, "source_done") for f in failed)
    mend = (
        "delete those files and rerun the workflow: the sources they hold are solved again"
        if per_source
        else "rerun its workflow with --overwrite to make it again"
    )
    return (
        f"damaged: {len(failed)} chunk file(s) do not read (changed on disk since they were "
        f"written, or cut short): {shown}; {mend}"
    )


def missing_arrays(path: str | Path) -> tuple[str, ...]:
    """The arrays a store was made with that are gone whole (their folder, or its
    ``zarr.json``, deleted or never copied).

    A store lists its arrays when it is made (``store_arrays``); for one made before that,
    the arrays every store holds and the per-source arrays its workflow asked for. Once
    its rays are assembled (``rays_assembled``), their arrays too.

    Parameters
    ----------
    path : str or Path
        A survey store.

    Returns
    -------
    tuple of str
        The missing arrays' names, sorted.
    """
    group = zarr.open_group(Path(path), mode="r")
    with _listing():
        present = set(group.array_keys())
    expected = group.attrs.get("store_arrays")
    if isinstance(expected, str):
        expected = expected.split()  # a list in stores made before 2026-12-05
    if expected is None:
        expected = ["velocity", "source_done"]
        try:
            outputs = json.loads(group.attrs["workflow"])["outputs"]
        except (KeyError, TypeError, ValueError):
            outputs = {}
        if outputs.get("fields"):
            expected.append("traveltime")
        receivers = [group[n] for n in present if n.startswith("receiver_")]
        if outputs.get("receiver_table") and any(a.shape[-1] for a in receivers):
            expected.append("receiver_traveltime")
    if group.attrs.get("rays_assembled", False) and "velocity" in present:
        dims = group["velocity"].metadata.dimension_names  # the model's, as the rays'
        expected = [*expected, *ray_arrays(tuple(dims))]
    return tuple(sorted(set(expected) - present))


def damage(path: str | Path) -> str | None:
    """Why a store is damaged beyond what a rerun mends, or ``None``: metadata that does not
    read (:func:`unreadable_arrays`), arrays lost whole (:func:`missing_arrays`), or chunks
    lost of arrays written once (:func:`lost_arrays`).
    A run, ``raygrid info`` and ``raygrid plot`` say it alike; ``--overwrite`` is the way
    out (a rerun that tried to write into a lost array failed the same way every time)."""
    unreadable = unreadable_arrays(path)
    if unreadable:
        return (
            f"{path} is damaged: the metadata (zarr.json) of {', '.join(unreadable)} does "
            "not read (cut short: a copy interrupted, or a disk that filled; no rerun writes "
            "it again): rerun its workflow with --overwrite to make it again"
        )
    missing = missing_arrays(path)
    if missing:
        return (
            f"{path} is damaged: it has no {', '.join(missing)} (lost whole: a copy cut "
            "short, or a folder deleted; no rerun makes it again): rerun its workflow with "
            "--overwrite to make it again"
        )
    lost = lost_arrays(path)
    return damaged_message(path, lost) if lost else None


def lost_message(lost: np.ndarray) -> str:
    """What ``raygrid info`` and :func:`~raygrid.pipeline.open_survey` say of sources marked
    done whose chunks are lost (:func:`lost_sources`, bool per source)."""
    lost = np.flatnonzero(lost)
    return (
        f"damaged: {lost.size} source(s) marked done have chunks missing or cut short on "
        f"disk ({listed_sources(lost)}), read as NaN: rerun the workflow to solve them again"
    )


def damaged_message(path: str | Path, arrays: tuple[str, ...]) -> str:
    """What a run and ``raygrid info`` say of a store whose :func:`lost_arrays` are
    ``arrays``: a rerun cannot mend it, ``--overwrite`` makes it again."""
    return (
        f"{path} is damaged: chunks of {', '.join(arrays)} are missing on disk (read as NaN "
        "or 0; written once, when the store was made or its rays assembled, so no rerun "
        "writes them again): rerun its workflow with --overwrite to make it again"
    )


def forget_sources(path: str | Path, sources: np.ndarray) -> None:
    """Remove the completion records of ``sources`` (indices) and the store's ``complete``
    mark, so that a run solves them again and finishes the store anew.

    Parameters
    ----------
    path : str or Path
        A survey store.
    sources : numpy.ndarray
        The sources' numbers (integers: rows of ``source_done``).

    Returns
    -------
    None
        Once their records are 0 and ``complete`` is false; a ``ray_parts`` group lost
        whole is made again (empty) when the store keeps rays not yet assembled.
    """
    group = zarr.open_group(Path(path), mode="r+")
    group.attrs["complete"] = 0  # flags as 0/1: NetCDF attributes hold no booleans
    if not group.attrs.get("rays_assembled", False) and RAY_PARTS not in group:
        if _rays_kept(group):  # lost whole: made again for the sources' parts
            group.create_group(RAY_PARTS)
    records = group["source_done"]
    for source in sources:
        records[int(source)] = 0


def listed_sources(sources: np.ndarray | tuple[int, ...]) -> str:
    """Source numbers for a message: the first ten, then ``...``."""
    sources = list(sources)
    return ", ".join(map(str, sources[:10])) + (" ..." if len(sources) > 10 else "")
