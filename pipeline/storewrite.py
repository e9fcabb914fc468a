"""Writing a survey store as sources finish: each source's field, receiver table, rays and
completion record (the record last, so a source is done only once all of it is on disk),
and the store finished once every source is (the ragged rays assembled, ``complete`` set).

:mod:`raygrid.pipeline.store` makes, opens and checks stores; this module fills them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr
import zarr

from .integrity import (
    chunks_whole,
)
from .store import RAY_CHUNK, StoreSpec, field_compressors, sweep_partials
from .storenames import RAY_PARTS, ray_part

__all__ = ["SourceResult", "SourceWriter", "write_field", "write_source", "finish_store"]


@dataclass(frozen=True)
class SourceResult:
    """One source's results, as a task writes them."""

    index: int
    field: np.ndarray | None  # model-shaped times, or None if fields are not kept
    receiver_times: np.ndarray | None  # (n_receivers,)
    ray_points: np.ndarray | None  # (n_points, 1 + ndim): time, then coordinates per dim
    ray_counts: list[int] | None  # points per receiver, in receiver order


class SourceWriter:
    """Writes sources' results into their own chunks of a survey store, each followed by its
    completion record.

    Used on the worker that solved the sources, one writer per task: the store's arrays are
    opened once for all the task's sources (opening one reads its metadata, about 2 ms).
    The order is what makes a crash harmless: a source's record is written after its data,
    so a source with a record has all its data.
    """

    def __init__(self, path: str | Path):
        self.store = str(path)
        self._arrays: dict[str, zarr.Array] = {}

    def _array(self, name: str) -> zarr.Array:
        if name not in self._arrays:
            self._arrays[name] = zarr.open_array(store=self.store, path=name, mode="r+")
        return self._arrays[name]

    def _ray_part_kept(self, i: int) -> bool:
        """Whether source ``i``'s ray part is whole on disk already, or read no more.

        A task can run twice: Dask recomputes a finished task whose worker died while the
        client still held its future, possibly while the run finishes. Its chunks are
        rewritten with the same bytes, each by an atomic rename; a ray part is an array of
        its own, replaced by deleting it first, which the assembly of the rays could meet
        half done (a KeyError), and a part written after the assembly would be left in the
        finished store. Kept, it is the same bytes. A part cut short (a copy interrupted:
        its source was found lost, :mod:`.integrity`) is not kept but written again.
        """
        if zarr.open_group(self.store, mode="r").attrs.get("rays_assembled", False):
            return True
        try:
            part = zarr.open_array(store=self.store, path=f"{RAY_PARTS}/{ray_part(i)}", mode="r")
        except (FileNotFoundError, ValueError):  # zarr's ArrayNotFoundError; torn metadata
            return False
        return chunks_whole(part, Path(self.store) / RAY_PARTS / ray_part(i))

    def write(self, result: SourceResult) -> None:
        """Write one source's results, then its completion record."""
        i = result.index
        if result.field is not None:
            self._array("traveltime")[i] = result.field
        if result.receiver_times is not None:
            self._array("receiver_traveltime")[i] = result.receiver_times
        if result.ray_points is not None and not self._ray_part_kept(i):
            points = np.asarray(result.ray_points, dtype=np.float64)
            zarr.create_array(
                self.store,
                name=f"{RAY_PARTS}/{ray_part(i)}",
                data=points,
                chunks=(max(points.shape[0], 1), points.shape[1]),
                compressors=field_compressors(),  # a part cut short is found (integrity)
                attributes={"counts": [int(c) for c in result.ray_counts]},
                overwrite=True,
                # Written even if all fill value (rays of one point at the origin, time 0):
                # zarr skipped that chunk, and its source looked lost to open_survey.
                config={"write_empty_chunks": True},
            )
        self._array("source_done")[i] = 1


def write_field(path: str | Path, index: int, field: xr.DataArray, client: Any) -> None:
    """Write source ``index``'s lazy field into its chunks of the store, from where its
    pieces are (a tiled solve's workers): it is never gathered to the client.

    Its completion record is not written: :func:`write_source` does, after this returns.

    Parameters
    ----------
    path : str or Path
        The survey store, as the workers can open it (they write the chunks).
    index : int
        The source's number: its row of ``traveltime``.
    field : xarray.DataArray
        The source's traveltimes (s) over the model, dask-backed, in the store's dim order;
        cast to the store's dtype and rechunked to its chunks.
    client : distributed.Client
        The cluster whose workers hold the field's pieces: the writes run there.

    Returns
    -------
    None
        Once every chunk of the source's field is written.
    """
    target = zarr.open_array(store=str(path), path="traveltime", mode="r+")
    values = field.data.astype(target.dtype)[np.newaxis]
    # One writer per chunk of the store: concurrent writes to one chunk would lose data.
    values = values.rechunk(target.chunks)
    region = (slice(index, index + 1),) + (slice(None),) * field.ndim
    stored = da.store(values, target, regions=region, lock=False, compute=False)
    client.compute(stored, sync=True)


