"""Workflow files: the YAML schema (pydantic, unknown keys rejected), reading and checking.

A workflow names the model, the sources and receivers, what to keep and where to run::

    model:    {synthetic: gradient, shape: {z: 201, x: 401}, spacing: 10.0}  # or {path: m.zarr}
    grid:     {radius: 4, weights: exact, precision: float64}
    sources:  [{z: 0.0, x: 2000.0}]          # or {csv: FILE}, {line: ...}, {grid: ...}
    receivers: {line: {start: {z: 0, x: 0}, stop: {z: 0, x: 4000}, count: 41}}
    outputs:  {store: out/survey.zarr, fields: true, receiver_table: true, rays: true}
    compute:  {backend: cpu, batch: 4, cluster: configs/local.yaml}

:func:`read_workflow` validates the file (errors name the file, the key path and the line);
:func:`prepare_workflow` then builds the model and checks every source and receiver against
it, before anything is started or written. Running is :func:`raygrid.pipeline.survey.run_survey`.
Relative paths in a workflow are relative to the directory raygrid runs in.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import xarray as xr
from pydantic import (
    Discriminator,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from ..kernels import Star, forward_star
from .clusterfile import AnyConfig, read_cluster
from .errors import InputError, InputWarning, for_workflows, warn_input
from .fingerprint import workflow_fingerprint
from .grid import Grid, grid_from_velocity, radius3
from .io import load_velocity
from .memory import available_memory, check_fits, footprint, one_of, precompute_hint
from .models import constant_model, gradient_model, layered_model, layers_problem
from .options import ALGORITHMS, Algorithm, Backend, Options, Precision, Weights, check_options
from .points import PointError, locate_points, repeated_sources
from .positions import CsvPoints, Points, resolve_points
from .solve import check_launchable
from .storepaths import check_writable, holds
from .yamlfile import (
    FilePath,
    PositiveFloat,
    PositiveInt,
    Strict,
    YamlDocument,
    format_problems,
    is_cluster_file,
    load_yaml,
    schema_error,
    validate_yaml,
)

__all__ = [
    "Workflow",
    "PreparedWorkflow",
    "read_workflow",
    "prepare_workflow",
    "run_workflow",
]


#: The keys each kind of synthetic model reads, besides ``synthetic``, ``shape`` and
#: ``spacing``, which every kind reads.
SYNTHETIC_KEYS = {
    "constant": ("velocity",),
    "gradient": ("top", "bottom"),
    "layered": ("interfaces", "velocities"),
}


#: The keys only a model read from a file takes (a synthetic model is in m and m/s).
FILE_ONLY_KEYS = ("units", "length_unit", "variable", "origin", "dims", "rename", "group")


class SyntheticModel(Strict):
    """A synthetic model, coordinates in m from 0, velocities in m/s.

    Each kind reads only its own keys (:data:`SYNTHETIC_KEYS`); another kind's key given in
    the file is an error, not ignored: ``synthetic: constant`` with ``top: 3000.0`` would
    otherwise run at the default 2000 m/s.
    """

    synthetic: Literal["constant", "gradient", "layered"]
    shape: dict[str, Annotated[int, Field(ge=2)]]
    spacing: PositiveFloat | dict[str, PositiveFloat] = 10.0
    velocity: PositiveFloat = 2000.0
    top: PositiveFloat = 500.0
    bottom: PositiveFloat = 4000.0
    interfaces: list[float] = []
    velocities: list[PositiveFloat] = []

    @model_validator(mode="before")
    @classmethod
    def _not_a_file(cls, data: Any) -> Any:
        # Said as such: "model.path: unknown key" left the user to guess which one was read.
        if isinstance(data, dict) and "path" in data:
            message = "a model is synthetic or read from a file (path), not both: drop one"
            raise schema_error("model_kind", message)
        # A file's keys (units above all, after the warning that velocities of a few m/s
        # are no rock's) were "unknown keys", though the README lists them for models.
        given = [key for key in FILE_ONLY_KEYS if isinstance(data, dict) and key in data]
        if given:
            message = (
                f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to a model "
                "read from a file (path), not to a synthetic one: a synthetic model's "
                "velocities (velocity, top, bottom, velocities) are in m/s and its spacing "
                "and interfaces in m (km/s times 1000)"
            )
            raise schema_error("synthetic_key", message)
        return data

    # Field validators run only for keys given (not for defaults), after ``synthetic``
    # (declared first); "before", so that the key is refused whatever its value.
    @field_validator(*(key for keys in SYNTHETIC_KEYS.values() for key in keys), mode="before")
    @classmethod
    def _used_by_kind(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("synthetic")
        key = info.field_name
        if kind is None or key in SYNTHETIC_KEYS[kind]:  # no valid kind: that error is enough
            return value
        owner = next(other for other, keys in SYNTHETIC_KEYS.items() if key in keys)
        *first, last = ("shape", "spacing", *SYNTHETIC_KEYS[kind])
        message = (
            f"{key} does not apply to a {kind} model ({key} is for {owner} models); a {kind} "
            f"model takes {', '.join(first)} and {last}"
        )
        raise schema_error("synthetic_key", message)

    @model_validator(mode="after")
    def _layers(self) -> SyntheticModel:
        # layered_model checks the same when it is called, but a workflow's mistakes are
        # named with their line by read_workflow (raygrid validate --no-check-model), not
        # found when the model is built; the defaults ([]) would otherwise pass the schema.
        if self.synthetic != "layered":
            return self
        message = layers_problem(self.interfaces, self.velocities)
        if message is None:
            return self
        raise schema_error("layered_model", message)

    @model_serializer(mode="wrap")
    def _dump_used_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only the keys this kind reads, so that a dump (the workflow kept in a store)
        # validates again and shows no value that played no part.
        unused = {key for keys in SYNTHETIC_KEYS.values() for key in keys}
        unused -= set(SYNTHETIC_KEYS[self.synthetic])
        return {key: value for key, value in handler(self).items() if key not in unused}

    def build(self, *, values: bool = True) -> xr.DataArray:
        """The model; with ``values=False``, its values are not held (a read-only broadcast
        of its depth profile) and are checked here, as :func:`grid_from_velocity` checks
        them, on one column."""
        broadcast = not values
        if self.synthetic == "constant":
            model = constant_model(self.shape, self.spacing, self.velocity, broadcast=broadcast)
        elif self.synthetic == "gradient":
            model = gradient_model(
                self.shape, self.spacing, self.top, self.bottom, broadcast=broadcast
            )
        else:
            model = layered_model(
                self.shape, self.spacing, self.interfaces, self.velocities, broadcast=broadcast
            )
        if not values:
            # Every kind varies with depth only: one column (two nodes wide, the least a
            # model has) holds all the values, whatever the model's size; numpy on the
            # whole broadcast would allocate it.
            grid_from_velocity(model.isel({d: slice(0, 2) for d in model.dims if d != "z"}))
        return model


class FileModel(Strict):
    """A model read from a Zarr store, NetCDF or ``.npy`` file (a ``.npy`` array has no
    coordinates: give its ``spacing``, and ``units`` for its values; ``dims`` if its axes
    are not in the order z, (y,) x).

    ``units`` and ``length_unit`` name the units of a file that has none (or spells them
    in a way raygrid does not read), and are refused where the file's are another size of
    unit (they are not a conversion)."""

    path: FilePath
    variable: str | None = None
    units: str | None = None
    spacing: PositiveFloat | dict[str, PositiveFloat] | None = None  # .npy only
    # .npy only; default 0 on every axis; one number for all, as spacing (the README's
    # default reads "0", and origin: 0 was refused as not a mapping)
    origin: float | dict[str, float] | None = None
    dims: Annotated[list[Literal["z", "y", "x"]], Field(min_length=2, max_length=3)] | None = None
    # .npy: unit of spacing and origin (needed); Zarr, NetCDF: of coordinates without units
    length_unit: Literal["m", "km"] | None = None
    # Zarr, NetCDF: the file's axis names that are raygrid's, e.g. {depth: z, easting: x}
    rename: dict[str, Literal["z", "y", "x"]] | None = None
    # Zarr, NetCDF: the group holding the model (default: the root)
    group: str | None = None

    def build(self, *, values: bool = True) -> xr.DataArray:
        """The model, checked as :func:`load_velocity` checks it (chunk by chunk): lazily
        backed by the file (Zarr, NetCDF, or a memory-mapped ``.npy`` array), whatever
        ``values`` says."""
        return load_velocity(
            self.path, self.variable, units=self.units, spacing=self.spacing,
            origin=self.origin, length_unit=self.length_unit,
            dims=None if self.dims is None else tuple(self.dims), rename=self.rename,
            group=self.group,
        )  # fmt: skip


def _model_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "model-synthetic" if "synthetic" in value else "model-file"
    return "model-synthetic" if isinstance(value, SyntheticModel) else "model-file"


Model = Annotated[
    Annotated[SyntheticModel, Tag("model-synthetic")] | Annotated[FileModel, Tag("model-file")],
    Discriminator(_model_kind),
]


class GridOptions(Strict):
    """The graph: forward-star radius, edge weight rule, float precision."""

    radius: PositiveInt | dict[str, PositiveInt] = 4
    weights: Weights = "exact"
    precision: Precision = "float64"


class Outputs(Strict):
    """What to keep, and where."""

    store: FilePath
    fields: bool = True  # traveltime(source, *model dims)
    receiver_table: bool = True  # receiver_traveltime(source, receiver)
    rays: bool = True  # raypaths from every source to every receiver
    plot: FilePath | None = None  # a PNG of one source's field with its rays (and a gather)
    # A number from 0, or a source's name (a CSV file's name column), as `raygrid plot
    # --source` takes: a name wins over the same digits.
    plot_source: Annotated[int, Field(ge=0)] | str = 0

    @field_validator("store")
    @classmethod
    def _a_folder_of_its_own(cls, store: Path) -> Path:
        # Refused here, not at the run as "not a Zarr store" ('' and '.' are this folder).
        if holds(store, Path.cwd()):
            raise schema_error(
                "store_here",
                f"{str(store) if str(store) != '.' else '. (or an empty path)'} is the working "
                "directory or holds it: name a folder for the store, e.g. out/survey.zarr",
            )
        return store

    @field_validator("plot")
    @classmethod
    def _picture_type(cls, plot: Path | None) -> Path | None:
        # Checked here, not by matplotlib once every source is solved; a name without a
        # type is a PNG, named so everywhere (the run prints the file it writes).
        if plot is None:
            return None
        if not plot.suffix and not plot.is_dir():  # (a folder is refused as one, later)
            return plot.with_name(plot.name + ".png")
        if not plot.suffix:  # an existing folder: out.png and out-gathers.png went beside it
            return plot
        from .plot import unwritable

        said = unwritable(plot.suffix[1:], shown=plot.suffix)
        if said:
            raise schema_error("picture_type", said)
        return plot


class Compute(Strict):
    """Where and how to solve."""

    backend: Backend = "cpu"
    algorithm: Algorithm | None = None
    batch: PositiveInt = 4  # sources per Dask task
    cuda_batch: PositiveInt = 1  # CUDA pull: sources relaxed together by a block (<= batch)
    precompute: bool = False  # edge weights computed once and sent to every worker
    threads: PositiveInt = 1  # CPU threads per task (sources of a batch solved at once)
    # Domain decomposition (tiled solves); {} is no tiles at all, refused, not one tile.
    tiles: Annotated[dict[str, PositiveInt], Field(min_length=1)] | None = None
    cluster: FilePath | None = None  # a cluster file; default: a LocalCluster on this machine


class Workflow(Strict):
    """A workflow file (see the module docstring). Paths are relative to the working dir."""

    model: Model
    grid: GridOptions = GridOptions()
    sources: Points
    receivers: Points = []
    outputs: Outputs
    compute: Compute = Compute()
    _document: YamlDocument | None = PrivateAttr(default=None)  # the file, for error lines


def read_workflow(path: str | Path) -> Workflow:
    """Read and validate a workflow file.

    Raises
    ------
    InputError
        Naming the file, and each problem's key path and line (unknown keys are errors).
    """
    document = load_yaml(path, "workflow")
    if is_cluster_file(document.data):
        # Its ten "missing key" and "unknown key" lines did not say what was wrong.
        raise InputError(
            f"{document.path} is a cluster file (a cluster key and none of a workflow's "
            "sections), not a workflow: give the workflow here and the cluster file with "
            "--cluster"
        )
    workflow = validate_yaml(document, Workflow, "workflow")
    problems = _cross_checks(workflow)
    if problems:
        raise InputError(
            f"{document.path}: invalid workflow\n{format_problems(document, problems)}"
        )
    workflow._document = document  # for errors found later (model file, points)
    return workflow


def _cross_checks(workflow: Workflow) -> list[tuple[tuple, str]]:
    problems = []
    outputs, compute = workflow.outputs, workflow.compute
    if not outputs.fields and not workflow.receivers:
        problems.append(
            (("outputs", "fields"), "nothing to store: fields is false and there are no receivers")
        )
    elif not (outputs.fields or outputs.receiver_table or outputs.rays):
        problems.append(
            (("outputs", "fields"), "nothing to store: fields, receiver_table and rays are false")
        )
    # A store replaced (--overwrite) or refused and cleaned up must never take an input
    # with it: the model, or a points file (a CSV inside the store went, and the rerun
    # failed for it).
    inputs = (
        [("the model file", workflow.model.path)] if isinstance(workflow.model, FileModel) else []
    )
    for what in ("sources", "receivers"):
        spec = getattr(workflow, what)
        if isinstance(spec, CsvPoints):
            inputs.append((f"the {what}' CSV file", spec.csv))
    for what, path in inputs:
        if holds(outputs.store, path):
            problems.append(
                (("outputs", "store"), f"the store {outputs.store} would hold {what} {path}, "
                 "which --overwrite would delete: give it its own path")
            )  # fmt: skip
    if compute.algorithm is not None and compute.backend in ALGORITHMS:  # not "auto"
        if compute.algorithm not in ALGORITHMS[compute.backend]:
            problems.append(
                (("compute", "algorithm"), f"{compute.algorithm} does not run on {compute.backend}")
            )
    if compute.tiles is not None and set(compute.tiles) - {"z", "y", "x"}:
        problems.append((("compute", "tiles"), "tile sizes are keyed by z, y, x"))
    return problems


@dataclass(frozen=True)
class PreparedWorkflow:
    """A workflow checked against its model: everything a run needs, nothing started."""

    workflow: Workflow
    velocity: xr.DataArray
    grid: Grid
    star: Star
    options: Options
    sources: list[dict[str, float]]
    receivers: list[dict[str, float]]
    source_index: np.ndarray  # (n_sources, 3) fractional node indices
    receiver_index: np.ndarray  # (n_receivers, 3)
    fingerprint: str | None  # None when prepared without the model's values
    # Short digests of the fingerprint's parts (model values, sources, ...), kept in a store
    # so that a refusal can say what differs; None with the fingerprint.
    fingerprint_parts: dict[str, str] | None = None
    # The points' names, where a CSV file gives them (the store's source and receiver
    # coordinates), by dim: {"source": [...], "receiver": [...]}; absent if unnamed.
    names: dict[str, list[str]] = field(default_factory=dict)

    @property
    def workflow_json(self) -> str:
        return self.workflow.model_dump_json()


def _located(workflow: Workflow, location: tuple, error: InputError) -> InputError:
    document = workflow._document
    if document is None:
        return error
    return InputError(document.problem(location, str(error)))


class _ModelWarnings:
    """Say the model's warnings (velocities no rock has, an elevation axis) at the
    workflow's ``model`` line, as its errors are; a synthetic model's with the unit it is
    in (its velocities are numbers in m/s: ``top: 5.0`` meant as km/s had no attribute to
    fix). Said on leaving, an error or not (a bad value found after a warning used to
    drop the warning). A class, not a generator: :func:`warn_input` places a warning at
    the first frame outside raygrid, which for a generator's was ``contextlib``'s."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self._catching = warnings.catch_warnings(record=True)

    def __enter__(self) -> None:
        self._caught = self._catching.__enter__()
        warnings.simplefilter("always", InputWarning)

    def __exit__(self, *exc_info: Any) -> None:
        self._catching.__exit__(*exc_info)
        for warning in self._caught:
            if not issubclass(warning.category, InputWarning):
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
                continue
            message = str(warning.message)
            synthetic = isinstance(self.workflow.model, SyntheticModel)
            if synthetic and "'units' attribute" in message:
                message += " A synthetic model's velocities are in m/s (km/s times 1000)."
            warn_input(str(_located(self.workflow, ("model",), InputError(message))))


