"""Cluster files: every shipped one validates, errors have lines, clusters start and close."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest
import yaml

from raygrid.pipeline.cluster import connect, jobqueue_kwargs
from raygrid.pipeline.clusterfile import JobQueueConfig, LocalConfig, SchedulerConfig, read_cluster
from raygrid.pipeline.errors import InputError

from clusters import jobqueue_or_skip

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def test_configs_are_all_there():
    names = {p.name for p in CONFIGS}
    assert {"local.yaml", "local-cuda.yaml", "slurm-gpu.yaml", "pbs-gpu.yaml",
            "scheduler.yaml"} <= names  # fmt: skip


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    config = read_cluster(path)
    assert config.cluster in ("local", "local-cuda", "slurm", "pbs", "scheduler")


def test_an_account_of_digits_is_told_to_be_quoted(tmp_path):
    # YAML reads `account: 0189` as the number 189 (YAML 1.2; 1.1 read it as text but 0123
    # as octal 83): a text field refuses it, saying how to keep it as written.
    text = (ROOT / "configs" / "slurm-gpu.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(re.sub(r"(?m)^account: null", "account: 0189", text))
    with pytest.raises(InputError, match=r"account: must be text, got the number 189: put the"):
        read_cluster(path)
    path.write_text(re.sub(r"(?m)^account: null", "account: '0189'", text))
    assert read_cluster(path).account == "0189"


def test_default_is_a_local_cluster():
    assert isinstance(read_cluster(None), LocalConfig)


@pytest.mark.parametrize(
    "text, message",
    [
        ("cluster: local\nn_worker: 2\n", ":2: n_worker: Extra inputs are not permitted"),
        # Spelled like a union tag, it was named nowhere, at the top level's line.
        (
            "cluster: local\nn-workers: 2\n",
            ":2: n-workers: Extra inputs are not permitted (unknown "
            "key; raygrid's keys use underscores, not hyphens; did you mean 'n_workers'?)",
        ),
        ("cluster: local\nn_workers: two\n", ":2: n_workers: Input should be a valid integer"),
        ("cluster: kubernetes\n", ":1: (top level): cluster must be one of local, local-cuda"),
        ("cluster: slurm\nworkers: 3\nworkers_per_node: 2\n", "must be a multiple of"),
        ("cluster: scheduler\n", "give exactly one of address and scheduler_file"),
        ("- local\n", "a cluster file is a YAML mapping"),
        # Sizes, addresses and walltimes are checked when the file is read (validate), not
        # when a worker or a job starts.
        (
            "cluster: local\nmemory_limit: lots\n",
            ":2: memory_limit: Value error, 'lots' is not a size",
        ),
        ("cluster: local\ndashboard_address: nonsense\n", "'nonsense' is not an address"),
        ("cluster: slurm\nmemory_per_worker: 60\n", "60 has no units: give a size as text"),
        ("cluster: pbs\nwalltime: 2 hours\n", "'2 hours' is not a walltime"),
        # qsub refuses SLURM's days form; ports above 65535 were replaced by Dask, unsaid.
        (
            "cluster: pbs\nwalltime: 1-06:30\n",
            ":2: walltime: Value error, '1-06:30' is SLURM's days-hours form: PBS reads "
            "hours:minutes:seconds, here '30:30:00'",
        ),
        ("cluster: local\ndashboard_address: ':99999'\n", "':99999': port 99999 is above 65535"),
        ("cluster: scheduler\naddress: tcp://h:70000\n", "'tcp://h:70000': port 70000 is above"),
        ("cluster: slurm\nwalltime: 7200\n", "7200 has no units: give the walltime as text"),
        ("cluster: local-cuda\nrmm_pool_size: huge\n", "'huge' is not a size"),
        # Workers their nannies kill as they start ("Stream is closed", restart loops).
        (
            "cluster: local\nmemory_limit: 200MB\n",
            ":2: memory_limit: Value error, '200MB' is less than a worker needs before any "
            "data: about 250.00 MiB",
        ),
        ("cluster: slurm\nmemory_per_worker: 300MB\n", "'300MB' is less than a worker needs"),
        # Written into the job's header: a newline ended a #SBATCH line there (sbatch then
        # ignored every directive after it) and ran the rest as shell; "" dropped the line.
        (
            'cluster: slurm\njob_name: "a\\necho INJECTED"\n',
            ":2: job_name: 'a\\necho INJECTED' holds a line break or control character",
        ),
        ('cluster: pbs\nqueue: "debug\\nrm -rf x"\n', ":2: queue: 'debug\\nrm -rf x' holds a"),
        ('cluster: slurm\njob_directives: ["--x=1", "a\\tb"]\n', "holds a line break or contr"),
        # A line pasted whole: "#SBATCH #SBATCH --exclusive", ignored by sbatch silently.
        (
            'cluster: slurm\njob_directives: ["#SBATCH --exclusive"]\n',
            ":2: job_directives: '#SBATCH --exclusive': give the option alone ('--exclusive')",
        ),
        ('cluster: slurm\nqueue: ""\n', ":2: queue: empty: give a value, or leave the key out"),
        ("cluster: slurm\nwalltime: '0'\n", "'0' is no time at all"),  # to SLURM: no limit
        ("cluster: pbs\nwalltime: '00:00:00'\n", "'00:00:00' is no time at all"),
    ],
)
def test_bad_cluster_files(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        read_cluster(path)
    assert message in str(error.value)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "text",
    [
        "cluster: local\nmemory_limit: 512MiB\ndashboard_address: 127.0.0.1:0\n",
        "cluster: local\ndashboard_address: '[::1]:8787'\n",
        "cluster: slurm\nwalltime: 2-12:00:00\nmemory_per_worker: 1.5 GB\n",
        "cluster: slurm\nwalltime: '90'\n",
    ],
)
def test_good_sizes_addresses_and_walltimes(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    read_cluster(path)


def test_a_local_cluster_that_cannot_start_says_why(tmp_path):
    """An address this machine does not have: a clear InputError, nothing left running."""
    import psutil

    def children() -> set:
        # Not multiprocessing's resource tracker: one per process, started before a local
        # cluster spawns workers (raygrid.pipeline.interrupts), it ends with its parent.
        return {
            child for child in psutil.Process().children(recursive=True)
            if "resource_tracker" not in " ".join(child.cmdline())
        }  # fmt: skip

    before = children()
    config = LocalConfig(cluster="local", n_workers=1, host="10.254.254.254",
                         dashboard_address=None)  # fmt: skip
    with pytest.raises(InputError, match=r"the local cluster did not start: OSError: .*address"):
        with connect(config, echo=lambda line: None):
            pass
    assert children() <= before


def test_one_gpu_is_named_by_its_number(tmp_path):
    # CUDA_VISIBLE_DEVICES: 0 (an integer in YAML) was refused as "not a valid string".
    path = tmp_path / "gpu.yaml"
    path.write_text("cluster: local-cuda\nCUDA_VISIBLE_DEVICES: 0\n")
    assert read_cluster(path).CUDA_VISIBLE_DEVICES == 0
    path.write_text("cluster: local-cuda\nCUDA_VISIBLE_DEVICES: -1\n")
    with pytest.raises(InputError, match="CUDA_VISIBLE_DEVICES"):
        read_cluster(path)


def test_jobqueue_arguments():
    config = read_cluster(ROOT / "configs" / "slurm-gpu.yaml")
    assert isinstance(config, JobQueueConfig) and config.nodes == 2
    kwargs = jobqueue_kwargs(config)
    assert kwargs["processes"] == 4 and kwargs["cores"] == 32
    assert kwargs["job_extra_directives"][0] == "--gres=gpu:4"
    assert kwargs["memory"] == "240000000000B"
    pbs = jobqueue_kwargs(read_cluster(ROOT / "configs" / "pbs-gpu.yaml"))
    assert pbs["resource_spec"] == "select=1:ncpus=32:ngpus=4:mem=240000000000B"
    # A GPU worker runs one thread, as under raygrid submit (it ran cores_per_worker).
    assert kwargs["worker_extra_args"] == ["--nthreads", "1"]
    cpu = config.model_copy(update={"gpus_per_worker": 0})
    assert "worker_extra_args" not in jobqueue_kwargs(cpu)
    # A prologue line that fails stops the job, as in raygrid submit's scripts.
    assert kwargs["job_script_prologue"] == ["set -e", *config.prologue, "set +e"]
    assert jobqueue_kwargs(config.model_copy(update={"prologue": []}))["job_script_prologue"] == []
    # dask-jobqueue writes these into its job scripts unquoted: a space cut them.
    for key, value in [("job_name", "my survey"), ("log_directory", Path("my jobs"))]:
        with pytest.raises(InputError, match=f"{key} '{value}' holds whitespace, which dask-"):
            jobqueue_kwargs(config.model_copy(update={key: value}))


@pytest.mark.parametrize("name", ["slurm-gpu.yaml", "pbs-gpu.yaml"])
def test_jobqueue_gpu_workers_sharing_a_job_is_refused(name):
    # Refused before dask-jobqueue is imported or any job submitted, naming the way out.
    config = read_cluster(ROOT / "configs" / name)
    with pytest.raises(InputError) as error, connect(config):
        pass
    message = str(error.value)
    assert "`raygrid run` does not start this" in message
    assert "raygrid submit WORKFLOW --cluster FILE" in message
    assert "workers_per_node: 1" in message


def _commands(text: str, command: str) -> list[str]:
    """Each mention of ``raygrid COMMAND ...`` in a file, up to a backtick, # or the next."""
    flat = re.sub(r"\s*\n\s*#?\s*", " ", text)  # comments and wrapped lines joined
    return re.findall(rf"raygrid {command}((?:(?!raygrid)[^`#])*)", flat)