def write_source(path: str | Path, result: SourceResult) -> None:
    """Write one source's results into its own chunks, then its completion record
    (:class:`SourceWriter` for one source).

    Parameters
    ----------
    path : str or Path
        The survey store.
    result : SourceResult
        The source's number and what the store keeps of it: its field, its receivers'
        times, its ray points and counts (``None`` for what is not kept, or is written
        already, as a tiled solve's field is by :func:`write_field`).

    Returns
    -------
    None
        Once the results and then ``source_done[result.index] = 1`` are written.
    """
    SourceWriter(path).write(result)


def finish_store(spec: StoreSpec) -> None:
    """Assemble the ragged raypaths from the per-source parts and mark the store complete.

    Deterministic and safe to repeat: if it is interrupted, the parts are still there (they
    are removed only after the assembled arrays and the ``rays_assembled`` mark are written).
    """
    path = spec.path
    # Every source is done, so no writer is left: what a killed worker left half written
    # (a root ``zarr.<id>.partial``) goes first, or appending the rays lists it and zarr
    # warns that it "is not recognized as a component of a Zarr hierarchy".
    sweep_partials(path)
    group = zarr.open_group(path, mode="r+")
    if spec.keeps_rays and not group.attrs.get("rays_assembled", False):
        _assemble_rays(spec, group)
        group.attrs["rays_assembled"] = 1  # 0/1, not a boolean: see _store_attrs
    if (path / RAY_PARTS).exists():
        shutil.rmtree(path / RAY_PARTS)
    group.attrs["complete"] = 1


def _assemble_rays(spec: StoreSpec, group: zarr.Group) -> None:
    """Concatenate the sources' ray parts, in source order, into the ragged ray arrays.

    The points stream through chunks of :data:`RAY_CHUNK` (Dask, on this process's
    threads): a survey's rays can outgrow the client's memory, which they only needed at
    once in the run's last step. Arrays an assembly cut short left are replaced: xarray
    would refuse to write them again with their encoding, and no rerun could finish.
    """
    parts = [group[f"{RAY_PARTS}/{ray_part(i)}"] for i in range(spec.n_sources)]
    n, m = spec.n_sources, spec.n_receivers
    counts = np.array([part.attrs["counts"] for part in parts], dtype=np.int64).reshape(n, m)
    starts = np.concatenate([[0], np.cumsum(counts.reshape(-1))[:-1]]).reshape(n, m)
    # Named, not tokenized: hashing thousands of zarr arrays costs more than reading them.
    points = da.concatenate(
        [da.from_zarr(part, name=f"raygrid-ray-part-{i}") for i, part in enumerate(parts)]
    )
    size = max(min(RAY_CHUNK, points.shape[0]), 1)
    points = points.rechunk((size, -1))
    unit = dict(group[spec.dims[0]].attrs).get("units")  # the model's coords share one unit
    rays = xr.Dataset(
        {
            "ray_start": (
                ("source", "receiver"),
                starts,
                {"long_name": "first point of the ray in the ray_* arrays"},
            ),
            "ray_count": (("source", "receiver"), counts, {"long_name": "points on the ray"}),
            "ray_time": (
                "ray_point",
                points[:, 0].astype(spec.dtype),
                {"units": "s", "long_name": "traveltime along the ray"},
            ),
        }
    )
    for k, d in enumerate(spec.dims, start=1):
        rays[f"ray_{d}"] = ("ray_point", points[:, k], {"units": unit} if unit else {})
    # Blosc, as every array: a chunk cut short is found (integrity).
    encoding = {
        name: {"chunks": (size,), "compressors": field_compressors()} for name in rays.data_vars
    }
    for name in ("ray_start", "ray_count"):
        encoding[name]["chunks"] = tuple(max(k, 1) for k in rays[name].shape)
    for name in rays.data_vars:
        if name in group:
            del group[name]
    # Appending a Dataset rewrites the store's attributes with the Dataset's before its
    # arrays: given the store's own, an interruption anywhere in between leaves them whole
    # (with none, the fingerprint was gone and the finished survey could not be resumed).
    rays.attrs = dict(group.attrs)
    with dask.config.set(scheduler="threads"):  # not the cluster: the parts are here
        rays.to_zarr(spec.path, mode="a", zarr_format=3, consolidated=False, encoding=encoding)