#: Compute options a tiled solve does not read: it solves a survey's sources one after
#: another, each over every worker (:mod:`.tiled`).
UNTILED_OPTIONS = ("batch", "cuda_batch", "precompute", "threads")


def _notes(
    workflow: Workflow,
    indices: dict[str, np.ndarray],
    grid: Grid,
    star: Star,
    names: dict[str, list[str]],
    backend: str,
) -> None:
    """Warn, at their line, about what a workflow asks for that will not happen as it may
    expect: a star too lopsided for the spacing or too costly, options the solve does not
    read, outputs with nothing to hold, sources solved twice. Not errors: the run is what
    was asked, minus what cannot apply."""
    notes = []
    for said in grid.star_notes(star.size, star.radius):
        # At the radius written, else (the default radius) at the model and its spacing.
        given = "radius" in workflow.grid.model_fields_set
        notes.append((("grid", "radius") if given else ("model",), said))
    repeated = repeated_sources(indices["sources"], names.get("source"))
    if repeated is not None:
        notes.append((("sources",), repeated))
    compute = workflow.compute
    sources = len(indices["sources"])
    given = "batch" in compute.model_fields_set  # (the default 4 for 3 sources: no news)
    # On the CPU with one thread a task: one core solves them all, one after another. (A
    # GPU's batch of every source is its way to run them together: not said.)
    sequential = backend == "cpu" and compute.threads == 1
    if given and sequential and compute.tiles is None and 1 < sources <= compute.batch:
        # batch: 5000 for 400 shots ran as one task: one worker busy, the others idle, and
        # the progress bar at 0 until the very end (26 s against 9-14 s at batch 4).
        notes.append((
            ("compute", "batch"),
            f"compute.batch {compute.batch} holds all {sources} sources: one task, solved "
            "on one worker while the others wait, its progress said only at its end; a "
            "batch of a few sources spreads them over the workers",
        ))  # fmt: skip
    if compute.tiles is not None:
        for key in sorted(set(UNTILED_OPTIONS) & compute.model_fields_set):
            notes.append((
                ("compute", key),
                f"compute.{key} does not apply to a tiled solve (compute.tiles), which solves "
                "the sources one after another, each over every worker: it is not used",
            ))  # fmt: skip
    outputs = workflow.outputs
    if outputs.plot is None and "plot_source" in outputs.model_fields_set:
        notes.append((
            ("outputs", "plot_source"),
            "plot_source chooses the source of outputs.plot, which is not given: no picture "
            "is drawn (give plot: a file name, or draw one later with raygrid plot --source)",
        ))  # fmt: skip
    if not len(indices["receivers"]):
        # Asked for in the file, not by default (a run of fields only need not say so).
        asked = outputs.model_fields_set
        kept = [key for key in ("receiver_table", "rays") if key in asked and getattr(outputs, key)]
        if kept:
            notes.append((
                ("receivers",),
                f"no receivers: {' and '.join(kept)} will hold nothing (the store keeps "
                "the fields only)",
            ))  # fmt: skip
    for location, message in notes:
        located = str(_located(workflow, location, InputError(message)))
        warn_input(located)


