"""GPU pull-solver settings side by side: tile shape, weights, cooperative launch, precision.

A companion to ``gpu_study.py`` (which runs the solvers at their defaults): the same source
and gradient models, one row per setting, with the solver's own statistics (passes, tile
relaxations, in-block iterations, weights evaluated, and the setup / passes / copy split of
the wall time) and the largest relative difference to the CPU Dijkstra. Run on the GPU
host from the repository root::

    python benchmarks/gpu_sweep.py > sweep.jsonl

Results: ``results/gpu_sweep_h100.jsonl`` (see ``results/gpu_study_h100.md``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_study import device_info, gradient_slowness, top_centre  # noqa: E402

from raygrid.kernels import dijkstra, forward_star  # noqa: E402
from raygrid.kernels.cuda.pull import solve_pull  # noqa: E402


def run(tag, slowness, spacing, star, seeds, reference, repeat=2, **settings):
    """Best of ``repeat`` timed solves after one warm-up; one JSON row (an error is a row)."""
    named = {k: getattr(v, "__name__", v) for k, v in settings.items()}
    try:
        start = time.perf_counter()
        solve_pull(slowness, spacing, star, seeds, **settings)
        first = time.perf_counter() - start
        best, stats, times = np.inf, None, None
        for _ in range(repeat):
            found = {}
            start = time.perf_counter()
            out, _ = solve_pull(slowness, spacing, star, seeds, stats=found, **settings)
            seconds = time.perf_counter() - start
            if seconds < best:
                best, stats, times = seconds, found, out
        row = {"tag": tag, **named, "s": best, "first": first, **stats}
        if reference is not None:
            row["rel"] = float(np.max(np.abs(times[0] - reference) / np.maximum(reference, 1e-30)))
        print(json.dumps(row, default=str), flush=True)
        return times[0]
    except Exception as error:  # a setting the device cannot launch is a result too
        print(json.dumps({"tag": tag, **named, "error": repr(error)[:300]}, default=str))
        return None


def main() -> None:
    print(json.dumps({"device": device_info()}), flush=True)
    h2 = np.array([10.0, 1.0, 10.0])

    # Per-pass cost where launches dominate: a small model.
    slowness = gradient_slowness((64, 1, 64))
    star = forward_star((1, 0, 1))
    for cooperative in (True, False):
        run("2d64r1", slowness, h2, star, top_centre(slowness.shape), None,
            block=(8, 1, 8), cooperative=cooperative)  # fmt: skip

    slowness = gradient_slowness((1601, 1, 1601))
    star = forward_star((5, 0, 5))
    seeds = top_centre(slowness.shape)
    dijkstra(slowness[:8, :, :8], h2, star, [0], [0.0])  # compile
    start = time.perf_counter()
    reference, _ = dijkstra(slowness, h2, star, *seeds[0])
    print(json.dumps({"tag": "2d1601r5", "cpu_s": time.perf_counter() - start}), flush=True)
    for block in [(16, 1, 16), (16, 1, 32), (8, 1, 32)]:
        for precomputed in (False, True):
            run("2d1601r5", slowness, h2, star, seeds, reference, block=block,
                precomputed=precomputed)  # fmt: skip
    run("2d1601r5", slowness, h2, star, seeds, reference, block=(16, 1, 16), cooperative=True)
    run("2d1601r5", slowness, h2, star, seeds, reference, block=(32, 1, 32))
    run("2d1601r5", slowness, h2, star, seeds, reference, block=(16, 1, 16), dtype=np.float32)

    slowness = gradient_slowness((256, 256, 256))
    h3 = np.array([10.0, 10.0, 10.0])
    star = forward_star((2, 2, 2))
    seeds = top_centre(slowness.shape)
    first = run("3d256r2", slowness, h3, star, seeds, None, block=(4, 8, 8))
    run("3d256r2", slowness, h3, star, seeds, first, block=(4, 8, 16))
    run("3d256r2", slowness, h3, star, seeds, first, block=(4, 8, 8), precomputed=True)

    slowness = gradient_slowness((401, 1, 401))
    star = forward_star((4, 0, 4))
    xs = np.linspace(0, 400, 64).astype(int)
    seeds = [(np.array([x]), np.array([0.0])) for x in xs]
    for cooperative in (False, True):
        run("survey401r4x64", slowness, h2, star, seeds, None, repeat=1, block=(16, 1, 16),
            batch=1, dtype=np.float32, cooperative=cooperative)  # fmt: skip


if __name__ == "__main__":
    main()
