"""`raygrid submit`: the batch scripts, and real runs on a local SLURM (marker ``slurm``).

The SLURM tests need a running cluster: ``bash ../shared/slurm/start-local-slurm.sh`` (CI's
``.ci/run`` starts it before the tests and stops it after); without one they are skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from distributed import Client, LocalCluster

import raygrid.pipeline as rg
from raygrid.pipeline.errors import InputError
from raygrid.pipeline.submit import submit_workflow

from clusters import ctrl_c_taken, jobqueue_or_skip

ROOT = Path(__file__).resolve().parents[1]

# The script tests pair GPU cluster files with this CPU workflow: its warning of idle GPUs
# is tested where it is said (test_a_cpu_workflow_submitted_with_gpus_is_warned...).
pytestmark = pytest.mark.filterwarnings("ignore:.*leaves them idle:raygrid.pipeline.InputWarning")

WORKFLOW = {
    "model": {"synthetic": "gradient", "shape": {"z": 41, "x": 61}, "spacing": 10.0},
    "grid": {"radius": 3},
    "sources": {"line": {"start": {"z": 0.0, "x": 0.0}, "stop": {"z": 0.0, "x": 600.0},
                         "count": 6}},
    "receivers": [{"z": 400.0, "x": 100.0}, {"z": 400.0, "x": 555.0}],
    "outputs": {"store": "out/survey.zarr"},
    "compute": {"batch": 2},
}  # fmt: skip


def _slurm_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        answer = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return answer.returncode == 0 and any(s in answer.stdout for s in ("idle", "mix", "alloc"))


# CI starts SLURM and sets RAYGRID_REQUIRE_SLURM=1: there a missing cluster is a failure,
# not a silent skip.
_REQUIRED = os.environ.get("RAYGRID_REQUIRE_SLURM") == "1"
needs_slurm = pytest.mark.skipif(
    not _REQUIRED and not _slurm_up(),
    reason="no SLURM cluster (run ../shared/slurm/start-local-slurm.sh)",
)


def setup(tmp_path: Path, kind: str = "slurm", **config) -> tuple[Path, Path]:
    (tmp_path / "survey.yaml").write_text(yaml.safe_dump(WORKFLOW))
    cluster = {
        "cluster": kind,
        "workers": 2,
        "workers_per_node": 2,
        "cores_per_worker": 1,
        "memory_per_worker": "1GB",
        "queue": "debug",
        "walltime": "00:10:00",
        "interface": "lo",
        "dashboard_address": ":0",
        "log_directory": "jobs",
        "wait_timeout": 90,
    } | config
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return tmp_path / "survey.yaml", tmp_path / "cluster.yaml"


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_a_jobs_scheduler_and_workers_speak_tls_with_credentials_of_its_own(tmp_path, kind):
    # Its scheduler listened on the node's interfaces unauthenticated: any user of the
    # batch cluster's network could run code as the job's user.
    workflow, cluster = setup(tmp_path, kind=kind)
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    script = job.script.read_text()
    # A folder of each start's own (a requeued job's late first start removes only its own)
    assert f'tls={job.directory}/"tls-$(hostname)-$$"\ntrap \'rm -rf "$tls"\' EXIT' in script
    made = script.index('-m raygrid.pipeline.credentials "$tls"')
    assert made < script.index("distributed.cli.dask_scheduler")  # before anything listens
    exported = "DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__KEY=$tls/key.pem"
    assert "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True" in script and exported in script
    assert 'wait; rm -rf "$tls"\' EXIT' in script  # the key goes with the job
    if kind == "pbs":  # pbsdsh passes no environment on: the node script sets it
        assert 'node.sh "$tls" &' in script
        assert exported in (job.directory / "node.sh").read_text()
    assert not list(job.directory.glob("tls*"))  # written as the job starts, not before
    # The job's run finds them in its Dask configuration, as its scheduler and workers do.
    assert "tls" not in yaml.safe_load((job.directory / "scheduler.yaml").read_text())
    bash = subprocess.run(["bash", "-n", str(job.script)], capture_output=True, text=True)
    assert bash.returncode == 0, bash.stderr
    plain = tmp_path / "plain"
    plain.mkdir()
    workflow, cluster = setup(plain, kind=kind, tls=False)
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=plain)
    assert "TLS" not in job.script.read_text()
    assert "tls" not in yaml.safe_load((job.directory / "scheduler.yaml").read_text())


def test_solver_threads_beyond_the_cores_asked_for_are_warned_about(tmp_path):
    # cores_per_worker: 2 and compute.threads: 2 ran 4 threads on the 2 cores a task
    # asked for, without a word.
    workflow, cluster = setup(tmp_path, cores_per_worker=2)
    spec = yaml.safe_load(workflow.read_text())
    spec.setdefault("compute", {})["threads"] = 2
    workflow.write_text(yaml.safe_dump(spec))
    with pytest.warns(rg.InputWarning, match=r"4 threads on 2 core\(s\); set compute.threads: 1"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    spec["compute"]["threads"] = 1
    workflow.write_text(yaml.safe_dump(spec))
    with warnings.catch_warnings():
        warnings.simplefilter("error", rg.InputWarning)
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)


def test_slurm_script(tmp_path):
    workflow, cluster = setup(tmp_path, gpus_per_worker=1, account="geo",
                              job_directives=["--constraint=h100"],
                              prologue=["module load cuda"])  # fmt: skip
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    assert job.job_id is None and job.submit_command.startswith("sbatch --parsable ")
    text = job.script.read_text()
    for line in (
        "#SBATCH --nodes=1", "#SBATCH --ntasks=2", "#SBATCH --ntasks-per-node=2",
        "#SBATCH --cpus-per-task=1", "#SBATCH --gpus-per-task=1", "#SBATCH --partition=debug",
        "#SBATCH --account=geo", "#SBATCH --time=00:10:00", "#SBATCH --constraint=h100",
        # A requeued job keeps its id and log files: its starts are appended, not replaced.
        "#SBATCH --open-mode=append", f"}} >> {job.directory}/workers.log 2>&1 &",
        f">> {job.directory}/scheduler.log 2>&1 &",
        "module load cuda", f"cd {tmp_path}", "distributed.cli.dask_scheduler",
        # srun of SLURM 22.05-23.02 does not inherit sbatch's --cpus-per-task: said again.
        'srun --kill-on-bad-exit=0 --ntasks="$SLURM_NTASKS" --cpus-per-task=1 '
        "--gpus-per-task=1 \\", "distributed.cli.dask_worker",
        f"raygrid.pipeline.cli run {workflow}", "trap ",
        # What the run's messages say resumes it: not its own command, whose scheduler
        # ends with the job.
        f"export RAYGRID_RESUME='submit the job again unless the batch system requeues it "
        f"(raygrid submit {workflow} --cluster {cluster}, in {tmp_path})'",
    ):  # fmt: skip
        assert line in text, line
    assert "overwrite" not in text
    assert text.index("module load cuda") < text.index("dask_scheduler") < text.index("srun")
    assert subprocess.run(["bash", "-n", str(job.script)]).returncode == 0
    scheduler = yaml.safe_load((job.directory / "scheduler.yaml").read_text())
    assert scheduler["cluster"] == "scheduler" and scheduler["wait_for_workers"] == 2
    assert rg.workflow.read_workflow(workflow)  # the job's inputs are untouched


def test_pbs_script(tmp_path):
    workflow, cluster = setup(tmp_path, "pbs", workers=4, workers_per_node=2,
                              gpus_per_worker=2, queue="gpu")  # fmt: skip
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    assert job.submit_command.startswith("qsub ")
    text = job.script.read_text()
    # Two workers' 1 GB (1907 MiB), and what the scheduler and the client hold on the first
    # node (the 41 x 61 model is a few kB of it).
    # PBS Pro / OpenPBS: a chunk a node, one node-file entry each, so that pbsdsh starts a
    # node's workers once (mpiprocs=2 started them twice a node), without Torque's -u
    # (PBS Pro's pbsdsh printed its usage: no worker ever came).
    assert "#PBS -l select=2:ncpus=2:mpiprocs=1:mem=2931mb:ngpus=4" in text
    assert "#PBS -l place=scatter" in text
    assert "#PBS -q gpu" in text and "#PBS -l walltime=00:10:00" in text
    assert f'  pbsdsh -- bash {job.directory}/node.sh "$tls" &' in text
    assert "pbsdsh -u" not in text
    # PBS copies its -o file back at the end only: the run's lines go to job.log live.
    assert f"exec >> {job.directory}/job.log 2>&1" in text
    node = (job.directory / "node.sh").read_text()
    assert "for k in $(seq 0 1)" in node and "CUDA_VISIBLE_DEVICES=$(IFS=," in node
    for script in (job.script, job.directory / "node.sh"):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # A placement of the cluster file's own replaces raygrid's; one that may put two
    # chunks on a host (whose workers pbsdsh would start twice) is warned about.
    workflow, cluster = setup(tmp_path, "pbs", job_directives=["-l place=scatter:excl"])
    text = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path).script.read_text()
    assert "#PBS -l place=scatter:excl" in text and "#PBS -l place=scatter\n" not in text
    workflow, cluster = setup(tmp_path, "pbs", workers=4, workers_per_node=2,
                              job_directives=["-l place=excl"])  # fmt: skip
    with pytest.warns(rg.InputWarning, match=r"place the chunks \(-l place=excl\) without"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    workflow, cluster = setup(tmp_path, "pbs", workers=4, workers_per_node=2,
                              job_directives=["-l place=vscatter"])  # fmt: skip
    with pytest.warns(rg.InputWarning, match=r"place=vscatter\) without scatter"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)


def _run_node_script(tmp_path: Path, visible: str | None) -> list[str]:
    """Run a PBS job's node.sh for real, its workers a stub that says which GPUs it got."""
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\necho "gpus=$CUDA_VISIBLE_DEVICES"\n')
    stub.chmod(0o755)
    workflow, cluster = setup(tmp_path, "pbs", workers=6, workers_per_node=3,
                              gpus_per_worker=2, python=str(stub),
                              prologue=['echo "$AN_UNSET_VARIABLE" > /dev/null'])  # fmt: skip
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    tls = str(tmp_path / "tls-x")  # the start's TLS folder, as job.sh passes it
    node = subprocess.run(["bash", str(job.directory / "node.sh"), tls], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert node.returncode == 0 or visible == "GPU-a", node.stderr
    if node.returncode:
        return [node.stderr.strip()]
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    return [(job.directory / f"worker-{host}-{k}.log").read_text().strip() for k in range(3)]


def test_pbs_workers_share_the_gpus_the_job_was_given(tmp_path):
    # PBS's cgroup hook gives the job its GPUs in CUDA_VISIBLE_DEVICES (often as UUIDs):
    # workers numbered 0, 1, ... from the node's first GPU were given GPUs not the job's.
    given = "GPU-a,GPU-b,GPU-c,GPU-d,GPU-e,GPU-f"
    assert _run_node_script(tmp_path, given) == ["gpus=GPU-a,GPU-b", "gpus=GPU-c,GPU-d",
                                                  "gpus=GPU-e,GPU-f"]  # fmt: skip


def test_pbs_workers_number_the_gpus_from_0_when_pbs_says_nothing(tmp_path):
    assert _run_node_script(tmp_path, None) == ["gpus=0,1", "gpus=2,3", "gpus=4,5"]


def test_pbs_workers_too_many_for_the_gpus_given_say_so(tmp_path):
    (said,) = _run_node_script(tmp_path, "GPU-a")
    assert said == (
        "raygrid: 3 worker(s) of 2 GPU(s) each, but this node shows 1 (CUDA_VISIBLE_DEVICES=GPU-a)"
    )


def test_the_prologue_runs_without_set_u(tmp_path):
    # Conda's activate and some sites' module functions read unset variables: under -u
    # the job ended at its first prologue line ("unbound variable").
    workflow, cluster = setup(tmp_path, prologue=["source ./activate"])
    (tmp_path / "activate").write_text('echo "${CONDA_SHLVL}" > prologue-ran\n')
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    lines = job.script.read_text().splitlines()
    at = lines.index("source ./activate")
    assert lines[at - 1 : at + 2] == ["set +u", "source ./activate", "set -u"]
    assert lines.index("set -euo pipefail") < at - 1
    # What the script runs up to the prologue's end, run for real.
    head = "\n".join(lines[: at + 2]) + "\n"
    env = {k: v for k, v in os.environ.items() if k != "CONDA_SHLVL"}
    ran = subprocess.run(["bash", "-c", head], cwd=tmp_path, env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "prologue-ran").exists()


def test_a_job_asks_for_its_scheduler_and_client_on_top_of_its_workers(tmp_path):
    # The batch system counts every process of the job: asked for the workers' memory
    # alone, the first node (scheduler, and a client that holds an untiled model and
    # builds its graph) went over it.
    from raygrid.pipeline.submit import DRIVER_BYTES, driver_bytes
    from raygrid.pipeline.workflow import prepare_workflow, read_workflow

    big = WORKFLOW | {"model": WORKFLOW["model"] | {"shape": {"z": 801, "x": 1601}}}
    workflow, cluster = setup(tmp_path)
    workflow.write_text(yaml.safe_dump(big))
    prepared = prepare_workflow(read_workflow(workflow), here=False, values=False)
    graph = rg.memory.footprint(prepared.grid.shape3, prepared.star, np.float64).model
    driver = driver_bytes(prepared)
    assert driver == DRIVER_BYTES + 801 * 1601 * 16 + graph
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    mib = (2 * 10**9 + driver) // 2**20
    assert f"#SBATCH --mem={mib}M" in job.script.read_text()
    # A tiled survey's client holds no model: the scheduler and the client alone.
    tiled = big | {"compute": {"tiles": {"z": 256, "x": 256}}}
    workflow.write_text(yaml.safe_dump(tiled))
    assert driver_bytes(prepare_workflow(read_workflow(workflow), here=False)) == DRIVER_BYTES


def test_an_empty_folder_at_the_store_is_no_store_to_check_the_model_against(tmp_path, monkeypatch):
    # A login node need not hold the model: an empty folder at outputs.store (made ahead)
    # read and hashed it whole, as for a store to resume, though none was there.
    from raygrid.pipeline import submit

    read = []
    prepare = submit.prepare_workflow
    monkeypatch.setattr(submit, "prepare_workflow", lambda *a, values, **k: read.append(
        values
    ) or prepare(*a, values=values, **k))  # fmt: skip
    workflow, cluster = setup(tmp_path)
    (tmp_path / "out" / "survey.zarr").mkdir(parents=True)
    submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    assert read == [False]


def test_submit_needs_a_batch_cluster_file(tmp_path):
    workflow, _ = setup(tmp_path)
    with pytest.raises(InputError, match="needs a slurm or pbs cluster file"):
        submit_workflow(workflow, ROOT / "configs" / "local.yaml", dry_run=True)


def test_submit_refuses_what_the_job_would_refuse_before_writing_it(tmp_path, monkeypatch):
    """Not after a wait in the queue: a source outside the model, a store of another run."""
    workflow, cluster = setup(tmp_path)
    outside = WORKFLOW | {"sources": [{"z": 0.0, "x": 4000.0}]}
    workflow.write_text(yaml.safe_dump(outside))
    with pytest.raises(InputError, match=r"sources\[0\]: source x=4000 is outside the model"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    assert not (tmp_path / "jobs").exists()
    # A store written by another workflow is refused unless the job is to overwrite it.
    other = WORKFLOW | {"grid": {"radius": 2}, "sources": [{"z": 0.0, "x": 100.0}]}
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    monkeypatch.chdir(tmp_path)  # outputs.store is relative to the working directory
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster_,
        Client(cluster_) as client,
    ):
        rg.workflow.run_workflow(rg.workflow.read_workflow(tmp_path / "other.yaml"), client=client)
    workflow.write_text(yaml.safe_dump(WORKFLOW))
    with pytest.raises(InputError, match="another workflow: what differs is the sources;"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    assert not (tmp_path / "jobs").exists()
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path, overwrite=True)
    assert job.script.exists()


def test_a_survey_local_workers_cannot_hold_is_refused_before_the_model_is_built(
    tmp_path, monkeypatch
):
    # A 561^3 model was built (15 s, 3 GB) and the cluster started before its workers were
    # found too small for it (a 3D survey designer's review).
    from raygrid.pipeline import survey
    from raygrid.pipeline.workflow import SyntheticModel

    built = []
    build = SyntheticModel.build

    def recorded(self, *, values=True):
        built.append(values)
        return build(self, values=values)

    def started(*args, **kwargs):
        raise AssertionError("the cluster was started")

    monkeypatch.setattr(SyntheticModel, "build", recorded)
    monkeypatch.setattr(survey, "connect", started)
    cluster = tmp_path / "local.yaml"
    cluster.write_text(yaml.safe_dump({
        "cluster": "local", "n_workers": 2, "threads_per_worker": 1, "memory_limit": "1GB",
        "host": "127.0.0.1", "dashboard_address": None,
    }))  # fmt: skip
    big = WORKFLOW | {
        "model": {"synthetic": "gradient", "shape": {"z": 301, "y": 301, "x": 301},
                  "spacing": 10.0},
        "sources": [{"z": 0.0, "y": 100.0, "x": 100.0}],
        "receivers": [{"z": 400.0, "y": 100.0, "x": 100.0}],
        "compute": {"cluster": str(cluster)},
    }  # fmt: skip
    workflow = tmp_path / "big.yaml"
    workflow.write_text(yaml.safe_dump(big))
    with pytest.raises(InputError, match=r"local worker 0 will hold 250.00 MiB before any data"):
        rg.workflow.run_workflow(rg.workflow.read_workflow(workflow))
    assert True not in built  # only its shape was read


def test_a_tiled_survey_its_workers_cannot_hold_is_refused_before_any_job(tmp_path):
    # Tiled surveys were not checked at all: a model cut into tiles because it did not fit
    # one machine, too big for its workers too, had them stopped by their nannies.
    workflow, cluster = setup(tmp_path, "slurm", workers=2, workers_per_node=1)
    big = WORKFLOW | {
        "model": {"synthetic": "gradient", "shape": {"z": 500, "y": 500, "x": 500},
                  "spacing": 10.0},
        "sources": [{"z": 0.0, "y": 100.0, "x": 100.0}],
        "receivers": [{"z": 400.0, "y": 100.0, "x": 100.0}],
        "compute": {"tiles": {"z": 100, "y": 100, "x": 100}},
    }  # fmt: skip
    workflow.write_text(yaml.safe_dump(big))
    with pytest.raises(InputError) as refused:
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    said = str(refused.value)
    assert said.startswith(
        "each worker's share of the tiles (63 of the 125 tiles of up to 106 x 106 x 106 nodes "
        "with their halos, 20.45 MiB each, and 1 tile solve(s) at once, "
    ), said
    assert "more workers (the tiles, about 18 bytes a node of the model with their halos" in said
    assert not (tmp_path / "jobs").exists()
    # Shared out between more workers, it fits.
    cluster.write_text(cluster.read_text().replace("workers: 2\n", "workers: 8\n"))
    assert submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path).script.exists()


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_submit_refuses_a_survey_its_workers_cannot_hold_before_writing_the_job(tmp_path, kind):
    # `raygrid run` refused it on workers of too little memory, but `submit` wrote and
    # submitted the job, refused only once it had waited for its allocation.
    workflow, cluster = setup(tmp_path, kind, workers=2, workers_per_node=1)
    big = WORKFLOW | {
        "model": {"synthetic": "gradient", "shape": {"z": 300, "y": 300, "x": 300},
                  "spacing": 10.0},
        "sources": [{"z": 0.0, "y": 100.0, "x": 100.0}],
        "receivers": [{"z": 400.0, "y": 100.0, "x": 100.0}],
    }  # fmt: skip
    workflow.write_text(yaml.safe_dump(big))
    with pytest.raises(InputError) as refused:
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    said = str(refused.value)
    assert said.startswith("each worker (the model and its CPU graph 1.23 GiB, then 1 task(s) ")
    assert (
        "each of the 2 batch worker(s) will hold 250.00 MiB before any data (raygrid, Numba "
        "and the solver's code), has a memory_limit of 0.93 GiB and Dask stops it at 95% of "
        "that; more memory_per_worker than 1GB in the cluster file, "
    ) in said
    assert not (tmp_path / "jobs").exists()
    # `raygrid validate` says so too (it said "valid workflow"), and `raygrid run --cluster`
    # (dask-jobqueue's workers, queued from here) refuses it before queueing any job.
    from click.testing import CliRunner

    from raygrid.pipeline import survey
    from raygrid.pipeline.cli import main

    workflow.write_text(yaml.safe_dump(big | {"compute": {"cluster": str(cluster)}}))
    checked = CliRunner().invoke(main, ["validate", str(workflow)])
    assert checked.exit_code == 2 and "valid workflow" not in checked.output
    assert f"error: {workflow}: each worker" in checked.output
    assert "more memory_per_worker than 1GB" in checked.output

    def queued(*args, **kwargs):
        raise AssertionError("jobs queued")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(survey, "connect", queued)
        with pytest.raises(InputError, match="more memory_per_worker than 1GB"):
            rg.workflow.run_workflow(rg.workflow.read_workflow(workflow))
    assert not (tmp_path / "out").exists()  # (the store's folder: nothing was made)
    workflow.write_text(yaml.safe_dump(big))
    # With the memory it asks for, the same survey is written.
    cluster.write_text(
        cluster.read_text().replace("memory_per_worker: 1GB", "memory_per_worker: 4GB")
    )
    assert submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path).script.exists()