DOCUMENTS = [ROOT / "README.md", *CONFIGS, *sorted((ROOT / "workflows").glob("*.yaml"))]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_gpu_batch_configs_are_documented_for_submit_only(path):
    # slurm-gpu.yaml and pbs-gpu.yaml share each job's GPUs between its workers, which
    # `raygrid run` refuses: no file may tell people to `raygrid run` them.
    for command in _commands(path.read_text(), "run"):
        assert "slurm-gpu" not in command and "pbs-gpu" not in command, command


def test_gpu_batch_configs_and_survey_3d_say_how_to_run_them():
    for name in ("slurm-gpu.yaml", "pbs-gpu.yaml"):
        text = (ROOT / "configs" / name).read_text()
        assert f" WORKFLOW --cluster configs/{name}" in _commands(text, "submit")[0]
    survey = (ROOT / "workflows" / "survey-3d.yaml").read_text()
    header = survey.split("model:")[0]
    assert "workflows/survey-3d.yaml --cluster configs/slurm-gpu.yaml" in " ".join(
        _commands(header, "submit")
    )
    assert any(
        command.startswith(" workflows/survey-3d.yaml --cluster configs/local-cuda.yaml ")
        for command in _commands(header, "run")
    )
    # Its compute.cluster is one `raygrid run` refuses, and the header says so.
    assert "cluster: configs/slurm-gpu.yaml" in survey
    assert "only `raygrid submit` runs" in " ".join(header.split())


