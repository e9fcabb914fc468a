"""GPU benchmark: raygrid's CUDA solvers against its CPU Dijkstra on the same host.

What it measures (issue 3, point 7), all in one process run:

1. The papers' study (Monsegny & Agudelo 2013; Kanoksirirath): a 2D vertical gradient
   0.5 -> 4 km/s at sizes 128^2 ... 1600^2 and radius 1 ... 6, single source at the top
   centre, full field: the single-thread CPU Dijkstra vs the GPU pull solver (on the fly and
   precomputed weights) and Near-Far, with the speed-up over the CPU and a check that the
   float64 fields agree.
2. 3D 256^3 at radius 2, 3 and 4 (radius 4 on tiles shrunk to fit shared memory).
3. Survey throughput: sources per second against the batch size of the pull solver, and
   the speed-up per source over the CPU Dijkstra where the study timed it (``--survey``).
4. Efficiency: graph edges per second (every directed edge of the star counted once per
   solve, the usual TEPS measure), the pull solver's tile loads per second, and the fraction
   of the device's memory bandwidth this implies (an estimate from the bytes each tile load
   moves: its slowness tile and one time tile per source; see ``tile_bytes``).

Targets on one H100: 2D 1601^2 radius 5 full field <= 50 ms; 3D 256^3 radius 2 <= 1 s;
>= 50x the single-thread CPU Dijkstra for radius >= 3 at 1600^2.

It uses only ``raygrid.kernels`` and NumPy, so it runs on a GPU machine without Dask or
Zarr; where ``raygrid.pipeline`` imports, the ``pipeline`` row times the user's whole call
(``traveltime(..., backend="cuda")``: the kernel's work plus the pipeline's on the host).
Run from the repository root::

    python benchmarks/gpu_study.py                 # everything (about 10 minutes on an H100)
    python benchmarks/gpu_study.py --quick         # small sizes, a smoke test
    python benchmarks/gpu_study.py --out benchmarks/results/gpu_study_h100.json

Timings take the best of ``--repeat`` runs after one warm-up run that compiles the kernels
(compile time is reported separately); the CPU Dijkstra's too (``cpu_runs_s``: each run).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raygrid.kernels import dijkstra, forward_star  # noqa: E402

#: Peak memory bandwidth (bytes/s) and FP64/FP32 vector throughput (FLOP/s) by device name.
PEAKS = {
    "H100": {"bandwidth": 3.35e12, "fp64": 34e12, "fp32": 67e12},
    "H200": {"bandwidth": 4.8e12, "fp64": 34e12, "fp32": 67e12},
}


def gradient_slowness(shape: tuple[int, int, int], top=500.0, bottom=4000.0) -> np.ndarray:
    """Slowness (s/m) of a velocity linear in z from ``top`` to ``bottom`` m/s."""
    z = np.arange(shape[0], dtype=np.float64)[:, None, None] / (shape[0] - 1)
    return np.broadcast_to(1.0 / (top + (bottom - top) * z), shape).copy()


def top_centre(shape: tuple[int, int, int]) -> list[tuple[np.ndarray, np.ndarray]]:
    node = (0, shape[1] // 2, shape[2] // 2)
    return [(np.array([np.ravel_multi_index(node, shape)]), np.array([0.0]))]


def edge_count(shape, star) -> int:
    """Directed edges of the graph: star offsets whose end lies inside the grid."""
    total = 0
    for offset in star.offsets:
        total += int(np.prod([max(n - abs(o), 0) for n, o in zip(shape, offset)]))
    return total


def tile_bytes(block, radius, batch, itemsize) -> int:
    """Global-memory bytes one tile relaxation moves: halo'd slowness (8), node pass stamps
    (4) and times in, times, predecessors (2) and stamps out for the interior."""
    halo = int(np.prod([b + 2 * r for b, r in zip(block, radius)]))
    interior = int(np.prod(block))
    return halo * (8 + 4 + batch * itemsize) + interior * (batch * (itemsize + 2) + 4)


def efficiency(stats: dict, seconds: float, block, radius, star, spacing, info, precomputed):
    """Fractions of the device's memory bandwidth and FP64 peak that a pull solve used.

    Bytes: each tile relaxation's tile traffic (:func:`tile_bytes`) plus 8 bytes per
    precomputed weight read. FLOPs: per weight computed on the fly, a multiply and an add per
    crossing of its table and one multiply by the length.
    """
    if not info["peaks"] or "tiles_relaxed" not in stats:
        return {}
    from raygrid.kernels import EXACT, star_crossings

    tile = tuple(b + 2 * r for b, r in zip(block, radius))
    crossings = star_crossings(star, spacing, EXACT, tile)
    per_weight = 2 * np.diff(crossings.start).mean() + 1
    weights = stats.get("weights_evaluated", 0)
    moved = stats["tiles_relaxed"] * tile_bytes(block, radius, 1, 8)
    flops = 0.0
    if precomputed:
        moved += 8 * weights
    else:
        flops = weights * per_weight
    return {
        "bandwidth_fraction": moved / seconds / info["peaks"]["bandwidth"],
        "fp64_fraction": flops / seconds / info["peaks"]["fp64"],
    }


PULL_STATS = (
    "block", "passes", "tiles_relaxed", "inner_iterations", "weights_evaluated", "schedule",
    "setup_s", "setup_model_s", "passes_s", "copy_s", "launch_s",
)  # fmt: skip


def cpu_time(run, repeat: int) -> tuple[list[float], object]:
    """Seconds of each of ``repeat`` runs of the CPU Dijkstra (compiled already), and the
    last result. The speed-ups divide the best of them by the GPU's best: one CPU run on a
    shared GPU host varied by up to 40 % between runs (results/gpu_study_h200.md), so a
    single run flattered the GPU as often as not."""
    seconds, result = [], None
    for _ in range(max(repeat, 1)):
        start = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - start)
    return seconds, result


def best_time(run, repeat: int) -> tuple[float, float, object]:
    """(compile+first run seconds, best of ``repeat`` seconds, last result)."""
    from numba import cuda

    start = time.perf_counter()
    result = run()
    cuda.synchronize()
    first = time.perf_counter() - start
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return first, best, result


def device_info() -> dict:
    from numba import cuda

    device = cuda.get_current_device()
    name = getattr(device, "name", b"simulator")
    name = name.decode() if isinstance(name, bytes) else str(name)
    peaks = next((v for k, v in PEAKS.items() if k in name), None)
    try:
        total = cuda.current_context().get_memory_info()[1]
    except Exception:  # the simulator has no memory to report
        total = 0
    return {
        "name": name,
        "compute_capability": list(device.compute_capability),
        "multiprocessors": getattr(device, "MULTIPROCESSOR_COUNT", 0),
        "memory_gib": round(total / 2**30, 1),
        "peaks": peaks,
    }


def pipeline_call(models: dict, slowness, spacing, star, seeds, stats=None, **settings):
    """The user's whole call, ``raygrid.pipeline.traveltime(..., backend="cuda",
    predecessors=True)``, on the model as a DataArray: the kernel rows' work plus the
    pipeline's own on the host (the model's checks, its slowness, the source's seeds, the
    result's DataArray). ``models`` caches the DataArray of each slowness (built untimed
    by the warm-up call)."""
    import xarray as xr

    import raygrid.pipeline as rg

    key = id(slowness)
    if key not in models:
        dims = ("z", "x") if slowness.shape[1] == 1 else ("z", "y", "x")
        values = 1.0 / (slowness[:, 0, :] if len(dims) == 2 else slowness)
        steps = dict(zip(("z", "y", "x"), spacing))
        coords = {
            d: (d, steps[d] * np.arange(n), {"units": "m"}) for d, n in zip(dims, values.shape)
        }
        models.clear()  # one model at a time on the host
        models[key] = xr.DataArray(values, dims=dims, coords=coords, attrs={"units": "m/s"})
    velocity = models[key]
    node = np.unravel_index(int(seeds[0][0][0]), slowness.shape)
    source = {d: float(velocity[d][i]) for d, i in zip(("z", "y", "x"), node) if d in velocity.dims}
    radius = {d: r for d, r in zip(("z", "y", "x"), star.radius) if d in velocity.dims}
    result = rg.traveltime(velocity, source, radius=radius, backend="cuda", predecessors=True)
    return result["traveltime"].values.reshape(1, -1), None


def solvers(only=None):
    """The GPU solvers present in this checkout, by name (``only``: a subset of names)."""
    from raygrid.kernels.cuda.pull_solver import PullSolver, solve_pull

    def resident(**fixed):
        held = []

        def solve(slowness, spacing, star, seeds, stats=None, **settings):
            # The model kept on the device between calls (a survey worker's batches, the
            # pipeline's resident solver): built by the first, untimed call; then solves.
            if not held:
                held.append(PullSolver(slowness, spacing, star, **fixed, **settings))
            return held[0].solve(seeds, stats=stats)

        return solve

    found = {
        "pull": lambda *a, **k: solve_pull(*a, **k),
        "pull-resident": resident(),
        # The rows walk (an experiment: PullSolver's walk), whole call and resident.
        "pull-rows": lambda *a, **k: solve_pull(*a, walk="rows", **k),
        "pull-resident-rows": resident(walk="rows"),
        "pull-precomputed": lambda *a, **k: solve_pull(*a, precomputed=True, **k),
        "pull-cooperative": lambda *a, **k: solve_pull(*a, schedule="cooperative", **k),
        "pull-phases": lambda *a, **k: solve_pull(*a, schedule="phases", **k),
    }
    try:
        from raygrid.kernels.cuda.nearfar import solve_near_far

        found["near-far"] = lambda *a, stats=None, **k: solve_near_far(*a, **k)
    except ImportError:
        pass
    try:  # Dask and xarray: on a GPU machine only with the wheels carried there (the
        # package itself imports lazily, so ask for the module the call runs)
        import raygrid.pipeline.solve  # noqa: F401

        found["pipeline"] = partial(pipeline_call, {})
    except ImportError as error:
        if only and "pipeline" in only:
            print(f"no pipeline row: raygrid.pipeline does not import ({error})", file=sys.stderr)
    return {k: v for k, v in found.items() if not only or k in only}


def study_2d(sizes, radii, repeat, cpu_limit, info, only=None) -> list[dict]:
    rows = []
    for n in sizes:
        shape = (n, 1, n)
        slowness = gradient_slowness(shape)
        spacing = np.array([10.0, 1.0, 10.0])
        seeds = top_centre(shape)
        for r in radii:
            star = forward_star((r, 0, r))
            edges = edge_count(shape, star)
            row = {"case": "2d", "n": n, "radius": r, "offsets": star.size, "edges": edges}
            cpu = None
            if n * n * star.size <= cpu_limit:
                dijkstra(slowness[:8, :, :8], spacing, star, [0], [0.0])  # compile
                runs, (cpu, _) = cpu_time(
                    partial(dijkstra, slowness, spacing, star, *seeds[0]), repeat
                )
                row["cpu_s"], row["cpu_runs_s"] = min(runs), runs
            for name, solve in solvers(only).items():
                stats = {}
                try:
                    first, best, (times, _) = best_time(
                        partial(solve, slowness, spacing, star, seeds, stats=stats), repeat
                    )
                except RuntimeError as error:  # e.g. the phases schedule's stall guard
                    row[f"{name}_error"] = str(error)
                    continue
                row[f"{name}_s"] = best
                row[f"{name}_first_s"] = first
                row[f"{name}_gteps"] = edges / best / 1e9
                if cpu is not None:
                    row[f"{name}_speedup"] = row["cpu_s"] / best
                    row[f"{name}_max_rel_diff"] = float(
                        np.max(np.abs(times[0] - cpu) / np.maximum(cpu, 1e-30))
                    )
                if "tiles_relaxed" in stats:
                    found = efficiency(stats, best, stats["block"], (r, 0, r), star, spacing, info,
                                       name.endswith("precomputed"))  # fmt: skip
                    row.update({f"{name}_{k}": v for k, v in found.items()})
                    row.update({f"{name}_{k}": stats[k] for k in PULL_STATS if k in stats})
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def study_3d(n, radii, repeat, cpu_limit, info, only=None) -> list[dict]:
    rows = []
    shape = (n, n, n)
    slowness = gradient_slowness(shape)
    spacing = np.array([10.0, 10.0, 10.0])
    seeds = top_centre(shape)
    for r in radii:
        star = forward_star((r, r, r))
        edges = edge_count(shape, star)
        row = {"case": "3d", "n": n, "radius": r, "offsets": star.size, "edges": edges}
        if n**3 * star.size <= cpu_limit:
            runs, _ = cpu_time(partial(dijkstra, slowness, spacing, star, *seeds[0]), repeat)
            row["cpu_s"], row["cpu_runs_s"] = min(runs), runs
        for name, solve in solvers(only).items():
            stats = {}
            try:
                first, best, _ = best_time(
                    partial(solve, slowness, spacing, star, seeds, stats=stats), repeat
                )
            except RuntimeError as error:  # e.g. the phases schedule's stall guard
                row[f"{name}_error"] = str(error)
                continue
            row[f"{name}_s"] = best
            row[f"{name}_first_s"] = first
            row[f"{name}_gteps"] = edges / best / 1e9
            if "cpu_s" in row:
                row[f"{name}_speedup"] = row["cpu_s"] / best
            if "tiles_relaxed" in stats:
                found = efficiency(stats, best, stats["block"], (r, r, r), star, spacing, info,
                                   name.endswith("precomputed"))  # fmt: skip
                row.update({f"{name}_{k}": v for k, v in found.items()})
                row.update({f"{name}_{k}": stats[k] for k in PULL_STATS if k in stats})
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def study_survey(n, radius, batches, n_sources, repeat, dtype=np.float32, cpu_s=None) -> list[dict]:
    """Sources per second of one ``solve_pull`` call (model up, all sources, results down)
    for each batch size; with ``cpu_s`` (the CPU Dijkstra's time for one source of the same
    model and radius, float64, from the top centre), the speed-up per source over it (a
    like-for-like ratio in float64; the sources lie along the top row)."""
    from raygrid.kernels.cuda.pull_solver import solve_pull

    shape = (n, 1, n)
    slowness = gradient_slowness(shape)
    spacing = np.array([10.0, 1.0, 10.0])
    star = forward_star((radius, 0, radius))
    xs = np.linspace(0, n - 1, n_sources).astype(int)
    seeds = [(np.array([x]), np.array([0.0])) for x in xs]
    rows = []
    for batch in batches:
        stats = {}
        try:
            first, best, _ = best_time(
                partial(
                    solve_pull, slowness, spacing, star, seeds,
                    batch=batch, dtype=dtype, stats=stats,
                ),
                repeat,
            )  # fmt: skip
        except ValueError as error:  # shared memory too small for this batch
            rows.append({"case": "survey", "batch": batch, "error": str(error)})
            continue
        row = {
            "case": "survey",
            "n": n,
            "radius": radius,
            "sources": n_sources,
            "batch": batch,
            "block": stats["block"],  # shrunk where a batch's tiles outgrow shared memory
            "precision": np.dtype(dtype).name,
            "seconds": best,
            "sources_per_s": n_sources / best,
        }
        if cpu_s is not None:
            row["cpu_s"] = cpu_s
            row["speedup_per_source"] = cpu_s * n_sources / best
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write results as JSON")
    parser.add_argument(
        "--cpu-limit",
        type=float,
        default=4.2e8,
        help="skip the CPU Dijkstra above this many node-offsets (time)",
    )
    parser.add_argument("--sizes", type=int, nargs="*", help="2D sizes (default: the study's)")
    parser.add_argument("--radii", type=int, nargs="*", help="2D radii")
    parser.add_argument("--n3", type=int, help="3D cube size (0 skips 3D)")
    parser.add_argument("--radii3", type=int, nargs="*", help="3D radii")
    parser.add_argument("--batches", type=int, nargs="*", help="survey batch sizes (none skips)")
    parser.add_argument(
        "--survey",
        type=int,
        nargs=3,
        metavar=("N", "RADIUS", "SOURCES"),
        help="the survey's N^2 model, radius and sources (default 401 4 64; the speed-up per "
        "source is given where the 2D study timed the CPU at that size and radius)",
    )
    parser.add_argument("--survey-precision", choices=("float32", "float64"), default="float32")
    parser.add_argument(
        "--solvers",
        nargs="*",
        help="subset of pull, pull-resident, pull-rows, pull-resident-rows, pull-precomputed, "
        "pull-cooperative, pull-phases, near-far, pipeline (raygrid.pipeline.traveltime: the "
        "user's whole call)",
    )
    args = parser.parse_args(argv)
    if args.survey and not (args.survey[0] >= 2 and 1 <= args.survey[2] <= args.survey[0]):
        parser.error("--survey: N must be at least 2 and SOURCES between 1 and N")

    import numba
    from numba import cuda

    if not cuda.is_available():
        sys.exit("no CUDA device: this benchmark needs a GPU")
    info = device_info()
    print(json.dumps({"device": info}), flush=True)

    if args.quick:
        sizes, radii, n3, radii3, survey_n, sources = [128, 256], [1, 3, 5], 48, [2], 128, 8
    else:
        sizes = [128, 256, 512, 1024, 1601]
        radii, n3, radii3, survey_n, sources = [1, 2, 3, 4, 5, 6], 256, [2, 3, 4], 401, 64
    batches = [1, 2, 4, 8, 16]
    sizes = args.sizes if args.sizes is not None else sizes
    radii = args.radii if args.radii is not None else radii
    n3 = args.n3 if args.n3 is not None else n3
    radii3 = args.radii3 if args.radii3 is not None else radii3
    batches = args.batches if args.batches is not None else batches
    results = {
        "device": info,
        "host": {
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "numba": numba.__version__,
            "numpy": np.__version__,
        },
        "date": time.strftime("%Y-%m-%d"),
        "2d": study_2d(sizes, radii, args.repeat, args.cpu_limit, info, args.solvers),
        "3d": study_3d(n3, radii3, args.repeat, args.cpu_limit, info, args.solvers) if n3 else [],
    }
    survey_n, survey_radius, sources = args.survey or (survey_n, 4, sources)
    cpu_s = [
        row["cpu_s"]
        for row in results["2d"]
        if (row["n"], row["radius"]) == (survey_n, survey_radius) and "cpu_s" in row
    ]
    results["survey"] = study_survey(
        survey_n, survey_radius, batches, sources, args.repeat,
        np.dtype(args.survey_precision).type, cpu_s[0] if cpu_s else None,
    )  # fmt: skip
    target = {
        "2d_1601_r5_le_50ms": None,
        "3d_256_r2_le_1s": None,
        "speedup_ge_50x_r3plus_1600": None,
    }
    for row in results["2d"]:
        if row["n"] == 1601 and row["radius"] == 5:
            target["2d_1601_r5_le_50ms"] = row.get("pull_s", np.inf) <= 0.05
        if row["n"] == 1601 and row["radius"] >= 3 and "pull_speedup" in row:
            ok = row["pull_speedup"] >= 50
            previous = target["speedup_ge_50x_r3plus_1600"]
            target["speedup_ge_50x_r3plus_1600"] = ok if previous is None else previous and ok
    for row in results["3d"]:
        if row["n"] == 256 and row["radius"] == 2:
            target["3d_256_r2_le_1s"] = row.get("pull_s", np.inf) <= 1.0
    # The targets read the default solver (a whole call, model to the device included); the
    # fastest variant is recorded beside them.
    for row in results["2d"]:
        if row["n"] == 1601 and row["radius"] == 5:
            names = solvers(args.solvers)
            times = {k: row[f"{k}_s"] for k in names if f"{k}_s" in row}
            if times:
                fastest = min(times, key=times.get)
                target["2d_1601_r5_fastest"] = [fastest, times[fastest]]
    results["targets"] = target
    print(json.dumps({"targets": target}), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