def test_submit_refuses_a_store_a_running_job_is_writing(tmp_path):
    # A second `raygrid submit` of a running workflow was queued without a word, and its
    # job refused once it had its allocation.
    workflow, cluster = setup(tmp_path)
    store = tmp_path / "out" / "survey.zarr"
    from clusters import lock_held_elsewhere

    with lock_held_elsewhere(store):
        with pytest.raises(InputError, match=r"survey.zarr is being written by another raygrid"):
            submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
        assert not (tmp_path / "jobs").exists()
    assert submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path).script.exists()
    assert not store.exists()  # the lock taken and left, no store made


def test_submit_dry_run_cli(tmp_path):
    workflow, _ = setup(tmp_path)
    exe = Path(sys.executable).parent / "raygrid"
    run = subprocess.run(
        [str(exe), "submit", str(workflow), "--cluster", str(ROOT / "configs" / "slurm-gpu.yaml"),
         "--dry-run"], cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "batch script:" in run.stdout and "dry run" in run.stdout
    script = next((tmp_path / "raygrid-jobs").glob("survey-*/job.sh"))
    assert "#SBATCH --gpus-per-task=1" in script.read_text()
    assert not (tmp_path / "out").exists()


def test_submit_does_not_hold_the_model_on_the_login_node(tmp_path):
    # A new store needs no fingerprint, so the model's values are never built: a cube far
    # larger than this machine (30001^3 nodes, 196 TiB as float64) is submitted all the same
    # (in tiles: whole, its workers could not hold it either; shared out between a thousand
    # workers of 1000 GB, the tiles fit; between two of 1 GB they do not, said from the
    # shape alone).
    workflow, cluster = setup(tmp_path, workers=1000, memory_per_worker="1000GB")
    huge = WORKFLOW | {"model": WORKFLOW["model"] | {"shape": {"z": 30001, "y": 30001, "x": 30001}}}
    huge["compute"] = {"tiles": {"z": 1000, "y": 1000, "x": 1000}}
    huge["sources"] = [{"z": 0.0, "y": 100.0, "x": 100.0}]
    huge["receivers"] = [{"z": 400.0, "y": 100.0, "x": 100.0}]
    workflow.write_text(yaml.safe_dump(huge))
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    assert job.script.exists() and not (tmp_path / "out").exists()
    (tmp_path / "small").mkdir()
    small = setup(tmp_path / "small")[1]
    with pytest.raises(InputError, match=r"share of the tiles \(14896 of the 29791 tiles"):
        submit_workflow(workflow, small, dry_run=True, workdir=tmp_path)


def _expected() -> xr.DataArray:
    prepared = rg.workflow.prepare_workflow(rg.workflow.Workflow.model_validate(WORKFLOW))
    return rg.traveltimes(prepared.velocity, prepared.sources, radius=3)


def _wait_for_job(job_id: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    state = "?"
    while time.monotonic() < deadline:
        shown = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True
        ).stdout
        state = shown.split("JobState=")[1].split()[0] if "JobState=" in shown else "?"
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(0.5)
    subprocess.run(["scancel", job_id])
    return f"still {state} after {timeout} s"


@pytest.mark.slurm
@needs_slurm
def test_real_slurm_submission_runs_the_workflow(tmp_path):
    # In a folder with a space in its name: every path in the script, the #SBATCH output
    # path too (it was cut at the space), must reach sbatch and the job whole.
    tmp_path = tmp_path / "survey run"
    tmp_path.mkdir()
    workflow, cluster = setup(tmp_path)
    # With a picture: drawn from the finished store once the job's cluster is shut down
    # (Dask's default scheduler was left set to the closed client: the job ended FAILED).
    spec = yaml.safe_load(workflow.read_text())
    spec["outputs"]["plot"] = "out/survey.png"
    workflow.write_text(yaml.safe_dump(spec))
    job = submit_workflow(workflow, cluster, workdir=tmp_path)
    assert f'#SBATCH --output="{job.directory}/job-%j.out"' in job.script.read_text()
    assert job.job_id and job.job_id.isdigit()
    state = _wait_for_job(job.job_id)
    logs = "\n".join(p.read_text() for p in job.directory.glob("*.out"))
    assert state == "COMPLETED", logs + (job.directory / "workers.log").read_text()
    assert "done: 6 source(s)" in logs
    assert (tmp_path / "out" / "survey.png").exists(), logs
    # The run closes its workers through their nannies before their scheduler: each ends
    # (status 0), removing its scratch folder, not killed amid tracebacks of a lost
    # connection by the scheduler's close and the launcher.
    workers_log = (job.directory / "workers.log").read_text()
    closed = re.findall(r"Closing Nanny at .* Reason: raygrid-run-ended", workers_log)
    assert len(closed) == 2, workers_log
    assert "Reason: scheduler-close" not in workers_log, workers_log
    assert (job.directory / "workers.ended").read_text().strip() == "0", workers_log
    scratch = re.findall(r"Local Directory: (\S+)", workers_log)
    assert len(scratch) == 2 and not any(Path(folder).exists() for folder in scratch)
    # Over TLS with the job's own credentials, removed when it ended.
    assert "Scheduler at:     tls://" in (job.directory / "scheduler.log").read_text()
    assert len(re.findall(r"Start worker at: +tls://", workers_log)) == 2, workers_log
    assert not list(job.directory.glob("tls*"))
    dataset = xr.open_zarr(tmp_path / "out" / "survey.zarr", consolidated=False)
    assert dataset.attrs["complete"] == 1
    np.testing.assert_array_equal(dataset["traveltime"].values, _expected().values)
    # raygrid info names the job and how it ended.
    said = rg.inspect.describe(tmp_path / "out" / "survey.zarr")
    assert f"\nlast batch job: job {job.job_id} (slurm), ended: COMPLETED" in said, said
    assert said.index("batch job:") < said.index("sources done:")


def test_an_overwrite_job_replaces_the_store_until_a_start_has_done_so(tmp_path, monkeypatch):
    # The job marked its first start before `raygrid run --overwrite` had replaced anything:
    # stopped in between (while its workers started), the requeued start ran without
    # --overwrite and was refused by the old store. The run marks it once it has.
    from clusters import in_process_client

    workflow, cluster = setup(tmp_path)
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path, overwrite=True)
    text = job.script.read_text()
    marker = job.directory / "store-replaced"
    assert f"export RAYGRID_OVERWRITTEN={marker}\n" in text
    assert f"overwrite=--overwrite; [ ! -e {marker} ] || overwrite=\n" in text
    assert text.rstrip().endswith("scheduler.yaml $overwrite")
    assert "--no-progress" not in text  # the job's log says how far it got
    assert subprocess.run(["bash", "-n", str(job.script)]).returncode == 0
    monkeypatch.setenv("RAYGRID_OVERWRITTEN", str(marker))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / "survey.zarr").mkdir(parents=True)  # not a raygrid store: refused
    (tmp_path / "out" / "survey.zarr" / "notes.txt").write_text("mine")  # (empty: filled)
    with in_process_client() as client:
        with pytest.raises(InputError, match="left untouched"):
            rg.workflow.run_workflow(rg.workflow.read_workflow(workflow), client=client,
                                     overwrite=True)  # fmt: skip
        assert not marker.exists()
        shutil.rmtree(tmp_path / "out" / "survey.zarr")
        rg.workflow.run_workflow(rg.workflow.read_workflow(workflow), client=client)
        assert not marker.exists()  # a run without --overwrite replaces nothing
        rg.workflow.run_workflow(rg.workflow.read_workflow(workflow), client=client,
                                 overwrite=True)  # fmt: skip
        assert marker.exists()


