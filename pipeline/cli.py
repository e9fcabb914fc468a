"""The ``raygrid`` command line: run, validate, submit, plot, info."""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import sys
import warnings
from collections.abc import Callable
from functools import wraps
from pathlib import Path

import click

from .errors import RESUME_ENV, InputError, InputWarning, RunFailed, full_disk, run_again
from .version import __version__

__all__ = ["main"]


def _said(message: str, err: bool = False) -> None:
    """``click.echo``, unless the terminal is gone: after a hangup (SIGHUP: the terminal or
    ssh session closed) writes fail with EIO, and a run stopped by it ended with that
    traceback and status 1 rather than as stopped (129)."""
    try:
        click.echo(message, err=err)
    except OSError as error:
        if error.errno not in (errno.EIO, errno.EPIPE):
            raise


def _input_errors(command: Callable) -> Callable:
    """Print an :class:`InputError`, a file that cannot be read or written (``OSError``: a
    read-only folder, a full disk) or memory that ran out, as ``error: ...`` and exit with
    status 2; a run that failed part-way for another reason (:class:`RunFailed`: a worker
    lost) as ``error: ...`` with status 1. A run cut short either way resumes like any other.

    Solves are checked against the memory they need before they start
    (:mod:`raygrid.pipeline.memory`); a ``MemoryError`` is what those checks do not count."""

    @wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (InputError, OSError) as error:
            if isinstance(error, BrokenPipeError) and _reader_gone(sys.stdout):
                # `raygrid ... | head` (not a socket to a worker): click ends quietly with
                # status 1, as it does for --help.
                raise
            _said(f"error: {error}{full_disk(error)}", err=True)
            sys.exit(2)
        except RunFailed as error:
            _said(f"error: {error}", err=True)
            sys.exit(1)
        except MemoryError as error:
            click.echo(
                f"error: out of memory ({error or 'no details'}): the model or the solve is too "
                "large for this machine; use a smaller model or a coarser spacing (a model "
                "stored as Zarr is read tile by tile with compute.tiles)",
                err=True,
            )
            sys.exit(2)

    return wrapper


