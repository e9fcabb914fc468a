"""Looking into a survey store: a summary for ``raygrid info``, pictures for ``raygrid plot``."""

from __future__ import annotations

import json
import os
import re
import warnings
from numbers import Real
from pathlib import Path

import numpy as np
import xarray as xr
from dask.utils import format_bytes

from .batchjobs import recorded_job
from .errors import InputError, as_path
from .integrity import (
    damage,
    listed_sources,
    lost_message,
    lost_sources,
    unchecked_arrays,
    unreadable_chunks,
    unreadable_message,
)
from .lock import is_locked
from .store import DamagedStore, StoreState, open_store, point_names
from .storenames import RAY_PARTS
from .storepaths import check_writable, holds

__all__ = [
    "describe", "numbered", "open_survey", "plot_directory", "point_number", "write_workflow",
]  # fmt: skip


def open_survey(path: str | Path) -> xr.Dataset:
    """Open a survey store lazily, checked as ``raygrid info`` checks it.

    Parameters
    ----------
    path : str or pathlib.Path
        The store a workflow's ``outputs.store`` names (``~`` is the home folder).

    Returns
    -------
    xarray.Dataset
        Dask-backed (nothing is read until used): ``velocity`` (the model the store was
        made with, dims as the model's), ``source_<dim>``, ``source_done`` (1 once a source
        is written whole), and, as the workflow kept them, ``traveltime`` ``(source,
        *dims)`` fields, ``receiver_<dim>`` and ``receiver_traveltime`` ``(source,
        receiver)``, and the rays in ragged form (``ray_time``, ``ray_<dim>`` along
        ``ray_point``; ``ray_start`` and ``ray_count`` by ``(source, receiver)``); a
        ``source``/``receiver`` coordinate where they are named. Lookups, rays and plots
        take it (``traveltime_at``, ``raypath``, ``plot_field``).

    Raises
    ------
    InputError
        If it does not exist, is not a raygrid survey store, or is damaged as ``raygrid
        info`` says (its metadata, an array lost, or sources marked done whose chunks are
        missing or cut short: read as NaN, said to be unsolved, or a raw decompression
        error from the lookups).
    """
    path = as_path(path, "a survey store")  # (~ the home folder, as in workflows)
    dataset, _, damaged, lost = _read(path)  # as raygrid info reads it
    if damaged:
        raise InputError(damaged)
    if lost.any():
        raise InputError(f"{path} is {lost_message(lost)}")
    return dataset


