"""Workflow files: the YAML schema (pydantic, unknown keys rejected) and running one.

This is the small first version behind ``raygrid run``: one model, a list of sources solved
one after another on the CPU, a Zarr store and a PNG. Fan-out over a Dask cluster, receiver
tables and resumable stores come with the survey workflows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import xarray as xr
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InputError
from .grid import grid_from_velocity
from .io import load_velocity
from .models import constant_model, gradient_model, layered_model
from .rays import raypath
from .solve import traveltime
from .store import write_store

__all__ = ["Workflow", "read_workflow", "run_workflow"]

Point = dict[str, float]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticModel(_Strict):
    """A synthetic model (m, m/s)."""

    synthetic: Literal["constant", "gradient", "layered"]
    shape: dict[str, Annotated[int, Field(ge=2)]]
    spacing: Annotated[float, Field(gt=0)] | dict[str, Annotated[float, Field(gt=0)]] = 10.0
    velocity: Annotated[float, Field(gt=0)] = 2000.0
    top: Annotated[float, Field(gt=0)] = 500.0
    bottom: Annotated[float, Field(gt=0)] = 4000.0
    interfaces: list[float] = []
    velocities: list[Annotated[float, Field(gt=0)]] = []

    def build(self) -> xr.DataArray:
        if self.synthetic == "constant":
            return constant_model(self.shape, self.spacing, self.velocity)
        if self.synthetic == "gradient":
            return gradient_model(self.shape, self.spacing, self.top, self.bottom)
        return layered_model(self.shape, self.spacing, self.interfaces, self.velocities)


class FileModel(_Strict):
    """A model read from a Zarr store, NetCDF or ``.npy`` file."""

    path: Path
    variable: str | None = None
    units: str | None = None

    def build(self) -> xr.DataArray:
        return load_velocity(self.path, self.variable, units=self.units)


class GridOptions(_Strict):
    radius: Annotated[int, Field(ge=1)] | dict[str, Annotated[int, Field(ge=1)]] = 4
    weights: Literal["exact", "mean"] = "exact"
    precision: Literal["float64", "float32"] = "float64"


class Outputs(_Strict):
    store: Path
    plot: Path | None = None


class Compute(_Strict):
    backend: Literal["cpu", "cuda", "auto"] = "cpu"


class Workflow(_Strict):
    """A workflow file. Paths are relative to the current directory."""

    model: SyntheticModel | FileModel
    grid: GridOptions = GridOptions()
    sources: Annotated[list[Point], Field(min_length=1)]
    receivers: list[Point] = []
    outputs: Outputs
    compute: Compute = Compute()


def _key_path(location: tuple) -> str:
    return ".".join(str(part) for part in location) or "(top level)"


def read_workflow(path: str | Path) -> Workflow:
    """Read and validate a workflow file.

    Raises
    ------
    InputError
        Naming the file and each bad key path (unknown keys are errors).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"workflow file {path} does not exist")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise InputError(f"{path}: a workflow is a mapping of sections (model, sources, ...)")
    try:
        return Workflow.model_validate(document)
    except ValidationError as error:
        problems = "\n".join(
            f"  {_key_path(e['loc'])}: {e['msg']}" for e in error.errors(include_url=False)
        )
        raise InputError(f"{path}: invalid workflow\n{problems}") from None


def run_workflow(workflow: Workflow, *, overwrite: bool = False) -> xr.Dataset:
    """Solve every source of a workflow, write the store (and plot) and return the dataset.

    Every input is validated, and every source solved, before the store is written, so a
    bad source or receiver never leaves a partial store behind.
    """
    velocity = workflow.model.build()
    grid = grid_from_velocity(velocity)
    for point in workflow.sources:  # every position checked before any work is done
        grid.to_index(point, "source")
    for point in workflow.receivers:
        grid.to_index(point, "receiver")
    options = workflow.grid
    results = [
        traveltime(
            velocity,
            source,
            radius=options.radius,
            weights=options.weights,
            precision=options.precision,
            backend=workflow.compute.backend,
            predecessors=True,
        )
        for source in workflow.sources
    ]
    rays = [[raypath(result, receiver) for receiver in workflow.receivers] for result in results]
    dataset = _assemble(velocity, results, rays, workflow)
    write_store(dataset, workflow.outputs.store, overwrite=overwrite)
    if workflow.outputs.plot is not None:
        from .plot import plot_store  # matplotlib only when a plot is asked for

        plot_store(dataset, workflow.outputs.plot)
    return dataset


def _assemble(velocity, results, rays, workflow: Workflow) -> xr.Dataset:
    """One dataset: fields along ``source``, rays as ragged arrays (points + offsets)."""
    dims = results[0]["traveltime"].dims
    fields = xr.concat([r["traveltime"] for r in results], dim="source", combine_attrs="drop")
    attrs = {k: v for k, v in results[0].attrs.items() if not k.startswith("source_")}
    dataset = xr.Dataset(
        {
            "traveltime": fields.assign_attrs(units="s", long_name="first-arrival traveltime"),
            "velocity": velocity.transpose(*dims),
        },
        attrs=attrs | {"workflow": workflow.model_dump_json()},
    )
    for d in dims:
        dataset[f"source_{d}"] = ("source", [float(s[d]) for s in workflow.sources])
        if workflow.receivers:
            dataset[f"receiver_{d}"] = ("receiver", [float(r[d]) for r in workflow.receivers])
    if workflow.receivers:
        flat = [ray for per_source in rays for ray in per_source]
        counts = np.array([ray.sizes["point"] for ray in flat])
        dataset["ray_start"] = ("ray", np.concatenate([[0], np.cumsum(counts)[:-1]]))
        dataset["ray_count"] = ("ray", counts)
        dataset["ray_source"] = ("ray", np.repeat(np.arange(len(rays)), len(workflow.receivers)))
        dataset["ray_receiver"] = ("ray", np.tile(np.arange(len(workflow.receivers)), len(rays)))
        for name in (*dims, "time"):
            values = np.concatenate([ray[name].values for ray in flat])
            dataset[f"ray_{name}"] = ("ray_point", values, flat[0][name].attrs)
        dataset["receiver_traveltime"] = (
            ("source", "receiver"),
            np.array([[ray.attrs["traveltime"] for ray in per_source] for per_source in rays]),
            {"units": "s"},
        )
    return dataset
