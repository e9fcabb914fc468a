"""``raygrid submit``: one batch job that runs a workflow on its own allocation.

The job script (SLURM or PBS) starts, on the allocation:

1. a Dask scheduler on the first node, writing a scheduler file into the job's folder;
2. ``workers`` Dask workers, one per batch task (SLURM: ``srun`` with ``--gpus-per-task``, so
   each worker sees only its GPUs; PBS: ``pbsdsh`` runs a node script on every node that
   starts ``workers_per_node`` workers with their own ``CUDA_VISIBLE_DEVICES``);
3. ``raygrid run WORKFLOW`` against that scheduler (a ``cluster: scheduler`` file written
   beside the script), which waits for every worker, fills the store and exits; the script
   then stops the workers and the scheduler.

The store is resumable like any run: resubmitting after a job hit its walltime carries on.
Everything goes into ``<log_directory>/<workflow>-<time>/``: the script, the node script
(PBS), the scheduler file and the logs.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from .batchjobs import (
    SUBMIT_COMMANDS,
    SUBMITTED,
    cannot_start,
    job_ended,
    refusal_hint,
    store_record,
)
from .cluster import SCHEDULER_ENDED_ENV, SCHEDULER_LOG_ENV, WORKERS_ENDED_ENV, WORKERS_LOG_ENV
from .clusterfile import JobQueueConfig, cluster_notes, memory_mb, worker_threads
from .credentials import CERT, KEY
from .errors import RESUME_ENV, InputError, warn_input
from .lock import store_lock
from .memory import footprint
from .store import check_store
from .storepaths import empty_folder, store_path, tidy_siblings
from .survey import OVERWRITTEN_ENV, store_spec
from .surveymemory import check_job_memory
from .workflow import PreparedWorkflow, prepare_workflow, read_workflow, workflow_cluster

__all__ = ["Job", "DRIVER_BYTES", "batch_script", "driver_bytes", "submit_workflow"]

#: What the job's Dask scheduler and its ``raygrid run`` hold on the first node besides the
#: model, asked of the batch system on top of the workers' memory: measured idle, the
#: client ~220 MiB (Python, Dask, Numba, xarray, Zarr, raygrid) and the scheduler ~60 MiB;
#: the rest is room for the survey's task graph, results in flight and the Numba compile.
DRIVER_BYTES = 2**30


@dataclass(frozen=True)
class Job:
    """A written (and possibly submitted) batch job."""

    script: Path
    directory: Path
    submit_command: str
    job_id: str | None
    stuck: str | None = None  # why SLURM may never start it (its pending reason), if so


def _python(config: JobQueueConfig) -> str:
    return _Expanded(config.python) if config.python else sys.executable


def driver_bytes(prepared: PreparedWorkflow) -> int:
    """Memory a job's first node needs besides its workers: the scheduler and the ``raygrid
    run`` client, which holds an untiled model whole.

    The workers cannot use more than their ``memory_per_worker`` (Dask's nanny stops one
    before), but the batch system counts every process of the job: asked for the workers'
    memory alone, a job whose client built a large model was killed on its first node.

    Parameters
    ----------
    prepared : PreparedWorkflow
        The workflow the job runs (its values need not be loaded: only the grid's shape,
        the star and the options are read).

    Returns
    -------
    int
        :data:`DRIVER_BYTES`, plus for an untiled survey the model on the client: velocity
        and slowness (float64), and the CPU graph the client builds and sends to the
        workers (:func:`raygrid.pipeline.memory.footprint`). A tiled survey's client holds
        only the tiles' bookkeeping.
    """
    if prepared.workflow.compute.tiles is not None:
        return DRIVER_BYTES
    grid, options = prepared.grid, prepared.options
    nodes = int(np.prod(grid.shape))
    # The CPU graph as check_survey_memory counts it (none on the GPU: built on the device).
    graph = footprint(
        grid.shape3, prepared.star, options.dtype, backend=options.backend,
        precompute=options.precompute,
    ).model  # fmt: skip
    return DRIVER_BYTES + nodes * (grid.velocity.dtype.itemsize + 8) + graph


def _worker_command(config: JobQueueConfig, scheduler_file: Path) -> list[str]:
    threads = worker_threads(config)
    command = [
        _python(config), "-m", "distributed.cli.dask_worker",
        "--scheduler-file", str(scheduler_file),
        "--nthreads", str(threads),
        "--memory-limit", f"{memory_mb(config.memory_per_worker)}MiB",
        "--no-dashboard",
    ]  # fmt: skip
    if config.interface:
        command += ["--interface", config.interface]
    if config.local_directory:
        command += ["--local-directory", _Expanded(config.local_directory)]
    return command


def _scheduler_command(config: JobQueueConfig, scheduler_file: Path) -> list[str]:
    command = [
        _python(config), "-m", "distributed.cli.dask_scheduler",
        "--scheduler-file", str(scheduler_file),
        "--port", "0",  # any free port: the scheduler file tells the workers which
    ]  # fmt: skip
    if config.dashboard_address:
        command += ["--dashboard-address", config.dashboard_address]
    else:
        command += ["--no-dashboard"]
    if config.interface:
        command += ["--interface", config.interface]
    return command


def _join(command: list[str]) -> str:
    return " ".join(map(_shell_word, command))


class _Expanded(str):
    """A cluster file's value the node's shell expands (``local_directory: $TMPDIR``,
    ``python: $HOME/env/bin/python``), as dask-jobqueue's scripts do; every other word of a
    command (the workflow's and the job's paths) is a literal."""


def _shell_word(word: str) -> str:
    """One word of a job script's command, single-quoted; a :class:`_Expanded` one with a
    ``$`` double-quoted so the shell expands it on the node (single quotes kept
    ``$TMPDIR`` a literal folder). A path holding ``$v2`` or ``$(id)`` was double-quoted
    too: expanded under ``set -u`` (the job died) or run."""
    if isinstance(word, _Expanded) and (word == "~" or word.startswith("~/")):
        # The node's home folder, as dask-jobqueue's scripts (unquoted) read it under run
        # --cluster; quoted, it was a folder named "~" in the job's working directory.
        word = _Expanded("$HOME" + word[1:])
    if isinstance(word, _Expanded) and "$" in word:
        if any(c in word for c in '"\\`'):
            raise InputError(
                f"{word!r}: a cluster file's value with a $ variable is expanded on the node "
                "inside double quotes, which it cannot hold with a quote, backslash or backtick"
            )
        return f'"{word}"'
    return shlex.quote(word)


def _directive_value(value: object) -> str:
    """A value for an ``#SBATCH`` line: double-quoted if it holds whitespace (sbatch reads
    quoted values whole; unquoted, a path with a space was cut at it)."""
    text = str(value)
    if not any(c.isspace() for c in text):
        return text
    if '"' in text:
        raise InputError(f"{text!r} holds both a space and a double quote: not usable in a job")
    return f'"{text}"'


def _pbs_word(value: object, what: str) -> str:
    """A value for a ``#PBS`` line, refused if it holds whitespace: qsub implementations
    differ on quotes in directives (POSIX says "as on the command line"; Torque splits at
    blanks) and none was at hand to check, so such a value is refused rather than cut."""
    text = str(value)
    if any(c.isspace() for c in text):
        raise InputError(f"{what} {text!r} holds whitespace, which a #PBS line cannot carry")
    return text


def _slurm_header(config: JobQueueConfig, directory: Path, driver: int) -> list[str]:
    lines = [
        f"--job-name={_directive_value(config.job_name)}",
        f"--nodes={config.nodes}",
        f"--ntasks={config.workers}",
        f"--ntasks-per-node={config.workers_per_node}",
        f"--cpus-per-task={config.cores_per_worker}",
        # Per node (SLURM has no per-node form): the first node's share and the driver.
        f"--mem={memory_mb(config.memory_per_worker, config.workers_per_node, driver)}M",
        f"--time={config.walltime}",
        f"--output={_directive_value(directory / 'job-%j.out')}",
        # A requeued job (preempted, a lost node) keeps its id: its second start wrote
        # over the first's log, the one that said why it stopped.
        "--open-mode=append",
    ]
    if config.gpus_per_worker:
        lines.append(f"--gpus-per-task={config.gpus_per_worker}")
    if config.queue:
        lines.append(f"--partition={config.queue}")
    if config.account:
        lines.append(f"--account={config.account}")
    lines += config.job_directives
    return [f"#SBATCH {line}" for line in lines]


def _pbs_header(config: JobQueueConfig, directory: Path, driver: int) -> list[str]:
    """PBS Pro / OpenPBS ``#PBS`` lines (``select`` chunks: Torque's ``nodes=`` is not
    written). One chunk a node (``place=scatter``, unless the cluster file places them
    itself) with one entry in the node file each (``mpiprocs=1``): ``pbsdsh`` then starts
    a node's workers once, not once per entry (4 copies of them on a 4-worker node)."""
    per_node = config.workers_per_node
    select = (
        f"select={config.nodes}:ncpus={config.cores_per_worker * per_node}"
        ":mpiprocs=1"
        f":mem={memory_mb(config.memory_per_worker, per_node, driver)}mb"
    )
    if config.gpus_per_worker:
        select += f":ngpus={config.gpus_per_worker * per_node}"
    folder = "the job folder (log_directory/<workflow name>-<time>; no spaces in either)"
    lines = [
        f"-N {_pbs_word(config.job_name, 'job_name')}",
        f"-l {select}",
        f"-l walltime={_pbs_word(config.walltime, 'walltime')}",
        "-j oe",
        f"-o {_pbs_word(directory / 'job.out', folder)}",
    ]
    places = [d for d in config.job_directives if re.match(r"-l\s*place=", d.strip())]
    if not places:
        lines.insert(2, "-l place=scatter")  # (scatter:excl and others: the file's own)
    elif config.nodes > 1 and not any(re.search(r"(?<!v)scatter", d) for d in places):
        warn_input(
            f"job_directives place the chunks ({places[0].strip()}) without scatter: PBS may "
            "put two of the job's chunks on one host, whose workers pbsdsh then starts twice "
            "(more workers than its GPUs); add scatter, e.g. -l place=scatter:excl"
        )
    if config.queue:
        lines.append(f"-q {_pbs_word(config.queue, 'queue')}")
    if config.account:
        lines.append(f"-A {_pbs_word(config.account, 'account')}")
    lines += config.job_directives
    return [f"#PBS {line}" for line in lines]