def workflow_cluster(workflow: Workflow, cluster: str | Path | None = None) -> AnyConfig:
    """The cluster a run of ``workflow`` uses: the file ``cluster`` (a command line's
    ``--cluster``), else the workflow's ``compute.cluster``, else a LocalCluster.

    Raises
    ------
    InputError
        For a missing or bad cluster file; one named by ``compute.cluster`` is reported at
        that line of the workflow.
    """
    if cluster is not None or workflow.compute.cluster is None:
        return read_cluster(cluster)
    try:
        return read_cluster(workflow.compute.cluster)
    except InputError as error:
        raise _located(workflow, ("compute", "cluster"), error) from None


def _check_picture(plot: Path, store: Path, writable: bool) -> None:
    """Refuse a picture path that is (or is in) the store or, if ``writable`` is asked
    (the run is on this machine), one that cannot be written."""
    if holds(store, plot):
        where = "the store's own path" if plot.resolve() == store.resolve() else "inside the store"
        raise InputError(
            f"cannot create picture {plot}: it is {where} ({store}); put it beside the store"
        )
    if not writable:
        return
    if plot.is_dir():
        raise InputError(f"cannot create picture {plot}: it is a folder; name a file")
    check_writable(plot, "picture")


def check_model_fits(workflow: Workflow, sizes: dict[str, int], graph: bool) -> None:
    """Refuse, before it is built or read, a model of ``sizes`` nodes per dim this machine
    cannot hold: a model held whole (velocity and slowness) with, where ``graph``, the CPU
    graph a survey builds beside it; a synthetic model under ``compute.tiles`` is still
    built whole (its velocity). Found from the shape alone: an 801^3 model was built, 8.3 GB
    in 25 s, before its graph was refused. Dims other than raygrid's are left to the
    model's own check, which names them."""
    if set(sizes) not in ({"z", "x"}, {"z", "y", "x"}):
        return
    sizes = {d: sizes[d] for d in ("z", "y", "x") if d in sizes}  # raygrid's order
    nodes = int(np.prod(list(sizes.values()), dtype=np.int64))
    shape = " x ".join(map(str, sizes.values()))
    synthetic = isinstance(workflow.model, SyntheticModel)
    available = available_memory()
    smaller = "a smaller model or a coarser spacing" if synthetic else "a smaller model"
    if workflow.compute.tiles is not None:  # only a synthetic model is held whole then
        if synthetic:
            check_fits(
                8 * nodes, available,
                f"the synthetic model of {shape} nodes (its velocity in float64, built whole "
                "with tiles too)",
                f"use {smaller} (a model file is read tile by tile with compute.tiles)",
            )  # fmt: skip
        return
    needed = 16 * nodes + (_cpu_graph_bytes(workflow, sizes) if graph else 0)
    with_graph = " and its CPU graph" if needed > 16 * nodes else ""
    lower = [smaller]
    if not synthetic:
        lower.insert(0, "compute.tiles (the model is then read tile by tile)")
    elif 8 * nodes <= available:  # tiles leave the velocity whole, built here
        lower.insert(0, "compute.tiles (then only the velocity is held whole)")
    if with_graph and workflow.compute.precompute:  # only what would lower the need
        lower.append(precompute_hint())
    check_fits(
        needed, available,
        f"the model of {shape} nodes{with_graph} (velocity and slowness in float64)",
        f"use {one_of(lower)}",
    )  # fmt: skip