def _dataset(path: str | Path) -> xr.Dataset:
    """The store at ``path``, known to be one (:func:`open_store`), opened lazily."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no consolidated metadata: normal
        # A folder without its zarr.json (an array lost whole) is named by integrity.damage.
        warnings.filterwarnings("ignore", "Object at .* is not recognized as a component")
        dataset = xr.open_zarr(path, consolidated=False)
    # What every store holds and everything that reads one uses: a store missing one (a
    # folder deleted by hand, a copy cut short) gave a KeyError traceback.
    dims = [d for d in ("z", "y", "x") if d in dataset.dims]
    needed = ["velocity", "source_done", *(f"source_{d}" for d in dims)]
    missing = [name for name in needed if name not in dataset.variables]
    if missing or not dims:
        raise DamagedStore(
            f"{path} is damaged: it has no {', '.join(missing or ['model dims'])}; "
            "rerun its workflow with --overwrite to make it again"
        )
    return dataset


def _read(path: Path) -> tuple[xr.Dataset, StoreState, str | None, np.ndarray]:
    """A store as ``raygrid info`` and ``raygrid plot`` read it: lazily opened, its state,
    what damages it (:func:`~raygrid.pipeline.integrity.damage`) and which sources marked
    done have lost chunks (bool per source)."""
    state = open_store(path)  # the clear errors, and its completion records read once
    return _dataset(path), state, damage(path), lost_sources(path, state.done)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _names(dataset: xr.Dataset, what: str) -> str:
    """``", named STA1 ... STA9"``: the first and last names of a store's sources or
    receivers (``what``), where it names them; else ``""``."""
    names = point_names(dataset, what)
    if names is None:
        return ""
    return f", named {names[0]}" + (f" ... {names[-1]}" if len(names) > 1 else "")


#: Times :func:`describe` reads a store that changes under it before it gives up.
READS = 3


def describe(path: str | Path, *, workflow: bool = False, verify: bool = False) -> str:
    """A text summary of a store: workflow, method, sources done, variables and sizes;
    ``verify``: every chunk read, to find those changed on disk since they were written
    (:func:`~raygrid.pipeline.integrity.unreadable_chunks`), as long as reading the store.

    A store a batch job will make (:func:`~.batchjobs.recorded_job`) is said to be so, with
    the job's state, not refused as missing; one whose job ended without making it is.

    A run finishing the store meanwhile removes files this reads (each source's ray
    parts, once the rays are assembled): read again, up to :data:`READS` times. It failed
    with a bare ``[Errno 2] No such file or directory: '.../ray_parts/0000104'``.
    """
    path = as_path(path, "a survey store")  # (~ the home folder, as in workflows)
    recorded = recorded_job(path)
    job = recorded[0] if recorded is not None else None
    if recorded is not None and not path.exists():
        if recorded[1]:  # ended without making it (failed, cancelled before it started)
            raise InputError(
                f"store {path} does not exist: the batch job submitted for it ended without "
                f"making it: {job}"
            )
        # Not an error: asked while its job waits or runs (exit status 0).
        return f"store: {path} (not made yet)\nstatus: its batch job will make it: {job}"
    read = 1
    while True:
        try:
            said = _describe(path, workflow, verify)
            if job is None:
                return said
            # After its status line (the first two lines: --verify's finding of damaged
            # chunks may be all there is).
            store_line, status, *rest = said.split("\n")
            return "\n".join([store_line, status, f"last batch job: {job}", *rest])
        except FileNotFoundError:
            if not path.exists():
                raise  # gone for good (overwritten, deleted): said as such by the caller
            if read == READS:
                raise InputError(
                    f"{path} changed while it was read, {READS} times: a run is writing it; "
                    "look again once it has finished"
                ) from None
            read += 1


def write_workflow(store: str | Path, path: str | Path) -> Path:
    """Write the workflow a store was made with (as its first run read it: sources and
    receivers listed, defaults filled in) to ``path`` as YAML, a file ``raygrid run`` takes:
    rerun as it is, it resumes that store (or remakes it, moved or deleted, with the same
    fingerprint); its model and CSV files are named, not copied.

    Keys left empty are left out (``plot_source`` with them where there is no ``plot``: it
    was warned about as a choice of nothing).

    Raises
    ------
    InputError
        If ``store`` is not a survey store, has no stored workflow, or ``path`` exists.
    """
    import yaml

    state = open_store(store)
    if not state.workflow:
        raise InputError(f"{store} stores no workflow (a store made before raygrid kept one)")
    path = as_path(path, "the workflow file")
    if path.exists():
        raise InputError(f"{path} exists: choose another name (nothing is written over)")
    workflow = _without_empty(json.loads(state.workflow))
    if "plot" not in workflow.get("outputs", {}):
        workflow.get("outputs", {}).pop("plot_source", None)
    header = (
        f"# The workflow {Path(store).name} was made with, written by raygrid info "
        "--workflow-file.\n# `raygrid run` of this file resumes the store at outputs.store "
        "(compute may be changed freely: it is not part of the store's fingerprint).\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(workflow, sort_keys=False))
    return path


def _without_empty(value: object) -> object:
    """``value`` with mapping keys whose value is ``None`` left out, at every level."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _describe(path: Path, workflow: bool, verify: bool = False) -> str:
    if verify and (failed := unreadable_chunks(path)):
        # Said before anything else is read: the records, coordinates and ray counts read
        # below may be among them (a traceback, where they were read first).
        size = format_bytes(_size(path))
        return f"store: {path} ({size} on disk)\nstatus: {unreadable_message(failed)}"
    dataset, state, damaged, lost_done = _read(path)
    attrs = dataset.attrs
    lost = np.flatnonzero(lost_done)
    done = int(state.done.sum()) - lost.size
    total = state.done.size
    if damaged:
        status = damaged.removeprefix(f"{path} is ")
    elif lost.size:
        status = lost_message(lost_done)
    elif state.complete and not state.done.all():  # a completion record's chunk lost
        status = (
            f"damaged: finished, but {total - int(state.done.sum())} source(s) have lost "
            f"their completion record ({listed_sources(np.flatnonzero(~state.done))}): "
            "rerun the workflow to solve them again"
        )
    elif state.complete:
        status = "complete"
    elif done == total:
        status = "all sources done, not finalised: rerun the workflow to finish it"
    elif is_locked(path):  # a rerun now would be refused
        status = "partial: a run is writing it now (it holds the store's lock)"
    else:
        status = "partial: rerun the workflow to resume it"
    velocity = dataset["velocity"]
    model = ", ".join(f"{d}={n}" for d, n in velocity.sizes.items())
    # Where the nodes are, in the model's length unit: a model in km labelled m shows here.
    extent = ", ".join(
        f"{d} {float(c[0]):g} to {float(c[-1]):g}"
        + (f" every {float(c[1] - c[0]):g}" if c.size > 1 else "")
        for d in velocity.dims
        for c in [velocity[d].values]
    )
    length_unit = velocity[velocity.dims[0]].attrs.get("units", "?")
    radius = ", ".join(f"{k[7:]}={v}" for k, v in attrs.items() if k.startswith("radius_"))
    lines = [
        f"store: {path} ({format_bytes(_size(path))} on disk)",
        f"status: {status}",
        f"sources done: {done} / {total}{_names(dataset, 'source')}",
        f"receivers: {dataset.sizes.get('receiver', 0)}{_names(dataset, 'receiver')}",
        f"model: {model} nodes, velocity in {velocity.attrs.get('units', '?')}",
        f"  coordinates ({length_unit}): {extent}",
        f"method: {attrs.get('method', '?')}",
        f"radius: {radius} ({attrs.get('star_offsets', '?')} star offsets), weights "
        f"{attrs.get('weights', '?')}, {attrs.get('precision', '?')}, backend "
        f"{attrs.get('backend', '?')}{_tiles(state.workflow, velocity.dims)}",
        # What made it (stores before 2026-12-05 name raygrid's version alone).
        f"made with: {attrs['software']}"
        if "software" in attrs
        else (f"raygrid version: {state.version}"),
        # Not the file's sha256 (sha256sum gives another): a digest of what the run reads
        # of it, its model's values included, which a resume must match.
        f"workflow fingerprint: {state.fingerprint}",
        "variables:",
    ]
    for name, variable in sorted(dataset.data_vars.items()):
        dims = ", ".join(f"{d}={n}" for d, n in variable.sizes.items())
        chunks = variable.encoding.get("chunks")
        lines.append(
            f"  {name}({dims}) {variable.dtype}, {format_bytes(variable.nbytes)} uncompressed"
            + (f", chunks {tuple(chunks)}" if chunks else "")
        )
    if "ray_count" in dataset and done == total:
        counts = dataset["ray_count"].values
        lines.append(f"rays: {counts.size}, {int(counts.sum())} points")
    if not state.done.all():
        lines.append(f"sources not done: {listed_sources(np.flatnonzero(~state.done))}")
    if verify:
        unchecked = unchecked_arrays(path)
        lines.append(
            "verified: every chunk written reads whole"
            + (
                f"; {len(unchecked)} array(s) have no checksums (made before 2026-12-05): "
                f"a change on disk is not seen there ({', '.join(unchecked[:5])}"
                + (", ...)" if len(unchecked) > 5 else ")")
                if unchecked
                else ", its checksum matching"
            )
        )
    if workflow and state.workflow:
        # The fingerprint leaves compute out: a run that resumed the store may have had
        # other compute settings (batch, threads, tiles, cluster) than the one that made it.
        said = "workflow (as the run that made the store read it; compute may differ since):"
        lines += [said, json.dumps(json.loads(state.workflow), indent=2)]
    return "\n".join(lines)