def _reader_gone(stream) -> bool:
    """Whether ``stream`` is a pipe whose reading end was closed (poll reports an error on
    the writing end on Linux, a hang-up on BSD and macOS)."""
    try:
        poll = select.poll()
        poll.register(stream.fileno(), select.POLLOUT)
        gone = select.POLLERR | select.POLLHUP
        return any(events & gone for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no fileno (captured), no poll (Windows)
        return False


@click.group()
@click.version_option(__version__, prog_name="raygrid")
@click.option(
    "-v", "--verbose", is_flag=True,
    help="Say more on stderr: raygrid's log (a tiled solve's rounds, with their times).",
)  # fmt: skip
def main(verbose: bool) -> None:
    """raygrid: seismic traveltimes and raypaths by shortest-path ray tracing.

    A workflow file (YAML) names the model, sources, receivers, outputs and where to
    compute; `raygrid run` solves it into a Zarr store, resumably.

    \b
    Examples:
      raygrid run workflows/quickstart.yaml --overwrite   # the quickstart, on this machine
      raygrid validate workflows/survey-2d.yaml            # before a long run
      raygrid run workflows/survey-2d.yaml --cluster configs/local.yaml
      raygrid info survey-2d-output/survey.zarr            # how far a run got
      raygrid plot survey-2d-output/survey.zarr --source 0
      raygrid submit workflows/survey-3d.yaml --cluster configs/slurm-gpu.yaml
    The workflow keys are shown, commented, in workflows/*.yaml.
    """
    _plain_input_warnings()
    if verbose:
        # The README's "one log line per round (logger raygrid)" was to be seen from Python
        # alone: `raygrid -v run` was a usage error.
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s raygrid: %(message)s", "%H:%M:%S"))
        logger = logging.getLogger("raygrid")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _plain_input_warnings() -> None:
    """Print raygrid's :class:`InputWarning` as ``warning: ...`` (no file and line of
    raygrid's source); other warnings as Python prints them."""
    show = warnings.showwarning

    def shown(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, InputWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = shown


def _identity(store: str | Path) -> tuple[int, int] | None:
    """Which folder ``store`` names (device and inode), or None: ``--overwrite`` makes the new
    store beside the old one before it takes the name, so the two never share one."""
    try:
        status = Path(store).stat()
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _kept(store: str | Path, pictures: bool = True) -> str:
    """What an interrupted run left in its store, and what to do next (``pictures``: its
    workflow draws some)."""
    from .store import open_store
    from .storepaths import empty_folder

    # A submitted job's way to resume (RESUME_ENV) is a command of its own, without it.
    again = run_again() if os.environ.get(RESUME_ENV) else f"{run_again()} (without --overwrite)"
    path = Path(store)
    if not path.exists() or empty_folder(path):  # stopped before the store was made
        return f"no source had finished yet (nothing was written to {store}): {again} to start"
    try:
        state = open_store(store)
    except Exception:  # a store stopped while it was made: zarr raises several kinds
        return f"the sources finished so far are in {store}; {again} to resume"
    if state.complete and not pictures:  # stopped while the cluster closed
        return f"{store} is complete ({state.done.size} sources): nothing is left to do"
    if state.complete:  # stopped while the pictures were drawn
        return (
            f"{store} is complete ({state.done.size} sources); only its pictures may be "
            f"missing: {again} to draw them"
        )
    done = int(state.done.sum())
    if not done:  # "the 0 of 8 sources finished so far are in" read oddly
        return f"no source had finished yet ({store} holds none): {again} to resume"
    return (
        f"the {done} of {state.done.size} sources finished so far are in {store}; {again} to resume"
    )


@main.command()
@click.argument("workflow", type=click.Path(path_type=Path))
@click.option(
    "--cluster",
    type=click.Path(path_type=Path),
    default=None,
    help="Cluster file (configs/*.yaml); overrides the workflow's compute.cluster. "
    "Default: the workflow's compute.cluster, else a LocalCluster on this machine.",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace an existing output store instead of resuming it."
)
@click.option(
    "--progress/--no-progress", default=True, show_default=True,
    help="Show a progress bar (stderr).",
)  # fmt: skip
@_input_errors
def run(workflow: Path, cluster: Path | None, overwrite: bool, progress: bool) -> None:
    """Run a WORKFLOW file into its Zarr store (resuming it if it exists), then draw the
    picture its outputs.plot names, if any.

    Sources fan out over the Dask cluster in batches; each finished source is recorded in
    the store, so after a crash the same command carries on where it stopped.
    """
    spec = old = None
    try:
        from .interrupts import interrupts_kept
        from .workflow import read_workflow, run_workflow

        spec = read_workflow(workflow)
        old = _identity(spec.outputs.store) if overwrite else None
        click.echo(f"raygrid {__version__}: running {workflow}")
        with interrupts_kept():  # not one lost where Python drops exceptions
            run_workflow(spec, overwrite=overwrite, cluster=cluster, progress=progress, echo=_said)
    except KeyboardInterrupt:
        # Ctrl-C pressed again while stopping would break the cluster's close at exit (Dask's
        # atexit hook), printing a traceback: the store is safe, so the rest is not stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if hasattr(signal, "SIGHUP"):  # the shell's hangup, then the kernel's, as it exits
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # Not imported again: stopped during the imports above, Python dropped the half-made
        # module, and importing it here met Dask half-imported (AttributeError: module
        # 'dask' has no attribute 'utils'). Then it was Ctrl-C: SIGTERM stops a process
        # without an exception until interrupts_kept handles it.
        interrupts = sys.modules.get(f"{__package__}.interrupts")
        stopped_by = (
            interrupts.stopping_signal()
            if hasattr(interrupts, "stopping_signal")
            else int(signal.SIGINT)
        )
        store = spec.outputs.store if spec is not None else None
        if old is not None and _identity(store) == old:
            said = f"{store} was not replaced: the old store is as it was"
        elif store is not None and Path(store).exists():
            said = _kept(store, pictures=spec.outputs.plot is not None)
        else:
            said = "nothing was written"
        how = (
            "interrupted"
            if stopped_by == signal.SIGINT
            else f"terminated ({signal.Signals(stopped_by).name})"
        )
        if stopped_by == signal.SIGTERM and os.environ.get(RESUME_ENV):
            # A batch job's SIGTERM is most often its time limit.
            said += " (with a longer walltime in its cluster file, if it ran out)"
        _said(f"{how}: {said}", err=True)
        sys.exit(128 + stopped_by)  # the shell's status for a command ended by that signal


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--check-model/--no-check-model",
    default=True,
    help="Also check the model (without holding its values in memory) and every source and "
    "receiver against it (the default); --no-check-model checks the files' schema only.",
)
@_input_errors
def validate(files: tuple[Path, ...], check_model: bool) -> None:
    """Check workflow and cluster FILES without running anything.

    A file whose top level has a "cluster" key and none of a workflow's sections (model,
    sources, outputs, ...) is a cluster file; any other is a workflow.
    """
    from .clusterfile import JobQueueConfig, cluster_notes, read_cluster
    from .survey import store_spec
    from .surveymemory import check_job_memory
    from .workflow import check_model_fits, prepare_workflow, read_workflow, workflow_cluster
    from .yamlfile import is_cluster_file, load_yaml

    failed = False
    for path in files:
        try:
            top = load_yaml(path, "workflow or cluster").data
            if is_cluster_file(top):
                config = read_cluster(path)
                click.echo(f"{path}: valid cluster file ({config.cluster})")
                continue
            spec = read_workflow(path)
            config = workflow_cluster(spec)
            # Batch jobs' nodes (its compute.cluster's) have GPUs if their file asks for them.
            jobs = isinstance(config, JobQueueConfig)
            if check_model:
                # Checked for the machine the workflow is meant for, not this one: a GPU
                # workflow is validated on a login node before it is submitted, and that
                # node may not have the memory for the model (values=False).
                prepared = prepare_workflow(
                    spec, here=False, values=False, gpu=config.gpus_per_worker > 0 if jobs else None
                )
                if jobs:  # what `raygrid submit`/`run` would refuse before any job is queued
                    try:
                        check_job_memory(prepared, store_spec(prepared), config)
                    except InputError as error:  # named by its file, as the others are
                        raise InputError(f"{path}: {error}") from None
                click.echo(
                    f"{path}: valid workflow: {len(prepared.sources)} source(s), "
                    f"{len(prepared.receivers)} receiver(s), model "
                    + " x ".join(map(str, prepared.grid.shape))
                )
                if not jobs:  # meant for this machine, most often: said, not refused
                    sizes = dict(zip(prepared.grid.dims, prepared.grid.shape))
                    try:
                        check_model_fits(spec, sizes, prepared.options.backend == "cpu")
                    except InputError as error:
                        click.echo(f"{path}: note: a run on this machine would be refused: {error}")
                # What `raygrid submit`/`run` would warn of, said before either.
                if spec.compute.cluster is not None:
                    for note in cluster_notes(config, prepared.options.backend, spec.compute):
                        click.echo(f"{path}: note: {spec.compute.cluster}: {note}")
            else:
                click.echo(f"{path}: valid workflow (schema only)")
            if spec.compute.backend == "cuda" and not jobs and (reason := _no_gpu_here()):
                click.echo(f"{path}: note: backend cuda cannot run on this machine: {reason}")
        except InputError as error:
            click.echo(f"error: {error}", err=True)
            failed = True
    if failed:
        sys.exit(2)


def _no_gpu_here() -> str | None:
    """Why CUDA kernels cannot run on this machine, or ``None`` where they can."""
    from ..kernels.cuda import unusable_reason  # numba.cuda only when a workflow asks for it

    return unusable_reason()


@main.command()
@click.argument("workflow", type=click.Path(path_type=Path))
@click.option(
    "--cluster",
    type=click.Path(path_type=Path),
    default=None,
    help="A slurm or pbs cluster file (configs/slurm-gpu.yaml, configs/pbs-gpu.yaml). "
    "Default: the workflow's compute.cluster.",
)
@click.option("--dry-run", is_flag=True, help="Write the batch script, do not submit it.")
@click.option("--overwrite", is_flag=True, help="The job replaces an existing store.")
@_input_errors
def submit(workflow: Path, cluster: Path | None, dry_run: bool, overwrite: bool) -> None:
    """Write a batch script that runs WORKFLOW on an allocation, and submit it.

    The job starts a Dask scheduler, one worker per batch task (one GPU each on GPU nodes)
    and `raygrid run` on the allocation; the store is resumable like any run. Exit status
    3: submitted, but SLURM says the job may never start as asked (it stays queued: scancel
    it, or wait if nodes are down).
    """
    from .submit import submit_workflow

    job = submit_workflow(workflow, cluster, dry_run=dry_run, overwrite=overwrite)
    if job is None:
        click.echo(
            f"{workflow}: its store is complete already: no job submitted (--overwrite "
            "solves it again)"
        )
        return
    click.echo(f"batch script: {job.script}")
    if job.job_id is None:
        click.echo(f"dry run: submit it with `{job.submit_command}`")
    else:
        click.echo(f"submitted job {job.job_id} ({job.submit_command}); logs in {job.directory}")
        if job.stuck:  # (said as a warning above): a script sees it too
            sys.exit(3)


@main.command()
@click.argument("store", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FOLDER",
    help="Folder for the pictures (default: beside the store).",
)
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="SOURCE",
    help="Source to draw, by index or, where the store names its sources, by name: a name "
    "wins over the same digits as an index (repeatable). A named source's picture is "
    "<store name without .zarr>-source<index>-<name>.png.",
)
@click.option(
    "--map-z",
    type=float,
    default=None,
    help="3D stores: draw the map at this depth (the model's length unit; the node plane "
    "nearest it). Default: the receivers' depth where they share one, else the source's.",
)
@click.option(
    "--format",
    "kind",
    default="png",
    show_default=True,
    help="The pictures' format: png, pdf, svg, or any other matplotlib writes (the model is "
    "a raster image inside a pdf or svg; lines and text are vectors).",
)
@click.option(
    "--dpi",
    type=float,
    default=None,
    help="Dots per inch of the pictures (default 120; 300 for print).",
)
@_input_errors
def plot(
    store: Path,
    out: Path | None,
    sources: tuple[str, ...],
    map_z: float | None,
    kind: str,
    dpi: float | None,
) -> None:
    """Draw a survey STORE: for each chosen source (default: the first, middle and last
    done) its traveltime contours over the model with its rays and receivers, and, once
    every source is done, the receiver gathers. One file per picture, named after the
    store, e.g. survey-source0.png and survey-gathers.png.

    \b
    Examples:
      raygrid plot survey-2d-output/survey.zarr
      raygrid plot survey.zarr --source 12 --source S40 --format pdf --dpi 300 --out figures
      raygrid plot survey-3d.zarr --map-z 1500
    """
    from .inspect import plot_directory

    written = plot_directory(
        store, out, list(sources), echo=click.echo, map_z=map_z, kind=kind.lower().lstrip("."),
        dpi=dpi,
    )  # fmt: skip
    for path in written:
        click.echo(f"wrote {path}")


@main.command()
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--workflow", "show_workflow", is_flag=True, help="Print the stored workflow.")
@click.option(
    "--workflow-file",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="Write the stored workflow to FILE as YAML, a workflow `raygrid run` takes (it "
    "resumes or remakes this store).",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Read every chunk, to find those changed on disk since they were written (their "
    "checksums): as long as reading the whole store.",
)
@_input_errors
def info(store: Path, show_workflow: bool, workflow_file: Path | None, verify: bool) -> None:
    """Summarise a STORE: its status, sources done, model and sizes (--workflow prints the
    stored workflow). Exit status 1 for a damaged store (its status says how), 0 for a
    sound one, finished or not; 2 for what is not a store."""
    from .inspect import describe, write_workflow
    from .store import DamagedStore

    if workflow_file is not None:
        click.echo(f"wrote {write_workflow(store, workflow_file)}")
    try:
        said = describe(store, workflow=show_workflow, verify=verify)
    except DamagedStore as error:  # metadata that does not read: damaged as the others
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    click.echo(said)
    if "\nstatus: damaged" in said:  # scripts check a store's health by the exit status
        sys.exit(1)


if __name__ == "__main__":  # python -m raygrid.pipeline.cli (used by batch scripts)
    main()