def test_local_cluster_prints_its_dashboard_and_closes():
    lines = []
    config = LocalConfig(cluster="local", n_workers=1, dashboard_address=":0")
    with connect(config, echo=lines.append) as client:
        assert client.submit(lambda x: x + 1, 1).result() == 2
        assert len(client.nthreads()) == 1
        # raygrid's scheduler settings: no work stealing, no replica dropping.
        extensions = client.run_on_scheduler(
            lambda dask_scheduler: {
                "stealing": "stealing" in dask_scheduler.extensions,
                "amm": dask_scheduler.extensions["amm"].running,
            }
        )
        assert extensions == {"stealing": False, "amm": False}
    assert lines and lines[0].startswith("dashboard: http://127.0.0.1:")
    assert client.status == "closed"


def test_a_slow_worker_close_is_quiet_only_for_raygrids_own_cluster():
    # "Worker process still alive after 4.0 seconds, killing" ended successful runs on a
    # busy machine; dropped while raygrid's cluster lives, said again for the user's own.
    import logging

    nanny = logging.getLogger("distributed.nanny")

    def said(message: str) -> bool:
        return bool(nanny.filter(logging.LogRecord(nanny.name, 30, "", 0, message, (), None)))

    slow = "Worker process still alive after 4.0 seconds, killing"
    config = LocalConfig(cluster="local", n_workers=1, processes=False, dashboard_address=":0")
    with connect(config):
        assert not said(slow)
        assert said("Worker exceeded 95% memory budget. Restarting...")
    assert said(slow)


def test_a_reconnect_cancelled_by_the_close_leaves_no_traceback():
    # A lost scheduler (kill -9) printed ~30 lines of distributed.client ERROR traceback
    # (ConnectionRefusedError, then CancelledError in Client._reconnect) before the run's
    # own "the connection to the Dask scheduler was lost ... to resume".
    import asyncio
    import logging
    import sys

    client_log = logging.getLogger("distributed.client")

    def record_of(error_in):
        try:
            error_in()
        except BaseException:
            exc_info = sys.exc_info()
        return logging.LogRecord(client_log.name, 40, "", 0, "", (), exc_info)

    def _reconnect():
        raise asyncio.CancelledError

    def elsewhere():
        raise asyncio.CancelledError

    config = LocalConfig(cluster="local", n_workers=1, processes=False, dashboard_address=":0")
    with connect(config):
        assert not client_log.filter(record_of(_reconnect))
        assert client_log.filter(record_of(elsewhere))  # other cancellations are said
        assert client_log.filter(logging.LogRecord(client_log.name, 40, "", 0, "x", (), None))