def _tiles(workflow: str | None, dims: tuple) -> str:
    """``", tiles z=24, x=32"`` (in the model's dim order) for a store its workflow solved
    in tiles, else ``""``."""
    try:
        tiles = json.loads(workflow or "{}").get("compute", {}).get("tiles")
    except (ValueError, AttributeError):  # the workflow attribute is the store's own
        return ""
    if not tiles:
        return ""
    return ", tiles " + ", ".join(f"{d}={tiles[d]}" for d in dims if d in tiles)


def source_numbers(dataset: xr.Dataset, chosen: list[int | str]) -> list[int]:
    """Sources chosen by number or, in a store that names them, by name: a text is looked
    up as a name first, so ``"12"`` is the station named so, if any, not source 12; an
    integer is a number."""
    names = point_names(dataset, "source") or []
    return [_number(names, choice, "source", "the store") for choice in chosen]


def point_number(
    dataset: xr.Dataset, choice: int | str, what: str, where: str = "the store"
) -> int:
    """The number of one of ``dataset``'s sources or receivers (``what``), chosen by name
    or number as :func:`source_numbers` chooses (a name wins over the same digits as a
    number), checked to be one of them.

    Parameters
    ----------
    dataset : xarray.Dataset
        A survey store (:func:`open_survey`) or a result with a ``what`` dim.
    choice : int or str
        A name (where ``dataset`` names them: its ``what`` coordinate) or a number from 0.
    what : str
        ``"source"`` or ``"receiver"``.
    where : str
        What ``dataset`` is, for the messages.

    Returns
    -------
    int
        The position along ``what``.

    Raises
    ------
    InputError
        For a name ``dataset`` does not hold, a number out of range, or anything else.
    """
    return numbered(point_names(dataset, what) or [], dataset.sizes.get(what, 0), choice,
                    what, where)  # fmt: skip


