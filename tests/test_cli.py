"""The real `raygrid` command: the quickstart end to end, and bad workflows."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

import raygrid.pipeline as rg

from clusters import LOCAL_CLUSTER_FILE, ctrl_c_taken

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "workflows" / "quickstart.yaml"


def raygrid(*args, cwd, real_cuda=False):
    """Run the installed console script as a user would; ``real_cuda``: without the CUDA
    simulator, as on a machine whose lack of a GPU is what the test is about."""
    exe = shutil.which("raygrid", path=str(Path(sys.executable).parent)) or "raygrid"
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"} if real_cuda else None
    return subprocess.run([exe, *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env)


def raygrid_here(*args, cwd):
    """``raygrid ARGS`` in this process, through click's runner, as :func:`raygrid` returns
    it: for the commands that read a finished store (info, plot), whose output is what is
    tested and whose new interpreter's imports cost more than they do (3-5 s a call on two
    busy cores). The console script itself is run by the other tests."""
    from click.testing import CliRunner

    from raygrid.pipeline.cli import main

    shown = warnings.showwarning  # the command sets its own, for its warnings
    try:
        with contextlib.chdir(cwd):
            result = CliRunner().invoke(main, list(map(str, args)))
    finally:
        warnings.showwarning = shown
    stderr = result.stderr
    if result.exc_info is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))  # as Python would
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, stderr)


def test_quickstart_writes_store_and_png(tmp_path):
    # The README's first command, as it is (--overwrite on a fresh directory too).
    run = raygrid("run", QUICKSTART, "--overwrite", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "done: 1 source(s)" in run.stdout
    assert "dashboard: http://" in run.stdout
    # The store is reported complete before the pictures are drawn, not after.
    lines = [line.split(":")[0] for line in run.stdout.splitlines()]
    assert lines.index("done") < lines.index("store") < lines.index("plot"), run.stdout
    store = tmp_path / "quickstart-output" / "quickstart.zarr"
    png = tmp_path / "quickstart-output" / "quickstart.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dataset = xr.open_zarr(store, consolidated=False)
    spec = yaml.safe_load(QUICKSTART.read_text())
    assert dataset["traveltime"].dims == ("source", "z", "x")
    assert dataset.attrs["raygrid_version"] == rg.__version__
    # The stored field is the API's result for the same inputs, exactly.
    velocity = rg.gradient_model(spec["model"]["shape"], 10.0, 500.0, 4000.0)
    expected = rg.traveltime(velocity, spec["sources"][0], radius=5)
    np.testing.assert_array_equal(dataset["traveltime"].isel(source=0).values, expected.values)
    # One ray per receiver, ending at the receiver with the receiver's traveltime.
    assert dataset.sizes["receiver"] == len(spec["receivers"])
    for ray, receiver in enumerate(spec["receivers"]):
        last = int(dataset["ray_start"][0, ray] + dataset["ray_count"][0, ray]) - 1
        assert float(dataset["ray_x"][last]) == receiver["x"]
        assert float(dataset["ray_time"][last]) == float(dataset["receiver_traveltime"][0, ray])
    # A second run finds the store complete and solves nothing (replacing a store with
    # --overwrite: tests/test_survey.py, through the same run_workflow).
    again = raygrid("run", QUICKSTART, cwd=tmp_path)
    assert again.returncode == 0 and "is complete already: its 1 source(s) are done" in again.stdout
    assert "dashboard" not in again.stdout  # no cluster started: nothing to solve


def write_workflow(tmp_path, **changes):
    spec = yaml.safe_load(QUICKSTART.read_text())
    spec["model"]["shape"] = {"z": 21, "x": 31}
    spec["sources"] = [{"z": 0.0, "x": 150.0}]
    spec["receivers"] = [{"z": 200.0, "x": 10.0}, {"z": 100.0, "x": 290.0}]
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            spec[section][field] = value
        else:
            spec[section] = value
    path = tmp_path / "workflow.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"grid__radious": 3},
            "grid.radious: Extra inputs are not permitted (unknown key; did you mean 'radius'?)",
        ),
        ({"grid__radius": "five"}, "grid.radius"),
        ({"model": {"path": "missing.zarr"}}, "missing.zarr does not exist"),
        ({"sources": [{"z": -50.0, "x": 10.0}]}, "source z=-50 is outside the model"),
        ({"receivers": [{"z": 10.0, "x": 9999.0}]}, "receiver x=9999 is outside the model"),
        ({"grid__weights": "linear"}, "grid.weights"),
        ({"extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_bad_workflow_fails_cleanly_and_writes_nothing(tmp_path, changes, message):
    path = write_workflow(tmp_path, **changes)
    run = raygrid("run", path, cwd=tmp_path)
    assert run.returncode == 2
    assert message in run.stderr
    assert "workflow.yaml:" in run.stderr  # the file, and the line
    assert not (tmp_path / "quickstart-output").exists()


def test_a_model_in_the_wrong_unit_is_a_plain_warning(tmp_path):
    slow = write_workflow(tmp_path, model={"synthetic": "gradient", "shape": {"z": 21, "x": 31},
                                           "top": 0.5, "bottom": 4.0})  # fmt: skip
    run = raygrid("validate", slow, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    # At the model's line, as its errors are, with the unit a synthetic model is in.
    (said,) = [line for line in run.stderr.splitlines() if "no rock is that slow" in line]
    assert said.startswith("warning: ") and "workflow.yaml:" in said
    assert "model: velocities from 0.5 to 4 m/s: no rock is that slow" in said
    assert said.endswith("A synthetic model's velocities are in m/s (km/s times 1000).")
    assert "InputWarning" not in run.stderr and "grid.py" not in run.stderr
    # A run says it once: the workers tracing rays do not check the model again (they
    # printed it twice more, as Python's raw warning with raygrid's source line).
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    run = raygrid("run", slow, "--cluster", "cluster.yaml", "--no-progress", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("no rock is that slow") == 1, run.stderr
    assert "InputWarning" not in run.stderr


def test_bad_units_in_model_file(tmp_path):
    velocity = rg.constant_model({"z": 5, "x": 5}, 10.0, 2000.0).assign_attrs(units="ft/s")
    velocity.to_dataset(name="vp").to_zarr(tmp_path / "m.zarr", zarr_format=3, consolidated=False)
    path = write_workflow(tmp_path, model={"path": "m.zarr"}, grid={"radius": 2})
    run = raygrid("run", path, cwd=tmp_path)
    assert run.returncode == 2 and "velocity has units 'ft/s'" in run.stderr
    assert not (tmp_path / "quickstart-output").exists()


def test_validate(tmp_path):
    assert raygrid("validate", QUICKSTART, cwd=tmp_path).returncode == 0
    bad = write_workflow(tmp_path, grid__radious=3)
    run = raygrid("validate", bad, cwd=tmp_path)
    assert run.returncode == 2 and "radious" in run.stderr
    assert raygrid("validate", tmp_path / "nope.yaml", cwd=tmp_path).returncode == 2
    # A workflow with a misplaced cluster key is still a workflow, and told so.
    misplaced = write_workflow(tmp_path, cluster="configs/local.yaml")
    run = raygrid("validate", misplaced, cwd=tmp_path)
    assert run.returncode == 2 and "cluster: Extra inputs are not permitted" in run.stderr


def test_validate_names_the_file_of_every_problem(tmp_path):
    (tmp_path / "syntax.yaml").write_text("model: {synthetic: gradient\nsources: []\n")
    (tmp_path / "twice.yaml").write_text("grid:\n  radius: 3\n  radius: 7\n")
    (tmp_path / "binary.yaml").write_bytes(b"\x93NUMPY\x01\x00\xff\xfe")
    no_cluster = write_workflow(tmp_path, compute={"cluster": "configs/nope.yaml"})
    files = ["syntax.yaml", "twice.yaml", "binary.yaml", no_cluster.name]
    run = raygrid("validate", *files, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "syntax.yaml:2: not valid YAML" in run.stderr
    assert "twice.yaml:3: not valid YAML: key 'radius' is given twice" in run.stderr
    assert "binary.yaml: not a text file" in run.stderr
    # At its line, as every other problem of a workflow (it was "workflow.yaml: ...").
    missing = "workflow.yaml:2: compute.cluster: cluster file configs/nope.yaml does not exist"
    assert missing in run.stderr
    run = raygrid("run", no_cluster.name, cwd=tmp_path)  # and so does a run, before anything
    assert run.returncode == 2 and f"error: {missing}" in run.stderr, run.stderr


def test_validate_checks_a_gpu_workflow_for_its_machine(tmp_path):
    # Validated on a login node (no GPU here) before it is submitted: a note, not an error;
    # running it here is refused.
    path = write_workflow(tmp_path, compute={"backend": "cuda"})
    checked = raygrid("validate", path, cwd=tmp_path, real_cuda=True)
    assert checked.returncode == 0, checked.stderr
    note = "note: backend cuda cannot run on this machine: no usable NVIDIA GPU"
    assert "valid workflow" in checked.stdout and note in checked.stdout


def test_validate_checks_a_workflow_against_its_own_cluster_file(tmp_path):
    # A CPU workflow naming GPU batch jobs was valid without a word (submit warned later);
    # a GPU workflow for them drew "cannot run on this machine", which is not its machine.
    jobs = ROOT / "configs" / "slurm-gpu.yaml"
    cpu = write_workflow(tmp_path, compute={"backend": "cpu", "cluster": str(jobs)})
    checked = raygrid_here("validate", cpu, cwd=tmp_path)  # in-process: 3 s less a call
    assert checked.returncode == 0, checked.stderr
    assert (
        f"{cpu}: note: {jobs}: gpus_per_worker: 1 asks 1 GPU for each of the 8 workers (8 in "
        "all), and backend cpu leaves them idle"
    ) in checked.stdout
    for backend in ("cuda", "auto"):  # auto: resolved as on the jobs' nodes
        gpu = write_workflow(tmp_path, compute={"backend": backend, "cluster": str(jobs)})
        checked = raygrid_here("validate", gpu, cwd=tmp_path)  # no GPU under the simulator
        assert checked.returncode == 0, checked.stderr
        assert "note" not in checked.stdout, checked.stdout


def test_validate_says_when_solver_threads_crowd_a_jobs_cores(tmp_path):
    # As submit and run warn: compute.threads on workers already running a task per core.
    jobs = yaml.safe_load((ROOT / "configs" / "slurm-gpu.yaml").read_text())
    jobs |= {"gpus_per_worker": 0, "cores_per_worker": 2}
    (tmp_path / "cpu-jobs.yaml").write_text(yaml.safe_dump(jobs))
    path = write_workflow(
        tmp_path,
        compute={"backend": "cpu", "threads": 2, "cluster": str(tmp_path / "cpu-jobs.yaml")},
    )
    checked = raygrid_here("validate", path, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "4 threads on 2 core(s); set compute.threads: 1" in checked.stdout


# Runs the CLI in this process and prints its peak resident memory (bytes) when it exits.
PEAK_MEMORY = """
import resource, sys
from raygrid.pipeline.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(code, peak * (1 if sys.platform == "darwin" else 1024))  # Linux counts KiB
"""


def peak_memory(*args, cwd) -> int:
    """Peak resident memory in bytes of ``raygrid ARGS``, which must succeed."""
    pytest.importorskip("resource")  # not on Windows
    run = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    code, peak = run.stdout.split()[-2:]
    assert code == "0", run.stdout + run.stderr
    return int(peak)


def test_validate_checks_a_model_it_does_not_hold(tmp_path):
    # 401^3 nodes: 516 MB of float64 velocities. Validate built the model and loaded its
    # slowness (1.2 GB on a login node); it checks the values on one column instead (that
    # they are still checked: test_a_model_in_the_wrong_unit_is_a_plain_warning).
    shape = {"z": 401, "y": 401, "x": 401}
    model = {"synthetic": "gradient", "shape": shape, "spacing": 25.0, "top": 1500.0}
    source = {"z": 0.0, "y": 5000.0, "x": 5000.0}
    path = write_workflow(tmp_path, model=model, sources=[source], receivers=[source])
    values = 401**3 * 8
    schema = peak_memory("validate", "--no-check-model", path, cwd=tmp_path)
    checked = peak_memory("validate", path, cwd=tmp_path)
    assert checked - schema < values / 4, (schema, checked)  # was 3 times values over
    # Whatever the model's size: 196 TiB of values (numpy refused it, out of memory).
    huge = {**model, "shape": {"z": 30001, "y": 30001, "x": 30001}}
    path = write_workflow(tmp_path, model=huge, sources=[source], receivers=[source])
    run = raygrid("validate", path, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "valid workflow: 1 source(s), 1 receiver(s), model 30001 x 30001 x 30001" in run.stdout
    # Valid, but a run here would refuse it for memory: said (it was not; a 3D survey
    # designer's review), not refused (a workflow may be validated on another machine).
    assert (
        "note: a run on this machine would be refused: the model of 30001 x 30001 x 30001 "
        "nodes and its CPU graph (velocity and slowness in float64) needs about "
    ) in run.stdout
    small = {**model, "shape": {"z": 101, "y": 101, "x": 101}}
    path = write_workflow(tmp_path, model=small, sources=[source], receivers=[source])
    assert "note:" not in raygrid_here("validate", path, cwd=tmp_path).stdout  # (fits)


def test_validate_names_every_problem_of_a_model_as_before(tmp_path):
    # The model is no longer built in memory to validate a workflow; what is refused, and
    # the words and lines, are the same. One file per problem, validated in one call.
    nan = rg.constant_model({"z": 21, "x": 31}, 10.0, 2000.0)
    nan[3, 4] = np.nan
    nan.to_dataset(name="vp").to_zarr(tmp_path / "nan.zarr", zarr_format=3, consolidated=False)
    slow = rg.constant_model({"z": 21, "x": 31}, 10.0, 2.0)  # km/s called m/s
    slow.to_dataset(name="vp").to_zarr(tmp_path / "slow.zarr", zarr_format=3, consolidated=False)
    problems = {
        "radius": ({"grid__radius": 30}, "grid.radius: radius along 'z' is 30 but the model "
                   "has only 21 nodes along it"),
        "source": ({"sources": [{"z": 0.0, "x": 10.0}, {"z": -50.0, "x": 10.0}]},
                   "sources[1]: source 1 (numbered from 0): source z=-50 is outside the model: "
                   "z spans [0, 200] m"),
        "receiver": ({"receivers": {"line": {"start": {"z": 0.0, "x": 0.0},
                                             "stop": {"z": 0.0, "x": 400.0}, "count": 3}}},
                     "receivers: receiver 2 (numbered from 0): receiver x=400 is outside the "
                     "model"),
        "plot": ({"outputs__plot_source": 3},
                 "outputs.plot_source: source number 3 is out of range: the workflow has 1 "),
        "tiles": ({"compute": {"tiles": {"y": 8}}},
                  "compute.tiles: tiles names unknown dims ['y']; the model has ('z', 'x')"),
        "missing": ({"model": {"path": "missing.zarr"}}, "model: velocity model missing.zarr "
                    "does not exist"),
        "nan": ({"model": {"path": "nan.zarr"}}, "model: nan.zarr: velocity must be finite and "
                "positive: 1 bad value(s) (NaN, inf, zero, negative or subnormal); the first "
                "found is nan at z=30, x=40"),
        "layers": ({"model": {"synthetic": "layered", "shape": {"z": 21, "x": 31}}},
                   "model: a layered model needs velocities, one more than interfaces"),
    }  # fmt: skip
    for name, (changes, _) in problems.items():
        write_workflow(tmp_path, **changes).rename(tmp_path / f"{name}.yaml")
    write_workflow(tmp_path, model={"path": "slow.zarr"}).rename(tmp_path / "slow.yaml")
    files = [f"{name}.yaml" for name in problems] + ["slow.yaml"]
    run = raygrid("validate", *files, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    for name, (_, message) in problems.items():
        assert any(f"{name}.yaml:" in line and message in line for line in lines), name
    assert "slow.yaml: valid workflow: 1 source(s), 2 receiver(s), model 21 x 31" in run.stdout
    # A model file is checked once, as it is opened: its warning was printed twice.
    (said,) = [line for line in lines if "no rock is that slow" in line]
    assert "slow.yaml:" in said and "model: velocities from 2 to 2 m/s: no rock" in said
    assert "synthetic" not in said  # a file's units attribute is what to check


def test_verbose_shows_a_tiled_solves_rounds(tmp_path):
    # The README's "one log line per round (logger raygrid)" could be seen from Python
    # alone: `raygrid -v run` was a usage error.
    path = write_workflow(tmp_path, compute={"tiles": {"z": 11, "x": 16}})
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    run = raygrid("-v", "run", path, "--cluster", "cluster.yaml", "--no-progress", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    rounds = [line for line in lines if " raygrid: round " in line]
    assert rounds and "(tile tasks " in rounds[0], run.stderr
    # Which source a solve is of, first, and its closing line, last.
    said = [line.split(" raygrid: ")[1] for line in lines if " raygrid: " in line]
    assert said[0] == "source 0 of 1: a tiled solve", run.stderr
    assert said[-1].startswith(f"solved in {len(rounds)} rounds: "), run.stderr


def test_version():
    run = raygrid("--version", cwd=ROOT)
    assert run.returncode == 0 and rg.__version__ in run.stdout


def test_output_piped_to_a_reader_that_left_ends_quietly():
    # `raygrid validate ... | head -1` used to end with "error: [Errno 32] Broken pipe".
    exe = shutil.which("raygrid", path=str(Path(sys.executable).parent)) or "raygrid"
    run = subprocess.Popen(
        [exe, "validate", "--no-check-model", QUICKSTART], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    run.stdout.close()  # before the command prints: its first write meets a closed pipe
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1 and stderr == b""


def test_validate_checks_every_shipped_file():
    files = sorted((ROOT / "workflows").glob("*.yaml")) + sorted((ROOT / "configs").glob("*.yaml"))
    run = raygrid("validate", "--no-check-model", *files, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("valid") == len(files)


def test_cuda_backend_without_gpu_fails_before_any_store(tmp_path):
    path = write_workflow(tmp_path, compute={"backend": "cuda"})
    run = raygrid("run", path, cwd=tmp_path, real_cuda=True)
    assert run.returncode == 2
    assert "compute.backend: cuda cannot run here: no usable NVIDIA GPU" in run.stderr
    assert "use cpu, or auto to use a GPU only when there is one" in run.stderr
    assert not (tmp_path / "quickstart-output").exists()


def test_local_cuda_cluster_without_gpu_is_a_clear_error(tmp_path):
    path = write_workflow(tmp_path)
    cluster = ROOT / "configs" / "local-cuda.yaml"
    run = raygrid("run", path, "--cluster", cluster, cwd=tmp_path, real_cuda=True)
    assert run.returncode == 2, run.stderr
    assert "local-cuda" in run.stderr
    assert "no usable GPU" in run.stderr or "needs dask-cuda" in run.stderr


@pytest.mark.parametrize("name", ["slurm-gpu.yaml", "pbs-gpu.yaml"])
def test_run_refuses_the_gpu_batch_configs_before_any_store(tmp_path, name):
    # These files are for `raygrid submit`; `raygrid run` says so and writes nothing.
    path = write_workflow(tmp_path)
    run = raygrid("run", path, "--cluster", ROOT / "configs" / name, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "error: `raygrid run` does not start this" in run.stderr
    assert "raygrid submit WORKFLOW --cluster FILE" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "quickstart-output").exists()
    assert not (tmp_path / "raygrid-jobs").exists()  # no dask-jobqueue job was written


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_scheduler_fails_before_any_store(tmp_path):
    path = write_workflow(tmp_path)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {"cluster": "scheduler", "address": f"tcp://127.0.0.1:{closed_port()}", "timeout": 1}
        )
    )
    run = raygrid("run", path, "--cluster", cluster, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "error: cannot reach the Dask scheduler at tcp://127.0.0.1:" in run.stderr
    assert not (tmp_path / "quickstart-output").exists()


SURVEY = {
    "model": {"synthetic": "gradient", "shape": {"z": 161, "x": 241}, "spacing": 10.0},
    "grid": {"radius": 4},
    "sources": {"line": {"start": {"z": 0.0, "x": 0.0}, "stop": {"z": 0.0, "x": 2400.0},
                         "count": 24}},
    "receivers": {"line": {"start": {"z": 1500.0, "x": 5.0}, "stop": {"z": 1500.0, "x": 2395.0},
                           "count": 7}},
    "outputs": {"store": "out/survey.zarr"},
    "compute": {"batch": 1, "cluster": "cluster.yaml"},
}  # fmt: skip
CLUSTER = LOCAL_CLUSTER_FILE


def survey_dir(directory: Path, sources: int = 24) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    survey = SURVEY | {"sources": {"line": SURVEY["sources"]["line"] | {"count": sources}}}
    (directory / "survey.yaml").write_text(yaml.safe_dump(survey))
    (directory / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    return directory / "survey.yaml"


def start(directory: Path) -> subprocess.Popen:
    exe = shutil.which("raygrid", path=str(Path(sys.executable).parent)) or "raygrid"
    with ctrl_c_taken():  # (it is sent one)
        return subprocess.Popen(
            [exe, "run", "survey.yaml"], cwd=directory, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip


def files_of(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("*") if p.is_file()}


def test_sigkill_of_the_whole_run_then_rerun_gives_the_same_store(tmp_path):
    from raygrid.pipeline.store import done_sources

    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    survey_dir(killed_dir)
    survey_dir(clean_dir)
    store = killed_dir / "out" / "survey.zarr"
    process = start(killed_dir)
    deadline = time.monotonic() + 120
    done = 0
    while time.monotonic() < deadline and process.poll() is None:
        if store.exists():
            done = int(done_sources(store).sum())
            if done >= 3:
                break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    os.killpg(process.pid, signal.SIGKILL)  # the client, the nannies and the workers
    process.communicate()
    assert 3 <= int(done_sources(store).sum()) < 24, "killed too late to test anything"
    assert not zarr_attrs(store)["complete"]

    resumed = raygrid("run", "survey.yaml", cwd=killed_dir)
    assert resumed.returncode == 0, resumed.stderr
    assert "sources already done" in resumed.stdout
    clean = raygrid("run", "survey.yaml", cwd=clean_dir)
    assert clean.returncode == 0, clean.stderr
    # Byte for byte: every chunk, every metadata document, no leftovers.
    assert files_of(store) == files_of(clean_dir / "out" / "survey.zarr")


def test_ctrl_c_stops_quietly_and_the_run_resumes(tmp_path):
    from raygrid.pipeline.store import done_sources

    # 96 sources: 24 took 0.8 s on a loaded 2-core machine, and once all were done before
    # the Ctrl-C sent after the third was handled (status 0, a complete store).
    survey_dir(tmp_path, sources=96)
    store = tmp_path / "out" / "survey.zarr"
    process = start(tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if store.exists() and int(done_sources(store).sum()) >= 3:
            break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends: the client and its workers
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    done = np.flatnonzero(done_sources(store))
    said = f"interrupted: the {done.size} of 96 sources finished so far are in out/survey.zarr"
    assert said in stderr, stderr
    assert done.size < 96, "interrupted too late to test anything"
    # The sources done so far can be drawn: by default the first, middle and last of them.
    plot = raygrid_here("plot", "out/survey.zarr", "--out", "partial", cwd=tmp_path)
    assert plot.returncode == 0, plot.stderr
    assert f"not complete ({done.size} of 96 sources)" in plot.stdout
    assert sorted(p.name for p in (tmp_path / "partial").iterdir()) == sorted(
        {f"survey-source{s}.png" for s in (done[0], done[done.size // 2], done[-1])}
    )
    missing = raygrid_here("plot", "out/survey.zarr", "--source", "95", cwd=tmp_path)
    assert missing.returncode == 2 and "sources [95] are not done yet" in missing.stderr
    # One done and one not: the done one is drawn, the other named (it refused both).
    some = raygrid_here(
        "plot", "out/survey.zarr", "--source", "95", "--source", done[0], "--out", "some",
        cwd=tmp_path,
    )  # fmt: skip
    assert some.returncode == 0, some.stderr
    assert (
        f"note: sources [95] are not done yet in out/survey.zarr ({done.size} of 96 are): not drawn"
        in some.stdout
    )
    assert [p.name for p in (tmp_path / "some").iterdir()] == [f"survey-source{done[0]}.png"]
    info = raygrid_here("info", "out/survey.zarr", cwd=tmp_path)
    assert "partial: rerun the workflow to resume it" in info.stdout, info.stdout
    # While a run writes it, "rerun" would be refused: info says what is going on.
    from clusters import lock_held_elsewhere

    with lock_held_elsewhere(store):
        info = raygrid_here("info", "out/survey.zarr", cwd=tmp_path)
        assert "partial: a run is writing it now (it holds the store's lock)" in info.stdout
    resumed = raygrid("run", "survey.yaml", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "sources already done" in resumed.stdout
    assert bool(done_sources(store).all()) and zarr_attrs(store)["complete"]


def zarr_attrs(store: Path) -> dict:
    return json.loads((store / "zarr.json").read_text())["attributes"]


def test_dashboard_answers_while_a_run_is_going_then_info_and_plot(tmp_path):
    survey_dir(tmp_path)
    process = start(tmp_path)
    try:
        url = None
        for line in process.stdout:
            if line.startswith("dashboard: "):
                url = line.split(": ", 1)[1].strip()
                break
        assert url and url.startswith("http://127.0.0.1:"), url
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            assert b"Dask" in response.read()
        assert process.poll() is None  # it answered during the run
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        assert "24/24 sources" in stderr  # the progress report
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # opened quietly
        opened = rg.open_survey(tmp_path / "out" / "survey.zarr")
    assert opened.sizes["source"] == 24 and bool(opened["source_done"].all())
    info = raygrid_here("info", "out/survey.zarr", "--workflow", cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    for text in (
        "status: complete",
        "sources done: 24 / 24",
        "receivers: 7",
        "model: z=161, x=241 nodes, velocity in m/s",
        "coordinates (m): z 0 to 1600 every 10, x 0 to 2400 every 10",  # spacing and unit
        "traveltime(source=24, z=161, x=241) float64",
        "rays: 168",
        '"radius": 4',
        "workflow (as the run that made the store read it; compute may differ since):",
    ):
        assert text in info.stdout, text  # fmt: skip
    plot = raygrid_here(
        "plot", "out/survey.zarr", "--out", "pictures", "--source", "5", "--source", "5",
        cwd=tmp_path,
    )  # fmt: skip
    assert plot.returncode == 0, plot.stderr
    assert plot.stdout.count("wrote ") == 2  # a source named twice is drawn once
    pngs = sorted(p.name for p in (tmp_path / "pictures").iterdir())
    assert pngs == ["survey-gathers.png", "survey-source5.png"]
    for png in pngs:
        assert (tmp_path / "pictures" / png).read_bytes()[:4] == b"\x89PNG"
    bad = raygrid_here("plot", "out/survey.zarr", "--source", "99", cwd=tmp_path)
    assert bad.returncode == 2 and "out of range" in bad.stderr
    flat = raygrid_here("plot", "out/survey.zarr", "--map-z", "500", cwd=tmp_path)
    assert flat.returncode == 2 and "this model is 2D" in flat.stderr
    # A folder that cannot be made (a file stands there) is an error, not a traceback.
    unwritable = raygrid_here("plot", "out/survey.zarr", "--out", "pictures/survey-gathers.png",
                         cwd=tmp_path)  # fmt: skip
    assert unwritable.returncode == 2 and unwritable.stderr.startswith("error: ")
    assert "Traceback" not in unwritable.stderr
    missing = raygrid_here("info", "nope.zarr", cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_a_run_that_failed_part_way_is_one_line_and_status_1(capsys):
    # A worker lost with the work it held: not a traceback, and not an input error (2).
    import raygrid.pipeline.cli as cli
    from raygrid.pipeline.errors import RunFailed

    def failing(*args, **kwargs):
        raise RunFailed("the cluster lost the task solving sources 3 to 4: run again")

    wrapped = cli._input_errors(failing)
    with pytest.raises(SystemExit) as exit_:
        wrapped()
    assert exit_.value.code == 1
    assert capsys.readouterr().err == (
        "error: the cluster lost the task solving sources 3 to 4: run again\n"
    )


def test_a_full_disk_says_what_to_do(capsys):
    # Zarr's chunk writes name no file: "error: [Errno 28] No space left on device" alone.
    import errno

    import raygrid.pipeline.cli as cli

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(SystemExit) as exit_:
        cli._input_errors(full)()
    assert exit_.value.code == 2
    hint = (
        " (the disk or quota is full: free some space, then run the same command again; a run "
        "keeps what it finished and resumes)"
    )
    assert capsys.readouterr().err == f"error: [Errno 28] No space left on device{hint}\n"
    # Most writes are a worker's: its error comes back through the survey's RunFailed,
    # which said only "the task solving source(s) 3 failed: OSError: ...".
    from raygrid.pipeline.survey import _failure

    pickled = pickle.loads(pickle.dumps(OSError(errno.ENOSPC, "No space left on device")))
    assert str(_failure("source(s) 3", pickled)) == (
        f"the task solving source(s) 3 failed: OSError: [Errno 28] No space left on device{hint}"
    )


def test_a_lost_scheduler_is_not_blamed_on_a_worker_dying_of_memory():
    # Killing the scheduler cancels every task at once: that was said as "a worker died
    # (killed for memory? ...)". The client, reconnecting, says what happened.
    from types import SimpleNamespace

    from raygrid.pipeline.survey import _failure

    said = str(_failure("source(s) 46, 47", None, SimpleNamespace(status="connecting")))
    # Not the sources of the task that told it first: any task, done or not, is cancelled.
    assert said.startswith("the connection to the Dask scheduler was lost mid-run (")
    assert "46" not in said
    assert (
        "memory" not in said
        and "run the same command again to resume once a scheduler is up" in said
    )
    running = str(_failure("source(s) 46, 47", None, SimpleNamespace(status="running")))
    assert "a worker died (killed for memory?" in running


def test_info_on_a_folder_that_is_no_store_says_so_plainly(tmp_path):
    # It said "(GroupNotFoundError: No group found in store PosixPath(...))".
    (tmp_path / "notastore").mkdir()
    run = raygrid_here("info", "notastore", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr == (
        "error: notastore is not a Zarr store (a folder without Zarr's group metadata, zarr.json)\n"
    )
    # A Zarr store of one array was "not a Zarr store (ContainsArrayError: ...)".
    import zarr

    zarr.create_array(tmp_path / "array.zarr", shape=(3,), dtype="f8")
    run = raygrid_here("info", "array.zarr", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr == (
        "error: array.zarr is a Zarr array, not a raygrid survey store (a Zarr group)\n"
    )


def _invoked_stopping(args: list[str]):
    """``raygrid ARGS`` through click's runner, for a run that is stopped: its handler sets
    SIGINT, SIGTERM and SIGHUP to be ignored, which this process must not keep."""
    from click.testing import CliRunner

    from raygrid.pipeline.cli import main

    stops = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
    handlers = {s: signal.getsignal(s) for s in stops}
    try:
        return CliRunner().invoke(main, args)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)


@pytest.mark.parametrize("replaced", [False, True])
def test_an_overwrite_stopped_says_whether_the_old_store_was_replaced(
    tmp_path, monkeypatch, replaced
):
    # Stopped after its new store was made, an --overwrite run said that the old store "was
    # not replaced yet"; stopped before, it counted the old store's sources as its own.

    from raygrid.pipeline import workflow

    survey_dir(tmp_path)
    store = tmp_path / "out" / "survey.zarr"
    store.mkdir(parents=True)

    def stopped(spec, **kwargs):
        if replaced:  # as prepare_store does: the new store made beside, then put in place
            (tmp_path / "new.zarr").mkdir()
            (tmp_path / "new.zarr" / "zarr.json").write_text("{}")  # made, not yet whole
            os.replace(tmp_path / "new.zarr", store)
        raise KeyboardInterrupt

    monkeypatch.setattr(workflow, "run_workflow", stopped)
    monkeypatch.chdir(tmp_path)
    result = _invoked_stopping(["run", "survey.yaml", "--overwrite"])
    assert result.exit_code == 130, result.output
    said = result.output.splitlines()[-1]
    if replaced:
        assert said == (
            "interrupted: the sources finished so far are in out/survey.zarr; run the same "
            "command again (without --overwrite) to resume"
        )
    else:
        assert said == "interrupted: out/survey.zarr was not replaced: the old store is as it was"


def test_a_run_stopped_before_its_store_was_made_says_nothing_was_written(tmp_path, monkeypatch):
    # An empty folder at outputs.store (a job script's mkdir -p) is where the store will be
    # made: stopped before that, a run said "the sources finished so far are in" it.
    from raygrid.pipeline import workflow

    survey_dir(tmp_path)
    (tmp_path / "out" / "survey.zarr").mkdir(parents=True)

    def stopped(spec, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(workflow, "run_workflow", stopped)
    monkeypatch.chdir(tmp_path)
    result = _invoked_stopping(["run", "survey.yaml"])
    assert result.exit_code == 130, result.output
    assert result.output.splitlines()[-1] == (
        "interrupted: no source had finished yet (nothing was written to out/survey.zarr): "
        "run the same command again (without --overwrite) to start"
    )


def test_ctrl_c_during_the_first_imports_says_nothing_was_written(tmp_path, monkeypatch):
    # Ctrl-C 0.2 s after `raygrid run` started (2 runs in 16) cut the imports short; the
    # handler imported the module again and met Dask half-imported: a traceback ending
    # "AttributeError: module 'dask' has no attribute 'utils'", status 1.
    import importlib.abc

    class Interrupted(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "raygrid.pipeline.interrupts":
                raise KeyboardInterrupt
            return None

    survey_dir(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "raygrid.pipeline.interrupts", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupted(), *sys.meta_path])
    result = _invoked_stopping(["run", "survey.yaml"])
    assert result.exit_code == 130, result.output
    assert result.output.splitlines()[-1] == "interrupted: nothing was written"
    assert not (tmp_path / "out").exists()


def test_submit_on_a_complete_store_submits_nothing(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from raygrid.pipeline import submit
    from raygrid.pipeline.cli import main

    monkeypatch.setattr(submit, "submit_workflow", lambda *args, **kwargs: None)
    result = CliRunner().invoke(main, ["submit", "w.yaml", "--cluster", "c.yaml"])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "w.yaml: its store is complete already: no job submitted (--overwrite solves it again)\n"
    )


def test_a_run_inside_a_submitted_job_says_to_submit_it_again(tmp_path, monkeypatch):
    # Its own command names the job's scheduler, gone with the job: "run the same command
    # again" sent users to it.

    from raygrid.pipeline import workflow

    survey_dir(tmp_path)
    (tmp_path / "out" / "survey.zarr").mkdir(parents=True)
    (tmp_path / "out" / "survey.zarr" / "zarr.json").write_text("{}")  # made, not yet whole

    def stopped(spec, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(workflow, "run_workflow", stopped)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAYGRID_RESUME", "submit the job again (raygrid submit w.yaml ...)")
    result = _invoked_stopping(["run", "survey.yaml"])
    assert result.exit_code == 130, result.output
    # (Its command has no --overwrite: "(without --overwrite)" doubled the parentheses.)
    assert result.output.splitlines()[-1] == (
        "interrupted: the sources finished so far are in out/survey.zarr; submit the job "
        "again (raygrid submit w.yaml ...) to resume"
    )
    # Stopped by its batch system (SIGTERM), most often at its time limit: said so.
    from raygrid.pipeline import interrupts

    monkeypatch.setattr(interrupts, "stopping_signal", lambda: int(signal.SIGTERM))
    result = _invoked_stopping(["run", "survey.yaml"])
    assert result.exit_code == 143, result.output
    assert result.output.splitlines()[-1] == (
        "terminated (SIGTERM): the sources finished so far are in out/survey.zarr; submit the "
        "job again (raygrid submit w.yaml ...) to resume (with a longer walltime in its "
        "cluster file, if it ran out)"
    )
