"""The batch system's side of a cluster (SLURM, PBS): what its submission commands said
when they refused a job, the states of the worker jobs dask-jobqueue submitted, and what
to say when they end, cannot start, or some of them are lost (:mod:`raygrid.pipeline.cluster`
watches them with these; ``raygrid submit`` checks queued jobs with them too); and the
record of the last job ``raygrid submit`` sent for a store, which ``raygrid info`` reads.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from .clusterfile import JobQueueConfig

__all__ = [
    "SUBMIT_COMMANDS", "SLURM_CANNOT_START", "UNREACHABLE", "Echo", "cannot_start",
    "job_ended", "job_states", "refusal_hint", "SUBMITTED", "store_record", "recorded_job",
    "job_record",
    "answers_kept", "jobs_ended", "jobs_lost", "log_ending",
]  # fmt: skip


#: What batch commands say when they cannot reach their controller or server at all.
UNREACHABLE = (
    "configuration source", "unable to contact slurm controller", "connection refused",
    "connect failure", "cannot connect to server", "no route to host",
)  # fmt: skip


#: Words of a batch system's refusal of a job's GPU request (SLURM's gres, TRES and
#: --gpus; PBS's ngpus, Torque's "max gpus"), as whole words ("progress" holds "gres").
_GPU_WORDS = re.compile(r"\bgres\b|generic resource|trackable resource|\bn?gpus?\b", re.I)


def refusal_hint(said: str, gpus: bool = False) -> str:
    """What to check after the batch system refused a job, from what it said: its
    controller unreachable (not this cluster's login node, or the batch system down) or
    the job's own settings, its GPU request first where the job asked for GPUs (``gpus``)
    and the refusal names them."""
    if any(words in said.lower() for words in UNREACHABLE):
        return (
            "the batch system's controller cannot be reached from here: run this on a login "
            "node of the cluster, or ask whether the batch system is up"
        )
    if gpus and _GPU_WORDS.search(said):
        return (
            "check its GPU request (gpus_per_worker: the partition or queue may have no "
            "GPUs, or name them otherwise), queue, account, walltime and memory"
        )
    return "check its queue, account, walltime and memory"


Echo = Callable[[str], None]


def _log_tail(path: Path, lines: int = 4) -> list[str]:
    """The last ``lines`` lines of a log that are not blank (read from its end, bytes that
    are not UTF-8 replaced); none if it cannot be read."""
    try:
        with open(path, "rb") as log:
            log.seek(max(log.seek(0, os.SEEK_END) - 16384, 0))
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def log_ending(path: Path) -> str:
    """``"; it ends:"`` and the end of the log at ``path``, indented; ``""`` if empty."""
    lines = _log_tail(path)
    return "; it ends:\n  " + "\n  ".join(lines) if lines else ""


#: The batch systems' submission commands, by cluster kind.
SUBMIT_COMMANDS = {"slurm": "sbatch", "pbs": "qsub"}


#: SLURM's job states (``squeue -t all``) of a job that will start no worker any more.
_SLURM_ENDED = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
}  # fmt: skip


#: What a worker job's end state says of its cluster file, where it says something.
_JOB_ENDS = {
    "TIMEOUT": ": its walltime, {config.walltime} in the cluster file, ran out",
    "OUT_OF_MEMORY": ": killed for memory, {config.memory_per_worker} a worker in the cluster file",
    "DEADLINE": ": its deadline passed",
}


def job_states(config: JobQueueConfig, ids: list[str]) -> dict[str, str]:
    """The batch system's state of each job of ``ids`` it knows: SLURM's name and reason
    (``RUNNING None``, ``PENDING Priority``, ``FAILED NonZeroExitCode``), PBS's letters
    (``Q``, ``R``, ``C``, ``F``), or ``"finished"`` where ``qstat`` says the job has
    finished; a job it does not name is left out (gone from its memory, or on another
    cluster or server). Raises ``OSError`` or ``subprocess.TimeoutExpired`` when it
    cannot be asked."""
    import subprocess

    def ask(command: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(command, capture_output=True, text=True, timeout=20)

    states = {}
    if config.cluster == "slurm":
        answer = ask(["squeue", "-h", "-t", "all", "-o", "%i %T %r", "-j", ",".join(ids)])
        for line in answer.stdout.splitlines():
            job, _, state = line.strip().partition(" ")
            if job in ids:
                states[job] = state.strip()  # with the reason: "PENDING PartitionNodeLimit"
        return states
    for job in ids:  # one at a time: qstat answers for the others past one it cannot find
        answer = ask(["qstat", job])
        if answer.returncode == 0:
            lines = [line.split() for line in answer.stdout.splitlines() if line.strip()]
            if lines and len(lines[-1]) >= 2:
                states[job] = lines[-1][-2]  # Job id, Name, User, Time Use, S, Queue
        elif "has finished" in (answer.stdout + answer.stderr).lower():  # PBS Pro
            states[job] = "finished"
    return states


#: SLURM's reasons for a pending job that its partition cannot start as asked (until an
#: administrator changes it), and what in a cluster file asks for it.
SLURM_CANNOT_START = {
    "PartitionNodeLimit": "more nodes than the partition gives a job, or nodes that are "
    "down (workers / workers_per_node nodes)",
    "PartitionTimeLimit": "a longer walltime than the partition allows",
    # SLURM 22.05 gives a job asking for more nodes than the partition has, or a longer
    # walltime than it allows, this reason for its first second too, before
    # PartitionNodeLimit or PartitionTimeLimit: all are named.
    "PartitionConfig": "more CPUs, memory or GPUs on a node than the partition's nodes have "
    "(cores_per_worker and gpus_per_worker times workers_per_node, memory_per_worker), more "
    "nodes than it has (workers / workers_per_node), or a longer walltime than it allows",
    "BadConstraints": "constraints (job_directives) that no node of the partition meets",
    "QOSMaxWallDurationPerJobLimit": "a longer walltime than its QOS allows",
}


def cannot_start(job: str, state: str) -> str | None:
    """What to say of SLURM job ``job`` whose squeue state and reason are ``state``
    (``PENDING PartitionNodeLimit``) when its partition cannot start it as asked; else
    ``None``."""
    name, _, reason = state.partition(" ")
    if name != "PENDING" or reason not in SLURM_CANNOT_START:
        return None
    return (
        f"job {job} is pending for {reason}: it asks for {SLURM_CANNOT_START[reason]}, so it "
        f"may never start; scancel {job} and change the cluster file"
    )


def jobs_ended(
    config: JobQueueConfig, ids: list[str], echo: Echo | None = None
) -> Callable[[], str | None]:
    """What to say once every worker job in ``ids`` has ended (asked of ``squeue`` or
    ``qstat`` at most every 5 s), with the end of the first one's error log; else
    ``None``. A job whose workers stop at start (a wrong ``python``, a failed prologue)
    otherwise left the run waiting its whole ``wait_timeout``.

    A job the batch system no longer names has ended only if it named it before: a job
    on another cluster (``--clusters``) or server (``queue@server``) is never named by a
    plain ``squeue``/``qstat``. A job its partition cannot start as asked
    (:func:`cannot_start`) is said through ``echo``, once.
    """
    polled = _states_every(config, ids, 5.0)
    seen, said = set(), set()

    def ended() -> str | None:
        states = polled()
        if states is None:  # not yet asked again, or cannot tell: the timeout ends the wait
            return None
        seen.update(states)
        for job, state in states.items():
            stuck = cannot_start(job, state) if config.cluster == "slurm" else None
            if stuck and echo and job not in said:
                said.add(job)
                echo(f"warning: worker {stuck}")
        over = _ended(states, seen)
        if not ids or over != set(ids):
            return None
        first = ids[0]
        number = first.split(".")[0]  # PBS: 123.server
        logs = sorted({*config.log_directory.glob(f"*-{first}.err"),
                       *config.log_directory.glob(f"*.e{number}")})  # fmt: skip
        name = states.get(first, "").split(" ")[0]
        why = _JOB_ENDS.get(name, "").format(config=config)
        where = f": see {logs[0]}{'' if why else log_ending(logs[0])}" if logs else (
            f": see the logs in {config.log_directory}"
        )  # fmt: skip
        jobs = "job " + first if len(ids) == 1 else "jobs " + ", ".join(ids)
        state = f" ({name}{why})" if name else ""
        return f"the worker {jobs} ended{state}{where}"

    return ended


def _states_every(
    config: JobQueueConfig, ids: list[str], every: float, first: float = 0.0
) -> Callable[[], dict[str, str] | None]:
    """:func:`job_states` of ``ids``, asked at most every ``every`` seconds (counted from
    ``first``); ``None`` between, or when the batch system does not answer."""
    import subprocess
    import time

    asked = [first]

    def states() -> dict[str, str] | None:
        if time.monotonic() - asked[0] < every:
            return None
        asked[0] = time.monotonic()
        try:
            return job_states(config, ids)
        except (OSError, subprocess.TimeoutExpired):
            return None

    return states


#: PBS's job states of a job that has ended (``C`` completed on Torque, ``F`` finished and
#: ``X`` a finished subjob on PBS Pro), and :func:`job_states`' ``"finished"``.
_PBS_ENDED = {"C", "F", "X", "finished"}


def job_ended(state: str) -> bool:
    """Whether a job in ``state`` (one of :func:`job_states`' values) will start nothing
    any more; any other state it has (pending, running, held, requeued, suspended) is a
    job that may still run. One rule for the watch of worker jobs and the refusal of a
    store a queued job will write."""
    return state.split(" ")[0] in _SLURM_ENDED | _PBS_ENDED


def _ended(states: dict[str, str], seen: set[str]) -> set[str]:
    """The jobs of ``states`` (squeue's or qstat's) that have ended, and those named
    before (``seen``) that it no longer names."""
    over = {job for job, state in states.items() if job_ended(state)}
    return over | (seen - set(states))


def jobs_lost(config: JobQueueConfig, ids: list[str]) -> Callable[[], str | None]:
    """What to say when some worker jobs in ``ids`` have ended, the others still running
    (asked at most every 30 s), each ended job said once; ``None`` otherwise, and once
    all have ended (:func:`jobs_ended` says that)."""
    import time

    polled = _states_every(config, ids, 30.0, first=time.monotonic())
    seen, said = set(), set()

    def lost() -> str | None:
        states = polled()
        if states is None:
            return None
        seen.update(states)
        over = _ended(states, seen)
        new = sorted(over - said, key=lambda job: (len(job), job))
        if not new or over >= set(ids):
            return None
        said.update(new)
        named = ", ".join(f"{job} ({states.get(job, 'gone').split(' ')[0]})" for job in new)
        return (
            f"worker job{'s' * (len(new) > 1)} {named} ended: {len(ids) - len(over)} of the "
            f"{len(ids)} worker jobs left; the run goes on with fewer workers (the tasks "
            "they held run again elsewhere)"
        )

    return lost


def _submission_said(error: BaseException, command: str, kind: str) -> str:
    """What the batch system said when it refused a job: dask-jobqueue's ``RuntimeError``
    quotes the command's whole output, of which its standard error (else its standard
    output: some sites' wrappers write errors there) is the news."""
    if isinstance(error, FileNotFoundError):
        return f"{command} not found: is this a {kind.upper()} login node?"
    text = str(error)
    if isinstance(error, RuntimeError) and "stderr:" in text:
        out, _, err = text.partition("stdout:")[2].partition("stderr:")
        text = err.strip() or out.strip() or text
    return "; ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def answers_kept(job: type, kind: str) -> type:
    """dask-jobqueue's job class ``job`` (``SLURMJob``, ``PBSJob``), keeping what the batch
    system answered each submission: ``submitted`` job ids, and ``refused``, what it said
    when it refused one (or why the job could not be submitted at all), instead of raising
    it in Dask's event loop."""
    from distributed.core import Status

    command = SUBMIT_COMMANDS[kind]

    class Answered(job):
        submitted: list[str] = []
        refused: list[str] = []

        async def start(self) -> None:
            try:
                await super().start()
            except Exception as error:  # refused, not found, an answer with no job id
                type(self).refused.append(_submission_said(error, command, kind))
                # Dask asserts each started job runs; a refused one has no job id, and
                # closing it cancels nothing.
                self.status = Status.running
            else:
                type(self).submitted.append(str(self.job_id))

        async def close(self) -> None:
            try:
                await super().close()
            finally:
                self.status = Status.closed  # Dask checks every job it made has closed

    Answered.submitted, Answered.refused = [], []  # this cluster's own
    return Answered


#: The file in a submitted job's folder naming its job id and store (``raygrid submit``).
SUBMITTED = "submitted.json"


def store_record(store: Path) -> Path:
    """The record of the last job submitted for ``store``, beside it (hidden)."""
    store = store.resolve()
    return store.parent / f".{store.name}.{SUBMITTED}"


def job_record(record: Path, store: Path) -> tuple[str, Path] | None:
    """``(job id, job folder)`` of a submitted job's ``record`` (:data:`SUBMITTED`, in its
    folder or beside its store) when it is one for ``store`` (resolved); ``None`` for a
    record that does not read, or names another store or no job."""
    import json

    try:
        said = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(said, dict) or said.get("store") != str(store) or not said.get("job_id"):
        return None
    return str(said["job_id"]), Path(said.get("directory") or record.parent)


def recorded_job(store: Path) -> tuple[str, bool] | None:
    """What ``raygrid info`` says of the last batch job submitted for ``store``
    (:func:`store_record`): its id, its state as the batch system tells it here, and its
    folder; with whether it has ended (as far as can be told here); ``None`` where none
    was. ("store does not exist" was all it said of a store a queued job will make.)"""
    import subprocess

    found = job_record(store_record(store), store.resolve())
    if found is None:
        return None
    job, folder = found
    try:
        header = (folder / "job.sh").read_text(errors="replace")[:4096]
    except OSError:
        header = ""
    kind = "slurm" if "#SBATCH" in header else "pbs" if "#PBS" in header else None
    state, ended = "its state unknown here", False
    if kind is not None:
        command = "squeue" if kind == "slurm" else "qstat"
        if shutil.which(command) is None:
            state = f"its state unknown here ({command} not found)"
        else:
            try:
                states = job_states(JobQueueConfig(cluster=kind), [job])
            except (OSError, subprocess.TimeoutExpired):
                states = None
            if states is None:
                state = f"its state unknown ({command} did not answer)"
            elif job not in states:
                state, ended = f"ended ({command} no longer names it)", True
            else:
                name = states[job]
                ended = job_ended(name)
                shown = name.removesuffix(" None")  # squeue's "no reason" (RUNNING None)
                state = f"{'ended' if ended else 'not ended'}: {shown}"
    return f"job {job} ({kind or 'batch'}), {state}; its files: {folder}", ended
