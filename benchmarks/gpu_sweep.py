"""GPU pull-solver settings side by side: the tile band (``delta``), the in-block bound,
tile shape, weights, schedule (passes, cooperative, phases), precision.

A companion to ``gpu_study.py`` (which runs the solvers at their defaults): the same source
and gradient models, one row per setting, with the solver's own statistics (passes, tile
relaxations, in-block iterations, weights evaluated, and the setup / passes / copy split of
the wall time) and the largest relative difference to the CPU Dijkstra. Run on the GPU
host from the repository root::

    python benchmarks/gpu_sweep.py > sweep.jsonl

Results: ``results/gpu_sweep_h100.jsonl`` (see ``results/gpu_study_h100.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_study import device_info, gradient_slowness, top_centre  # noqa: E402

from raygrid.kernels import dijkstra, forward_star  # noqa: E402
from raygrid.kernels.cuda.pull_solver import DELTA_TILES, default_delta, solve_pull  # noqa: E402
from raygrid.kernels.layout import PaddedLayout  # noqa: E402


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


def band(slowness, spacing, star, block, tiles):
    """The ``delta`` of ``tiles`` tiles' worth of the model's median slowness (None: inf)."""
    if tiles is None:
        return np.inf
    layout = PaddedLayout(slowness.shape, star.radius, block)
    return tiles * default_delta(slowness, spacing, layout) / DELTA_TILES


def resident_sweep(repeat: int = 5) -> None:
    """The in-block bound, the band and the precision of a resident ``PullSolver`` at
    1601^2, radius 5 and 3: one JSON row each, best of ``repeat`` solves after a warm-up
    (``same``: float64 times bit for bit those of the first row of the radius).
    Results: ``results/gpu_sweep_resident_h200.jsonl``."""
    from raygrid.kernels.cuda.pull_solver import PullSolver

    slowness = gradient_slowness((1601, 1, 1601))
    spacing = np.array([10.0, 1.0, 10.0])
    seeds = top_centre(slowness.shape)
    for r in (5, 3):
        star = forward_star((r, 0, r))
        first = None
        for max_inner in (8, 12, 16):
            for tiles in (4, 8):
                precisions = (
                    (np.float64, np.float32) if (max_inner, tiles) == (8, 4) else (np.float64,)
                )
                for dtype in precisions:
                    solver = PullSolver(slowness, spacing, star, max_inner=max_inner, dtype=dtype)
                    solver.delta *= tiles / DELTA_TILES
                    solver.solve(seeds)
                    best, stats = np.inf, None
                    for _ in range(repeat):
                        found = {}
                        start = time.perf_counter()
                        times, _ = solver.solve(seeds, stats=found)
                        seconds = time.perf_counter() - start
                        if seconds < best:
                            best, stats = seconds, found
                    first = times if first is None else first
                    same = bool(np.array_equal(times, first)) if dtype == np.float64 else None
                    row = {"r": r, "max_inner": max_inner, "tiles": tiles,
                           "dtype": np.dtype(dtype).name, "s": best, "same": same,
                           **{k: stats[k] for k in ("passes_s", "setup_s", "copy_s", "passes",
                                                    "tiles_relaxed")}}  # fmt: skip
                    print(json.dumps(row, default=str), flush=True)


#: 2D tiles the block sweep tries at radius 3: the default, its halves and doubles, and
#: 512 and 1024 threads (whose in-block bounds are swept too: a tile twice as tall takes
#: about twice the iterations to cross).
SWEEP_BLOCKS = [
    ((16, 1, 16), (6, 8)), ((8, 1, 32), (8,)), ((32, 1, 8), (8,)), ((8, 1, 16), (8,)),
    ((16, 1, 32), (8, 12, 16)), ((32, 1, 16), (8, 12, 16)), ((32, 1, 32), (8, 16)),
]  # fmt: skip


def block_sweep(repeat: int = 3, best: int = 2) -> None:
    """Tile shapes and in-block bounds of a resident ``PullSolver`` at 1601^2: every
    setting of :data:`SWEEP_BLOCKS` at radius 3, then the default and the ``best`` fastest
    at radius 4 to 6, and a whole call (``solve_pull``) of each at radius 3 to 6. One JSON
    row each, best of ``repeat`` after a warm-up that compiles; ``same``: the float64 times
    bit for bit those of the default tile. The CPU Dijkstra is not run here (``targets``
    runs it). Results: ``results/gpu_sweep_blocks_*.jsonl``."""
    from raygrid.kernels.cuda.pull import MAX_INNER
    from raygrid.kernels.cuda.pull_solver import PullSolver

    slowness = gradient_slowness((1601, 1, 1601))
    spacing = np.array([10.0, 1.0, 10.0])
    seeds = top_centre(slowness.shape)
    default = ((16, 1, 16), MAX_INNER)
    reference = {}

    def one(r, block, max_inner, whole=False):
        star = forward_star((r, 0, r))
        row = {"r": r, "block": block, "max_inner": max_inner, "whole": whole}
        try:
            if whole:
                call = partial(
                    solve_pull, slowness, spacing, star, seeds, block=block, max_inner=max_inner
                )
            else:
                solver = PullSolver(slowness, spacing, star, block=block, max_inner=max_inner)
                call = partial(solver.solve, seeds)
            start = time.perf_counter()
            call()
            row["first"] = time.perf_counter() - start
            seconds, stats, times = np.inf, None, None
            for _ in range(repeat):
                found = {}
                start = time.perf_counter()
                out, _ = call(stats=found)
                took = time.perf_counter() - start
                if took < seconds:
                    seconds, stats, times = took, found, out
            reference.setdefault(r, times)
            row.update(s=seconds, same=bool(np.array_equal(times, reference[r])))
            row.update({k: stats[k] for k in ("setup_s", "passes_s", "copy_s", "passes",
                                               "tiles_relaxed", "inner_iterations")})  # fmt: skip
        except Exception as error:  # a tile the device cannot launch is a result too
            row["error"] = repr(error)[:300]
        print(json.dumps(row, default=str), flush=True)
        return row

    rows = [one(3, *default)]
    rows += [one(3, b, m) for b, bounds in SWEEP_BLOCKS for m in bounds if (b, m) != default]
    ranked = sorted((row for row in rows if "s" in row), key=lambda row: row["s"])
    chosen = [default] + [
        (row["block"], row["max_inner"]) for row in ranked
        if (row["block"], row["max_inner"]) != default
    ][:best]  # fmt: skip
    for r in (4, 5, 6):
        for block, max_inner in chosen:
            one(r, block, max_inner)
    for r in (3, 4, 5, 6):
        for block, max_inner in chosen:
            one(r, block, max_inner, whole=True)


def main(argv=None) -> None:
    # The parser gives --help (a bare script ran the sweep and, on a machine without a GPU,
    # ended in a CudaSupportError traceback).
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Prints one JSON object per line (the device first); needs an NVIDIA GPU.",
    )
    parser.add_argument(
        "--resident",
        action="store_true",
        help="only the resident solver's in-block bound, band and precision (about a minute)",
    )
    parser.add_argument(
        "--blocks",
        action="store_true",
        help="only tile shapes and in-block bounds at 1601^2, radius 3 to 6 (about 2 minutes)",
    )
    args = parser.parse_args(argv)
    print(json.dumps({"device": device_info()}), flush=True)
    if args.resident:
        resident_sweep()
        return
    if args.blocks:
        block_sweep()
        return
    h2 = np.array([10.0, 1.0, 10.0])

    # Per-pass cost where launches dominate: a small model.
    slowness = gradient_slowness((64, 1, 64))
    star = forward_star((1, 0, 1))
    for schedule in ("cooperative", "passes", "phases"):
        run("2d64r1", slowness, h2, star, top_centre(slowness.shape), None,
            block=(8, 1, 8), schedule=schedule)  # fmt: skip

    slowness = gradient_slowness((1601, 1, 1601))
    star = forward_star((5, 0, 5))
    seeds = top_centre(slowness.shape)
    dijkstra(slowness[:8, :, :8], h2, star, [0], [0.0])  # compile
    start = time.perf_counter()
    reference, _ = dijkstra(slowness, h2, star, *seeds[0])
    print(json.dumps({"tag": "2d1601r5", "cpu_s": time.perf_counter() - start}), flush=True)
    block = (16, 1, 16)
    # The band of tiles relaxed per pass (None: every queued tile) and the in-block bound.
    for tiles in (None, 2, 4, 8):
        for max_inner in (8, 64):
            delta = band(slowness, h2, star, block, tiles)
            run("2d1601r5", slowness, h2, star, seeds, reference, block=block, delta=delta,
                max_inner=max_inner)  # fmt: skip
    for block in [(16, 1, 32), (8, 1, 16)]:
        run("2d1601r5", slowness, h2, star, seeds, reference, block=block)
    run("2d1601r5", slowness, h2, star, seeds, reference, block=(16, 1, 16), precomputed=True)
    run("2d1601r5", slowness, h2, star, seeds, reference, block=(16, 1, 16), schedule="cooperative")
    # Phases: one barrier per band instead of per pass, so wider bands may pay.
    for tiles in (1, 2, 4, 8, 16, None):
        delta = band(slowness, h2, star, block, tiles)
        run("2d1601r5", slowness, h2, star, seeds, reference, block=(16, 1, 16), delta=delta,
            schedule="phases")  # fmt: skip
    run("2d1601r5", slowness, h2, star, seeds, reference, block=(16, 1, 16), dtype=np.float32)

    slowness = gradient_slowness((256, 256, 256))
    h3 = np.array([10.0, 10.0, 10.0])
    star = forward_star((2, 2, 2))
    seeds = top_centre(slowness.shape)
    first = run("3d256r2", slowness, h3, star, seeds, None, block=(4, 8, 8))
    for tiles in (None, 1, 8):
        delta = band(slowness, h3, star, (4, 8, 8), tiles)
        run("3d256r2", slowness, h3, star, seeds, first, block=(4, 8, 8), delta=delta)
    run("3d256r2", slowness, h3, star, seeds, first, block=(4, 8, 16))
    run("3d256r2", slowness, h3, star, seeds, first, block=(4, 8, 8), precomputed=True)
    for tiles in (4, 16):
        delta = band(slowness, h3, star, (4, 8, 8), tiles)
        run("3d256r2", slowness, h3, star, seeds, first, block=(4, 8, 8), delta=delta,
            schedule="phases")  # fmt: skip


if __name__ == "__main__":
    main()