@pytest.mark.slurm
@needs_slurm
def test_an_overwrite_job_started_again_resumes_the_store_it_made(tmp_path):
    # Every start of the job ran --overwrite: SLURM starting it again (a preemption, a lost
    # node: the same script run again) deleted the sources it had finished and began again.
    # The same script is submitted again here, as `scontrol requeue` would start it: a
    # requeued job is held back two minutes (its credential revoked meanwhile), and one
    # started at once was killed as "non-startable".
    workflow, cluster = setup(tmp_path)
    store = tmp_path / "out" / "survey.zarr"
    job = submit_workflow(workflow, cluster, workdir=tmp_path, overwrite=True)
    assert _wait_for_job(job.job_id) == "COMPLETED"
    made = store.stat().st_ino  # the store the first start made
    again = subprocess.run(
        ["sbatch", "--parsable", str(job.script)], capture_output=True, text=True,
        cwd=tmp_path, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    state = _wait_for_job(again)
    log = (job.directory / f"job-{again}.out").read_text()
    assert state == "COMPLETED", log
    assert "is complete already" in log, log  # the second start resumed, found it done
    assert store.stat().st_ino == made
    np.testing.assert_array_equal(
        xr.open_zarr(store, consolidated=False)["traveltime"].values, _expected().values
    )
    # A complete store: nothing to submit, nothing written (a job would only say so).
    jobs = set((tmp_path / "jobs").iterdir())
    assert submit_workflow(workflow, cluster, workdir=tmp_path) is None
    assert set((tmp_path / "jobs").iterdir()) == jobs


@pytest.mark.slurm
@needs_slurm
def test_run_with_dask_jobqueue_workers_as_slurm_jobs(tmp_path):
    jobqueue_or_skip()
    workflow, cluster = setup(tmp_path)  # one job of two workers
    exe = Path(sys.executable).parent / "raygrid"
    run = subprocess.run(
        [str(exe), "run", str(workflow), "--cluster", str(cluster), "--no-progress"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "submitted 1 slurm worker job(s) (job " in run.stdout
    assert "dashboard: http://" in run.stdout
    dataset = xr.open_zarr(tmp_path / "out" / "survey.zarr", consolidated=False)
    np.testing.assert_array_equal(dataset["traveltime"].values, _expected().values)
    errs = list((tmp_path / "jobs").glob("*.err"))
    assert errs, "the worker ran as a SLURM job"
    # Over TLS: dask-jobqueue wrote the workers' credentials beside their logs, and
    # removed them when the cluster closed.
    assert re.search(r"Start worker at: +tls://", errs[0].read_text()), errs[0].read_text()
    # Closed through its nanny before its job was cancelled: no traceback of a lost
    # connection in its log (four, when the scheduler's close and SIGTERM stopped it).
    assert "Traceback" not in errs[0].read_text(), errs[0].read_text()
    assert not list((tmp_path / "jobs").glob(".dask-jobqueue.*"))


@pytest.mark.slurm
@needs_slurm
def test_a_job_whose_workers_all_stop_at_start_says_so_at_once(tmp_path):
    # The job's run idled its whole wait_timeout, then said "no Dask worker arrived ... (at
    # the existing scheduler)", pointing nowhere near workers.log.
    workflow, cluster = setup(tmp_path, local_directory="/proc/raygrid-cannot-make-this")
    started = time.monotonic()
    job = submit_workflow(workflow, cluster, workdir=tmp_path)
    assert _wait_for_job(job.job_id) == "FAILED"
    assert time.monotonic() - started < 75  # the cluster file waits 90 s for workers
    log = (job.directory / f"job-{job.job_id}.out").read_text()
    assert (
        "error: no Dask worker joined (at the job's scheduler), and the job's workers have "
        "all stopped (their launcher exited with status 1): see "
        f"{job.directory}/workers.log; it ends:\n"
    ) in log, log
    assert "FileNotFoundError" in log and "Exited with exit code 1" in log


@pytest.mark.slurm
@needs_slurm
def test_a_job_whose_scheduler_cannot_start_says_so_at_once(tmp_path):
    # An interface its node lacks stopped the job's scheduler at once, and the run waited
    # its whole timeout for the scheduler file, then said only that it did not appear.
    workflow, cluster = setup(tmp_path, interface="nosuchif9")
    started = time.monotonic()
    job = submit_workflow(workflow, cluster, workdir=tmp_path)
    assert _wait_for_job(job.job_id) == "FAILED"
    assert time.monotonic() - started < 75  # the cluster file waits 90 s
    log = (job.directory / f"job-{job.job_id}.out").read_text()
    assert (
        "error: the job's Dask scheduler stopped (exit status 1) before it wrote "
        f"{job.directory}/scheduler.json: see {job.directory}/scheduler.log; it ends:\n"
    ) in log, log
    assert "nosuchif9" in log.split("it ends:")[1]


@pytest.mark.slurm
@needs_slurm
def test_a_job_its_partition_cannot_start_is_warned_about_and_holds_its_store(tmp_path):
    # More CPUs a node than the partition's nodes have: the job sat pending without a word.
    workflow, cluster = setup(tmp_path, cores_per_worker=512)
    with pytest.warns(rg.InputWarning, match=r"is pending for PartitionConfig: it asks for "):
        job = submit_workflow(workflow, cluster, workdir=tmp_path)
    assert job.stuck and f"job {job.job_id} is pending for PartitionConfig" in job.stuck
    try:
        # `raygrid run --cluster` of the same store queued worker jobs behind it and waited
        # its whole wait_timeout for them: refused as a second submit is.
        from raygrid.pipeline.workflow import read_workflow, run_workflow

        here = os.getcwd()
        os.chdir(tmp_path)
        try:
            with pytest.raises(InputError, match=f"job {job.job_id} .* is pending for the same"):
                run_workflow(read_workflow(workflow), cluster=cluster)
        finally:
            os.chdir(here)
        assert not (tmp_path / "out" / "survey.zarr").exists()
        # A second job for the store while the first is queued (it holds no lock yet) was
        # queued too, and took an allocation to find the store taken or finished.
        with pytest.raises(InputError) as refused:
            submit_workflow(workflow, cluster, workdir=tmp_path)
        assert str(refused.value) == (
            f"job {job.job_id} ({job.directory}) is pending for the same store, "
            f"{tmp_path / 'out' / 'survey.zarr'}: wait for it to finish (then submit again, "
            f"if it did not), or cancel it first (scancel {job.job_id})"
        )
        # Another cluster file's log_directory found no earlier job: both ran, the second
        # failing on the store's lock after its allocation. The store's own record tells.
        other = yaml.safe_load(cluster.read_text()) | {"log_directory": "other-jobs"}
        (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
        with pytest.raises(InputError, match=f"job {job.job_id} .* is pending for the same"):
            submit_workflow(workflow, tmp_path / "other.yaml", workdir=tmp_path)
        # A dry run submits nothing: said, not refused.
        with pytest.warns(rg.InputWarning, match=f"job {job.job_id} .* is pending for the"):
            assert submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    finally:
        subprocess.run(["scancel", job.job_id], check=True)
    assert _wait_for_job(job.job_id) == "CANCELLED"
    assert submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path) is not None


def test_a_job_waiting_for_its_workers_points_at_their_log(tmp_path, monkeypatch):
    from raygrid.pipeline.cluster import WORKERS_ENDED_ENV, WORKERS_LOG_ENV, _wait

    class Client:  # a scheduler no worker joins
        def wait_for_workers(self, n, timeout):
            time.sleep(timeout)
            raise TimeoutError

        def sync(self, *args, **kwargs):
            raise OSError("gone")

    log = tmp_path / "workers.log"
    log.write_bytes(b"starting\n\nworker: out of luck \xff\n")
    ended = tmp_path / "workers.ended"
    monkeypatch.setenv(WORKERS_LOG_ENV, str(log))
    monkeypatch.setenv(WORKERS_ENDED_ENV, str(ended))  # not written: the launcher runs
    with pytest.raises(InputError) as waited:
        _wait(Client(), 2, 1.5, "at the job's scheduler")
    assert str(waited.value) == (
        f"no Dask worker arrived within 1.5 s (at the job's scheduler): see {log}"
    )
    ended.write_text("1\n")
    started = time.monotonic()
    with pytest.raises(InputError) as stopped:
        _wait(Client(), 2, 600, "at the job's scheduler")
    assert time.monotonic() - started < 10
    assert str(stopped.value) == (
        "no Dask worker joined (at the job's scheduler), and the job's workers have all "
        f"stopped (their launcher exited with status 1): see {log}; it ends:\n"
        "  starting\n  worker: out of luck \ufffd"
    )


@pytest.mark.slurm
@needs_slurm
def test_run_with_worker_jobs_sbatch_refuses_says_so_at_once(tmp_path):
    # A wrong partition printed dask-jobqueue's tracebacks, then "submitted 1 slurm worker
    # job(s)", waited the whole wait_timeout, and ended in an AssertionError from Dask's
    # close, leaving a lock file beside a store it never made.
    jobqueue_or_skip()
    workflow, cluster = setup(tmp_path, workers=1, workers_per_node=1, queue="nosuchqueue")
    exe = Path(sys.executable).parent / "raygrid"
    started = time.monotonic()
    run = subprocess.run(
        [str(exe), "run", str(workflow), "--cluster", str(cluster), "--no-progress"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert time.monotonic() - started < 60  # the cluster file waits 90 s for workers
    assert "error: sbatch refused the worker job(s) of the cluster file: sbatch: error: " in (
        run.stderr
    )
    assert "invalid partition" in run.stderr.lower()
    assert "Traceback" not in run.stderr and "submitted" not in run.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.slurm
@needs_slurm
def test_run_with_worker_jobs_that_end_at_start_says_so_with_their_log(tmp_path):
    # A worker job whose worker could not start (here its local_directory) left the run
    # waiting the whole wait_timeout for it.
    jobqueue_or_skip()
    workflow, cluster = setup(
        tmp_path, workers=1, workers_per_node=1, local_directory="/proc/raygrid-no-such"
    )
    exe = Path(sys.executable).parent / "raygrid"
    started = time.monotonic()
    run = subprocess.run(
        [str(exe), "run", str(workflow), "--cluster", str(cluster), "--no-progress"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert time.monotonic() - started < 75  # the cluster file waits 90 s for workers
    job = run.stdout.split("(job ")[1].split(")")[0]
    assert (
        f"error: no Dask worker joined (from the worker jobs), and the worker job {job} "
        f"ended (FAILED): see jobs/raygrid-{job}.err; it ends:\n"
    ) in run.stderr, run.stderr
    assert "FileNotFoundError" in run.stderr and "Traceback" not in run.stderr.split("it ends")[0]


def test_run_with_worker_jobs_without_sbatch_or_its_job_id_says_so_at_once(tmp_path, monkeypatch):
    # No sbatch on PATH (FileNotFoundError), or one whose answer holds no job id (a site's
    # wrapper: ValueError), escaped the refusals kept, and the run waited its whole
    # wait_timeout.
    jobqueue_or_skip()
    workflow, cluster = setup(tmp_path, workers=1, workers_per_node=1)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    monkeypatch.setenv("PATH", str(bin_))  # no system sbatch
    monkeypatch.chdir(tmp_path)
    for sbatch, said in [
        (None, "sbatch not found: cluster slurm submits its workers as batch jobs from a "
               "SLURM login node"),
        ("echo 'all good, nothing to see'", "sbatch refused the worker job(s) of the cluster "
         "file: Could not parse job id from submission command output."),
    ]:  # fmt: skip
        if sbatch:
            (bin_ / "sbatch").write_text(f"#!/bin/sh\n{sbatch}\n")
            (bin_ / "sbatch").chmod(0o755)
        started = time.monotonic()
        with pytest.raises(InputError) as refused:
            rg.workflow.run_workflow(rg.workflow.read_workflow(workflow), cluster=cluster)
        assert time.monotonic() - started < 60  # the cluster file waits 90 s for workers
        assert str(refused.value).startswith(said), str(refused.value)
        assert not (tmp_path / "out").exists()
        if sbatch is None:  # refused before its log folder was made
            assert not (tmp_path / "jobs").exists()


def test_worker_jobs_ended_are_told_from_jobs_never_seen(tmp_path, monkeypatch):
    # A job on another SLURM cluster (--clusters) or PBS server (queue@server) is named by
    # no plain squeue/qstat: it was said to have ended a second after its submission. And
    # job 25's log was looked for as *25*.err, which raygrid-125.err matched first.
    from raygrid.pipeline import batchjobs as clusters

    config = clusters.JobQueueConfig(cluster="slurm", workers=2, log_directory=tmp_path)
    (tmp_path / "raygrid-125.err").write_text("not this one\n")
    (tmp_path / "raygrid-25.err").write_text("Traceback ...\nOSError: no such python\n")
    answers = iter([{}, {"25": "PENDING"}, {"25": "RUNNING", "26": "RUNNING"},
                    {"25": "FAILED", "26": "RUNNING"}, {"26": "COMPLETED"}])  # fmt: skip
    monkeypatch.setattr(clusters, "job_states", lambda config, ids: next(answers))
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the calls' own clock
    ended = clusters.jobs_ended(config, ["25", "26"])
    said = []
    for _ in range(5):
        clock[0] += 5.0  # squeue is asked at most every 5 s
        said.append(ended())
    assert said[:4] == [None] * 4
    assert said[4] == (
        f"the worker jobs 25, 26 ended: see {tmp_path / 'raygrid-25.err'}; it ends:\n"
        "  Traceback ...\n  OSError: no such python"
    )
    # Their walltime: said as such (its log ends in the workers' own closing lines).
    answers = iter([{"25": "RUNNING None"}, {"25": "TIMEOUT None"}])
    ended = clusters.jobs_ended(config, ["25"])
    clock[0] += 5.0
    assert ended() is None
    clock[0] += 5.0
    assert ended() == (
        "the worker job 25 ended (TIMEOUT: its walltime, 01:00:00 in the cluster file, ran "
        f"out): see {tmp_path / 'raygrid-25.err'}"
    )
    # A job its partition cannot start: said once, as a warning, and waited for.
    answers = iter([{"25": "PENDING PartitionNodeLimit"}] * 2)
    warned = []
    ended = clusters.jobs_ended(config, ["25"], warned.append)
    for _ in range(2):
        clock[0] += 5.0
        assert ended() is None
    assert warned == [
        "warning: worker job 25 is pending for PartitionNodeLimit: it asks for more nodes "
        "than the partition gives a job, or nodes that are down (workers / workers_per_node "
        "nodes), so it may never start; scancel 25 and change the cluster file"
    ]


def test_importing_dask_jobqueue_keeps_the_ctrl_c_handler():
    # dask_jobqueue.runner sets SIGINT to sys.exit() as it is imported: Ctrl-C of `raygrid
    # run --cluster` exited with status 0 and no word, its store part-written.
    jobqueue_or_skip()
    code = (
        "import signal, sys\n"
        "def mine(*args): pass\n"
        "signal.signal(signal.SIGINT, mine)\n"
        "from raygrid.pipeline.clusterfile import JobQueueConfig\n"
        "from raygrid.pipeline.cluster import _import_jobqueue\n"
        "_import_jobqueue(JobQueueConfig(cluster='slurm'))\n"
        "assert 'dask_jobqueue.runner' in sys.modules\n"
        "print(signal.getsignal(signal.SIGINT) is mine)\n"
    )
    kept = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert kept.stdout == "True\n", kept.stdout + kept.stderr


@pytest.mark.slurm
@needs_slurm
def test_ctrl_c_of_a_run_waiting_for_its_worker_jobs_stops_it_as_an_interrupt(tmp_path):
    import signal

    jobqueue_or_skip()
    workflow, cluster = setup(tmp_path, workers=1, workers_per_node=1)
    exe = Path(sys.executable).parent / "raygrid"
    with ctrl_c_taken():
        run = subprocess.Popen(
            [str(exe), "run", str(workflow), "--cluster", str(cluster), "--no-progress"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    said = run.stdout.readline() + run.stdout.readline()  # the run, then its jobs
    assert "submitted 1 slurm worker job(s) (job " in said, said
    job = said.split("(job ")[1].split(")")[0]
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, said + out + err
    assert err.startswith("interrupted: "), err
    left = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout  # the worker job cancelled


def test_worker_jobs_some_refused_are_said_and_the_rest_waited_for():
    from raygrid.pipeline.cluster import _wait_for_jobs
    from raygrid.pipeline.clusterfile import JobQueueConfig

    class Jobs:
        submitted, refused = ["41"], ["qsub: Job exceeds queue resource limits"]

    class Client:
        def wait_for_workers(self, n, timeout):
            assert n == 1 and 0 < timeout <= 90

    said = []
    config = JobQueueConfig(cluster="pbs", workers=2, wait_timeout=90)
    _wait_for_jobs(Client(), config, Jobs, said.append)
    # None arrives: said with the cluster file's whole wait, not what was left of it.
    never = JobQueueConfig(cluster="slurm", workers=1, wait_timeout=1.5, log_directory="jobs")

    class Late(Jobs):
        submitted, refused = ["999999999"], []

    class Empty:
        def wait_for_workers(self, n, timeout):
            time.sleep(timeout)
            raise TimeoutError

        def sync(self, *args, **kwargs):
            return {"workers": {}}

    with pytest.raises(InputError) as late:
        _wait_for_jobs(Empty(), never, Late, said.append)
    assert str(late.value) == (
        "no Dask worker arrived within 1.5 s (from the worker jobs); are they still queued "
        "(squeue)? Their logs go to jobs"
    )
    said.pop()
    assert said == [
        "qsub refused 1 of the 2 worker job(s) of the cluster file: qsub: Job exceeds queue "
        "resource limits",
        "submitted 1 pbs worker job(s) (job 41)",
    ]


def test_worker_jobs_are_listed_in_the_order_submitted():
    # The batch system's answers come in any order: "(jobs 25, 24)" read as a mistake.
    from raygrid.pipeline.cluster import _wait_for_jobs
    from raygrid.pipeline.clusterfile import JobQueueConfig

    class Jobs:
        submitted, refused = ["100", "99", "101"], []

    class Client:
        def wait_for_workers(self, n, timeout):
            pass

    said = []
    _wait_for_jobs(Client(), JobQueueConfig(cluster="slurm", workers=3), Jobs, said.append)
    assert said == ["submitted 3 slurm worker job(s) (jobs 99, 100, 101)"]


@pytest.mark.parametrize(
    "where, message",
    [
        ("workdir", "the job folder"),
        ("workflow", "the job folder .*<workflow name>"),
        ("job_name", "job_name 'my survey'"),
        ("queue", "queue 'gpu short'"),
        ("account", "account 'geo lab'"),
    ],
)
def test_pbs_refuses_whitespace_it_cannot_quote(tmp_path, where, message):
    # A #PBS -o path with a space was written unquoted (cut at the space); qsubs differ on
    # quotes in directives, so it is refused before any job file is written.
    workdir = tmp_path / ("job runs" if where == "workdir" else "runs")
    workdir.mkdir()
    config = {"job_name": "my survey", "queue": "gpu short", "account": "geo lab"}
    workflow, cluster = setup(workdir, "pbs", **{k: v for k, v in config.items() if k == where})
    if where == "workflow":
        workflow = workflow.rename(workdir / "my survey.yaml")
    with pytest.raises(InputError, match=f"{message}.* holds whitespace"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=workdir)
    assert not (workdir / "jobs").exists()


def test_slurm_refuses_a_path_it_cannot_quote_before_writing_anything(tmp_path):
    # A #SBATCH value is double-quoted where it holds a space: one with a double quote too
    # is refused, and the job folder (scheduler.yaml) was already written.
    workdir = tmp_path / 'job "runs" here'
    workdir.mkdir()
    workflow, cluster = setup(workdir, "slurm")
    with pytest.raises(InputError, match="holds both a space and a double quote"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=workdir)
    assert not (workdir / "jobs").exists()


def test_a_cpu_workflow_submitted_with_gpus_is_warned_before_the_queue(tmp_path):
    # backend cpu on slurm-gpu.yaml: 8 GPUs held idle for the allocation, without a word.
    workflow, cluster = setup(tmp_path, gpus_per_worker=1)
    with pytest.warns(rg.InputWarning) as said:
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    # (InputWarnings only: pytest.warns records every warning, and one from an earlier
    # test's objects collected meanwhile failed this once under xdist.)
    assert [str(w.message) for w in said if issubclass(w.category, rg.InputWarning)] == [
        f"{cluster}: gpus_per_worker: 1 asks 1 GPU for each of the 2 workers (2 in all), and "
        "backend cpu leaves them idle: set compute.backend: cuda (or auto) in the workflow, or "
        "gpus_per_worker: 0 in the cluster file"
    ]


@pytest.mark.parametrize("gpus, backend", [(1, "cuda"), (0, "cpu")])
def test_backend_auto_is_checked_as_the_jobs_nodes_resolve_it(tmp_path, monkeypatch, gpus, backend):
    # Resolved as on the login node (no GPU: the CPU), a store a GPU job had made was
    # refused as another workflow's ("what differs is the backend") on resubmission.
    from raygrid.pipeline import submit

    workflow, cluster = setup(tmp_path, gpus_per_worker=gpus, workers_per_node=1)
    auto = WORKFLOW | {"compute": {"batch": 2, "backend": "auto"}}
    workflow.write_text(yaml.safe_dump(auto))
    (tmp_path / "out" / "survey.zarr").mkdir(parents=True)  # a store to resume: checked
    (tmp_path / "out" / "survey.zarr" / "zarr.json").write_text("{}")  # (empty: none)
    checked = []
    monkeypatch.setattr(
        submit, "check_store", lambda spec, fingerprint, **_: checked.append(fingerprint)
    )
    submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    resolved = WORKFLOW | {"compute": {"batch": 2, "backend": backend}}
    job = rg.workflow.Workflow.model_validate(resolved)
    assert checked == [rg.workflow.prepare_workflow(job, here=False).fingerprint]


@pytest.mark.parametrize("gpus, asked, backend", [(1, "auto", "cuda"), (1, "cuda", "cuda"),
                                                  (0, "auto", "cpu")])  # fmt: skip
def test_run_from_a_login_node_checks_the_backend_for_its_worker_jobs(
    tmp_path, monkeypatch, gpus, asked, backend
):
    # `raygrid run --cluster` with single-GPU worker jobs, from a login node without a GPU:
    # backend cuda was refused ("no usable NVIDIA GPU"), though the jobs have one, and auto
    # resolved to the CPU, leaving their GPUs idle.
    from raygrid.pipeline import survey

    workflow, cluster = setup(tmp_path, workers=1, workers_per_node=1, gpus_per_worker=gpus)
    workflow.write_text(yaml.safe_dump(WORKFLOW | {"compute": {"batch": 2, "backend": asked}}))
    resolved = []

    def prepare(*args, **kwargs):
        prepared = rg.workflow.prepare_workflow(*args, **kwargs)
        resolved.append(prepared.options.backend)
        return prepared

    def connect(config, echo):
        raise InputError("no cluster in this test")

    monkeypatch.setattr(survey, "prepare_workflow", prepare)
    monkeypatch.setattr(survey, "connect", connect)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no cluster in this test"):
        rg.workflow.run_workflow(rg.workflow.read_workflow(workflow), cluster=cluster)
    assert resolved == [backend]


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
@pytest.mark.parametrize("name", ["survey$v2-$(date)", "survey$HOME"])
def test_paths_with_shell_characters_reach_the_job_literally(tmp_path, kind, name):
    # A folder named survey$v2 made the job die under set -u ("v2: unbound variable"), and
    # one holding $(...) ran it: only a cluster file's own values expand. (PBS refuses
    # spaces in paths.)
    folder = tmp_path / name
    folder.mkdir()
    workflow, cluster = setup(folder, kind, python="$HOME/env/bin/python")
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=folder)
    for script in (p for p in job.directory.iterdir() if p.suffix == ".sh"):
        for line in script.read_text().splitlines():
            if "--scheduler-file" not in line and "cli run" not in line:
                continue
            command = line.strip().rstrip("\\&").split(" >> ")[0].replace(" $overwrite", "")
            # The words bash would pass, printed by bash itself (nothing expanded but $HOME).
            words = subprocess.run(
                ["bash", "-uc", f"printf '%s\\n' {command}"], capture_output=True, text=True,
                cwd=tmp_path, env={**os.environ, "HOME": "/home/u"},
            )  # fmt: skip
            assert words.returncode == 0, (line, words.stderr)
            printed = words.stdout.splitlines()
            assert printed[0] == "/home/u/env/bin/python", line
            assert any(w.startswith(str(folder)) for w in printed), (line, printed)


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_a_local_directory_variable_is_expanded_on_the_node(tmp_path, kind):
    # configs/slurm-gpu.yaml suggests "$TMPDIR": single-quoted, every worker used a folder
    # literally named $TMPDIR in the shared working directory.
    workflow, cluster = setup(tmp_path, kind, local_directory="$TMPDIR/dask")
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    scripts = "".join(p.read_text() for p in job.directory.iterdir() if p.suffix == ".sh")
    assert '--local-directory "$TMPDIR/dask"' in scripts
    assert "'$TMPDIR" not in scripts
    # ~ is the node's home, as under run --cluster (quoted, it was a folder named "~").
    workflow, cluster = setup(tmp_path, kind, local_directory="~/scratch")
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path / "home")
    scripts = "".join(p.read_text() for p in job.directory.iterdir() if p.suffix == ".sh")
    assert '--local-directory "$HOME/scratch"' in scripts and "'~" not in scripts
    # One double quotes cannot hold is refused, not made a literal folder without a word.
    workflow, cluster = setup(tmp_path, kind, local_directory='$TMPDIR/"dask"')
    with pytest.raises(InputError, match="cannot hold with a quote, backslash or backtick"):
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path / "other")


def test_submit_takes_the_workflows_own_cluster_file_and_names_the_job_after_it(tmp_path):
    # survey-3d.yaml names configs/slurm-gpu.yaml in compute.cluster "for raygrid submit",
    # which then refused to run without --cluster; every job was named "raygrid" in squeue.
    workflow, cluster = setup(tmp_path)
    text = yaml.safe_load(workflow.read_text())
    text["compute"]["cluster"] = str(cluster)
    (tmp_path / "my survey.yaml").write_text(yaml.safe_dump(text))
    job = submit_workflow(tmp_path / "my survey.yaml", dry_run=True, workdir=tmp_path)
    script = job.script.read_text()
    assert "#SBATCH --job-name=raygrid-my_survey" in script
    assert f"--cluster {cluster}" in script  # what the job's messages say resumes it
    named = yaml.safe_load(cluster.read_text()) | {"job_name": "vp-table"}
    (tmp_path / "named.yaml").write_text(yaml.safe_dump(named))
    job = submit_workflow(workflow, tmp_path / "named.yaml", dry_run=True, workdir=tmp_path)
    assert "#SBATCH --job-name=vp-table" in job.script.read_text()
    with pytest.raises(InputError, match=r"survey.yaml: raygrid submit needs a slurm or pbs "
                       "cluster file: give --cluster, or name it in the workflow's"):  # fmt: skip
        submit_workflow(workflow, dry_run=True, workdir=tmp_path)


@pytest.mark.parametrize(
    ("kind", "directive", "option", "key"),
    [("slurm", "--output=elsewhere-%j.log", "--output", "log_directory"),
     ("slurm", "-o x.log", "-o", "log_dir"), ("slurm", "--time=2:00:00", "--time", "walltime"),
     ("slurm", "-J name", "-J", "job_name"), ("slurm", "-t48:00:00", "-t", "walltime"),
     ("slurm", "-Jother", "-J", "job_name"), ("slurm", "--out=/tmp/x", "--output", "log_dir"),
     ("slurm", "--part gpu", "--partition", "queue"),
     ("slurm", "--open-mode=truncate", "--open-mode", "nothing: raygrid appends"),
     ("pbs", "-o /tmp/x.log", "-o", "log_directory"), ("pbs", "-N name", "-N", "job_name"),
     ("pbs", "-l walltime=48:00:00", "-l walltime", "walltime"),
     ("pbs", "-l select=2:ncpus=4", "-l select", "workers"),
     ("pbs", "-lwalltime=48:00:00", "-l walltime", "walltime"),
     ("pbs", "-lselect=1:ncpus=1", "-l select", "workers")],
)  # fmt: skip
def test_directives_raygrid_writes_are_refused_naming_the_key(
    tmp_path, kind, directive, option, key
):
    # A user's --output won over raygrid's: the job's log went elsewhere, and the run still
    # named its own folder for it; short options with their values attached and sbatch's
    # abbreviations of long ones went through, as did PBS's -l walltime.
    _, cluster = setup(tmp_path, kind=kind, job_directives=[directive])
    with pytest.raises(InputError, match=f"raygrid writes {option} itself from {key}"):
        rg.clusterfile.read_cluster(cluster)
    fine = {
        "slurm": ["--constraint=h100", "--gpus=1", "-C h100", "--exclusive", "-q normal",
                  "--mem-per-cpu=2G", "--time-min=30", "--gres=gpu:1"],
        "pbs": ["-l place=scatter", "-W group_list=geo", "-V", "-m abe", "-P proj"],
    }[kind]  # fmt: skip
    _, cluster = setup(tmp_path, kind=kind, job_directives=fine)
    assert rg.clusterfile.read_cluster(cluster).job_directives == fine


def test_the_software_record_names_raygrids_own_checkout_only(tmp_path, monkeypatch):
    # A wheel installed in a project's .venv asked git from inside the project: the
    # project's commit (and its edits) was recorded as raygrid's.
    from raygrid.pipeline import version

    project = tmp_path / "project"
    installed = project / ".venv" / "lib" / "site-packages" / "raygrid"
    (installed / "pipeline").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(project)]
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "a.txt").write_text("a")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "theirs"], check=True)
    monkeypatch.setattr(version, "__file__", str(installed / "pipeline" / "version.py"))
    made = version.software()
    assert made.startswith(f"raygrid {rg.__version__};") and "(git" not in made
    # raygrid's own checkout (the repo root is the package) names its commit.
    monkeypatch.setattr(version, "__file__", str(project / "pipeline" / "version.py"))
    commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    assert version.software().startswith(f"raygrid {rg.__version__} (git {commit});")


def test_a_batch_system_out_of_reach_is_said_so_not_blamed_on_the_job(tmp_path):
    from raygrid.pipeline.batchjobs import refusal_hint

    down = "sbatch: error: Could not establish a configuration source"
    assert "controller cannot be reached from here" in refusal_hint(down)
    assert refusal_hint("sbatch: error: invalid partition specified: gpu") == (
        "check its queue, account, walltime and memory"
    )


def test_submit_exits_3_for_a_job_that_may_never_start(tmp_path, monkeypatch):
    # It exited 0, the job left pending: a script submitting surveys could not tell.
    from click.testing import CliRunner

    from raygrid.pipeline import submit
    from raygrid.pipeline.cli import main

    stuck = submit.Job(tmp_path / "job.sh", tmp_path, "sbatch job.sh", "14", "job 14 is pending")
    monkeypatch.setattr(submit, "submit_workflow", lambda *a, **k: stuck)
    result = CliRunner().invoke(main, ["submit", "survey.yaml", "--cluster", "c.yaml"])
    assert result.exit_code == 3 and "submitted job 14" in result.output
    monkeypatch.setattr(submit, "submit_workflow", lambda *a, **k: replace(stuck, stuck=None))
    assert CliRunner().invoke(main, ["submit", "survey.yaml"]).exit_code == 0


def test_a_worker_job_ending_while_others_run_is_said_once(monkeypatch):
    # `scancel` of one of two worker jobs (or a lost node) mid-run: the run went on with
    # one worker and said nothing. Losing them all is said by jobs_ended (the run stops).
    from raygrid.pipeline import batchjobs as clusters

    config = clusters.JobQueueConfig(cluster="slurm", workers=3)
    answers = iter([
        {"25": "RUNNING", "26": "RUNNING", "27": "RUNNING"},
        {"25": "CANCELLED by 0", "26": "RUNNING", "27": "RUNNING"},
        {"25": "CANCELLED by 0", "26": "RUNNING", "27": "RUNNING"},
        {"26": "RUNNING"},  # 25 forgotten, 27 gone unnamed (a lost node)
        {"26": "COMPLETED"},
    ])  # fmt: skip
    monkeypatch.setattr(clusters, "job_states", lambda config, ids: next(answers))
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    lost = clusters.jobs_lost(config, ["25", "26", "27"])
    said = [lost()]  # (not yet asked: every 30 s at most)
    for _ in range(5):
        clock[0] += 30.0
        said.append(lost())
    assert said == [
        None, None,
        "worker job 25 (CANCELLED) ended: 2 of the 3 worker jobs left; the run goes on with "
        "fewer workers (the tasks they held run again elsewhere)",
        None,
        "worker job 27 (gone) ended: 1 of the 3 worker jobs left; the run goes on with fewer "
        "workers (the tasks they held run again elsewhere)",
        None,  # all ended: said by jobs_ended, as the run stops
    ]  # fmt: skip


def test_a_runs_progress_says_what_its_watch_notes():
    import io

    from raygrid.pipeline.progress import Progress

    notes = iter(["worker job 25 (CANCELLED) ended: ..."])
    stream = io.StringIO()
    bar = Progress(3, 0, True, stream, tick=0.01, noted=lambda: next(notes, None))
    with bar.ticking():
        time.sleep(0.2)
        bar.update(3)
    assert stream.getvalue().count("worker job 25 (CANCELLED) ended: ...\n") == 1
    failing = Progress(3, 0, False, io.StringIO(), tick=0.01, noted=lambda: 1 / 0)
    with failing.ticking():  # a failing watch says nothing and stops nothing
        time.sleep(0.05)
        failing.update(3)


@pytest.mark.parametrize(
    ("state", "refused"),
    [
        ("PENDING Priority", True),
        ("REQUEUE_HOLD JobHeldAdmin", True),  # held after a requeue: it runs again later
        ("STOPPED None", True),
        ("H", True),  # PBS: held
        ("TIMEOUT None", False),
        ("X", False),  # PBS Pro: a finished subjob
        ("finished", False),
    ],
)
def test_a_queued_jobs_state_is_read_by_one_rule(tmp_path, monkeypatch, state, refused):
    # The refusal of a store a queued job will write listed the live states, the watch of
    # worker jobs the ended ones: a state in neither (REQUEUE_HOLD) was a job gone for one
    # and alive for the other. One rule now, batchjobs.job_ended.
    import json

    from raygrid.pipeline import batchjobs as clusters
    from raygrid.pipeline.batchjobs import store_record
    from raygrid.pipeline.submit import refuse_if_queued

    _, path = setup(tmp_path)
    config = rg.clusterfile.read_cluster(path)
    store = tmp_path / "out" / "survey.zarr"
    record = store_record(store)
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"store": str(store.resolve()), "job_id": "41"}))
    monkeypatch.setattr(clusters, "job_states", lambda config, ids: {"41": state})
    assert clusters.job_ended(state) is not refused
    if refused:
        with pytest.raises(InputError, match=r"job 41 .* for the same store"):
            refuse_if_queued(config, tmp_path, store)
    else:
        refuse_if_queued(config, tmp_path, store)