def numbered(names: list[str], count: int, choice: int | str, what: str, where: str) -> int:
    """:func:`point_number` from the ``names`` (or ``[]``) and ``count`` of the sources or
    receivers (``what``) of ``where``: one rule wherever a point is chosen by name or
    number (``raygrid plot --source``, :func:`~raygrid.pipeline.raypath`, a workflow's
    ``outputs.plot_source``)."""
    if isinstance(choice, (bool, np.bool_)) or not isinstance(choice, (str, int, np.integer)):
        # int() took 2.7 as 2 and True as 1: another point than meant, silently.
        raise InputError(f"{what} must be a {what}'s name or number, got {choice!r}")
    number = _number(names, choice, what, where)
    if not 0 <= number < count:
        held = f"0..{count - 1}" if count else f"none: it has no {what} dim"
        raise InputError(
            f"{what} number {number} is out of range: {where} has {count} {what}s ({held})"
        )
    return number


def _number(names: list[str], choice: int | str, what: str, where: str) -> int:
    """``choice``'s position in ``names`` if it is a text and one of them, else the number
    it is (unchecked)."""
    if isinstance(choice, str):
        # Spaces around it are a shell's or a table's, not the name's; a number is plain
        # digits: int() took " 1" for 1 where a source is named "1" (and "1_0" for 10).
        choice = choice.strip()
        if choice in names:
            return names.index(choice)
    try:
        if isinstance(choice, str) and not re.fullmatch(r"-?[0-9]+", choice):
            raise ValueError(choice)
        return int(choice)
    except ValueError:
        some = (
            f" (its names: {names[0]!r} ... {names[-1]!r})"
            if names
            else f" (it does not name its {what}s: give a number)"
        )
        raise InputError(
            f"{what} {choice!r} is neither a {what} number nor a {what}'s name in {where}{some}"
        ) from None


#: Characters of a source's name that go into its picture's file name (most file systems
#: allow 255 bytes a name, the store's own name and a temporary prefix included).
PICTURE_NAME = 64


def picture_name(stem: str, source: int, name: str | None, kind: str = "png") -> str:
    """The file name of source number ``source``'s picture of the store ``stem``.

    A named source's picture carries its name: "--source 0" on sources named 2, 0, 1 drew
    the one named "0" into "-source1.png", which read as another source. The name is made
    safe for any file system and cut to :data:`PICTURE_NAME` characters: a 300-character
    name failed "File name too long" after its figure was drawn (the number keeps cut
    names apart). ``kind``: the format's suffix, without its dot.
    """
    part = "" if name is None else "-" + re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    return f"{stem}-source{source}{part[: PICTURE_NAME + 1]}.{kind}"


