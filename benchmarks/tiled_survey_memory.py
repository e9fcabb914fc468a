"""Benchmark: the client's peak memory during a tiled survey with fields, receivers and rays.

A tiled survey is for models too large for one machine, so the client must not hold
anything the size of the model: the workers write each field's tiles into the store and
receivers' times and rays read only the chunks that hold their nodes
(``raygrid.pipeline.nodevalues``). This script makes a 3D gradient model as a Zarr file
(in a child process, so its making does not count), runs a workflow on it with
``compute.tiles`` on a 2-worker ``LocalCluster`` and prints the client's peak resident
memory (``ru_maxrss``) above what it held before the run, against the size of one field.
Two sources, 8 receivers on a diagonal of the bottom face, radius 2, rays stored.

Run from the repository root (each size in its own process: ``ru_maxrss`` only grows)::

    python benchmarks/tiled_survey_memory.py --size 241 --tile 121
    python benchmarks/tiled_survey_memory.py --size 321 --tile 121
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def make_model(path: Path, n: int) -> None:
    import raygrid.pipeline as rg

    velocity = rg.gradient_model({"z": n, "y": n, "x": n}, 10.0, 500.0, 4000.0)
    velocity.to_dataset(name="vp").to_zarr(
        path, zarr_format=3, consolidated=False, encoding={"vp": {"chunks": (64, 64, 64)}}
    )


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run(n: int, tile: int, work: Path) -> dict:
    from distributed import Client, LocalCluster

    from raygrid.pipeline.workflow import read_workflow, run_workflow

    model = work / "model.zarr"
    subprocess.run([sys.executable, __file__, "--make", str(model), "--size", str(n)], check=True)
    far = 10.0 * (n - 1)
    spec = {
        "model": {"path": str(model)},
        "grid": {"radius": 2},
        "sources": [{"z": 0.0, "y": 5.0 * n, "x": 5.0 * n}, {"z": 0.0, "y": 3.0 * n, "x": 2.0 * n}],
        "receivers": {
            "line": {
                "start": {"z": far, "y": 0.0, "x": 0.0},
                "stop": {"z": far, "y": far, "x": far},
                "count": 8,
            }
        },
        "outputs": {"store": str(work / "survey.zarr"), "plot": None},
        "compute": {"tiles": {"z": tile, "y": tile, "x": tile}},
    }
    (work / "workflow.yaml").write_text(yaml.safe_dump(spec))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=None, host="127.0.0.1"
        ) as cluster,
        Client(cluster) as client,
    ):
        before = peak_mib()
        start = time.perf_counter()
        store = run_workflow(read_workflow(work / "workflow.yaml"), client=client)
        seconds = time.perf_counter() - start
        after = peak_mib()
    return {
        "size": n,
        "tile": tile,
        "seconds": round(seconds, 1),
        "client_peak_mib": round(after),
        "client_before_mib": round(before),
        "client_growth_mib": round(after - before),
        "field_mib": round(n**3 * 8 / 2**20),
        "ray_points": int(store["ray_count"].sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=241)
    parser.add_argument("--tile", type=int, default=121)
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        make_model(args.make, args.size)
        return
    with tempfile.TemporaryDirectory() as work:
        print(json.dumps(run(args.size, args.tile, Path(work))))


if __name__ == "__main__":
    main()
