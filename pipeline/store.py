"""The survey store: one Zarr (v3) store that many tasks fill at once and a rerun resumes.

Layout (``n`` sources, ``m`` receivers, model dims ``(z, [y,] x)``)::

    velocity(z, x)                      the model
    traveltime(source, z, x)            chunks (1, z, x): one source per chunk
    receiver_traveltime(source, receiver)   chunks (1, m)
    source_done(source)                 uint8, chunks (1,): the completion records
    source_z(source), source_x(source), receiver_z(receiver), receiver_x(receiver)
    ray_start(source, receiver), ray_count(source, receiver)    ragged raypaths:
    ray_z(ray_point), ray_x(ray_point), ray_time(ray_point)     points + offsets
    ray_parts/<source>                  while running: each source's rays (removed at the end)

How concurrent writers never collide: every array a task writes is chunked 1 along
``source``, so the task solving source ``i`` is the only writer of chunk ``i`` (no sharding,
so no shard is shared either). Raypaths have a length nobody knows in advance, so each
task writes its source's points into its own array ``ray_parts/<i>``; once every source is
done, the client concatenates them in source order into the ragged arrays (a deterministic
step, redone from the parts if it is interrupted) and removes the parts.

Nothing lost on a crash: the metadata is written first, under a temporary name renamed into
place, so a store either exists whole or not at all; a task writes ``source_done[i] = 1``
only after source ``i``'s data, so a rerun redoes exactly the unfinished sources, rewriting
their chunks with the same bytes (the solvers are deterministic), and the sources whose
chunks were lost since (:mod:`.integrity`). The root attributes hold
the workflow, its fingerprint (a rerun of a *different* workflow is refused) and the package
version; ``complete`` turns true after the final step.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import EllipsisType
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec

from .errors import InputError, as_path
from .fingerprint import FINGERPRINT_PARTS
from .integrity import (
    completion_records,
    damage,
    forget_sources,
    lost_sources,
    unreadable_arrays,
)
from .storenames import RAY_PARTS
from .storepaths import (
    check_writable,
    empty_folder,
    hidden_sibling,
    holds,
    remove_tree,
    siblings,
    store_path,
    tidy_siblings,
)
from .version import __version__, software

__all__ = [
    "DamagedStore",
    "StoreState",
    "check_store",
    "create_store",
    "done_sources",
    "open_store",
    "point_names",
    "prepare_store",
]

#: Bytes of one traveltime chunk above which a field is cut along the model dims too.
CHUNK_BYTES = 64 * 2**20
#: Points per chunk of the assembled ray arrays (8 MiB of float64 coordinates).
RAY_CHUNK = 2**20


def field_compressors() -> tuple:
    """Codecs of every array of a store: Blosc LZ4 after a byte shuffle, then a CRC-32C
    checksum of the compressed chunk.

    Traveltimes are smooth, so grouping the bytes of equal significance (shuffle) leaves
    long runs that LZ4 packs fast. Measured on 401^2 float64 fields: 75 % of the raw size in
    5.9 ms a field, where zarr's default (Zstandard level 0, no shuffle) gives 83 % in
    9.4 ms; the write is on every survey task's path. The checksum (Zarr's ``crc32c``
    codec, 4 bytes a chunk) makes a chunk changed on disk since it was written (a bit
    flipped, another chunk copied over it) fail to read ("Stored and computed checksum do
    not match") where it was read as wrong times without a word.
    """
    return (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec())


def field_chunks(shape: tuple[int, ...], itemsize: int, tiles: Mapping[str, int] | None,
                 dims: tuple[str, ...]) -> tuple[int, ...]:  # fmt: skip
    """Chunks of ``traveltime(source, *dims)``: 1 source, then tiles or the whole field.

    With tiles, chunks follow them (a tiled solve's pieces map to whole chunks); otherwise the
    field is one chunk, halved along ``z`` until a chunk holds at most :data:`CHUNK_BYTES`
    (then along the next dim, where one depth's slab is larger).

    Parameters
    ----------
    shape : tuple of int
        The model's shape, in the order of ``dims``.
    itemsize : int
        Bytes per traveltime value (4 for float32, 8 for float64).
    tiles : mapping of str to int or None
        Tile size in nodes per dim of a tiled survey (``compute.tiles``); dims left out are
        whole. ``None`` (or empty) for an untiled survey.
    dims : tuple of str
        The model's dims, ``("z", "x")`` or ``("z", "y", "x")``.

    Returns
    -------
    tuple of int
        ``(1, *chunk)``: one source, then the chunk's size along each of ``dims`` (tile
        sizes clipped to the model). :func:`create_store` chunks the model by ``chunk`` too.
    """
    if tiles:
        return (1, *(min(int(tiles.get(d, n)), n) for d, n in zip(dims, shape)))
    chunks = list(shape)
    for axis in range(len(chunks)):
        while chunks[axis] > 1 and np.prod(chunks) * itemsize > CHUNK_BYTES:
            chunks[axis] = (chunks[axis] + 1) // 2
    return (1, *chunks)


@dataclass(frozen=True)
class StoreSpec:
    """What a survey store holds: enough for the client to create it and tasks to fill it."""

    path: Path
    n_sources: int
    n_receivers: int
    dims: tuple[str, ...]
    fields: bool
    receiver_table: bool
    rays: bool
    dtype: str

    @property
    def keeps_table(self) -> bool:
        """Whether the store holds ``receiver_traveltime``: asked for, and receivers to fill it."""
        return bool(self.receiver_table and self.n_receivers)

    @property
    def keeps_rays(self) -> bool:
        """Whether the store holds raypaths: asked for, and receivers for them to reach."""
        return bool(self.rays and self.n_receivers)


def create_store(
    spec: StoreSpec,
    velocity: xr.DataArray,
    sources: list[dict[str, float]],
    receivers: list[dict[str, float]],
    attrs: dict,
    chunks: tuple[int, ...],
    check_copy: Callable[[xr.DataArray], None] | None = None,
    names: Mapping[str, list[str]] | None = None,
) -> None:
    """Write the store's metadata, coordinates and model, atomically (temp name, rename).

    Data variables are dask placeholders written with ``compute=False``: only their
    metadata lands; the tasks fill the chunks. A lazy model is copied chunk by chunk, and
    ``check_copy`` is then called with the copy (opened lazily from the unfinished store):
    what it raises leaves no store behind.

    Parameters
    ----------
    spec : StoreSpec
        What the store holds: its path, numbers of sources and receivers, dims, the outputs
        kept (fields, receiver table, rays) and the traveltimes' dtype.
    velocity : xarray.DataArray
        The model, with the dims of ``spec.dims`` in any order (stored in that order); in
        memory, or dask-backed (a lazy model, copied chunk by chunk).
    sources, receivers : list of dict
        Positions, ``{dim: coordinate}`` in the model's length unit, stored as float64
        ``source_<dim>`` and ``receiver_<dim>`` with the coordinates' units; ``receivers``
        may be empty (no receiver arrays, receiver table or ray parts then).
    attrs : dict
        The root attributes: the workflow (JSON), its fingerprint and the parts' digests,
        the package version, the solver settings, and ``complete`` false.
    chunks : tuple of int
        Chunks of ``traveltime`` (:func:`field_chunks`); the model is chunked like one
        source's field (``chunks[1:]``).
    check_copy : callable, optional
        Called with the store's copy of a lazy model before the store is put in place; what
        it raises propagates. Not called for a model in memory.
    names : mapping, optional
        The points' names by dim (``source``, ``receiver``), where given: stored as that
        dim's coordinate (variable-length text), so results are selected by name.

    Returns
    -------
    None
        The store is at ``spec.path`` once this returns: metadata, coordinates, positions,
        the model, completion records all 0, and an empty ``ray_parts`` group when rays are
        kept; the per-source chunks are left to the tasks.
    """
    dims = spec.dims
    n, m = spec.n_sources, spec.n_receivers
    velocity = velocity.transpose(*dims)
    # The model is chunked like one source's field (by the tiles, in a tiled survey): a
    # tiled solve reads it tile by tile, and rays read the chunks they cross.
    model_chunks = dict(zip(dims, chunks[1:]))
    if isinstance(velocity.data, da.Array):
        velocity = velocity.chunk(model_chunks)
    coords = {d: velocity.coords[d] for d in dims}
    template = xr.Dataset(coords=coords, attrs=attrs)
    template["velocity"] = velocity.drop_vars([c for c in velocity.coords if c not in dims])
    for d in dims:  # (after the model: its coordinates come with it)
        template[d].attrs = {**AXES.get(d, {}), **template[d].attrs}
    for d in dims:
        unit = {"units": coords[d].attrs["units"]} if "units" in coords[d].attrs else {}
        positions = np.array([p[d] for p in sources], dtype=np.float64)
        template[f"source_{d}"] = ("source", positions, unit | {"long_name": f"source {d}"})
        if m:
            positions = np.array([p[d] for p in receivers], dtype=np.float64)
            described = unit | {"long_name": f"receiver {d}"}
            template[f"receiver_{d}"] = ("receiver", positions, described)
    for what, labels in (names or {}).items():
        template.coords[what] = (what, np.array(labels, dtype=object))
    template = template.set_coords([name for name in template.data_vars if name != "velocity"])
    # The store's own encoding, not the model file's: a Zarr v2 or NetCDF file's compressors
    # and filters (kept in each variable's encoding when it was opened) cannot be written
    # into a Zarr v3 store.
    for variable in template.variables.values():
        variable.encoding = {}
    encoding = {"velocity": {"chunks": tuple(model_chunks.values())}}
    if spec.fields:
        shape = (n, *velocity.shape)
        # The field's own record of how it was solved (radius, grid, model check), as a
        # traveltime() result carries it: the store's 'traveltime' read with xarray alone
        # (xr.open_zarr(store).traveltime) was looked up with any radius= and velocity=.
        solved = {
            k: v for k, v in attrs.items()
            if k.startswith(("radius_", "nodes_")) or k == "model_check"
        }  # fmt: skip
        template["traveltime"] = (
            ("source", *dims),
            da.empty(shape, chunks=chunks, dtype=spec.dtype),
            {"units": "s", "long_name": "first-arrival traveltime", **solved},
        )
        encoding["traveltime"] = {
            "chunks": chunks,
            "fill_value": np.nan,
            "compressors": field_compressors(),
        }
    if spec.keeps_table:
        template["receiver_traveltime"] = (
            ("source", "receiver"),
            da.empty((n, m), chunks=(1, m), dtype=spec.dtype),
            {"units": "s", "long_name": "first-arrival traveltime at each receiver"},
        )
        encoding["receiver_traveltime"] = {
            "chunks": (1, m),
            "fill_value": np.nan,
            "compressors": field_compressors(),
        }
    template["source_done"] = (
        "source",
        da.zeros(n, chunks=1, dtype=np.uint8),
        {"long_name": "completion record: 1 once the source's results are all written"},
    )
    encoding["source_done"] = {"chunks": (1,), "fill_value": 0}
    # Blosc for every array, as for the fields: its header gives each chunk's length, so a
    # chunk file cut short (a copy interrupted) is found (integrity._cut_short).
    for name in template.variables:
        encoding.setdefault(name, {})["compressors"] = field_compressors()
    for name in template.coords:
        if template[name].dtype.kind == "f":  # no fill value for positions (CF: none)
            encoding[name]["_FillValue"] = None
    # What it is made with, so that an array lost whole later is named (integrity). One
    # string, not a list: NetCDF-3 (to_netcdf(engine="scipy")) holds no list of strings.
    template.attrs["store_arrays"] = " ".join(sorted(str(name) for name in template.variables))

    spec.path.parent.mkdir(parents=True, exist_ok=True)
    partial = hidden_sibling(spec.path)
    try:
        template.to_zarr(
            partial,
            mode="w",
            compute=False,
            zarr_format=3,
            consolidated=False,
            encoding=encoding,
        )
        if isinstance(velocity.data, da.Array):  # a lazy model: copied chunk by chunk
            template[["velocity"]].to_zarr(
                partial, mode="r+", region={d: slice(None) for d in dims}, consolidated=False
            )
            if check_copy is not None:
                check_copy(xr.open_zarr(partial, consolidated=False)["velocity"])
        if spec.keeps_rays:
            zarr.open_group(partial, mode="r+").create_group(RAY_PARTS)
        # Made whole, then put in place at once. Nothing is there: prepare_store moved any
        # old store aside under the store's lock.
        os.replace(partial, spec.path)
    finally:
        # Cut short (Ctrl-C), zarr's own thread may still be writing into it: what it
        # leaves is removed by the next run (tidy_siblings). An error here would
        # hide the KeyboardInterrupt.
        shutil.rmtree(partial, ignore_errors=True)


#: CF's description of the model's axes, given to a store's coordinates where the model's
#: own attributes do not say (they are kept): readable without raygrid's docs. (raygrid's
#: z is depth, positive down: a model whose z is not is refused as it is read.)
AXES = {
    "z": {"axis": "Z", "positive": "down", "long_name": "depth"},
    "y": {"axis": "Y", "long_name": "y (horizontal)"},
    "x": {"axis": "X", "long_name": "x (horizontal)"},
}


@dataclass(frozen=True)
class StoreState:
    """An existing store as found: its fingerprint, workflow and which sources are done."""

    path: Path
    fingerprint: str | None
    workflow: str | None
    version: str | None
    complete: bool
    done: np.ndarray  # bool, (n_sources,)
    fingerprint_parts: dict[str, str] | None = None  # absent from stores before 2026-11-24
    # Sources whose record outlived their chunks (:mod:`.integrity`), not counted in
    # ``done``; found by check_store, whose run forgets their records and solves them again.
    lost: tuple[int, ...] = ()


def point_names(dataset: xr.Dataset, what: str) -> list[str] | None:
    """The names of a store's sources or receivers (``what``), its ``source``/``receiver``
    coordinate, where the workflow gave them (:func:`create_store`); else ``None``."""
    return [str(n) for n in dataset[what].values] if what in dataset.coords else None


class DamagedStore(InputError):
    """A raygrid survey store that cannot be read for its completion records: metadata cut
    short, or ``source_done`` lost whole. ``--overwrite`` replaces it, as it replaces any
    raygrid store (and never a folder that is not one)."""


def open_store(path: str | Path) -> StoreState:
    """Read a store's attributes and completion records.

    Raises
    ------
    DamagedStore
        If it is a raygrid survey store whose metadata does not read, or that lost its
        completion records whole.
    InputError
        If ``path`` does not exist or is not a raygrid survey store.
    """
    path = as_path(path, "a survey store")
    if not path.exists():
        aside = siblings(store_path(path), "replaced")  # beside a link's target, if one
        if aside and aside[0][2]:  # a killed --overwrite's: info and plot called it gone
            raise InputError(
                f"store {path} does not exist, but a run stopped while it replaced it "
                f"(--overwrite) left the old store aside as {aside[0][0]}: the next "
                "`raygrid run` of its workflow puts it back (so may you, renaming it)"
            )
        if aside:  # its run may be alive (here, or on another host)
            raise InputError(
                f"store {path} does not exist: a run replacing it (--overwrite) has the old "
                f"store aside as {aside[0][0]}, until its new store takes the name (if that "
                "run was stopped, the next `raygrid run` of its workflow puts it back)"
            )
        raise InputError(f"store {path} does not exist")
    try:
        group = zarr.open_group(path, mode="r")
    except FileNotFoundError:  # zarr's GroupNotFoundError is one: no group metadata there
        kind = "folder" if path.is_dir() else "file"
        raise InputError(
            f"{path} is not a Zarr store (a {kind} without Zarr's group metadata, zarr.json)"
        ) from None
    except Exception as error:  # metadata that does not read (cut short, not JSON)
        if type(error).__name__ == "ContainsArrayError":  # a Zarr store, of one array
            raise InputError(
                f"{path} is a Zarr array, not a raygrid survey store (a Zarr group)"
            ) from None
        raise InputError(f"{path} is not a Zarr store ({type(error).__name__}: {error})") from None
    attrs = dict(group.attrs)
    # A store raygrid made that lost what every read needs is damaged, not foreign:
    # --overwrite replaces it (DamagedStore). Its fingerprint alone does not tell (xarray
    # copies a dataset's attributes into any store written from a survey's), so its
    # completion records' folder must be there too, with or without their metadata.
    records = path / "source_done"
    if "workflow_sha256" in attrs and records.is_dir():
        if unreadable_arrays(path) or not (records / "zarr.json").exists():
            raise DamagedStore(damage(path))
    if "source_done" not in group:
        said = ""
        if "workflow_sha256" in attrs:
            # Raygrid's attributes, but they are copied into any store written with
            # xarray from a survey's data: a lost source_done cannot be told from that.
            said = (
                " (it has a survey's attributes but no completion records, source_done: "
                "data written from a survey store, or a survey store that lost them, which "
                "only a person can tell apart; if it is a damaged survey store, delete it "
                "and run again)"
            )
        raise InputError(f"{path} is a Zarr store but not a raygrid survey store{said}")
    if "workflow_sha256" not in attrs:
        # Completion records without a survey's attributes: its root metadata lost (info
        # said "all sources done, not finalised: rerun", the rerun "a different workflow
        # (stored fingerprint None...)"), or other data with such an array.
        raise InputError(
            f"{path} has completion records (source_done) but none of a survey store's "
            "attributes: a survey store whose root metadata (zarr.json) was lost, or other "
            "data, which only a person can tell apart; if it is a damaged survey store, delete "
            "it and run again"
        )
    return StoreState(
        path=path,
        fingerprint=attrs.get("workflow_sha256"),
        workflow=attrs.get("workflow"),
        version=attrs.get("raygrid_version"),
        complete=bool(attrs.get("complete", False)),
        done=completion_records(path),
        fingerprint_parts=_parts(attrs.get("workflow_sha256_parts")),
    )


def _parts(stored: Any) -> dict[str, str] | None:
    """A store's fingerprint parts: JSON text, or a mapping (stores before 2026-11-27)."""
    if isinstance(stored, str):
        try:
            stored = json.loads(stored)
        except ValueError:
            return None  # unreadable: the parts only name what differs
    return dict(stored) if isinstance(stored, dict) else None


def _differences(stored: dict | None, now: dict | None) -> list[str]:
    """What differs between two fingerprints' parts, in words; empty if unknown."""
    if not stored or not now:
        return []
    keys = [k for k in FINGERPRINT_PARTS if k in stored or k in now]
    keys += sorted((set(stored) | set(now)) - set(FINGERPRINT_PARTS))
    differ = [k for k in keys if stored.get(k) != now.get(k)]
    # A part on one side only follows from another that differs (the tiles count only
    # when rays are stored: switching rays would blame unchanged tiles); named alone, it
    # is what changed (a rule of a newer version, such as direct_reach).
    both = [k for k in differ if k in stored and k in now]
    return [FINGERPRINT_PARTS.get(k, k) for k in (both or differ)]


def _tiled(workflow: str | None) -> bool | None:
    """Whether a workflow (as JSON, as a store keeps it) solves by tiles; ``None``: unknown."""
    try:
        return json.loads(workflow)["compute"]["tiles"] is not None
    except (TypeError, ValueError, KeyError):
        return None


def check_store(
    spec: StoreSpec, fingerprint: str | None, *, overwrite: bool, workflow: str | None = None,
    parts: dict[str, str] | None = None,
) -> StoreState | None:  # fmt: skip
    """What :func:`prepare_store` will find, read without touching the store.

    Its callers tidy what killed runs left beside it first (:func:`tidy_siblings`), so
    that an old store a killed ``--overwrite`` had moved aside is found in its place.

    Returns the existing store's state when it is to be resumed, ``None`` when a fresh store
    will be created (none there, or ``overwrite``). A run calls it before starting a
    cluster, so a refused store costs no cluster and a cluster that fails to start leaves no
    store behind. A refusal says what differs: by the fingerprint's ``parts`` (model values,
    sources, ...) when the store has them too, else by ``workflow`` (the workflow's JSON, as
    stored): the same workflow file whose inputs changed, or another workflow.

    Parameters
    ----------
    spec : StoreSpec
        The workflow's store: its path and number of sources.
    fingerprint : str or None
        The workflow's SHA-256 fingerprint, compared with the store's ``workflow_sha256``;
        ``None`` when the workflow was prepared without the model's values (``raygrid
        submit`` for a store that is not there yet or is to be overwritten).
    overwrite : bool
        An existing raygrid survey store will be replaced: ``None`` is returned for it
        without comparing fingerprints.
    workflow : str, optional
        The workflow as JSON (as a store keeps it), to tell the same workflow file with
        changed inputs from another workflow when the fingerprints differ.
    parts : dict of str to str, optional
        Short digests of the fingerprint's parts (:data:`FINGERPRINT_PARTS`), to name what
        differs.

    Returns
    -------
    StoreState or None
        The existing store's state, to resume it: sources marked done whose chunks are
        missing on disk are listed in ``lost`` and left out of ``done`` (their records are
        still on disk: :func:`prepare_store` removes them). ``None`` when a fresh store will
        be created.

    Raises
    ------
    InputError
        As :func:`prepare_store`, for a path that holds anything but this workflow's store.
        Also, with or without ``overwrite``, for a store that cannot be created at that path
        (:func:`check_writable`) or a path that holds the working directory; and, to be
        resumed, for a store whose arrays written once miss chunks on disk
        or arrays lost whole (:func:`~raygrid.pipeline.integrity.damage`).
    """
    path = spec.path
    check_writable(path)
    if not path.exists():
        return None
    if holds(path, Path.cwd()):
        raise InputError(f"{path} holds the working directory; choose another outputs.store")
    if empty_folder(path):
        return None  # made ahead for the store (a scratch folder, a link's target): filled
    try:
        state = open_store(path)
    except DamagedStore as error:
        if not overwrite:
            raise InputError(str(error)) from None
        state = None  # replaced as any raygrid store is, unless it holds the working directory
    except InputError as error:
        # --overwrite replaces a raygrid store, never whatever else a mistyped path names (a
        # folder of the user's, the model, the working directory).
        raise InputError(
            f"{error}; it is left untouched, with or without --overwrite (which replaces "
            "only a raygrid survey store): choose another outputs.store"
        ) from None
    if overwrite:
        return None
    if state.fingerprint != fingerprint:
        stored = f"stored fingerprint {str(state.fingerprint)[:12]}, now {str(fingerprint)[:12]}"
        differences = _differences(state.fingerprint_parts, parts)
        tiled = {_tiled(state.workflow), _tiled(workflow)}
        if FINGERPRINT_PARTS["model"] in differences and tiled == {True, False}:
            differences[differences.index(FINGERPRINT_PARTS["model"])] = (
                "the model's values, or only how they were hashed: a run with compute.tiles "
                "hashes the model block by block, one without it whole, so run it as the "
                "store was made (with or without compute.tiles)"
            )
        if differences:
            raise InputError(
                f"{path} holds the results of another workflow: what differs is "
                f"{'; '.join(differences)} ({stored}); it is left untouched: choose another "
                "outputs.store, or pass --overwrite to replace it"
            )
        if workflow is not None and state.workflow == workflow:
            raise InputError(
                f"{path} holds the results of this same workflow file, but not of what it "
                f"reads now ({stored}): the model's values or a points file changed, or "
                "backend auto chose another backend here, or another raygrid version wrote "
                "the store; it is left untouched: restore them, choose another "
                "outputs.store, or pass --overwrite to replace it"
            )
        raise InputError(
            f"{path} holds the results of a different workflow ({stored}); it is left "
            "untouched: choose another outputs.store, or pass --overwrite to replace it"
        )
    if state.done.size != spec.n_sources:
        raise InputError(f"{path} has {state.done.size} sources, the workflow {spec.n_sources}")
    damaged = damage(path)
    if damaged:
        raise InputError(damaged)
    lost = lost_sources(path, state.done)
    if lost.any():
        state = replace(
            state, done=state.done & ~lost, complete=False,
            lost=tuple(int(i) for i in np.flatnonzero(lost)),
        )  # fmt: skip
    return state


def prepare_store(
    spec: StoreSpec,
    fingerprint: str,
    *,
    overwrite: bool,
    create: Callable[[], None],
    workflow: str | None = None,
    parts: dict[str, str] | None = None,
    checked: StoreState | EllipsisType | None = ...,
) -> StoreState:
    """Open the store to resume it, or create it; never silently replace another survey's.

    ``create()`` writes a fresh store (called when none exists, or with ``overwrite``).

    Parameters
    ----------
    spec : StoreSpec
        The workflow's store: its path and number of sources.
    fingerprint : str
        The workflow's SHA-256 fingerprint, compared with the store's (:func:`check_store`).
    overwrite : bool
        Replace an existing raygrid survey store instead of resuming it: the old one is
        moved aside and deleted, then ``create()`` makes the new one.
    create : callable
        Called with no arguments to write a fresh store at ``spec.path`` (a survey's calls
        :func:`create_store`).
    workflow : str, optional
        The workflow as JSON, as for :func:`check_store`.
    parts : dict of str to str, optional
        Short digests of the fingerprint's parts, as for :func:`check_store`.
    checked : StoreState or None, optional
        What :func:`check_store` returned for these arguments, with the store locked
        (:func:`~raygrid.pipeline.lock.store_lock`) since: it is not checked again, which
        would list every chunk file once more. By default the store is checked here.

    Returns
    -------
    StoreState
        The store as it now is: a resumed store's state, its ``lost`` sources' completion
        records removed (:func:`~raygrid.pipeline.integrity.forget_sources`) and left out of
        ``done``; or the fresh store's, with no source done.

    Raises
    ------
    InputError
        If the path holds something else: a store from a different workflow (fingerprints
        differ), a store of a different shape, or anything that is not a raygrid store.
    """
    path = spec.path
    state = checked
    if state is ...:
        tidy_siblings(path)
        state = check_store(spec, fingerprint, overwrite=overwrite, workflow=workflow, parts=parts)
    if state is not None:
        sweep_partials(path)
        if state.lost:
            forget_sources(path, np.array(state.lost))
        return state
    if not path.exists() or empty_folder(path):
        create()  # (its store is renamed onto an empty folder as onto no file)
        return open_store(path)
    # --overwrite. The old store is moved aside while the new one is made, and deleted only
    # once the new one is in place: a creation that fails (a full disk, a model file that
    # cannot be read, Ctrl-C) puts it back, and one killed outright leaves it for the next
    # run to put back (tidy_siblings). Deleted in place, a deletion cut short would
    # leave a half store whose completion records could outlive its chunks.
    old = hidden_sibling(path, "replaced")
    os.replace(path, old)
    try:
        create()
    except BaseException:
        if not path.exists():
            os.replace(old, path)
        raise
    # Renamed before it is deleted: a deletion cut short leaves a half store that is never
    # put back (a "partial" sibling is only ever deleted).
    doomed = hidden_sibling(path)
    os.replace(old, doomed)
    remove_tree(doomed)
    return open_store(path)


def sweep_partials(path: Path) -> int:
    """Remove the temporary files of writes cut short by a crash (``*.partial``).

    zarr writes every chunk under a temporary name and renames it into place, so a killed
    writer leaves only such files, never a torn chunk. Returns how many were removed.
    """
    removed = 0
    for leftover in path.rglob("*.partial"):
        leftover.unlink(missing_ok=True)
        removed += 1
    return removed


def done_sources(path: str | Path) -> np.ndarray:
    """Which sources have their completion record (bool per source)."""
    return completion_records(path)


def version_attrs() -> dict:
    """Attributes every store carries: raygrid's version, and what made it
    (:func:`~raygrid.pipeline.version.software`: the git commit, Python and libraries)."""
    return {"raygrid_version": __version__, "software": software()}