@pytest.mark.parametrize(
    "hidden, said",
    [
        (["cryptography"], "cannot import cryptography (tls: true"),
        (
            ["raygrid", "cryptography"],
            "cannot import raygrid (its command line, with click and the rest) nor cryptography",
        ),
        (["click"], "cannot import raygrid (its command line"),
        (["distributed"], "cannot import distributed (the job's Dask scheduler"),
        ([], None),
    ],
)
def test_a_node_interpreter_lacking_what_the_job_runs_first_is_warned_about(tmp_path, hidden, said):
    # A `python:` without cryptography stopped the job as it started, after its queue wait.
    stub = tmp_path / "python3-nodes"
    blocked = "".join(f"sys.modules[{name!r}] = None; " for name in hidden)
    stub.write_text(f'#!/bin/sh\nexec {sys.executable} -c "import sys; {blocked}\n$2"\n')
    stub.chmod(0o755)
    for tls in (True, False):
        workflow, cluster = setup(tmp_path, python=str(stub), tls=tls)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
        told = [str(w.message) for w in caught if "cannot import" in str(w.message)]
        expected = said if tls or "cryptography" not in hidden else (
            "cannot import raygrid (" if "raygrid" in hidden else None
        )  # fmt: skip
        if expected is None:
            assert told == []
        else:
            assert len(told) == 1 and expected in told[0], told
            assert f"python: {stub} cannot import" in told[0]