def plot_directory(
    path: str | Path,
    out: str | Path | None,
    sources: list[int | str],
    echo=None,
    map_z: float | None = None,
    kind: str = "png",
    dpi: float | None = None,
) -> list[Path]:
    """Pictures of a store: one field-and-rays picture per chosen source (by number, or by name
    where the store names them; default: the first, middle and last of the sources done so
    far), and the receiver gathers once every source is done; written to ``out`` (default:
    beside the store). ``echo`` is told what an unfinished store's pictures lack (rays are
    assembled when the run completes), and which chosen sources are not done yet and so
    not drawn (without ``echo``, or when none is done, that is refused). ``map_z``: a 3D
    store's map depth (:func:`~raygrid.pipeline.plot.plot_field`). ``kind``: the files'
    format (``png``, ``pdf``, ``svg``: any matplotlib writes), ``dpi`` their resolution
    (default :data:`~raygrid.pipeline.plot.DPI`)."""
    from .plot import DPI, plot_field, plot_gathers, unwritable

    if said := unwritable(kind):  # before the store is read
        raise InputError(said)
    dpi = DPI if dpi is None else dpi
    if not (isinstance(dpi, Real) and not isinstance(dpi, bool) and 10 <= dpi <= 2400):
        raise InputError(f"dpi must be a number from 10 to 2400, got {dpi!r}")

    path = Path(path)
    dataset, state, damaged, lost = _read(path)  # lost: drawn as if nothing reached them
    if damaged:  # a model, its coordinates or rays read as NaN: no picture to trust
        raise InputError(damaged)
    n = dataset.sizes["source"]
    done = np.flatnonzero(state.done & ~lost)
    if not sources:
        if not done.size:
            raise InputError(f"no source is done yet in {path}: nothing to plot")
        sources = sorted({int(done[0]), int(done[done.size // 2]), int(done[-1])})
    sources = list(dict.fromkeys(source_numbers(dataset, sources)))  # 0 and 0: drawn once
    bad = [s for s in sources if not 0 <= s < n]
    if bad:
        raise InputError(f"source index {bad} out of range: {path} has {n} sources (0..{n - 1})")
    missing = [s for s in sources if lost[s]]
    if missing and (len(missing) == len(sources) or echo is None):
        raise InputError(
            f"sources {missing} have chunks missing on disk in {path} (it is damaged): "
            "rerun the workflow to solve them again, or pick others with --source"
        )
    if missing:  # as a source not done: the others are drawn (the note on damage below)
        sources = [s for s in sources if not lost[s]]
    not_done = [s for s in sources if not state.done[s]]
    if not_done and (len(not_done) == len(sources) or echo is None):
        raise InputError(
            f"sources {not_done} are not done yet in {path} ({done.size} of {n} are): "
            "rerun the workflow, or pick done ones with --source"
        )
    if not_done:  # a run under way: what is done is drawn, and the rest named
        echo(
            f"note: sources {not_done} are not done yet in {path} ({done.size} of {n} are): "
            "not drawn"
        )
        sources = [s for s in sources if state.done[s]]
    if lost.any() and echo is not None:
        echo(
            f"note: {path} is damaged: source(s) {listed_sources(np.flatnonzero(lost))} marked "
            "done have chunks missing on disk and are not drawn, nor the receiver gathers: "
            "rerun the workflow to solve them again"
        )
    elif done.size < n and echo is not None:
        # Promised only what the store keeps: rays (their parts, assembled at the end) and
        # gathers (a receiver table, more than one source).
        later = [
            what for what, kept in (
                ("rays", (path / RAY_PARTS).is_dir()),
                ("the receiver gathers", "receiver_traveltime" in dataset and n > 1),
            ) if kept
        ]  # fmt: skip
        echo(
            f"note: {path} is not complete ({done.size} of {n} sources)"
            + (f": {' and '.join(later)} are drawn once the run has finished" if later else "")
        )
    # Made absolute: the store named "." (plotted from inside it) has no name or parent;
    # not resolved: pictures of a link to a store go beside the link, named after it.
    named = Path(os.path.abspath(path))
    out = Path(out) if out is not None else named.parent
    if out.exists() and not out.is_dir():  # named as the --out given
        raise InputError(f"cannot write pictures into {out}: it is a file, not a folder")
    if holds(path, out):
        raise InputError(
            f"cannot write pictures into {out}: it is inside the store {path}; choose another "
            "--out (by default they go beside the store)"
        )
    stem = named.name.removesuffix(".zarr")
    names = point_names(dataset, "source")

    def picture(s: int) -> Path:
        return out / picture_name(stem, s, None if names is None else names[s], kind)

    # Before anything is drawn: --out under a file, or a folder not writable.
    check_writable(picture(sources[0]), "picture")
    written = [plot_field(dataset, picture(s), s, map_z=map_z, dpi=dpi) for s in sources]
    # Gathers plot time against source position: with one source there is nothing to draw.
    if "receiver_traveltime" in dataset and done.size == n and n > 1:
        written.append(plot_gathers(dataset, out / f"{stem}-gathers.{kind}", dpi=dpi))
    return written
