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
