"""GPU pull-solver variants head to head, interleaved in one process.

The GPU host is noisy (the same solve varied by 15-20 % between runs of one session, the
CPU reference by 1.5-2.8 s across sessions: ``results/gpu_study_h100.md``), so variants are
timed round-robin: round ``k`` runs every variant once, and each variant's median and best
over the rounds are compared. Variants: the launch-per-pass schedule with prepared launches
(``raygrid.kernels.cuda.launch``) and through Numba's launch, and the phases schedule, each as
a whole call (``solve_pull``: model to the device, solve, results back) and with the model
resident (a ``PullSolver`` built before the rounds: a survey worker's case), the resident
passes schedule returning times alone (no predecessors copied back), precomputed
weights resident, and the star walked by changed tile rows (``walk="rows"``, whole call and
resident). The CPU Dijkstra runs once on the same host for the ratio.

``--baseline DIR`` adds ``baseline`` and ``baseline-resident``: the same solve through an
earlier revision's ``kernels/`` copied into ``DIR`` (``git archive REV kernels | tar -x -C
DIR``), imported under another package name, so a kernel change made without a GPU is timed
against the code it replaced in the same rounds.

Run on the GPU host from the repository root (about a minute on an H100)::

    python benchmarks/gpu_ab.py > ab.jsonl
    python benchmarks/gpu_ab.py --baseline .baseline > ab.jsonl

One JSON row per variant and case: ``median_s``, ``best_s``, the median of each of the
solver's wall-time parts (``setup_s``, ``passes_s``, ``copy_s``, ``launch_s``), its work
counters, and the speed-up of the best over the CPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_study import device_info, gradient_slowness, top_centre  # noqa: E402

import raygrid.kernels  # noqa: E402
from raygrid.kernels import dijkstra, forward_star  # noqa: E402
from raygrid.kernels.cuda import launch  # noqa: E402

#: Variant name -> (resident model?, solver settings, solve settings, prepared launches?).
VARIANTS = {
    "passes": (False, {}, {}, True),
    # Every pass launched through Numba, which marshals the arguments each time (the launch
    # path before raygrid.kernels.cuda.launch).
    "passes-numba-launch": (False, {}, {}, False),
    "passes-resident": (True, {}, {}, True),
    # A node's star walked row by row, only the tile rows that changed (walk="rows"; the
    # kernel's docstring), whole call and resident.
    "passes-rows": (False, {"walk": "rows"}, {}, True),
    "passes-resident-rows": (True, {"walk": "rows"}, {}, True),
    # The same with a higher in-block bound: later iterations cost the rows walk less, so
    # the bound that was best for the scan (8) may not be for it.
    "passes-resident-rows-inner12": (True, {"walk": "rows", "max_inner": 12}, {}, True),
    # The times alone (traveltime() without raypaths): no predecessors copied back.
    "passes-resident-times": (True, {}, {"predecessors": False}, True),
    "precomputed-resident": (True, {"precomputed": True}, {}, True),
    "phases": (False, {"schedule": "phases"}, {}, True),
    "phases-resident": (True, {"schedule": "phases"}, {}, True),
}
#: Variants run through the ``--baseline`` copy of ``kernels/`` (its own launch settings).
BASELINE_VARIANTS = {
    "baseline": (False, {}, {}, True),
    "baseline-resident": (True, {}, {}, True),
}
PARTS = ("setup_s", "setup_model_s", "passes_s", "copy_s", "launch_s")
COUNTERS = (
    "passes", "host_reads", "tiles_relaxed", "inner_iterations", "weights_evaluated", "walk",
)  # fmt: skip


def load_baseline(directory: str):
    """The ``kernels`` package of an earlier revision copied into ``directory``, imported as
    ``raygrid_baseline.kernels`` (its imports are relative, so any package name works)."""
    root = Path(directory).resolve()
    if not (root / "kernels" / "cuda" / "pull_solver.py").is_file():
        raise SystemExit(f"--baseline {directory}: no kernels/cuda/pull_solver.py in it")
    holder = Path(tempfile.mkdtemp(prefix="raygrid-baseline-"))
    (holder / "raygrid_baseline").symlink_to(root, target_is_directory=True)
    sys.path.insert(0, str(holder))
    return importlib.import_module("raygrid_baseline.kernels")


def head_to_head(tag, slowness, spacing, radius, rounds, cpu_s=None, baseline=None, names=None):
    """Every variant once per round, ``rounds`` rounds, after one warm-up each; with
    ``baseline`` (a ``kernels`` package), its variants too; ``names``: only these of
    :data:`VARIANTS`."""
    from numba import cuda

    seeds = top_centre(slowness.shape)
    chosen = VARIANTS if names is None else {name: VARIANTS[name] for name in names}
    variants = {name: (raygrid.kernels, *v) for name, v in chosen.items()}
    if baseline is not None:
        variants.update({name: (baseline, *v) for name, v in BASELINE_VARIANTS.items()})
    calls, failed, fields = {}, {}, {}
    for name, (code, resident, settings, solve, prepared) in variants.items():
        launch.PREPARED = prepared
        star = code.forward_star(radius)
        module = importlib.import_module(code.__name__ + ".cuda.pull_solver")
        try:
            if resident:
                solver = module.PullSolver(slowness, spacing, star, **settings)
                call = partial(solver.solve, seeds, **solve)
            else:
                call = partial(
                    module.solve_pull, slowness, spacing, star, seeds, **settings, **solve
                )
            fields[name] = call(stats={})[0]  # warm-up: compiles
            cuda.synchronize()
            calls[name] = call
        except Exception as error:  # a variant the device cannot run is a result too
            failed[name] = repr(error)[:300]
    seconds = {name: [] for name in calls}
    stats = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            launch.PREPARED = variants[name][4]
            found = {}
            start = time.perf_counter()
            call(stats=found)
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
            # Every variant must give the first one's floats (the same fixed point).
            "same_times": bool(np.array_equal(fields[name], next(iter(fields.values())))),
        }
        for part in PARTS:
            row[part] = float(np.median([found[part] for found in stats[name]]))
        # (.get: an older revision's solver, --baseline, may not count them all)
        row.update({k: stats[name][-1].get(k) for k in COUNTERS})
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
    parser.add_argument(
        "--baseline", metavar="DIR", help="an earlier revision's kernels/ in DIR, timed too"
    )
    parser.add_argument("--radii", type=int, nargs="+", default=[5], help="2D radii (default 5)")
    parser.add_argument(
        "--variants", nargs="+", choices=sorted(VARIANTS), help="only these (default: all)"
    )
    args = parser.parse_args(argv)
    baseline = None if args.baseline is None else load_baseline(args.baseline)
    print(json.dumps({"device": device_info()}), flush=True)

    h2 = np.array([10.0, 1.0, 10.0])
    slowness = gradient_slowness((args.n, 1, args.n))
    for r in args.radii:
        star = forward_star((r, 0, r))
        dijkstra(slowness[:8, :, :8], h2, star, [0], [0.0])  # compile
        start = time.perf_counter()
        dijkstra(slowness, h2, star, *top_centre(slowness.shape)[0])
        cpu_s = time.perf_counter() - start
        head_to_head(
            f"2d{args.n}r{r}", slowness, h2, (r, 0, r), args.rounds, cpu_s, baseline,
            args.variants,
        )  # fmt: skip
    if args.n3:
        slowness = gradient_slowness((args.n3,) * 3)
        rounds = max(args.rounds // 2, 2)
        head_to_head(
            f"3d{args.n3}r2", slowness, np.full(3, 10.0), (2, 2, 2), rounds, None, baseline,
            args.variants,
        )  # fmt: skip


if __name__ == "__main__":
    main()