def _cpu_graph_bytes(workflow: Workflow, sizes: dict[str, int]) -> int:
    """Bytes of the CPU graph a survey of ``workflow`` builds beside a model of ``sizes``
    nodes per dim (raygrid's dims, in order), as the survey's own check counts them once
    the model is loaded (:attr:`Footprint.model`, with the grid's slowness again), so that
    a model passed here is not refused there after its read; 0 for a radius the model
    cannot take (said when the model is checked)."""
    try:
        star = forward_star(radius3(workflow.grid.radius, sizes))
    except InputError:
        return 0
    shape3 = (sizes["z"], sizes.get("y", 1), sizes["x"])
    dtype = np.dtype(workflow.grid.precision)
    return footprint(shape3, star, dtype, precompute=workflow.compute.precompute).model


@for_workflows
def prepare_workflow(
    workflow: Workflow,
    *,
    here: bool = True,
    values: bool = True,
    gpu: bool | None = None,
    workers_gpu: bool | None = None,
) -> PreparedWorkflow:
    """Build the model and check every option, source and receiver against it.

    ``here=False`` checks a workflow meant for another machine (``raygrid validate`` on a
    login node): options are not refused for this machine's hardware
    (:func:`raygrid.pipeline.options.check_options`); ``gpu`` says whether that machine has
    a GPU, where known, so that ``backend: auto`` resolves (and is fingerprinted) as there.

    ``workers_gpu`` (``True`` or ``False``) runs the workflow here with workers elsewhere,
    whose hardware decides the backend as ``gpu`` does (batch jobs that ``raygrid run
    --cluster`` submits from a login node with or without GPUs): ``backend: cuda`` is not
    refused for want of a GPU here, and the model, its checks and the CPU graph are as for
    a run here.

    ``values=False`` checks the same without the model's values in memory (``raygrid
    validate`` on a login node): a synthetic model's values are checked on one column (they
    vary with depth only), a model file's as it is opened (:func:`load_velocity`, chunk by
    chunk), and nothing is loaded or hashed: ``grid.slowness`` and ``fingerprint`` are
    ``None``, and the result is for reading, not for running.

    Raises
    ------
    InputError
        For a missing or bad model file, bad units or values, a radius the model cannot
        hold, a source or receiver outside the model (naming which one and its line), a
        plotted source that does not exist, or an option the machine cannot honour
        (``backend: cuda`` without a GPU, unless ``here=False``).
    """
    compute = workflow.compute
    try:  # first: the backend decides whether a CPU graph is held beside the model
        options = check_options(
            workflow.grid.weights,
            compute.backend,
            workflow.grid.precision,
            compute.algorithm,
            compute.cuda_batch,
            compute.precompute,
            here=here and workers_gpu is None,
            gpu=gpu if workers_gpu is None else workers_gpu,
        )
    except InputError as error:
        raise _located(workflow, ("compute", "backend"), error) from None
    whole = values and compute.tiles is None  # held whole, not tile by tile
    # The CPU graph is built where the run's client runs: here, not for another machine.
    graph = here and options.backend == "cpu"
    if values and isinstance(workflow.model, SyntheticModel):  # refused before it is built
        try:
            check_model_fits(workflow, dict(workflow.model.shape), graph)
        except InputError as error:
            raise _located(workflow, ("model",), error) from None
    try:
        with _ModelWarnings(workflow):
            velocity = workflow.model.build(values=values)
    except InputError as error:
        raise _located(workflow, ("model",), error) from None
    if compute.tiles is not None:
        from .tiled import chunked_lazily  # Dask's tiled solve only for tiled workflows

        # A lazily indexed file (NetCDF, .npy) in fixed blocks, so that its fingerprint and
        # its copy into the store read it block by block: `.data` would read it whole here.
        velocity = chunked_lazily(velocity)
    # A model file's values were checked as load_velocity opened it, naming the file
    # (checking them again would read the file again and repeat its warnings), and a model
    # built without its values was checked as it was built.
    checked = isinstance(workflow.model, FileModel) or not values
    if whole and isinstance(workflow.model, FileModel):  # opened, read whole next
        try:
            check_model_fits(workflow, dict(velocity.sizes), graph)
        except InputError as error:
            raise _located(workflow, ("model",), error) from None
    with _ModelWarnings(workflow):
        grid = grid_from_velocity(velocity, load=whole, check_values=not checked)
    try:
        star = forward_star(grid.radius3(workflow.grid.radius))
    except InputError as error:
        raise _located(workflow, ("grid", "radius"), error) from None
    points = {}
    indices = {}
    names = {}
    for key, what in (("sources", "source"), ("receivers", "receiver")):
        try:
            points[key], named = resolve_points(getattr(workflow, key), what)
        except InputError as error:
            raise _located(workflow, (key,), error) from None
        if named is not None:
            names[what] = named
        spec = getattr(workflow, key)
        try:  # a CSV file's row by its line, as a malformed row's is named
            path = spec.csv if isinstance(spec, CsvPoints) else None
            indices[key] = locate_points(grid, points[key], what, named, path)
        except PointError as error:
            listed = isinstance(spec, list)  # not a CSV file or a line
            raise _located(workflow, (key, error.index) if listed else (key,), error) from None
    if not points["sources"]:
        raise _located(workflow, ("sources",), InputError("no sources"))
    _notes(workflow, indices, grid, star, names, options.backend)
    options = options.for_sources(min(compute.batch, len(points["sources"])))  # in one task
    if compute.tiles is None:  # a tiled solve relaxes one source at a time: tiled_geometry
        try:
            check_launchable(grid, star, options)
        except InputError as error:
            try:  # the batch is the fix only if one source at a time would run
                check_launchable(grid, star, options, batch=1)
                where = ("compute", "cuda_batch")
            except InputError:
                where = ("grid", "radius")
            raise _located(workflow, where, error) from None
    outputs = workflow.outputs
    if outputs.plot is not None:
        try:
            plot_source_number(outputs, len(points["sources"]), names.get("source"))
        except InputError as error:
            raise _located(workflow, ("outputs", "plot_source"), error) from None
    if outputs.plot is not None:  # not found out once every source is solved
        try:
            _check_picture(outputs.plot, outputs.store, writable=here)
        except InputError as error:
            raise _located(workflow, ("outputs", "plot"), error) from None
    if compute.tiles is not None:
        from .tiled import tiled_geometry  # Dask's tiled solve only for tiled workflows

        try:
            geometry = tiled_geometry(compute.tiles, grid, star, options)
        except InputError as error:
            raise _located(workflow, ("compute", "tiles"), error) from None
        small = geometry.small_tiles(grid.dims)
        if small is not None:
            warn_input(str(_located(workflow, ("compute", "tiles"), InputError(small))))
    fingerprint, parts = (
        workflow_fingerprint(workflow, grid, options, points, indices, names)
        if values
        else (None, None)
    )
    return PreparedWorkflow(
        workflow=workflow,
        velocity=velocity,
        grid=grid,
        star=star,
        options=options,
        sources=points["sources"],
        receivers=points["receivers"],
        source_index=indices["sources"],
        receiver_index=indices["receivers"],
        fingerprint=fingerprint,
        fingerprint_parts=parts,
        names=names,
    )


def plot_source_number(outputs: Outputs, count: int, names: list[str] | None) -> int:
    """The number of the source ``outputs.plot`` draws: ``plot_source``, a number or one
    of the sources' ``names``, chosen as ``raygrid plot --source`` chooses
    (:func:`~raygrid.pipeline.inspect.numbered`: a name wins over the same digits).

    Raises
    ------
    InputError
        For a name no source has, or a number beyond the ``count`` sources.
    """
    from .inspect import numbered  # the store's readers, only where a picture is asked for

    return numbered(names or [], count, outputs.plot_source, "source", "the workflow")


def run_workflow(
    workflow: Workflow,
    *,
    overwrite: bool = False,
    client: Any = None,
    cluster: str | Path | None = None,
    progress: bool = False,
    echo: Any = None,
) -> xr.Dataset:
    """Run a workflow into its store (resuming a partial one) and return the store, opened.

    See :func:`raygrid.pipeline.survey.run_survey` for the parameters.
    """
    from .survey import run_survey

    return run_survey(
        workflow, overwrite=overwrite, client=client, cluster=cluster, progress=progress, echo=echo
    )
