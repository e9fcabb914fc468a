"""Reading velocity models from Zarr (first class), NetCDF and NumPy files."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from .errors import ELEVATION_NAMES, Z_IS_DEPTH, InputError, as_path, missing_file
from .grid import grid_from_velocity
from .modelcheck import LENGTH_UNITS, SPEED_UNITS, known_unit, unit_size
from .models import per_dim, real_number

__all__ = ["load_velocity", "NpyArray"]


class NpyArray(BackendArray):
    """A ``.npy`` array read a box at a time through a memory map: xarray's lazily indexed
    backend array (as a NetCDF file is opened), so a model too big for memory is checked
    chunk by chunk and a tiled solve's workers each read only their tile.

    Pickles as its path (made absolute, so that workers started in another folder find
    it), never its values.

    Parameters
    ----------
    path : Path
        The ``.npy`` file.

    Raises
    ------
    ValueError
        If the file is not a NumPy array that can be memory-mapped (pickled objects).
    """

    def __init__(self, path: Path):
        self.path = Path(path).resolve()
        array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        self.shape, self.dtype = array.shape, array.dtype
        stat = self.path.stat()
        self._stamp = (str(self.path), stat.st_size, stat.st_mtime_ns)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.BASIC, self._read
        )

    def _read(self, key: tuple) -> np.ndarray:
        # A copy: a view would keep the file mapped for as long as the values live.
        return np.array(np.load(self.path, mmap_mode="r", allow_pickle=False)[key])

    def __dask_tokenize__(self) -> tuple:
        # dask names chunks by the file, its size and time: a file rewritten is new values.
        return ("raygrid-npy", *self._stamp)


def _pick(
    dataset: xr.Dataset, variable: str | None, path: Path, group: str | None = None
) -> xr.DataArray:
    where = f"{path}" if group is None else f"{path} (group {group!r})"
    if variable is None:
        if not dataset.data_vars:
            raise InputError(f"{where} holds no data variable: no velocity model"
                             f"{_groups_hint(path, group)}")  # fmt: skip
        if len(dataset.data_vars) != 1:
            raise InputError(
                f"{where} holds {sorted(dataset.data_vars)}: name the velocity (variable= in "
                "Python, model.variable in a workflow)"
            )
        variable = next(iter(dataset.data_vars))
    if variable not in dataset.data_vars:
        raise InputError(f"{where} has no variable {variable!r}; it has "
                         f"{sorted(dataset.data_vars)}{_groups_hint(path, group)}")  # fmt: skip
    return dataset[variable]


def _groups_hint(path: Path, group: str | None) -> str:
    """``"; its groups with variables: ..."``, naming the groups of a NetCDF file or Zarr
    store (other than the one read) that hold data variables, for a model not found where
    it was looked for; ``""`` if there are none (or they cannot be listed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # no consolidated metadata
            kind = {"engine": "zarr"} if _is_zarr(path) else {}
            with xr.open_datatree(path, **kind) as tree:
                found = {
                    node.path: sorted(node.data_vars) for node in tree.subtree if node.data_vars
                }
    except Exception:  # noqa: BLE001 - only a hint: the refusal stands without it
        return ""
    read = "/" + (group or "").strip("/")
    found.pop(read, None)
    if not found:
        return ""
    listed = ", ".join(f"{name} {variables}" for name, variables in sorted(found.items()))
    return f"; its groups with variables: {listed} (group= in Python, model.group in a workflow)"


def _is_zarr(path: Path) -> bool:
    """Whether ``path`` is a Zarr store: named ``.zarr``, or a folder with Zarr metadata
    (v3, then v2)."""
    marks = ("zarr.json", ".zgroup", ".zattrs", ".zmetadata")
    return path.suffix.lower() == ".zarr" or (
        path.is_dir() and any((path / mark).exists() for mark in marks)
    )


def _has_group(path: Path, group: str) -> bool:
    """Whether the Zarr store at ``path`` has a group ``group`` (``""``: its root). An
    error opening it through xarray may be another's: arrays without dimension names."""
    import zarr

    try:
        zarr.open_group(str(path), path=group.strip("/"), mode="r")
    except Exception:  # noqa: BLE001 - zarr's GroupNotFoundError, or not a group
        return False
    return True


def _no_group(path: Path, group: str) -> InputError:
    return InputError(f"{path} has no group {group!r}{_groups_hint(path, group)}")


def _conflicts(found: str | None, given: str, scales: Mapping[str, float]) -> bool:
    """Whether a unit given for a file contradicts the file's own: both are units raygrid
    reads (``scales``) and of different sizes. ``m s-1`` and ``m/s`` agree; a file's unit
    raygrid does not read (``meters per second``) is the one the user is correcting, not a
    conflict."""
    return (
        known_unit(found, scales)
        and known_unit(given, scales)
        and unit_size(found, scales) != unit_size(given, scales)
    )


def _renamed(velocity: xr.DataArray, path: Path, rename: Mapping[str, str]) -> xr.DataArray:
    """The model with the file's axes renamed to raygrid's (``{"depth": "z"}``).

    Raises
    ------
    InputError
        For a name that is not one of the variable's axes, or a new name other than z, y,
        x or one used twice.
    """
    unknown = [name for name in rename if name not in velocity.dims]
    if unknown:
        raise InputError(
            f"{path}: rename names {unknown}, not axes of the velocity, whose axes are "
            f"{list(velocity.dims)}"
        )
    wrong = [to for to in rename.values() if to not in ("z", "y", "x")]
    kept = [d for d in velocity.dims if d not in rename]
    targets = [*rename.values(), *kept]
    if wrong or len(set(targets)) != len(targets):
        raise InputError(
            f"{path}: rename {dict(rename)} must give axes the names z, y or x, each once "
            f"(the velocity's axes are {list(velocity.dims)})"
        )
    for name, to in rename.items():
        positive = velocity[name].attrs.get("positive") if name in velocity.coords else None
        marked_down = isinstance(positive, str) and positive.strip().lower() == "down"
        if to == "z" and name.lower() in ELEVATION_NAMES and not marked_down:
            # Renamed, an elevation read as depth turned the model upside down, silently.
            raise InputError(
                f"{path}: rename {{{name!r}: 'z'}}: {name!r} measures up where raygrid's "
                f"{Z_IS_DEPTH}: renamed, the model would be upside down; negate it into "
                f"depth in the file, e.g. velocity.assign_coords({{{name!r}: "
                f"(-velocity[{name!r}]).assign_attrs(positive='down')}})"
                f".rename({{{name!r}: 'z'}}).sortby('z') (if it holds depths despite its name, "
                "give it the attribute positive: 'down')"
            )
    taken = [to for to in rename.values() if to in velocity.coords and to not in velocity.dims]
    if taken:  # a coordinate along another axis (an elevation z): xarray's bare ValueError
        raise InputError(
            f"{path}: rename {dict(rename)} gives an axis the name {taken[0]!r} of another "
            f"coordinate of the file: drop it first (velocity.drop_vars({taken[0]!r}))"
        )
    return velocity.rename(dict(rename))


def _check_unit(given: str | None, option: str, known: Mapping[str, float]) -> None:
    """Refuse a unit option (``units``, ``length_unit``) given in a spelling raygrid does
    not read."""
    if given is not None and not known_unit(given, known):
        raise InputError(f"{option} {given!r} is not a unit raygrid reads: one of {sorted(known)}")


def _given_units(
    velocity: xr.DataArray, path: Path, units: str | None, length_unit: str | None
) -> xr.DataArray:
    """The model with the units a caller gave: for a file that lacks them, or whose spelling
    raygrid does not read.

    A unit given where the file has another size of unit is refused: taking it would
    silently rescale every time (km/s read as m/s is a factor of 1000), and a conversion
    is the user's decision, made on the file.
    """
    # Checked whatever the file says: "m/sec" was taken silently where the file had km/s
    # (and ignored), and refused only where the file had none.
    _check_unit(units, "units", SPEED_UNITS)
    _check_unit(length_unit, "length_unit", LENGTH_UNITS)
    if units is not None:
        found = velocity.attrs.get("units")
        if _conflicts(found, units, SPEED_UNITS):
            raise InputError(
                f"{path}: the velocity's units are {found!r} in the file, not {units!r}; the "
                "units option is for a file without them (it converts nothing): leave it "
                "out, or, if the file's attribute is wrong, correct it in the file "
                f"(e.g. with xarray: model.attrs['units'] = {units!r}, then write it again)"
            )
        if not known_unit(found, SPEED_UNITS):
            velocity.attrs["units"] = units
    elif "units" not in velocity.attrs:
        raise InputError(
            f"{path}: velocity has no 'units' attribute: give them (units= in Python, "
            "model.units in a workflow), m/s or km/s"
        )
    for d in velocity.dims:
        if d not in velocity.coords or d not in ("z", "y", "x"):
            continue  # grid_from_velocity names a dim without coordinates, or not a model's
        found = velocity[d].attrs.get("units")
        if found is None and length_unit is None:
            raise InputError(
                f"{path}: coordinate {d!r} has no 'units' attribute: give the coordinates' "
                "unit (length_unit= in Python, model.length_unit in a workflow), m or km"
            )
        if length_unit is None:
            continue
        if _conflicts(found, length_unit, LENGTH_UNITS):
            raise InputError(
                f"{path}: coordinate {d!r} is in {found!r} in the file, not {length_unit!r}; "
                "length_unit is for coordinates without units (it converts nothing): leave "
                "it out, or, if the file's attribute is wrong, correct it in the file (e.g. "
                f"with xarray: model[{d!r}].attrs['units'] = {length_unit!r}, then write it "
                "again)"
            )
        if not known_unit(found, LENGTH_UNITS):  # none, or a spelling raygrid does not read
            velocity = velocity.assign_coords({d: velocity[d].assign_attrs(units=length_unit)})
    return velocity


def _gridded(
    values,
    path: Path | str,
    spacing: float | Mapping[str, float] | None,
    origin: float | Mapping[str, float] | None,
    length_unit: str | None,
    dims: tuple[str, ...] | None,
) -> xr.DataArray:
    """An array without coordinates (a ``.npy`` file's, or one in memory) given its grid:
    ``spacing`` and ``origin`` in ``length_unit``, axes named by ``dims``; ``path`` names it
    in refusals."""
    if values.ndim not in (2, 3):
        raise InputError(f"{path}: a velocity array must be 2D or 3D, got {values.ndim}D")
    if spacing is None:
        raise InputError(
            f"{path}: a .npy model or array has no coordinates: give its spacing (spacing= in "
            "Python, model.spacing in a workflow) and its units"
        )
    _check_unit(length_unit, "length_unit", LENGTH_UNITS)  # (feet: said as the option)
    if length_unit is None:
        # Taken as metres, a spacing meant in km gave every time 1000 times too small,
        # silently (a 60 m model at 3.5-8 km/s passes every check).
        raise InputError(
            f"{path}: a .npy model's or array's spacing has no unit: give it (length_unit= in "
            "Python, model.length_unit in a workflow), m or km"
        )
    if isinstance(dims, str):  # "xz" was read as ("x", "z"); a workflow refuses it
        raise InputError(f"{path}: dims must be a list of dim names, e.g. ['x', 'z'], got "
                         f"{dims!r}")  # fmt: skip
    dims = tuple(dims or (("z", "x") if values.ndim == 2 else ("z", "y", "x")))
    if len(dims) != values.ndim or len(set(dims)) != len(dims):
        raise InputError(f"{path}: dims {dims} for a {values.ndim}D array")
    step = per_dim(spacing, dims, f"{path}: spacing")
    start = per_dim({} if origin is None else origin, dims, f"{path}: origin", default=0.0)
    for d in dims:
        real_number(step[d], f"{path}: spacing {d}", positive=True)
        real_number(start[d], f"{path}: origin {d}")
    coords = {
        d: xr.DataArray(
            float(start[d]) + float(step[d]) * np.arange(n),
            dims=d,
            attrs={"units": length_unit},
        )
        for d, n in zip(dims, values.shape)
    }
    if isinstance(values, np.ndarray):
        return xr.DataArray(values, dims=dims, coords=coords, name="velocity")
    lazy = xr.Variable(dims, indexing.LazilyIndexedArray(values))
    return xr.DataArray(lazy, coords=coords, name="velocity")


def load_velocity(
    path: str | Path | np.ndarray,
    variable: str | None = None,
    *,
    units: str | None = None,
    spacing: float | Mapping[str, float] | None = None,
    origin: float | Mapping[str, float] | None = None,
    length_unit: str | None = None,
    dims: tuple[str, ...] | None = None,
    rename: Mapping[str, str] | None = None,
    group: str | None = None,
) -> xr.DataArray:
    """Open a velocity model and validate it.

    Parameters
    ----------
    path : str, Path or numpy.ndarray
        A Zarr store (directory ending ``.zarr``), a NetCDF file (``.nc``, ``.nc4``,
        ``.netcdf``) or a NumPy ``.npy`` array; or a 2D or 3D NumPy array in memory, given
        its grid as a ``.npy`` file's (what scikit-fmm, pykonal and fteikpy take: mind
        their axis orders, given here by ``dims``).
    variable : str, optional
        Name of the velocity variable in a Zarr/NetCDF dataset holding several.
    units : str, optional
        Velocity units, for a file that has none (always ``.npy``) or whose spelling raygrid
        does not read; refused where the file's are another size of unit (it is not a
        conversion: km/s for a file in m/s).
    spacing, origin, dims
        Grid of a ``.npy`` or in-memory array, which has no coordinates: node spacing and
        first coordinate (default 0), each one number for all dims or a mapping per dim,
        and dim names in the array's axis order (default ``("z", "x")`` or ``("z", "y",
        "x")`` by rank). Nodes are where the velocities are: a cell-centred model's first
        node lies half a cell in.
    length_unit : {"m", "km"}, optional
        Unit of an array's spacing and origin (needed), or of a Zarr or NetCDF
        model's coordinates that have no ``units`` attribute (or one raygrid does not read);
        refused where a coordinate's unit is another size.
    rename : mapping, optional
        Zarr and NetCDF: the file's names of axes that are raygrid's ``z``, ``y`` or ``x``,
        e.g. ``{"depth": "z", "northing": "y", "easting": "x"}`` (their coordinates too).
    group : str, optional
        Zarr and NetCDF: the group holding the model, e.g. ``"models/vp"`` (default: the
        root). A model not found where it is looked for is refused naming the groups that
        hold variables.

    Returns
    -------
    xarray.DataArray
        The model, lazily backed by the file: for Zarr by dask in the store's chunks, for
        NetCDF and ``.npy`` (through a memory map, :class:`NpyArray`) lazily indexed (an
        in-memory array: a copy of it);
        checked by the same rules as
        :func:`raygrid.pipeline.traveltime`; the values are checked chunk by chunk, never
        loaded whole.

    Raises
    ------
    InputError
        If the file is missing or of an unknown kind, or the model fails validation.
    """
    if isinstance(path, np.ndarray):
        if rename is not None or group is not None or variable is not None:
            raise InputError(
                "a velocity array's axes are named by dims; rename, group and variable are "
                "for Zarr and NetCDF files"
            )
        if np.ma.is_masked(path):  # np.array keeps the data under the mask, silently
            raise InputError(
                "the velocity array is masked: give every node a velocity (e.g. "
                "array.filled(...)) or cut the masked part off"
            )
        velocity = _gridded(
            np.array(path), "the velocity array", spacing, origin, length_unit, dims
        )
        velocity = _given_units(velocity, "the velocity array", units, None)
        grid_from_velocity(velocity, load=False)  # refusals name what to change
        return velocity
    path = as_path(path, "the velocity model")
    if not path.exists():
        raise missing_file(path, "velocity model")
    suffix = path.suffix.lower()
    if suffix == ".npy" and rename is not None:
        raise InputError(f"{path}: rename is for Zarr and NetCDF models; a .npy array's axes "
                         "are named by dims")  # fmt: skip
    if suffix != ".npy" and (spacing is not None or origin is not None or dims is not None):
        given = [name for name, value in (("spacing", spacing), ("origin", origin), ("dims", dims))
                 if value is not None]  # fmt: skip
        raise InputError(
            f"{path}: {', '.join(given)} {'is' if len(given) == 1 else 'are'} for .npy "
            "models; this file has its own coordinates"
        )
    if suffix == ".npy" and group is not None:
        raise InputError(f"{path}: group is for Zarr and NetCDF models; a .npy file holds one "
                         "array: leave it out")  # fmt: skip
    if _is_zarr(path):
        with warnings.catch_warnings():
            # Stores without consolidated metadata are normal in zarr v3; xarray warns
            # when it falls back to reading them without.
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                dataset = xr.open_zarr(path, group=group, consolidated=None)
            except Exception as error:  # no metadata there, or metadata that does not read
                if group is not None and _has_group(path, "") and not _has_group(path, group):
                    raise _no_group(path, group) from None
                said = (
                    "no Zarr group metadata in it"
                    if isinstance(error, FileNotFoundError)
                    else f"{type(error).__name__}: {error}"
                )
                raise InputError(f"{path}: cannot open it as Zarr ({said})") from None
        velocity = _pick(dataset, variable, path, group)
    elif suffix in (".nc", ".nc4", ".netcdf", ".cdf"):
        # Lazily indexed (no dask): a tiled solve reads it in blocks (tiled.chunked_lazily),
        # so each worker reads only its tile; a contiguous file opened with dask would be
        # one chunk.
        try:
            dataset = xr.open_dataset(path, group=group)
        except (OSError, ValueError) as error:  # no NetCDF engine, or not a NetCDF file
            if group is not None and "group not found" in str(error):
                raise _no_group(path, group) from None
            raise InputError(f"{path}: cannot open it as NetCDF ({error})") from None
        velocity = _pick(dataset, variable, path, group)
        # The model's close() closes the file (a variable of a dataset has none of its own:
        # the file stayed open, and HDF5's lock refused the next iteration's rewrite of it).
        velocity.set_close(dataset.close)
    elif suffix == ".npy":
        if variable is not None:  # it was ignored: the array read may not be the one meant
            raise InputError(
                f"{path}: variable {variable!r} names a variable of a Zarr or NetCDF dataset; a "
                ".npy file holds one array: leave it out"
            )
        try:
            values = NpyArray(path)
        except (OSError, ValueError, EOFError) as error:  # EOFError: an empty file
            raise InputError(f"{path}: cannot read it as a NumPy array ({error})") from None
        velocity = _gridded(values, path, spacing, origin, length_unit, dims)
    else:
        raise InputError(f"{path}: unknown model format {suffix!r} (use .zarr, .nc or .npy)")
    if rename:
        velocity = _renamed(velocity, path, rename)
    velocity = _given_units(velocity, path, units, None if suffix == ".npy" else length_unit)
    # Checked now, naming the file, rather than at solve time: a file-backed model by dask
    # reductions that stream its chunks (a lazily indexed one through a chunked view), never
    # loaded whole.
    checked = velocity if velocity.chunks else velocity.chunk("auto")
    try:
        grid_from_velocity(checked, load=False)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None
    return velocity