def test_info_of_a_store_a_queued_job_will_make_names_the_job(tmp_path, monkeypatch):
    # "store ... does not exist" was all it said while the job waited in the queue.
    import json

    from raygrid.pipeline import batchjobs
    from raygrid.pipeline.inspect import describe

    workflow, cluster = setup(tmp_path)
    job = submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)  # its files
    store = tmp_path / "out" / "survey.zarr"
    record = batchjobs.store_record(store)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"store": str(store.resolve()), "job_id": "41",
                                  "directory": str(job.directory)}))  # fmt: skip
    monkeypatch.setattr(batchjobs.shutil, "which", lambda command: f"/usr/bin/{command}")
    monkeypatch.setattr(batchjobs, "job_states", lambda config, ids: {"41": "PENDING Priority"})
    # Not an error while it waits or runs (it was, and read like a failure).
    assert describe(store) == (
        f"store: {store} (not made yet)\nstatus: its batch job will make it: job 41 (slurm), "
        f"not ended: PENDING Priority; its files: {job.directory}"
    )
    monkeypatch.setattr(batchjobs, "job_states", lambda config, ids: {"41": "RUNNING None"})
    assert "job 41 (slurm), not ended: RUNNING; its files" in describe(store)  # (no "None")
    monkeypatch.setattr(batchjobs, "job_states", lambda config, ids: {})
    ended = r"does not exist: the batch job submitted for it ended without making it: job 41 "
    with pytest.raises(InputError, match=ended + r"\(slurm\), ended \(squeue no longer names"):
        describe(store)
    monkeypatch.setattr(batchjobs, "job_states", lambda config, ids: {"41": "FAILED None"})
    with pytest.raises(
        InputError, match=r"ended without making it: job 41 \(slurm\), ended: FAILED"
    ):
        describe(store)
    monkeypatch.setattr(batchjobs.shutil, "which", lambda command: None)
    assert "job 41 (slurm), its state unknown here (squeue not found)" in describe(store)


