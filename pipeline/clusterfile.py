"""Cluster files: where a workflow runs, read and validated (:mod:`raygrid.pipeline.cluster`
starts or joins the cluster each describes).

A cluster file is a YAML mapping whose ``cluster`` key picks the kind (``configs/`` holds one
of each):

- ``local``: :class:`distributed.LocalCluster` on this machine (the default);
- ``local-cuda``: :class:`dask_cuda.LocalCUDACluster`, one worker per GPU (imported only
  when used; without a GPU it fails with a clear message);
- ``slurm`` / ``pbs``: ``raygrid submit`` writes one batch job that runs everything on its
  allocation, one GPU per worker (:mod:`raygrid.pipeline.submit`); ``raygrid run`` instead
  has dask-jobqueue submit worker jobs from where raygrid runs (a login node), which it
  refuses for GPU workers sharing a job (``workers_per_node > 1``, as in the shipped
  ``slurm-gpu.yaml`` and ``pbs-gpu.yaml``): those files are for ``raygrid submit``;
- ``scheduler``: an existing scheduler, by address or scheduler file.

Unknown keys are errors, reported with the file, key path and line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .errors import InputError
from .yamlfile import (
    WORKFLOW_SECTIONS,
    FilePath,
    PositiveInt,
    Strict,
    is_workflow_file,
    load_yaml,
    schema_error,
    validate_yaml,
)

__all__ = [
    "ClusterConfig", "LocalConfig", "LocalCUDAConfig", "JobQueueConfig", "SchedulerConfig",
    "AnyConfig", "DEFAULT", "read_cluster", "own_directive", "OWN_DIRECTIVES",
    "gpus_unmatched", "worker_threads", "job_worker", "threads_crowded", "cluster_notes",
    "workers_back_s", "memory_mb", "memory_bytes", "machine_oversold", "local_workers",
    "TLSFiles", "TLS_DEFAULT",
]  # fmt: skip


def _text(what: str, example: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"{value!r} has no units: give {what} as text, such as {example}")
        return value

    return check


def _size(value: str) -> str:
    # Checked when the file is read (raygrid validate), not when a worker starts.
    from dask.utils import parse_bytes

    try:
        if parse_bytes(value) <= 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"{value!r} is not a size such as 16GB or 512MiB") from None
    return value


def _worker_memory(value: str) -> str:
    """A worker's memory (``memory_limit``, ``memory_per_worker``): a size that holds what
    a worker process needs before any data and some room for its first task, under Dask's
    ``pause`` fraction. Less, and the nannies killed the workers as they started ("Stream
    is closed", restart loops); a 300 MB worker, which passed a check against the
    ``terminate`` fraction, was paused and restarted over and over on a tiny model."""
    from dask.utils import format_bytes, parse_bytes

    from .memory import WORKER_BYTES, worker_fractions

    _size(value)  # a size at all, said as for any size
    pause, terminate = worker_fractions()
    if parse_bytes(value) * pause < WORKER_BYTES + _FIRST_TASK_BYTES:
        raise ValueError(
            f"{value!r} is less than a worker needs before any data: about "
            f"{format_bytes(WORKER_BYTES)} (Python, Dask, raygrid, Numba and the solver's "
            f"code) and {format_bytes(_FIRST_TASK_BYTES)} of room for its first task, and "
            f"Dask pauses a worker at {pause:.0%} of its limit (and stops it at "
            f"{terminate:.0%}); give at least 1GB"
        )
    return value


#: Room a worker needs beyond its code for its first task's data and compile, in the
#: smallest memory a cluster file may give it (:func:`_worker_memory`).
_FIRST_TASK_BYTES = 2**27


def _memory_limit(value: str) -> str:
    return value if value == "auto" else _worker_memory(value)


def _port(port: int, address: str) -> None:
    if port > 65535:  # Dask would pick another port, unsaid
        raise ValueError(f"{address!r}: port {port} is above 65535")


def _address(value: str) -> str:
    if not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[\w.\-]*):\d{1,5}", value):
        raise ValueError(f"{value!r} is not an address such as :8787, :0 or 127.0.0.1:8787")
    _port(int(value.rsplit(":", 1)[1]), value)
    return value


def _walltime(value: str) -> str:
    # Both batch systems read [days-]hours:minutes:seconds (SLURM also fewer fields).
    if not re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}", value):
        raise ValueError(f"{value!r} is not a walltime such as 01:30:00 or 2-00:00:00")
    if not any(c not in "0-:" for c in value):
        # SLURM reads a zero time limit as none at all (the partition's longest).
        raise ValueError(f"{value!r} is no time at all: give the job's walltime, e.g. 01:00:00")
    return value


#: A size such as "16GB" (dask's units).
Size = Annotated[str, BeforeValidator(_text("a size", "16GB")), AfterValidator(_size)]
#: A worker's memory: a size a worker can start in (:func:`_worker_memory`).
WorkerMemory = Annotated[
    str, BeforeValidator(_text("a size", "16GB")), AfterValidator(_worker_memory)
]
#: ``[host]:port`` of a dashboard; ``:0`` picks a free port.
Address = Annotated[str, AfterValidator(_address)]


#: A cluster raygrid starts speaks TLS with credentials of its own (``tls: true``, the
#: default; :mod:`raygrid.pipeline.credentials`): without them, anyone who can reach its
#: scheduler's port (another user of this machine or of the batch cluster's network) can
#: run code as you. ``false``: plain TCP, as Dask's default (transfers about twice as fast).
TLS_DEFAULT = True


class _OnThisMachine(Strict):
    """What the clusters raygrid starts on this machine share."""

    threads_per_worker: PositiveInt = 1
    host: str | None = "127.0.0.1"
    dashboard_address: Address | None = ":8787"  # ":0" picks a free port; null: no dashboard
    tls: bool = TLS_DEFAULT  # credentials of its own: only you reach its scheduler


class LocalConfig(_OnThisMachine):
    """``distributed.LocalCluster``: worker processes on this machine."""

    cluster: Literal["local"]
    n_workers: PositiveInt | None = None  # default: one per core
    processes: bool = True
    memory_limit: (
        Annotated[
            str, BeforeValidator(_text("a size", '"4GB" or "auto"')), AfterValidator(_memory_limit)
        ]
        | None
    ) = "auto"  # per worker


class LocalCUDAConfig(_OnThisMachine):
    """``dask_cuda.LocalCUDACluster``: one worker process per GPU of this machine."""

    cluster: Literal["local-cuda"]
    # default: every GPU; one GPU's number (CUDA_VISIBLE_DEVICES: 0), a list or "0,2"
    CUDA_VISIBLE_DEVICES: str | Annotated[int, Field(ge=0)] | list[int] | None = None
    rmm_pool_size: Size | None = None  # e.g. "24GB": an RMM memory pool per GPU


def _own(keys: dict[tuple[str, ...], str]) -> dict[str, str]:
    return {option: key for options, key in keys.items() for option in options}


#: Job directives raygrid writes itself (its job script's header, and dask-jobqueue's for
#: worker jobs), by batch system, with the cluster file's keys they come from. PBS ``-l``
#: resources are keyed ``-l <resource>``.
OWN_DIRECTIVES = {
    "slurm": _own({
        ("--output", "-o", "--error", "-e"): "log_directory (the job's logs)",
        ("--open-mode",): "nothing: raygrid appends (a requeued job keeps its first log)",
        ("--job-name", "-J"): "job_name",
        ("--partition", "-p"): "queue",
        ("--account", "-A"): "account",
        ("--time", "-t"): "walltime",
        ("--mem",): "memory_per_worker",
        ("--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node"): "workers and workers_per_node",
        ("--cpus-per-task", "-c"): "cores_per_worker",
        ("--gpus-per-task",): "gpus_per_worker",
    }),
    "pbs": _own({
        ("-o", "-e", "-j"): "log_directory (the job's logs)",
        ("-N",): "job_name",
        ("-q",): "queue",
        ("-A",): "account",
        ("-l walltime",): "walltime",
        ("-l select", "-l nodes", "-l ncpus", "-l mem", "-l ngpus"):
            "workers, workers_per_node, cores_per_worker, memory_per_worker, gpus_per_worker",
    }),
}  # fmt: skip


#: sbatch's own options that begin as one of raygrid's does: whole options, not
#: abbreviations (--gpus is not --gpus-per-task).
WHOLE_OPTIONS = {"--gpus", "--mem-bind", "--time-min", "--nodelist", "--nodefile"}


def own_directive(directive: str, cluster: str | None) -> str | None:
    """The option of ``directive`` that raygrid writes itself for ``cluster``, as
    :data:`OWN_DIRECTIVES` names it, or ``None``: written ``--output=x`` or ``--output x``,
    a short option with its value attached (``-t48:00:00``, ``-Jname``), a long one
    abbreviated as sbatch takes it (``--out``), a PBS resource in ``-l a=1,b=2``."""
    own = OWN_DIRECTIVES.get(cluster or "", {})
    text = directive.strip()
    separator = "=" if re.match(r"--[^\s=]+=", text) else " "
    option, _, value = text.partition(separator)
    value = value.strip()
    if cluster == "pbs" and option.startswith("-l"):
        value = text[2:].strip()  # -l walltime=1:00:00, or attached: -lwalltime=1:00:00
        for resource in re.split(r"[,:]", value):
            name = f"-l {resource.split('=')[0].strip()}"
            if name in own:
                return name
        return None
    if option in own:
        return option
    if option.startswith("--") and len(option) > 3 and option not in WHOLE_OPTIONS:
        # An abbreviation, as getopt_long takes one (--out for --output).
        return next((o for o in own if o.startswith(option) and o.startswith("--")), None)
    if re.fullmatch(r"-[A-Za-z].+", option):  # a short option with its value attached
        return option[:2] if option[:2] in own else None
    return None


class JobQueueConfig(Strict):
    """A batch system (SLURM or PBS): Dask workers run as, or inside, batch jobs.

    The same file serves two ways of running:

    - ``raygrid submit WORKFLOW --cluster FILE``: one batch job of
      ``workers / workers_per_node`` nodes runs the scheduler, the workers (one batch task
      each, ``gpus_per_worker`` GPUs each) and ``raygrid run`` itself.
    - ``raygrid run WORKFLOW --cluster FILE`` (from a login node): dask-jobqueue submits
      ``workers / workers_per_node`` jobs, each running ``workers_per_node`` workers; the
      scheduler and the client stay where raygrid runs. Refused for GPU workers with
      ``workers_per_node > 1``: dask-jobqueue cannot give each worker of a job its own GPU.
    """

    cluster: Literal["slurm", "pbs"]
    workers: PositiveInt = 1  # Dask workers in all (one per GPU on GPU nodes)
    workers_per_node: PositiveInt = 1
    cores_per_worker: PositiveInt = 1
    memory_per_worker: WorkerMemory = "4GB"
    gpus_per_worker: Annotated[int, Field(ge=0)] = 0
    queue: str | None = None  # SLURM partition / PBS queue
    account: str | None = None
    # (YAML reads an unquoted 1:30:00 as a number of seconds, 5400; 01:30:00, with its
    # leading zero, as text: quoted, either is text.)
    walltime: Annotated[
        str,
        BeforeValidator(_text("the walltime", '"01:00:00" (quoted)')),
        AfterValidator(_walltime),
    ] = "01:00:00"
    job_name: str = "raygrid"
    job_directives: list[str] = []  # extra lines for the job header, without the prefix
    prologue: list[str] = []  # shell lines run first in every job (modules, venv)
    interface: str | None = None  # network interface for the scheduler/workers (e.g. ib0)
    python: str | None = None  # interpreter on the nodes; default: the one running raygrid
    log_directory: FilePath = Path("raygrid-jobs")  # job scripts, logs, scheduler files
    local_directory: str | None = None  # worker scratch (e.g. $TMPDIR)
    dashboard_address: Address | None = ":8787"
    tls: bool = TLS_DEFAULT  # credentials of the job's own: only you reach its scheduler
    # s to wait for workers: the first (run --cluster), all of a submitted job's; after every
    # worker died, for one to join again (workers_back_s)
    wait_timeout: Annotated[float, Field(gt=0)] = 600.0

    @model_validator(mode="after")
    def _whole_nodes(self) -> JobQueueConfig:
        if self.workers % self.workers_per_node:
            raise ValueError(
                f"workers ({self.workers}) must be a multiple of workers_per_node "
                f"({self.workers_per_node})"
            )
        return self

    @field_validator(
        "queue", "account", "walltime", "job_name", "job_directives", "interface", "python",
        "log_directory", "local_directory",
    )  # fmt: skip
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        # Written into the job's header and commands: a newline in a job_name ended its
        # #SBATCH line there (sbatch then ignored every directive after it, --time and
        # --mem among them) and ran the rest as shell. (prologue lines are shell already.)
        for text in value if isinstance(value, list) else [value]:
            if text is not None and any(ord(c) < 32 or ord(c) == 127 for c in str(text)):
                message = f"{str(text)!r} holds a line break or control character"
                raise schema_error("one_line", message)
            if text is not None and not str(text).strip():  # (queue: "" dropped --partition)
                raise schema_error("one_line", "empty: give a value, or leave the key out")
        return value

    @field_validator("job_directives")
    @classmethod
    def _without_prefix(cls, directives: list[str]) -> list[str]:
        # A whole line pasted from a site's script became "#SBATCH #SBATCH --exclusive",
        # which sbatch ignores: the node was not exclusive, and nothing said so.
        for directive in directives:
            if directive.lstrip().startswith("#"):
                option = directive.lstrip().lstrip("#").partition(" ")[2].strip()
                raise schema_error(
                    "directive_prefix",
                    f"{directive!r}: give the option alone ({option!r}): raygrid writes the "
                    "#SBATCH or #PBS before it (a line written twice is ignored by the batch "
                    "system)",
                )
        return directives

    @field_validator("job_directives")
    @classmethod
    def _not_raygrids_own(cls, directives: list[str], info: ValidationInfo) -> list[str]:
        # raygrid writes these itself: a user's --output won over raygrid's, the job's log
        # went elsewhere and the run still named its own folder as the log's.
        cluster = info.data.get("cluster")
        for directive in directives:
            option = own_directive(directive, cluster)
            if option is not None:
                source = OWN_DIRECTIVES[cluster][option]
                then = "leave it out" if source.startswith("nothing") else "set that instead"
                raise schema_error(
                    "own_directive",
                    f"{directive!r}: raygrid writes {option} itself from {source}: {then}",
                )
        return directives

    @field_validator("walltime")
    @classmethod
    def _pbs_walltime(cls, walltime: str, info: ValidationInfo) -> str:
        if info.data.get("cluster") == "pbs" and "-" in walltime:  # SLURM's, refused by qsub
            days, clock = walltime.split("-")
            hours, minutes, seconds = [*clock.split(":"), "00", "00"][:3]  # days-hours[:m[:s]]
            raise ValueError(
                f"{walltime!r} is SLURM's days-hours form: PBS reads hours:minutes:seconds, "
                f"here '{24 * int(days) + int(hours):02d}:{minutes}:{seconds}'"
            )
        return walltime

    @property
    def nodes(self) -> int:
        return math.ceil(self.workers / self.workers_per_node)


def _scheduler_address(address: str) -> str:
    """A scheduler's address with its port, as Dask parses it: ``foo`` passed validation,
    then the run stopped in a traceback ("missing port number")."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme in ("http", "https"):  # a dashboard's link (its /status page)
            raise ValueError(
                f"{address!r} is a web address (a dashboard's?), not a scheduler's: Dask "
                "speaks tcp:// (or tls://) to its scheduler, on its own port"
            )
        if scheme == "inproc":  # a LocalCluster(processes=False)'s: within its process only
            raise ValueError(
                f"{address!r} is an in-process address, which only the process that started "
                "the cluster can reach (LocalCluster(processes=False)): give that cluster "
                "protocol='tcp', or pass its Client to raygrid from that process"
            )
        if scheme not in ("tcp", "tls", "ucx", "ws", "wss"):
            raise ValueError(f"{address!r}: Dask has no protocol {scheme!r}")
        _port(parse_host_port(location)[1], address)
    except ValueError as error:
        message = f"{error}: give it as tcp://HOST:PORT (Dask's default port is 8786)"
        raise schema_error("scheduler_address", message) from None
    return address


def _credentials_or_none(value: Any) -> Any:
    """A scheduler file's ``tls``: ``false`` as ``null`` (no credentials: a plain
    scheduler's); ``true`` refused, saying what it takes (it was "must be a mapping")."""
    if value is False:
        return None
    if value is True:
        raise schema_error(
            "tls_credentials",
            "an existing scheduler's tls: takes its credentials, {ca_file: ..., cert: ..., "
            "key: ...} (tls: true/false is for the clusters raygrid starts itself)",
        )
    return value


class TLSFiles(Strict):
    """The credentials a client of a scheduler that speaks TLS (``tls://``) presents: the
    certificate authority's certificate (its peers' certificates are signed by it), and
    the client's own certificate and key, PEM files (``key`` left out where ``cert`` holds
    both), as ``dask scheduler --tls-ca-file --tls-cert --tls-key`` takes them."""

    ca_file: FilePath
    cert: FilePath
    key: FilePath | None = None

    @field_validator("ca_file", "cert", "key")
    @classmethod
    def _exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            where = "" if path.is_absolute() else " (paths are relative to where raygrid runs)"
            raise schema_error("tls_file", f"{path}: no such file{where}")
        return path

    @model_validator(mode="after")
    def _usable(self) -> TLSFiles:
        from .credentials import unusable

        said = unusable(self.ca_file, self.cert, self.key)
        if said:
            raise schema_error("tls_files", said)
        return self


class SchedulerConfig(Strict):
    """An existing Dask scheduler, by address or by scheduler file."""

    cluster: Literal["scheduler"]
    address: Annotated[str, AfterValidator(_scheduler_address)] | None = None  # tcp://h:8786
    scheduler_file: FilePath | None = None  # written by `dask scheduler --scheduler-file`
    wait_for_workers: Annotated[int, Field(ge=0)] = 1
    timeout: Annotated[float, Field(gt=0)] = 120.0  # s to wait for the scheduler and workers
    # a tls:// scheduler's credentials (else Dask's configuration's distributed.comm.tls)
    tls: Annotated[TLSFiles | None, BeforeValidator(_credentials_or_none)] = None

    @model_validator(mode="after")
    def _one_way(self) -> SchedulerConfig:
        if (self.address is None) == (self.scheduler_file is None):
            raise ValueError("give exactly one of address and scheduler_file")
        if self.tls is not None and self.address and not self.address.startswith("tls://"):
            raise ValueError(
                f"tls: gives credentials, but the address {self.address} is not a TLS "
                "scheduler's (tls://HOST:PORT): give the address as its log says it"
            )
        return self


def _kind(value: Any) -> str | None:
    kind = value.get("cluster") if isinstance(value, dict) else getattr(value, "cluster", None)
    return {
        "local": "cluster-local",
        "local-cuda": "cluster-local-cuda",
        "slurm": "cluster-jobqueue",
        "pbs": "cluster-jobqueue",
        "scheduler": "cluster-scheduler",
    }.get(kind)


ClusterConfig = Annotated[
    Annotated[LocalConfig, Tag("cluster-local")]
    | Annotated[LocalCUDAConfig, Tag("cluster-local-cuda")]
    | Annotated[JobQueueConfig, Tag("cluster-jobqueue")]
    | Annotated[SchedulerConfig, Tag("cluster-scheduler")],
    Discriminator(
        _kind,
        custom_error_type="cluster_kind",
        custom_error_message="cluster must be one of local, local-cuda, slurm, pbs, scheduler",
        custom_error_context={},
    ),
]


DEFAULT = LocalConfig(cluster="local")


AnyConfig = LocalConfig | LocalCUDAConfig | JobQueueConfig | SchedulerConfig


def gpus_unmatched(config: AnyConfig, backend: str, asked: str | None = None) -> str | None:
    """What to say when a cluster file's GPUs do not match the solver's ``backend``
    (``"cpu"`` or ``"cuda"``, resolved from the workflow's ``asked`` backend), or ``None``.

    A CPU solve on GPU workers (``gpus_per_worker``, ``local-cuda``) holds GPUs it leaves
    idle, one a worker, in allocations billed for them; a CUDA solve on batch jobs that
    ask for no GPU may find none on its nodes (a site gives a job the GPUs it asked for).
    Warned, not refused: some sites give a partition's GPUs whatever the job asks.
    """
    if backend == "cpu":
        # ``auto`` resolves to the CPU for a CPU algorithm (dijkstra), or where the client
        # runs without a GPU (raygrid run on local-cuda workers it cannot use).
        solver = "backend cpu" if asked in (None, "cpu") else f"backend {asked} (the CPU)"
        fix = "compute.backend: cuda" + (" (or auto)" if asked in (None, "cpu") else "")
        if isinstance(config, LocalCUDAConfig):
            return (
                f"cluster local-cuda starts one worker per GPU, and {solver} leaves the GPUs "
                f"idle: set {fix}, or use cluster: local"
            )
        if isinstance(config, JobQueueConfig) and config.gpus_per_worker:
            gpus, workers = config.gpus_per_worker, config.workers
            return (
                f"gpus_per_worker: {gpus} asks {gpus} GPU{'s' * (gpus > 1)} for each of the "
                f"{workers} workers ({gpus * workers} in all), and {solver} leaves them idle: "
                f"set {fix} in the workflow, or gpus_per_worker: 0 in the cluster file"
            )
    if backend == "cuda" and isinstance(config, JobQueueConfig) and not config.gpus_per_worker:
        return (
            "backend cuda on workers whose jobs ask for no GPU (gpus_per_worker: 0): most "
            "sites give a job only the GPUs it asks for; set gpus_per_worker: 1"
        )
    return None


def worker_threads(config: JobQueueConfig) -> int:
    """Threads of each of the job's workers: one on a GPU (its sources go to the device one
    batch after another; more threads would only hold more of them in memory)."""
    return 1 if config.gpus_per_worker else config.cores_per_worker


def job_worker(config: JobQueueConfig) -> dict:
    """What each of a batch system's workers will have (``memory_limit`` in whole MiB, as
    the job asks for it, and ``nthreads``), as the scheduler records a joined worker
    (:func:`worker_info`): for checks made before any job is queued."""
    return {
        "memory_limit": memory_mb(config.memory_per_worker) * 2**20,
        "nthreads": worker_threads(config),
    }


def threads_crowded(config: AnyConfig, backend: str, threads: int) -> str | None:
    """What to say when batch jobs' CPU workers run more solver threads than the cores
    they ask for: each of a worker's ``cores_per_worker`` task threads solves its sources
    on ``compute.threads`` threads (``cores_per_worker: 2`` with ``threads: 2`` ran 4
    threads on the 2 cores of each task, the job asking for 2); else ``None``."""
    if not isinstance(config, JobQueueConfig):
        return None
    running = worker_threads(config) * threads
    if backend != "cpu" or running <= config.cores_per_worker:
        return None
    return (
        f"each worker runs {worker_threads(config)} task(s) at once (cores_per_worker: "
        f"{config.cores_per_worker}), each solving on compute.threads: {threads} threads: "
        f"{running} threads on {config.cores_per_worker} core(s); set compute.threads: 1 "
        "(the workers already run one task per core)"
    )


def local_workers(config: LocalConfig) -> int:
    """How many workers a local cluster file starts: ``n_workers``, else as Dask's
    ``LocalCluster`` counts them, one per ``threads_per_worker`` of the machine's cores."""
    from dask.system import CPU_COUNT

    return config.n_workers or max(1, CPU_COUNT // config.threads_per_worker)


def machine_oversold(config: AnyConfig) -> str | None:
    """What to say when a local cluster file asks for more threads or memory than this
    machine has (16 threads and 80 GB of limits on 2 cores and 24 GB ran without a word:
    the workers then crowd each other, or the machine swaps before Dask's limits act);
    else ``None``. Dask caps a single worker's limit at the machine's, with its own
    warning, but not their sum; ``auto`` shares the memory out."""
    if not isinstance(config, LocalConfig):
        return None
    import psutil  # a dependency of distributed
    from dask.system import CPU_COUNT  # (what LocalCluster counts: affinity, cgroup quota)
    from dask.utils import format_bytes, parse_bytes

    workers, threads = local_workers(config), config.threads_per_worker
    said, lower = [], []
    if workers * threads > CPU_COUNT:
        said.append(f"{workers} worker(s) of {threads} thread(s) on {CPU_COUNT} CPUs")
        lower.append("fewer workers (n_workers) or threads_per_worker")
    if config.memory_limit not in (None, "auto"):
        asked, total = workers * parse_bytes(config.memory_limit), psutil.virtual_memory().total
        if asked > total:
            said.append(
                f"{workers} x {config.memory_limit} of memory limits ({format_bytes(asked)}) "
                f"with {format_bytes(total)} of memory"
            )
            lower.append("a smaller memory_limit (auto shares the memory out)")
    if not said:
        return None
    return f"the cluster file asks this machine for {' and '.join(said)}: {' or '.join(lower)}"


def cluster_notes(config: AnyConfig, backend: str, compute: Any) -> list[str]:
    """What a workflow's ``compute`` section and the solver's ``backend`` do not match of
    a cluster file (:func:`gpus_unmatched`, :func:`threads_crowded`), and what a local
    file asks beyond this machine (:func:`machine_oversold`): warned by ``run`` and
    ``submit``, noted by ``validate``."""
    said = [
        gpus_unmatched(config, backend, compute.backend),
        threads_crowded(config, backend, compute.threads),
        machine_oversold(config),
    ]
    return [note for note in said if note is not None]


def workers_back_s(config: AnyConfig) -> float | None:
    """How long a run whose every worker died waits for one to join before it stops: a
    batch system's new worker job may wait in the queue as the first ones did (the cluster
    file's ``wait_timeout``), a scheduler's workers as long as its ``timeout``; a local
    cluster's nannies restart theirs within seconds (``None``: the survey's default)."""
    if isinstance(config, JobQueueConfig):
        return config.wait_timeout
    if isinstance(config, SchedulerConfig):
        return config.timeout
    return None


def read_cluster(path: str | Path | None) -> AnyConfig:
    """Read and validate a cluster file; ``None`` gives the default local cluster.

    Raises
    ------
    InputError
        Naming the file, and each problem's key path and line.
    """
    if path is None:
        return DEFAULT
    document = load_yaml(path, "cluster")
    if is_workflow_file(document.data):
        sections = ", ".join(sorted(set(document.data) & WORKFLOW_SECTIONS))
        raise InputError(
            f"{document.path} is a workflow (it has {sections} and no cluster key), not a "
            "cluster file: give it as the workflow, and a cluster file (such as "
            "configs/local.yaml) with --cluster"
        )
    return validate_yaml(document, ClusterConfig, "cluster file")


def memory_mb(memory: str, factor: int = 1, extra: int = 0) -> int:
    """MiB of ``factor`` workers' memory and ``extra`` bytes, at least 1 (batch systems take
    whole MiB)."""
    return max(1, (memory_bytes(memory, factor) + extra) // 2**20)


def memory_bytes(memory: str, factor: int = 1) -> int:
    """Bytes of ``factor`` workers' ``memory_per_worker`` (a size such as ``16GB``): what a
    job asks of the batch system, in dask-jobqueue's or the submission script's units."""
    from dask.utils import parse_bytes

    try:
        return int(parse_bytes(memory) * factor)
    except ValueError:
        raise InputError(f"memory_per_worker {memory!r} is not a size such as 16GB") from None