def test_a_local_cluster_of_threads_in_this_process_starts():
    # processes: false with the default host (127.0.0.1) never started: distributed's
    # in-process transport has no host ("not enough values to unpack").
    config = LocalConfig(cluster="local", n_workers=1, processes=False, dashboard_address=":0")
    for tls, scheme in ((True, "tls"), (False, "tcp")):  # a host: a port, guarded by default
        with connect(config.model_copy(update={"tls": tls})) as client:
            assert client.submit(lambda x: x + 1, 1).result() == 2
            assert client.scheduler.address.startswith(f"{scheme}://127.0.0.1:")
        assert client.status == "closed"


def _listening(pid: int) -> set[str]:
    """Addresses a process (or its children) listens on, ``ip:port``."""
    import psutil

    processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return {
        f"{c.laddr.ip}:{c.laddr.port}"
        for p in processes
        for c in p.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.mark.parametrize("address", [":0", None])
def test_a_local_dashboard_keeps_to_the_clusters_host(address):
    # ":port" used to listen on every interface although the cluster keeps to loopback;
    # null printed a link to a page that is not there (Dask always serves HTTP, on 8787).
    lines = []
    config = LocalConfig(cluster="local", n_workers=1, dashboard_address=address)
    with connect(config, echo=lines.append) as client:
        listening = _listening(os.getpid())
        http = client.scheduler_info()["services"]["dashboard"]
    assert listening and all(a.startswith("127.0.0.1:") for a in listening), listening
    assert f"127.0.0.1:{http}" in listening and http != 8787
    assert [line.startswith("dashboard: ") for line in lines] == ([True] if address else [])


def test_a_taken_dashboard_port_is_no_warning(recwarn):
    """A second run while another holds the port: the dashboard moves, quietly."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        lines = []
        config = LocalConfig(cluster="local", n_workers=1, dashboard_address=f"127.0.0.1:{port}")
        with connect(config, echo=lines.append):
            pass
    assert lines[0].startswith("dashboard: http://127.0.0.1:") and f":{port}/" not in lines[0]
    assert not [w for w in recwarn if "already in use" in str(w.message)]


def test_existing_scheduler_by_address_and_file(tmp_path):
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, dashboard_address=":0", host="127.0.0.1"
    ) as cluster:
        with connect(SchedulerConfig(cluster="scheduler", address=cluster.scheduler_address),
                     echo=lambda line: None) as client:  # fmt: skip
            assert client.submit(sum, [1, 2]).result() == 3
        scheduler_file = tmp_path / "scheduler.json"
        scheduler_file.write_text(
            json.dumps({"address": cluster.scheduler_address, "type": "Scheduler"})
        )
        config = SchedulerConfig(cluster="scheduler", scheduler_file=scheduler_file)
        with connect(config, echo=lambda line: None) as client:
            assert client.submit(sum, [2, 2]).result() == 4
    lines = []
    with pytest.raises(InputError, match="did not appear"):
        config = SchedulerConfig(
            cluster="scheduler", scheduler_file=tmp_path / "none.json", timeout=0.3
        )
        with connect(config, echo=lines.append):
            pass
    assert lines == [f"waiting up to 0.3 s for {tmp_path / 'none.json'} to appear"]


@pytest.mark.parametrize("dashboard", [True, False])
def test_a_scheduler_without_its_dashboard_gets_no_link(dashboard):
    # Its HTTP server (health, metrics) is named "dashboard" too: the link printed gave 404.
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
        protocol="tcp", host="127.0.0.1", scheduler_kwargs={"dashboard": dashboard},
    ) as cluster:  # fmt: skip
        lines = []
        config = SchedulerConfig(cluster="scheduler", address=cluster.scheduler_address)
        with connect(config, echo=lines.append):
            pass
    assert [line.split(":")[0] for line in lines] == (["dashboard"] if dashboard else [])


def test_too_few_workers_at_a_scheduler_are_counted(tmp_path):
    # It said "no Dask worker arrived" of a scheduler that had one of the two asked for.
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
        protocol="tcp", host="127.0.0.1",
    ) as cluster:  # fmt: skip
        config = SchedulerConfig(
            cluster="scheduler", address=cluster.scheduler_address, wait_for_workers=2, timeout=1
        )
        with pytest.raises(InputError) as refused:
            with connect(config, echo=lambda line: None):
                pass
    assert str(refused.value) == (
        "only 1 of the 2 Dask workers asked for arrived within 1 s (at the existing scheduler)"
    )


@pytest.mark.parametrize("by", ["address", "scheduler_file"])
def test_a_silent_scheduler_address_is_reported_before_the_wait(tmp_path, by):
    # A scheduler file left by a scheduler that has stopped was silent for the whole timeout.
    with socket.socket() as closed:  # a port nothing listens on once closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    where = {"address": address}
    if by == "scheduler_file":
        where = {"scheduler_file": tmp_path / "scheduler.json"}
        where["scheduler_file"].write_text(json.dumps({"address": address, "type": "Scheduler"}))
    lines = []
    config = SchedulerConfig(cluster="scheduler", timeout=1, **where)
    with pytest.raises(InputError, match=f"cannot reach the Dask scheduler at {address}"):
        with connect(config, echo=lines.append):
            pass
    assert len(lines) == 1 and "refused" in lines[0] and "waiting up to 1 s" in lines[0]
    assert (str(tmp_path / "scheduler.json") in lines[0]) == (by == "scheduler_file")


@pytest.mark.parametrize("peer", ["mute", "http", "closes", "ssh"])
def test_an_address_that_is_not_a_scheduler_answering_is_refused_within_the_timeout(peer):
    # A dashboard's port (8787, pasted for 8786) or a stopped scheduler: Dask's client waited
    # for a handshake past any timeout; an HTTP server's reply to its handshake was read as
    # a message of 3 EiB, said as "out of memory: the model is too large".
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve():  # mute: accepted by the kernel's backlog, never read or answered
        while peer != "mute" and not stop.is_set():
            try:
                server.settimeout(0.1)
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                if peer == "ssh":  # speaks first, as a Dask server does, but not Dask
                    conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
                    time.sleep(0.5)
                if peer == "http":  # answers a request, as a dashboard would
                    conn.settimeout(5)
                    try:
                        conn.recv(1024)
                        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                    except OSError:
                        pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    config = SchedulerConfig(cluster="scheduler", address=f"tcp://127.0.0.1:{port}", timeout=1)
    said = {
        "closes": "closed the connection",
        "ssh": r"first bytes \(b'SSH-2.0-'\) are not a Dask message's",
    }.get(peer, "sent nothing within 1 s")
    started = time.monotonic()
    try:
        with pytest.raises(InputError, match=f"did not answer as a Dask scheduler: its? {said}"):
            with connect(config, echo=print):
                pass
    finally:
        stop.set()
        thread.join()
        server.close()
    assert time.monotonic() - started < 10


def test_a_scheduler_with_no_worker_is_refused_when_none_was_waited_for():
    # The run failed at its first task with Dask's "No valid workers found".
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=0, processes=False, dashboard_address=None, protocol="tcp", host="127.0.0.1"
    ) as cluster:  # fmt: skip
        config = SchedulerConfig(
            cluster="scheduler", address=cluster.scheduler_address, wait_for_workers=0
        )
        with pytest.raises(InputError) as refused:
            with connect(config, echo=lambda line: None):
                pass
    assert str(refused.value).startswith(
        f"no Dask worker has joined the scheduler at {cluster.scheduler_address}, and "
        "wait_for_workers: 0 waits for none: a run needs at least one"
    )


def test_a_scheduler_address_without_a_port_is_refused_when_read(tmp_path):
    # It passed validation, then the run ended in a traceback ("missing port number").
    path = tmp_path / "scheduler.yaml"
    path.write_text("cluster: scheduler\naddress: foo\n")
    with pytest.raises(InputError, match=r"scheduler.yaml:2: address: missing port number in "
                       r"address 'foo': give it as tcp://HOST:PORT"):  # fmt: skip
        read_cluster(path)
    path.write_text("cluster: scheduler\naddress: tcp://10.0.0.5:8786\n")
    assert read_cluster(path).address == "tcp://10.0.0.5:8786"


def test_gpus_a_backend_leaves_idle_or_lacks_are_said():
    # A backend: cpu workflow on slurm-gpu.yaml held 8 GPUs idle for the whole allocation.
    from raygrid.pipeline.clusterfile import gpus_unmatched, read_cluster

    gpu_jobs = read_cluster(ROOT / "configs" / "slurm-gpu.yaml")
    said = gpus_unmatched(gpu_jobs, "cpu")
    assert said == (
        "gpus_per_worker: 1 asks 1 GPU for each of the 8 workers (8 in all), and backend cpu "
        "leaves them idle: set compute.backend: cuda (or auto) in the workflow, or "
        "gpus_per_worker: 0 in the cluster file"
    )
    # auto resolves where the client runs: a login node without a GPU runs it on the CPU.
    two = gpu_jobs.model_copy(update={"gpus_per_worker": 2})
    assert gpus_unmatched(two, "cpu", "auto").startswith(
        "gpus_per_worker: 2 asks 2 GPUs for each of the 8 workers (16 in all), and backend "
        "auto (the CPU) leaves them idle: set compute.backend: cuda in the workflow"
    )
    assert gpus_unmatched(gpu_jobs, "cuda") is None
    cpu_jobs = gpu_jobs.model_copy(update={"gpus_per_worker": 0})
    assert gpus_unmatched(cpu_jobs, "cpu") is None
    assert "set gpus_per_worker: 1" in gpus_unmatched(cpu_jobs, "cuda")
    local_cuda = read_cluster(ROOT / "configs" / "local-cuda.yaml")
    assert "backend cpu leaves the GPUs idle" in gpus_unmatched(local_cuda, "cpu")
    assert gpus_unmatched(local_cuda, "cuda") is None
    assert gpus_unmatched(read_cluster(None), "cpu") is None  # a LocalCluster: either runs
    assert gpus_unmatched(read_cluster(None), "cuda") is None


def test_solver_threads_beyond_a_jobs_cores_are_said():
    # cores_per_worker: 2 and compute.threads: 2 ran 4 threads on the 2 cores of a task.
    from raygrid.pipeline.clusterfile import read_cluster, threads_crowded

    jobs = read_cluster(ROOT / "configs" / "slurm-gpu.yaml").model_copy(
        update={"gpus_per_worker": 0, "cores_per_worker": 2}
    )
    assert threads_crowded(jobs, "cpu", 2) == (
        "each worker runs 2 task(s) at once (cores_per_worker: 2), each solving on "
        "compute.threads: 2 threads: 4 threads on 2 core(s); set compute.threads: 1 (the "
        "workers already run one task per core)"
    )
    assert threads_crowded(jobs, "cpu", 1) is None
    assert threads_crowded(jobs, "cuda", 4) is None  # (threads do not apply)
    gpu = jobs.model_copy(update={"gpus_per_worker": 1})  # one task a worker at a time
    assert threads_crowded(gpu, "cpu", 2) is None


def test_a_cuda_survey_on_an_existing_schedulers_workers_is_checked_on_them(tmp_path, monkeypatch):
    # Refused on a client without a GPU ("backend='cuda' cannot run here"), though the
    # scheduler's workers may have one; checked on the workers instead, before the store.
    import shutil
    import subprocess

    from distributed import LocalCluster

    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"]).returncode == 0:
        pytest.skip("this machine's workers have a GPU")
    from raygrid.pipeline.workflow import read_workflow, run_workflow

    spec = {
        "model": {"synthetic": "gradient", "shape": {"z": 21, "x": 31}, "spacing": 10.0},
        "sources": [{"z": 0.0, "x": 100.0}],
        "compute": {"backend": "cuda"},
        "outputs": {"store": str(tmp_path / "survey.zarr"), "plot": None},
    }
    path = tmp_path / "workflow.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")  # the workers: real CUDA, or none
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster:  # fmt: skip
        config = tmp_path / "scheduler.yaml"
        config.write_text(f"cluster: scheduler\naddress: {cluster.scheduler_address}\n")
        with pytest.raises(InputError) as refused:
            run_workflow(read_workflow(path), cluster=config)
    assert str(refused.value).startswith(
        "backend cuda, but 1 of the 1 Dask workers cannot run CUDA kernels: worker tcp://"
    )
    assert str(refused.value).endswith(
        ": no usable NVIDIA GPU and driver were found; start the workers on GPU nodes, or use "
        "backend cpu"
    )
    assert not (tmp_path / "survey.zarr").exists()


def test_a_batch_cluster_whose_scheduler_cannot_start_here_is_a_clear_error(tmp_path, monkeypatch):
    # `raygrid run --cluster` with an interface this machine lacks (ib0 on a login node)
    # printed dask-jobqueue's 98-line traceback ("Cluster failed to start"), exit status 1.
    jobqueue_or_skip()
    from raygrid.pipeline import cluster as clusters

    monkeypatch.setattr(clusters.shutil, "which", lambda command: f"/usr/bin/{command}")
    config = JobQueueConfig(
        cluster="slurm", interface="nosuchif9", dashboard_address=":0",
        log_directory=tmp_path / "jobs",
    )  # fmt: skip
    with pytest.raises(InputError) as refused:
        with connect(config):
            pass
    said = str(refused.value)
    assert said.startswith("the slurm cluster did not start: ValueError: 'nosuchif9' is not a")
    assert said.endswith(
        "(interface 'nosuchif9', dashboard_address ':0' in the cluster file: is the interface "
        "one of this machine's (the scheduler runs here), is the port free?)"
    )


def test_a_jobs_run_closes_its_workers_through_their_nannies_then_its_scheduler():
    # A submitted job's run, once ended, closes the job's workers and scheduler (the real
    # SLURM test checks the job's logs): each nanny asked to close its worker, no worker
    # left, then the scheduler closed. Without it the job script's launcher killed them.
    from distributed import Client, LocalCluster

    from raygrid.pipeline.cluster import _close_the_jobs_cluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:  # fmt: skip
        with Client(cluster) as client:
            nannies = list(cluster.workers.values())
            shut = []
            client.shutdown = lambda: shut.append(cluster.scheduler.status.name)
            _close_the_jobs_cluster(client)
            # The workers closed by their nannies while the scheduler still ran; then it
            # was shut down.
            assert all(nanny.status.name == "closed" for nanny in nannies)
            assert all(nanny.process is None for nanny in nannies)  # worker processes ended
            assert shut == ["running"]


def test_a_job_scripts_variables_alone_do_not_make_a_scheduler_the_runs_own(tmp_path, monkeypatch):
    # Copied from a job script into a shell (to debug), RAYGRID_WORKERS_ENDED made a run on
    # an existing scheduler close it and its workers at the end.
    from distributed import Client, LocalCluster

    from raygrid.pipeline import cluster as clusters

    monkeypatch.setenv(clusters.WORKERS_ENDED_ENV, str(tmp_path / "job" / "workers.ended"))
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
        host="127.0.0.1", dashboard_address=":0",
    ) as local:  # fmt: skip
        address = local.scheduler_address
        config = SchedulerConfig(cluster="scheduler", address=address, timeout=5)
        assert not clusters._the_jobs_own(config)
        with connect(config):
            pass
        with Client(address) as client:
            assert len(client.nthreads()) == 1  # scheduler and worker still there
            # Nor, for a survey on a client of its own, that the job's workers stopped.
            (tmp_path / "job").mkdir()
            (tmp_path / "job" / "workers.ended").write_text("1\n")
            assert clusters.workers_gone(client) is None
    # The job's own: its scheduler file in the folder the variables name.
    owned = SchedulerConfig(cluster="scheduler", scheduler_file=tmp_path / "job" / "s.json")
    assert clusters._the_jobs_own(owned)
    # Nor do they say an old job's workers have stopped, pointing at its log, while the run
    # waits for workers of a scheduler that has none yet.
    monkeypatch.setenv(clusters.WORKERS_LOG_ENV, str(tmp_path / "job" / "workers.log"))
    with LocalCluster(
        n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=":0"
    ) as empty:  # fmt: skip
        config = SchedulerConfig(
            cluster="scheduler", address=empty.scheduler_address, timeout=2, wait_for_workers=1
        )
        said = refused_connection(config)
    assert said.startswith("no Dask worker arrived within 2 s (at the existing scheduler)")
    assert "workers.log" not in said and "stopped" not in said


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ({"address": "http://127.0.0.1:8787/status"}, "is a web address .* not a scheduler's"),
        ({"address": "foo://host:1"}, "Dask has no protocol 'foo'"),
        ({"address": "inproc://192.0.2.2/123/1"}, "is an in-process address"),
    ],
)
def test_an_address_that_is_not_daskish_is_refused_as_the_file_is_read(where, said):
    # A dashboard link pasted for the scheduler's address passed validation, then the run
    # ended in a traceback.
    with pytest.raises(Exception, match=said):
        SchedulerConfig(cluster="scheduler", timeout=1, **where)


def test_a_scheduler_file_that_is_not_one_is_said(tmp_path):
    garbage = tmp_path / "scheduler.json"
    garbage.write_text("not json at all")
    config = SchedulerConfig(cluster="scheduler", scheduler_file=garbage, timeout=1)
    with pytest.raises(InputError, match=r"scheduler.json is not a Dask scheduler file"):
        with connect(config):
            pass
    garbage.write_text(json.dumps({"address": "inproc://192.0.2.2/123/1"}))
    with pytest.raises(InputError, match=r"scheduler.json names an in-process address"):
        with connect(config):
            pass


def test_a_batch_systems_gpu_refusal_hints_at_the_gpu_request():
    from raygrid.pipeline.batchjobs import refusal_hint

    for said in [
        "sbatch: error: Invalid generic resource (gres) specification",
        "sbatch: error: Invalid Trackable RESource (TRES) specification",
        "qsub: Job exceeds queue resource limits MSG=cannot satisfy queue max gpus requirement",
    ]:
        assert refusal_hint(said, gpus=True).startswith("check its GPU request"), said
        assert refusal_hint(said).startswith("check its queue"), said  # asked for none
    for said in ["sbatch: error: operation in progress", "invalid partition specified: a"]:
        assert refusal_hint(said, gpus=True).startswith("check its queue"), said


def test_workers_dask_has_paused_are_said_as_such():
    # A worker paused for memory does not count as arrived: "no Dask worker arrived" while
    # the scheduler listed it, a contradiction without the reason.
    from clusters import paused_workers

    with paused_workers(protocol="tcp", host="127.0.0.1") as (local, _):
        config = SchedulerConfig(
            cluster="scheduler", address=local.scheduler_address, timeout=2, wait_for_workers=1
        )
        said = refused_connection(config)
    assert said.startswith("no Dask worker arrived within 2 s (at the existing scheduler); 1 more")
    assert "Dask has paused them (their memory is past its pause fraction: tcp://" in said


def refused_connection(config) -> str:
    """What :func:`connect` refuses ``config`` with."""
    with pytest.raises(InputError) as refused:
        with connect(config):
            pass
    return str(refused.value)


def test_a_local_cluster_asking_more_than_the_machine_has_is_said(monkeypatch):
    # 4 workers x 4 threads and 4 x 20 GB ran on 2 cores and 24 GB without a word.
    import dask.system
    import psutil

    from raygrid.pipeline import clusterfile

    monkeypatch.setattr(dask.system, "CPU_COUNT", 2)
    total = type("Memory", (), {"total": 24 * 2**30})()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: total)
    big = clusterfile.LocalConfig(
        cluster="local", n_workers=4, threads_per_worker=4, memory_limit="20GB"
    )
    said = clusterfile.machine_oversold(big)
    assert said == (
        "the cluster file asks this machine for 4 worker(s) of 4 thread(s) on 2 CPUs and "
        "4 x 20GB of memory limits (74.51 GiB) with 24.00 GiB of memory: fewer workers "
        "(n_workers) or threads_per_worker or a smaller memory_limit (auto shares the memory "
        "out)"
    )
    compute = type("Compute", (), {"backend": "cpu", "threads": 1})()
    assert said in clusterfile.cluster_notes(big, "cpu", compute)
    # Memory alone, with the default worker count (one per core): its own advice only.
    monkeypatch.setattr(clusterfile, "local_workers", lambda config: 2)
    alone = clusterfile.machine_oversold(
        clusterfile.LocalConfig(cluster="local", memory_limit="20GB")
    )
    assert alone.endswith(
        "with 24.00 GiB of memory: a smaller memory_limit (auto shares the memory out)"
    )
    fits = clusterfile.LocalConfig(cluster="local", n_workers=2, memory_limit="4GB")
    assert clusterfile.machine_oversold(fits) is None


def test_workers_that_left_and_did_not_come_back_are_said_once(monkeypatch):
    # A submitted job's worker on a lost node, or an existing scheduler's worker stopped:
    # the run went on with fewer, without a word (worker jobs of dask-jobqueue were said).
    from distributed import Client, LocalCluster

    from raygrid.pipeline import cluster as clusters

    monkeypatch.setattr(clusters, "WORKERS_BACK_S", 0.3)
    monkeypatch.setattr(clusters, "WORKERS_ASKED_S", 0.0)
    with (
        LocalCluster(n_workers=3, processes=False, dashboard_address=":0") as local,
        Client(local) as client,
    ):  # fmt: skip
        lost = clusters.workers_lost(client)  # a run's watch
        assert lost() is None  # three seen
        local.scale(1)
        deadline = time.monotonic() + 10
        while len(client.nthreads()) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lost() is None  # not yet: it may come back
        time.sleep(0.4)
        said = lost()
        assert said is not None and said.startswith("2 of the 3 Dask workers left (")
        assert said.endswith("the run goes on with 1 (the tasks they held run again elsewhere)")
        time.sleep(0.4)
        assert lost() is None  # said once
        local.scale(2)  # back to two: nothing to say
        client.wait_for_workers(2, timeout=10)
        assert lost() is None


def test_a_jobs_run_can_compute_once_it_has_shut_its_scheduler_down(tmp_path, monkeypatch):
    # Client.shutdown() left Dask's default scheduler set to the closed client's: a
    # submitted job drawing its outputs.plot from the finished store failed ("Requested
    # dask.distributed scheduler but no Client active") and SLURM marked it FAILED.
    import dask
    import dask.array as da
    from distributed import LocalCluster

    from raygrid.pipeline import cluster as clusters

    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.setenv(clusters.WORKERS_ENDED_ENV, str(job / "workers.ended"))
    before = dask.config.get("scheduler", None)
    local = LocalCluster(n_workers=1, processes=False, protocol="tcp", host="127.0.0.1",
                         dashboard_address=":0")  # fmt: skip
    try:
        (job / "scheduler.json").write_text(json.dumps({"address": local.scheduler_address}))
        config = SchedulerConfig(cluster="scheduler", scheduler_file=job / "scheduler.json")
        with connect(config, echo=lambda line: None) as client:
            assert client.submit(sum, [1, 2]).result() == 3
        assert dask.config.get("scheduler", None) == before
        assert int(da.ones(4, chunks=2).sum().compute()) == 4
    finally:  # (its scheduler shut down by the run: its close not waited for again)
        with contextlib.suppress(TimeoutError):
            local.close(timeout=2)
