"""Benchmark: one solve by domain decomposition on 2 Dask workers vs single domain on 1.

Issue 4, point 7. In one process run, for each case:

- single domain: ``traveltime(...)`` in this process, one core (the CPU Dijkstra is
  single-threaded);
- tiled: ``traveltime(..., tiles=..., client=...)`` on a 2-worker ``LocalCluster`` (one
  thread each), the model scattered from this process (in-memory NumPy model);

and prints wall times, rounds, tile tasks, bytes moved in boundary strips, whether the
two fields are bitwise equal, and where the tiled solve's time went (``tile_seconds``: the
rounds' wall time against the tile tasks' summed seconds, their solvers' and, on CUDA, the
solvers' model setup, starting times' upload, relaxation and copy back; from the rounds'
log records). Cases: 2D 1601^2
radius 5 with 2x2 tiles, 3D 161^3 radius 2 with 2x2x1 tiles (source at the top centre,
gradient 0.5 -> 4 km/s).

``--small-tiles`` runs 3D 101^3 radius 2 in 51^3 and in 26^3 tiles instead: what a round
of small tile tasks costs (the README's advice to keep tiles large).

Targets: the 2-worker tiled solve is no slower than the 1-worker single-domain solve, and
rounds stay within 3x the number of tiles along the longest axis.

Run from the repository root::

    python benchmarks/tiled_decomposition.py [--quick] [--out benchmarks/results/tiled.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import time
from pathlib import Path

import numpy as np
from report import machine as machine_of


def machine() -> dict:
    """What this ran on (:func:`report.machine`)."""
    return machine_of(("raygrid", "numpy", "numba", "dask", "distributed", "xarray"))


def warm(velocity, source, radius, backend="cpu") -> None:
    """Compile (or load from Numba's cache) the kernels in this process."""
    import raygrid.pipeline as rg

    rg.traveltime(velocity, source, radius=radius, backend=backend)


class RoundSeconds(logging.Handler):
    """Sums the ``tile_seconds`` each round of a tiled solve logs (``solve_tiled``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds: dict = {}

    def emit(self, record: logging.LogRecord) -> None:
        for part, value in getattr(record, "tile_seconds", {}).items():
            self.seconds[part] = self.seconds.get(part, 0.0) + value


@contextlib.contextmanager
def round_seconds():
    """The tile seconds of the tiled solves run inside, summed over rounds."""
    logger = logging.getLogger("raygrid")
    handler, level = RoundSeconds(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.seconds
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run_case(client, name, shape, radius, tiles, backend="cpu") -> dict:
    import raygrid.pipeline as rg

    velocity = rg.gradient_model(shape, 10.0, 500.0, 4000.0)
    source = {d: 0.0 if d == "z" else 10.0 * (n // 2) for d, n in shape.items()}
    # Compile once outside the timings, here and on the workers.
    small = velocity.isel({d: slice(0, 12) for d in shape})
    origin = {d: 0.0 for d in shape}
    warm(small, origin, radius, backend)
    client.run(warm, small, origin, radius, backend)
    workers = len(client.nthreads())

    start = time.perf_counter()
    single = rg.traveltime(velocity, source, radius=radius, backend=backend)
    single_s = time.perf_counter() - start

    with round_seconds() as seconds:
        start = time.perf_counter()
        tiled = rg.traveltime(
            velocity, source, radius=radius, tiles=tiles, client=client, backend=backend
        )
        values = tiled.values  # gather: the timing includes bringing the field home
        tiled_s = time.perf_counter() - start

    counts = [-(-shape[d] // tiles.get(d, shape[d])) for d in shape]
    row = {
        "case": name,
        "shape": shape,
        "radius": radius,
        "tiles": tiles,
        "backend": backend,
        "single_domain_1_worker_s": round(single_s, 3),
        f"tiled_{workers}_workers_s": round(tiled_s, 3),
        "speedup": round(single_s / tiled_s, 3),
        "rounds": tiled.attrs["rounds"],
        "round_limit": 3 * max(counts),
        "strip_bytes": tiled.attrs["strip_bytes"],
        "bitwise_equal": bool(np.array_equal(values, single.values)),
        # Summed over rounds: ``round`` is the rounds' wall time; the others (``task``,
        # ``solve`` and the CUDA solver's ``model``, ``start``, ``relax`` and ``copy``:
        # pipeline.decompose.TILE_PARTS) are summed over the tile tasks (which run side by
        # side).
        "tile_seconds": {part: round(value, 4) for part, value in seconds.items()},
    }
    row["targets"] = {
        "no_slower": tiled_s <= single_s,
        "rounds_within_3x": row["rounds"] <= row["round_limit"],
    }
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--small-tiles", action="store_true",
        help="what small tiles cost instead: 3D 101^3 radius 2 in 51^3 and in 26^3 tiles",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--cuda", action="store_true",
        help="CUDA backend on a dask-cuda cluster, one worker per GPU (single domain: on the "
        "first GPU, in this process)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    from distributed import Client, LocalCluster

    cases = [
        ("2d", {"z": 1601, "x": 1601}, 5, {"z": 801, "x": 801}),
        ("3d", {"z": 161, "y": 161, "x": 161}, 2, {"z": 161, "y": 81, "x": 81}),
    ]
    if args.small_tiles:
        shape = {"z": 101, "y": 101, "x": 101}
        cases = [(f"3d-{n}", shape, 2, {d: n for d in shape}) for n in (51, 26)]
    elif args.quick:
        cases = [
            ("2d", {"z": 201, "x": 201}, 5, {"z": 101, "x": 101}),
            ("3d", {"z": 41, "y": 41, "x": 41}, 2, {"z": 41, "y": 21, "x": 21}),
        ]
    if args.cuda:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(dashboard_address=None, host="127.0.0.1")
    else:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None, host="127.0.0.1")  # fmt: skip
    backend = "cuda" if args.cuda else "cpu"
    with cluster, Client(cluster) as client:
        rows = [run_case(client, *case, backend=backend) for case in cases]
    result = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "cases": rows}
    if args.cuda:
        from numba import cuda

        result["gpus"] = [g.name.decode() if isinstance(g.name, bytes) else g.name
                          for g in cuda.gpus]  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
