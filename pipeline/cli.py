"""The ``raygrid`` command line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .errors import InputError
from .version import __version__

__all__ = ["main"]


@click.group()
@click.version_option(__version__, prog_name="raygrid")
def main() -> None:
    """raygrid: seismic traveltimes and raypaths by shortest-path ray tracing."""


@main.command()
@click.argument("workflow", type=click.Path(path_type=Path))
@click.option("--overwrite", is_flag=True, help="Replace an existing output store.")
def run(workflow: Path, overwrite: bool) -> None:
    """Run a WORKFLOW file: solve its sources, write the Zarr store and plot."""
    from .workflow import read_workflow, run_workflow

    try:
        spec = read_workflow(workflow)
        click.echo(f"raygrid {__version__}: running {workflow}")
        start = time.perf_counter()
        dataset = run_workflow(spec, overwrite=overwrite)
    except InputError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    elapsed = time.perf_counter() - start
    shape = " x ".join(str(n) for n in dataset["velocity"].shape)
    click.echo(
        f"solved {dataset.sizes['source']} source(s) on {shape} nodes in {elapsed:.2f} s "
        f"(radius {spec.grid.radius}, {dataset.attrs['star_offsets']} star offsets)"
    )
    click.echo(f"store: {spec.outputs.store}")
    if spec.outputs.plot is not None:
        click.echo(f"plot:  {spec.outputs.plot}")


@main.command()
@click.argument("workflow", type=click.Path(path_type=Path))
def validate(workflow: Path) -> None:
    """Check a WORKFLOW file without running it."""
    from .workflow import read_workflow

    try:
        read_workflow(workflow)
    except InputError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    click.echo(f"{workflow}: valid")