def test_an_interpreter_that_does_not_answer_is_said_unchecked_and_stopped(tmp_path, monkeypatch):
    # A slow wrapper held raygrid submit for a minute without a word, and its children
    # were left running.
    from raygrid.pipeline import submit

    marker = f"raygrid-probe-{os.getpid()}"
    stub = tmp_path / "python-slow"
    stub.write_text(f"#!/bin/sh\nsleep 60 # {marker}\n")
    stub.chmod(0o755)
    monkeypatch.setattr(submit, "INTERPRETER_WAIT_S", 1.0)
    workflow, cluster = setup(tmp_path, python=str(stub), tls=False)
    start = time.monotonic()
    with pytest.warns(rg.InputWarning, match=r"did not answer within 1 s here: not checked for "
                      r"what the job imports \(raygrid, distributed\)"):  # fmt: skip
        submit_workflow(workflow, cluster, dry_run=True, workdir=tmp_path)
    assert time.monotonic() - start < 20
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the probe's processes were left running"


def test_info_names_the_job_after_the_status_whatever_follows(tmp_path, monkeypatch):
    # With --verify's damaged chunks the summary is two lines: the job's line was put
    # before a "sources done:" line it added, empty.
    from raygrid.pipeline import inspect

    store = tmp_path / "s.zarr"
    store.mkdir()
    monkeypatch.setattr(inspect, "recorded_job", lambda path: ("job 41 (slurm), x", True))
    monkeypatch.setattr(inspect, "_describe", lambda *a: "store: s\nstatus: damaged: ...")
    assert inspect.describe(store, verify=True) == (
        "store: s\nstatus: damaged: ...\nlast batch job: job 41 (slurm), x"
    )
    monkeypatch.setattr(inspect, "_describe", lambda *a: "store: s\nstatus: ok\nsources done: 1")
    assert inspect.describe(store).split("\n") == [
        "store: s", "status: ok", "last batch job: job 41 (slurm), x", "sources done: 1"
    ]  # fmt: skip