#: Dask's configuration, as environment variables, for TLS with a job's credentials
#: (:mod:`.credentials`): its scheduler, workers and run read them. (Given as `dask
#: scheduler`'s --tls-* options they conflict with --interface: "Can not specify both
#: interface and host".)
_TLS_ENV = {
    "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": None,
    "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": CERT,
    **{f"DASK_DISTRIBUTED__COMM__TLS__{role}__{part.upper()}": name
       for role in ("SCHEDULER", "WORKER", "CLIENT")
       for part, name in (("cert", CERT), ("key", KEY))},
}  # fmt: skip


#: What a job's interpreter imports first (its scheduler, its run, its credentials), by
#: what to call it when it cannot; and how long :func:`_interpreter_notes` waits for it.
_JOB_IMPORTS = {
    "raygrid.pipeline.cli": "raygrid (its command line, with click and the rest)",
    "distributed.cli.dask_scheduler": "distributed (the job's Dask scheduler and workers)",
    "cryptography": "cryptography (tls: true: the job's TLS credentials; or set tls: false)",
}
INTERPRETER_WAIT_S = 15.0


def _interpreter_notes(config: JobQueueConfig) -> list[str]:
    """What the cluster file's ``python`` cannot import of what the job runs first
    (:data:`_JOB_IMPORTS`), where that interpreter runs here too (a shared file system):
    found out on the nodes, it ended the job after its queue wait. An interpreter that does
    not run here (a node-only path), or a bare name (the prologue's PATH resolves it on the
    nodes), is left to the job; one that does not answer within
    :data:`INTERPRETER_WAIT_S` s is said to be unchecked (its processes stopped)."""
    import signal

    if not config.python or "/" not in config.python:
        return []  # this one, which has them all; or a name the prologue's PATH resolves
    python = shutil.which(os.path.expanduser(os.path.expandvars(config.python)))
    if python is None:
        return []
    needed = [name for name in _JOB_IMPORTS if config.tls or name != "cryptography"]
    code = "import importlib\n" + "".join(
        f"try: importlib.import_module({name!r})\nexcept Exception: print('missing', {name!r})\n"
        for name in needed
    )
    try:
        probe = subprocess.Popen(
            [python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True,  # a wrapper's children stopped with it
        )  # fmt: skip
    except OSError:
        return []
    try:
        out, _ = probe.communicate(timeout=INTERPRETER_WAIT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(probe.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # (a child of its own session)
            probe.communicate(timeout=5)
        imports = ", ".join(name.split(".")[0] for name in needed)
        return [
            f"python: {config.python} did not answer within {INTERPRETER_WAIT_S:g} s here: "
            f"not checked for what the job imports ({imports})"
        ]
    # (Only the probe's own lines: a wrapper may print more.)
    said = [line.partition(" ") for line in out.splitlines()]
    missing = [name for word, _, name in said if word == "missing" and name in needed]
    if probe.returncode != 0 or not missing:
        return []
    prologue = " (run without the cluster file's prologue)" if config.prologue else ""
    them = "them" if len(missing) > 1 else "it"
    return [
        f"python: {config.python} cannot import "
        f"{' nor '.join(_JOB_IMPORTS[name] for name in missing)} here{prologue}: the job "
        f"would stop as it starts; install {them} for that interpreter"
    ]


def _tls_env(config: JobQueueConfig) -> list[str]:
    """The script line exporting :data:`_TLS_ENV` for credentials in the folder ``$tls``;
    none with ``tls: false``."""
    if not config.tls:
        return []
    values = [
        f"{name}={'True' if file is None else f'$tls/{file}'}" for name, file in _TLS_ENV.items()
    ]
    return ["export " + " \\\n  ".join(values)]


#: A start's folder of TLS credentials, in its job folder (readable by its user only): one
#: a start (host and shell), so that a late end of an earlier start of a requeued job
#: removes only its own.
TLS_FOLDER = '"tls-$(hostname)-$$"'


def _prologue(config: JobQueueConfig) -> list[str]:
    """The cluster file's prologue lines, run without ``set -u``: environment scripts
    (conda's ``activate``, some sites' ``module`` functions) read unset variables, and
    under ``-u`` the job ended at its first line with "unbound variable"."""
    if not config.prologue:
        return []
    return ["set +u", *config.prologue, "set -u"]


def _node_script(config: JobQueueConfig, directory: Path, workdir: Path) -> str:
    """PBS: the script ``pbsdsh`` runs once on every node: its share of the workers.

    With GPUs, worker ``k`` gets the ``k``-th share of the node's GPUs: those PBS gave
    the job (its ``CUDA_VISIBLE_DEVICES``, where its cgroup hook sets one, often as
    UUIDs), else the node's first ones, numbered from 0.
    """
    worker = _join(_worker_command(config, directory / "scheduler.json"))
    gpus = config.gpus_per_worker
    per_node = config.workers_per_node
    lines = ["#!/usr/bin/env bash", "# raygrid: the Dask workers of one node", "set -eu"]
    lines += _prologue(config)
    if config.tls:  # pbsdsh passes on no environment: the job's folder comes as $1
        lines += ['tls="${1:?the TLS folder of the job, as job.sh passes it}"', *_tls_env(config)]
    lines += [f"cd {shlex.quote(str(workdir))}"]
    if gpus:
        lines += [
            f'IFS=, read -r -a visible <<< "${{CUDA_VISIBLE_DEVICES:-$(seq -s, 0 '
            f'{gpus * per_node - 1})}}"',
            f'if [ "${{#visible[@]}}" -lt {gpus * per_node} ]; then',
            f'  echo "raygrid: {per_node} worker(s) of {gpus} GPU(s) each, but this node '
            f'shows ${{#visible[@]}} (CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-}})" >&2',
            "  exit 1",
            "fi",
        ]
    lines += [f"for k in $(seq 0 {per_node - 1}); do"]
    log = f"{shlex.quote(str(directory))}/worker-$(hostname)-$k.log"
    if gpus:
        lines += [
            f'  share=("${{visible[@]:$((k * {gpus})):{gpus}}}")',
            '  CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${share[*]}") \\',
            f"    {worker} >> {log} 2>&1 &",
        ]
    else:
        lines += [f"  {worker} >> {log} 2>&1 &"]
    lines += ["done", "wait", ""]
    return "\n".join(lines)


#: Seconds a job's workers have to close themselves once the run has ended and its
#: scheduler has closed (their launcher stops those still running then).
WORKERS_CLOSE_S = 20


def _watched(launch: list[str], ended: Path, log: Path) -> list[str]:
    """Script lines that run ``launch`` (lines ending in ``&``: a scheduler, the workers'
    launcher) in the background, appending to ``log``, and write its exit status into
    ``ended`` when it ends. ``$!`` after them is the block's: stopped (TERM), the block
    stops what it runs and waits for it."""
    quoted = shlex.quote(str(ended))
    return [
        f"rm -f {quoted}",
        "{",
        *launch,
        "  child=$!",
        "  trap 'kill \"$child\" 2>/dev/null || true' TERM",
        '  status=0; wait "$child" || status=$?',
        '  wait "$child" 2>/dev/null || true  # after a TERM: until it has stopped',
        f'  echo "$status" > {quoted}',
        f"}} >> {shlex.quote(str(log))} 2>&1 &",
    ]


def batch_script(
    workflow: Path,
    config: JobQueueConfig,
    directory: Path,
    *,
    workdir: Path,
    overwrite: bool,
    driver: int = DRIVER_BYTES,
    resume: str | None = None,
) -> str:
    """The batch script running ``workflow`` on an allocation described by ``config``.

    ``directory`` holds the job's files; ``workdir`` is where ``raygrid run`` runs (the
    workflow's relative paths are relative to it); ``driver`` is the memory the scheduler
    and the client need on the first node besides the workers (:func:`driver_bytes`),
    asked of every node since the batch systems' memory requests are per node;
    ``resume``, what resumes the run once the job has stopped (said by the run's messages,
    :data:`~.errors.RESUME_ENV`).

    With ``overwrite`` the store is replaced once: a job the batch system starts again
    (requeued after a preemption or a lost node, same job, same script) resumes the store
    an earlier start made (:data:`~.survey.OVERWRITTEN_ENV`). Every start ran
    ``--overwrite``, and a requeued job deleted the sources it had finished.
    """
    scheduler_file = directory / "scheduler.json"
    header = (_slurm_header if config.cluster == "slurm" else _pbs_header)(
        config, directory, driver
    )
    run = [
        _python(config), "-m", "raygrid.pipeline.cli", "run", str(workflow),
        # Progress as lines, sparser as the job goes on (Progress): its log says how far it
        # got, not only that it started.
        "--cluster", str(directory / "scheduler.yaml"),
    ]  # fmt: skip
    quoted_dir = shlex.quote(str(directory))
    replaced = shlex.quote(str(directory / "store-replaced"))
    lines = ["#!/usr/bin/env bash", *header, ""]
    lines += [
        f"# Written by raygrid submit: runs {workflow} on this job's allocation.",
        "# A Dask scheduler here, one worker per batch task, then `raygrid run`.",
        "set -euo pipefail",
        *(
            [
                "# PBS copies its -o file back only when the job ends: what the run says goes",
                "# to job.log as it comes.",
                f"exec >> {quoted_dir}/job.log 2>&1",
            ]
            if config.cluster == "pbs"
            else []
        ),
        *_prologue(config),
        *(
            [
                "# TLS: credentials of this start's own, readable by you alone: only their",
                "# holders reach its scheduler and workers. Removed when the job ends (the",
                "# trap below, once set, removes them too); one killed outright leaves",
                "# them, useless once its scheduler has stopped.",
                f"tls={quoted_dir}/{TLS_FOLDER}",
                """trap 'rm -rf "$tls"' EXIT""",
                _join([_python(config), "-m", "raygrid.pipeline.credentials"]) + ' "$tls"',
                *_tls_env(config),
            ]
            if config.tls
            else []
        ),
        f"cd {shlex.quote(str(workdir))}",
        *([f"export {RESUME_ENV}={shlex.quote(resume)}"] if resume else []),
        f"rm -f {shlex.quote(str(scheduler_file))}",
        "# The scheduler and the workers' launcher each write their exit status when they",
        "# end: the run then says so at once, with their log, not after its whole wait.",
        *_watched([f"  {_join(_scheduler_command(config, scheduler_file))} &"],
                  directory / "scheduler.ended", directory / "scheduler.log"),
        "scheduler=$!",
    ]  # fmt: skip
    # Logs are appended to: a job started again (requeued) keeps what its last start said.
    if config.cluster == "slurm":
        worker = _join(_worker_command(config, scheduler_file))
        # Each task's CPUs (and GPUs) said again: srun of SLURM 22.05 to 23.02 does not
        # inherit sbatch's --cpus-per-task, and would bind each worker to one CPU.
        per_task = f"--cpus-per-task={config.cores_per_worker}"
        if config.gpus_per_worker:
            per_task += f" --gpus-per-task={config.gpus_per_worker}"
        launch = [
            f'  srun --kill-on-bad-exit=0 --ntasks="$SLURM_NTASKS" {per_task} \\',
            f"    {worker} &",
        ]
    else:
        # PBS Pro's pbsdsh runs it once per node-file entry: one a node (mpiprocs=1).
        # (Torque's -u is not PBS Pro's: there pbsdsh printed its usage and no worker came.)
        tls = ' "$tls"' if config.tls else ""
        launch = [f"  pbsdsh -- bash {quoted_dir}/node.sh{tls} &"]
    lines += [
        *_watched(launch, directory / "workers.ended", directory / "workers.log"),
        "workers=$!",
        f"export {WORKERS_ENDED_ENV}={shlex.quote(str(directory / 'workers.ended'))} "
        f"{WORKERS_LOG_ENV}={quoted_dir}/workers.log",
        f"export {SCHEDULER_ENDED_ENV}={shlex.quote(str(directory / 'scheduler.ended'))} "
        f"{SCHEDULER_LOG_ENV}={quoted_dir}/scheduler.log",
        "# The workers and the scheduler end with the run, whatever its outcome (said in",
        "# the workers' log). The scheduler first: closing, it closes its workers, which then",
        "# exit of themselves and remove their scratch folders; those still running after",
        f"# {WORKERS_CLOSE_S} s are stopped. (Stopped together, the workers' launcher killed",
        "# them while they closed: tracebacks of a lost connection and scratch left behind.)",
        "trap "
        + shlex.quote(
            f'echo "raygrid: the run has ended: closing its scheduler and workers" >> '
            f'{quoted_dir}/workers.log; kill "$scheduler" 2>/dev/null || true; '
            f"for _ in $(seq {WORKERS_CLOSE_S * 10}); do "
            'kill -0 "$workers" 2>/dev/null || break; sleep 0.1; done; '
            'kill "$workers" "$scheduler" 2>/dev/null || true; wait'
            + ('; rm -rf "$tls"' if config.tls else "")
        )
        + " EXIT",
    ]
    if overwrite:
        lines += [
            "# --overwrite until a start has replaced the store (the run touches the file",
            "# then): started again (requeued), the job resumes the store instead of",
            "# deleting what it finished.",
            f"export {OVERWRITTEN_ENV}={replaced}",
            f"overwrite=--overwrite; [ ! -e {replaced} ] || overwrite=",
            f"{_join(run)} $overwrite",
        ]
    else:
        lines += [_join(run)]
    lines += [""]
    return "\n".join(lines)


def submit_workflow(
    workflow: str | Path,
    cluster: str | Path | None = None,
    *,
    dry_run: bool = False,
    overwrite: bool = False,
    workdir: str | Path | None = None,
) -> Job | None:
    """Write the job's files and, unless ``dry_run``, submit it (``sbatch`` or ``qsub``);
    ``None``, with nothing written or submitted, when the store is complete already.
    ``cluster``: the cluster file, by default the workflow's ``compute.cluster`` (a
    workflow written for a batch cluster names it there).

    Everything the job's ``raygrid run`` would refuse is refused here, before a job waits
    in the queue for it: the workflow checked against its model as ``raygrid validate``
    does (for the job's machine: a CUDA workflow passes on a login node without a GPU),
    and the store at ``outputs.store`` (in ``workdir``) as a run checks it.

    Raises
    ------
    InputError
        For a bad workflow or cluster file, a cluster file that is not ``slurm``/``pbs``, a
        bad model, source or receiver, a store that holds another workflow (without
        ``overwrite``), a missing ``sbatch``/``qsub``, or a refused submission.
    """
    workflow = Path(workflow)
    spec = read_workflow(workflow)
    if cluster is None and spec.compute.cluster is None:
        raise InputError(
            f"{workflow}: raygrid submit needs a slurm or pbs cluster file: give --cluster, "
            "or name it in the workflow's compute.cluster"
        )
    config = workflow_cluster(spec, cluster)
    cluster = Path(cluster if cluster is not None else spec.compute.cluster)
    if not isinstance(config, JobQueueConfig):
        raise InputError(
            f"{cluster}: raygrid submit needs a slurm or pbs cluster file, got "
            f"cluster: {config.cluster} (use raygrid run for that)"
        )
    if config.cluster == "slurm" and "job_name" not in config.model_fields_set:
        # Named after the workflow in squeue, not every survey's "raygrid".
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", workflow.stem).strip("_") or "job"
        config = config.model_copy(update={"job_name": f"raygrid-{name}"})
    workdir = Path(workdir or Path.cwd()).resolve()
    # A job whose store a running job (or any run) is writing would be refused as it starts,
    # after its queue wait: said now. (A job still queued holds no lock yet.)
    refuse_if_queued(config, workdir, workdir / spec.outputs.store, dry_run=dry_run)
    with store_lock(workdir / spec.outputs.store):
        # An old store a killed run moved aside.
        tidy_siblings(store_path(workdir / spec.outputs.store))
    # The model's values are read (and hashed) only to check an existing store against
    # them: a new store needs none, and a login node need not hold the model.
    store_at = workdir / spec.outputs.store
    resumed = store_at.exists() and not empty_folder(store_at) and not overwrite
    # backend: auto resolved as on the job's nodes (GPUs if the cluster file asks for them),
    # as the job fingerprints it: a store a GPU job made was refused as another workflow's.
    gpu = config.gpus_per_worker > 0
    prepared = prepare_workflow(spec, here=False, values=resumed, gpu=gpu)
    for note in [*cluster_notes(config, prepared.options.backend, spec.compute),
                 *_interpreter_notes(config)]:  # fmt: skip
        warn_input(f"{cluster}: {note}")  # before the queue wait, not found out on the nodes
    store = store_spec(prepared)
    state = check_store(
        replace(store, path=workdir / store.path), prepared.fingerprint, overwrite=overwrite,
        workflow=prepared.workflow_json, parts=prepared.fingerprint_parts,
    )  # fmt: skip
    if state is not None and state.complete and not state.lost:
        # Its job would only say so, after waiting in the queue for its allocation (two
        # nodes and eight GPUs, for slurm-gpu.yaml).
        return None
    # The job's workers, as they will start: a survey that cannot fit in them is refused
    # here, not once the job has waited in the queue for its allocation.
    check_job_memory(prepared, store, config)
    tool = SUBMIT_COMMANDS[config.cluster]
    if not dry_run and shutil.which(tool) is None:
        raise InputError(f"{tool} not found: is this a {config.cluster.upper()} login node?")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    directory = (workdir / config.log_directory / f"{workflow.stem}-{stamp}").resolve()
    # The scripts first: their refusals (a path a #SBATCH or #PBS line cannot carry) come
    # before any file is written (a refused submit left the job folder behind).
    text = batch_script(
        workflow.resolve(), config, directory, workdir=workdir, overwrite=overwrite,
        driver=driver_bytes(prepared),
        # (A job stopped by `scontrol requeue` or a preemption is started again by the
        # batch system itself and resumes: its log should not send its user to submit.)
        resume=f"submit the job again unless the batch system requeues it (raygrid submit "
        f"{shlex.quote(str(workflow.resolve()))} --cluster "
        f"{shlex.quote(str(Path(cluster).resolve()))}, in {workdir})",
    )  # fmt: skip
    node_text = _node_script(config, directory, workdir) if config.cluster == "pbs" else None
    directory.mkdir(parents=True)
    (directory / "scheduler.yaml").write_text(
        "# Written by raygrid submit: the job's own scheduler.\n"
        + yaml.safe_dump(
            {
                "cluster": "scheduler",
                "scheduler_file": str(directory / "scheduler.json"),
                "wait_for_workers": config.workers,
                # (Its TLS credentials, new at each start, come through the job's
                # Dask configuration variables.)
                "timeout": config.wait_timeout,
            },
            sort_keys=False,
        )
    )
    if node_text is not None:
        node = directory / "node.sh"
        node.write_text(node_text)
        node.chmod(0o755)
    script = directory / "job.sh"
    script.write_text(text)
    script.chmod(0o755)
    command = [tool, "--parsable", str(script)] if tool == "sbatch" else [tool, str(script)]
    shown = " ".join(shlex.quote(word) for word in command)
    if dry_run:
        return Job(script, directory, shown, None)
    done = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    if done.returncode != 0:
        said = done.stderr.strip()
        hint = refusal_hint(said, gpus=config.gpus_per_worker > 0)
        raise InputError(
            f"{shown} failed ({done.returncode}): {said} ({hint}; the job's files are in "
            f"{directory})"
        )
    job_id = done.stdout.strip().split(";")[0].strip()
    # What a later submit of the same store checks (refuse_if_queued): in the job's folder,
    # and beside the store, where a submit with another log_directory (or from another
    # folder) finds it too.
    record = json.dumps(
        {"job_id": job_id, "store": str((workdir / spec.outputs.store).resolve()),
         "directory": str(directory)}
    )  # fmt: skip
    (directory / SUBMITTED).write_text(record)
    beside = store_record(workdir / spec.outputs.store)
    beside.parent.mkdir(parents=True, exist_ok=True)
    beside.write_text(record)
    stuck = _warn_if_stuck(config, job_id) if tool == "sbatch" and job_id else None
    return Job(script, directory, shown, job_id, stuck)


def refuse_if_queued(
    config: JobQueueConfig,
    workdir: Path,
    store: Path,
    *,
    dry_run: bool = False,
    again: str = "submit again",
) -> None:
    """Refuse a second job for ``store`` while an earlier one (recorded in the cluster
    file's ``log_directory``, or beside the store) is still queued or running: a job still
    queued holds no lock yet, and the second took a whole allocation to find the store
    taken or finished. ``dry_run`` (which submits nothing): said as a warning instead.
    ``again``: what to do once it has finished, if it did not (``raygrid run`` says "run
    again").

    A submit with another ``log_directory`` (or from another folder, the store's path
    absolute) found no earlier job: both ran, the second failing on the store's lock.
    """
    from .batchjobs import job_record, job_states

    store = store.resolve()
    earlier = {}
    records = [*(workdir / config.log_directory).glob(f"*/{SUBMITTED}"), store_record(store)]
    for record in records:
        found = job_record(record, store)
        if found is not None:
            earlier[found[0]] = found[1]
    if not earlier:
        return
    try:
        states = job_states(config, sorted(earlier))
    except (OSError, subprocess.TimeoutExpired):
        return  # cannot tell: the job's own run refuses a store in use
    for job, state in sorted(states.items()):
        name = state.split(" ")[0]
        if not job_ended(state):  # held after a requeue (REQUEUE_HOLD) too: it runs later
            cancel = "scancel" if config.cluster == "slurm" else "qdel"
            shown = name.lower() if len(name) > 1 else f"in state {name}"  # PBS: one letter
            said = (
                f"job {job} ({earlier[job]}) is {shown} for the same store, {store}: wait "
                f"for it to finish (then {again}, if it did not), or cancel it first "
                f"({cancel} {job})"
            )
            if dry_run:
                warn_input(said)
                return
            raise InputError(said)


def _warn_if_stuck(config: JobQueueConfig, job_id: str, wait: float = 3.0) -> str | None:
    """Warn if SLURM holds the job just submitted for a reason that will not pass (more
    nodes or CPUs than its partition has: :func:`~raygrid.pipeline.batchjobs.cannot_start`),
    asked for ``wait`` seconds at most: the controller gives a pending job its reason at its
    next scheduling pass. Such a job sat in the queue without a word until cancelled.
    Returns the warning, if any (``raygrid submit`` then exits 3: the job is queued, and
    left there, since nodes that are down come back)."""
    import time

    from .batchjobs import job_states

    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = job_states(config, [job_id]).get(job_id, "")
        except (OSError, subprocess.TimeoutExpired):
            return None
        said = cannot_start(job_id, state)
        if said:
            warn_input(said)
            return said
        if not state.startswith("PENDING"):  # running, or gone: nothing to say
            return None
        if state.split(" ")[-1] not in ("None", ""):  # a reason that passes (Priority)
            return None
        time.sleep(0.5)
    return None
