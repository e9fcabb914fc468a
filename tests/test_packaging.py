"""The wheel ships every module of both import packages."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_every_module(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("raygrid-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, package in (("kernels", "raygrid/kernels"), ("pipeline", "raygrid/pipeline")):
        modules = sorted((ROOT / folder).rglob("*.py"))
        assert modules, folder
        for module in modules:
            assert f"{package}/{module.relative_to(ROOT / folder).as_posix()}" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "raygrid = raygrid.pipeline.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def test_every_benchmark_script_prints_its_help_without_a_gpu_or_peers():
    # The scripts are what users run to check our numbers: each must at least start and say
    # what it takes on a machine without a GPU or the peer packages (gpu_sweep.py had no
    # options and ended in a CudaSupportError traceback).
    assert len(BENCHMARKS) >= 7
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    for script in BENCHMARKS:
        shown = subprocess.run(
            [sys.executable, str(script), "--help"], capture_output=True, text=True,
            timeout=120, cwd=ROOT, env=env,
        )  # fmt: skip
        assert shown.returncode == 0, (script.name, shown.stderr[-2000:])
        assert shown.stdout.startswith("usage: "), script.name


def test_gpu_session_script_refuses_unknown_parts_and_stops_a_part_at_its_limit(tmp_path):
    """benchmarks/gpu_session.sh is what a session lent a GPU runs, in one device call: a
    typo must fail before the machine's time goes on anything, and a part past its limit
    must leave the call's time to the parts after it."""
    script = ROOT / "benchmarks" / "gpu_session.sh"
    # `python3` there is this test's Python (the GPU machine's has numba on its own).
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = tmp_path / "out"
    env["OUT"] = str(out)
    typo = subprocess.run(
        ["bash", str(script), "tests", "target"], capture_output=True, text=True, cwd=tmp_path,
        env=env, timeout=60,
    )  # fmt: skip
    assert typo.returncode == 2 and "unknown part: target" in typo.stderr
    assert not out.exists()  # nothing ran, not even the device's description
    # Without a GPU the targets end in a second or two (more on a loaded machine: a 2 s
    # limit once stopped them under CI's load); the tests part, a GPU test that outlasts
    # any limit, is stopped at the limit and the script goes on to say how long each took.
    sleeper = tmp_path / "test_sleeper.py"
    sleeper.write_text(
        "import time, pytest\n\n@pytest.mark.gpu\ndef test_sleeps():\n    time.sleep(120)\n"
    )
    run = subprocess.run(
        ["bash", str(script), "targets", "tests"], capture_output=True, text=True, cwd=ROOT,
        env={**env, "GPU_PART_LIMIT": "8", "GPU_TESTS": str(sleeper), "TMPDIR": str(tmp_path)},
        timeout=120,
    )  # fmt: skip
    parts = (out / "parts.log").read_text().splitlines()
    assert [line.split(":")[0] for line in parts] == ["part targets", "part tests"], run.stderr
    # Stopped by SIGINT, so pytest said where it was.
    assert "KeyboardInterrupt" in (out / "gpu-tests.log").read_text()
    assert "no CUDA device" in (out / "gpu-targets.log").read_text()


def test_the_readmes_first_python_example_runs_as_written():
    # Its lines are the API a reader copies first (raypaths was added to it): run them.
    readme = (ROOT / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(example, "README.md", "exec"), scope)
    assert len(scope["rays"]) == 2 and scope["ray"].attrs["traveltime"] > 0


def test_the_readmes_tiled_script_runs_as_written(tmp_path):
    # It named sources, source and big_model it never defined, and its solves ran again in
    # every worker process (at the top level, unguarded). Run as a script, its cluster kept
    # to two workers on 127.0.0.1 with no dashboard (the only change).
    import xarray as xr

    readme = (ROOT / "README.md").read_text()
    script = next(block.split("```", 1)[0] for block in readme.split("```python\n")
                  if "def main():" in block)  # fmt: skip
    small = "Client(n_workers=2, threads_per_worker=1, host='127.0.0.1', dashboard_address=None)"
    assert script.count("Client()") == 1
    (tmp_path / "tiled.py").write_text(script.replace("Client()", small))
    env = {**os.environ, "MPLBACKEND": "Agg"}
    run = subprocess.run([sys.executable, "tiled.py"], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    times = xr.open_zarr(tmp_path / "times.zarr", consolidated=False)["traveltime"]
    assert times.chunks is not None and float(times.min()) == 0.0


def test_ci_runs_the_readme_test_command_unchanged():
    # The README's second command is how anyone runs the suite; CI must run that very line
    # (the brief's rule), so a change to one (e.g. its -n) cannot silently miss the other.
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(block) == 2 and "pytest" in block[1], block
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert block[1] in ci


def test_the_kernels_import_no_dask_xarray_or_zarr():
    # raygrid.kernels is numeric kernels only (its docstring): a CUDA solver's message once
    # borrowed Dask's byte formatter.
    modules = sorted(
        "raygrid.kernels." + ".".join(path.relative_to(ROOT / "kernels").with_suffix("").parts)
        for path in (ROOT / "kernels").rglob("*.py")
        if path.name != "__init__.py"
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in ('dask', 'distributed', 'xarray', 'zarr') if m in sys.modules))\n"
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "[]\n"
