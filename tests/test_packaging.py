"""The wheel ships every module of both import packages."""

from __future__ import annotations

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
