"""GPU pull-solver variants head to head, interleaved in one process.

The GPU host is noisy (the same solve varied by 15-20 % between runs of one session, the
CPU reference by 1.5-2.8 s across sessions: ``results/gpu_study_h100.md``), so variants are
timed round-robin: round ``k`` runs every variant once, and each variant's median and best
over the rounds are compared. Variants: the launch-per-pass schedule with prepared launches
(``raygrid.kernels.cuda.launch``) and through Numba's launch, and the phases schedule, each as
a whole call (``solve_pull``: model to the device, solve, results back) and with the model
resident (a ``PullSolver`` built before the rounds: a survey worker's case), the resident
passes schedule returning times alone (no predecessors copied back), and precomputed
weights resident. The CPU Dijkstra runs once on the same host for the ratio.

Run on the GPU host from the repository root (about a minute on an H100)::

    python benchmarks/gpu_ab.py > ab.jsonl

One JSON row per variant and case: ``median_s``, ``best_s``, the median of each of the
solver's wall-time parts (``setup_s``, ``passes_s``, ``copy_s``, ``launch_s``), its work
counters, and the speed-up of the best over the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_study import device_info, gradient_slowness, top_centre  # noqa: E402

from raygrid.kernels import dijkstra, forward_star  # noqa: E402
from raygrid.kernels.cuda import launch  # noqa: E402
from raygrid.kernels.cuda.pull_solver import PullSolver, solve_pull  # noqa: E402

#: Variant name -> (resident model?, solver settings, solve settings, prepared launches?).
VARIANTS = {
    "passes": (False, {}, {}, True),
    # Every pass launched through Numba, which marshals the arguments each time (the launch
    # path before raygrid.kernels.cuda.launch).
    "passes-numba-launch": (False, {}, {}, False),
    "passes-resident": (True, {}, {}, True),
    # The times alone (traveltime() without raypaths): no predecessors copied back.
    "passes-resident-times": (True, {}, {"predecessors": False}, True),
    "precomputed-resident": (True, {"precomputed": True}, {}, True),
    "phases": (False, {"schedule": "phases"}, {}, True),
    "phases-resident": (True, {"schedule": "phases"}, {}, True),
}
PARTS = ("setup_s", "setup_model_s", "passes_s", "copy_s", "launch_s")
COUNTERS = ("passes", "host_reads", "tiles_relaxed", "inner_iterations", "weights_evaluated")


def head_to_head(tag, slowness, spacing, star, rounds, cpu_s=None) -> list[dict]:
    """Every variant once per round, ``rounds`` rounds, after one warm-up each."""
    from numba import cuda

    seeds = top_centre(slowness.shape)
    calls, failed = {}, {}
    for name, (resident, settings, solve, prepared) in VARIANTS.items():
        launch.PREPARED = prepared
        try:
            if resident:
                solver = PullSolver(slowness, spacing, star, **settings)
                call = (lambda s, k: lambda stats: s.solve(seeds, stats=stats, **k))(solver, solve)
            else:
                call = (lambda k: lambda stats: solve_pull(
                    slowness, spacing, star, seeds, stats=stats, **k)
                )({**settings, **solve})  # fmt: skip
            call({})  # warm-up: compiles
            cuda.synchronize()
            calls[name] = call
        except Exception as error:  # a variant the device cannot run is a result too
            failed[name] = repr(error)[:300]
    seconds = {name: [] for name in calls}
    stats = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            launch.PREPARED = VARIANTS[name][3]
            found = {}
            start = time.perf_counter()
            call(found)
            cuda.synchronize()
            seconds[name].append(time.perf_counter() - start)
            stats[name].append(found)
    launch.PREPARED = True
    rows = []
    for name in calls:
        row = {
            "case": tag,
            "variant": name,
            "rounds": rounds,
            "median_s": float(np.median(seconds[name])),
            "best_s": float(np.min(seconds[name])),
        }
        for part in PARTS:
            row[part] = float(np.median([found[part] for found in stats[name]]))
        row.update({k: stats[name][-1][k] for k in COUNTERS})
        if cpu_s is not None:
            row["cpu_s"] = cpu_s
            row["speedup_best"] = cpu_s / row["best_s"]
            row["speedup_median"] = cpu_s / row["median_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    for name, error in failed.items():
        print(json.dumps({"case": tag, "variant": name, "error": error}), flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=1601, help="2D size")
    parser.add_argument("--n3", type=int, default=256, help="3D size (0 skips)")
    args = parser.parse_args(argv)
    print(json.dumps({"device": device_info()}), flush=True)

    h2 = np.array([10.0, 1.0, 10.0])
    slowness = gradient_slowness((args.n, 1, args.n))
    star = forward_star((5, 0, 5))
    dijkstra(slowness[:8, :, :8], h2, star, [0], [0.0])  # compile
    start = time.perf_counter()
    dijkstra(slowness, h2, star, *top_centre(slowness.shape)[0])
    cpu_s = time.perf_counter() - start
    head_to_head(f"2d{args.n}r5", slowness, h2, star, args.rounds, cpu_s)
    if args.n3:
        slowness = gradient_slowness((args.n3,) * 3)
        star = forward_star((2, 2, 2))
        head_to_head(f"3d{args.n3}r2", slowness, np.full(3, 10.0), star, max(args.rounds // 2, 2))


if __name__ == "__main__":
    main()
