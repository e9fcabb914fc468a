"""Where the host's time goes in a GPU solve: the pieces of a whole ``solve_pull`` call
timed apart, then cProfile of ``solve_pull`` and of the pipeline's ``traveltime``.

The relaxation is the device's; everything around it (checking and uploading the model,
the crossing tables, the band, a batch's seeds and queue, the copies back) is Python and
driver calls on the host, and at 1601^2 it was a third of the whole call
(``results/gpu_study_h200.md``). Run on the GPU host from the repository root::

    python benchmarks/gpu_profile.py > gpu_profile.txt

``--solves N`` runs only N resident solves and prints their statistics, for a kernel
profiler to look at the device's side (``gpu_session.sh ncu``)::

    ncu -k regex:per_pass --launch-skip 100 --launch-count 3 --set full \\
        python benchmarks/gpu_profile.py --radius 3 --solves 1

Results: ``results/gpu_profile_h100.txt``, ``results/gpu_ncu_h100.txt``;
``results/gpu_profile_h200.txt`` (made by an earlier, ad hoc version of this script).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_study import gradient_slowness, pipeline_call, top_centre  # noqa: E402

from raygrid.kernels import EXACT, forward_star, star_crossings  # noqa: E402
from raygrid.kernels.layout import checked_slowness  # noqa: E402


def best_of(run, repeat: int = 5) -> float:
    """Best wall time of ``run`` (after one untimed call), the device drained each time."""
    from numba import cuda

    run()
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def profile(name: str, run, calls: int, lines: int) -> None:
    """cProfile of ``calls`` calls of ``run`` (after one untimed), by own and by cumulative
    time."""
    run()
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for _ in range(calls):
        run()
    profiler.disable()
    each = (time.perf_counter() - start) / calls
    print(f"== {name}: {each * 1e3:.1f} ms a call under cProfile", flush=True)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(lines)
    stats.sort_stats("cumulative").print_stats(lines)
    print(text.getvalue(), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Prints plain text; needs an NVIDIA GPU.",
    )
    parser.add_argument("--n", type=int, default=1601, help="2D size (default 1601)")
    parser.add_argument("--radius", type=int, default=5, help="2D radius (default 5)")
    parser.add_argument("--n3", type=int, default=256, help="3D size at radius 2 (0 skips)")
    parser.add_argument("--lines", type=int, default=35, help="rows of each profile")
    parser.add_argument(
        "--solves",
        type=int,
        default=0,
        help="only this many resident 2D solves, their statistics (for Nsight Compute)",
    )
    args = parser.parse_args(argv)

    from numba import cuda

    from raygrid.kernels.cuda.arrays import padded_slowness
    from raygrid.kernels.cuda.pull_solver import PullSolver, default_delta, pull_layout, solve_pull

    shape = (args.n, 1, args.n)
    slowness = gradient_slowness(shape)
    spacing = np.array([10.0, 1.0, 10.0])
    star = forward_star((args.radius, 0, args.radius))
    seeds = top_centre(shape)
    if args.solves:
        solver = PullSolver(slowness, spacing, star)
        for _ in range(args.solves):
            stats = {}
            solver.solve(seeds, stats=stats)
            print(stats, flush=True)
        return
    layout = pull_layout(shape, star.radius, None, 1, np.dtype(np.float64))
    host = np.empty_like(slowness)
    device = cuda.to_device(slowness)
    pinned = cuda.pinned_array(slowness.shape)
    pieces = {
        "checked_slowness": lambda: checked_slowness(slowness),
        "star_crossings (cached after the first)": lambda: star_crossings(
            star, spacing, EXACT, layout.tile
        ),
        "default_delta": lambda: default_delta(slowness, spacing, layout),
        "to_device (the model)": lambda: cuda.to_device(slowness),
        "padded_slowness (the model up, padded and checked)": lambda: padded_slowness(
            layout, slowness
        ),
        "device_array (the model's size)": lambda: cuda.device_array(shape),
        "to_device (1000 floats)": lambda: cuda.to_device(np.zeros(1000)),
        "copy_to_host, pageable (the model's size)": lambda: device.copy_to_host(host),
        "copy_to_host, pinned (the model's size)": lambda: device.copy_to_host(pinned),
        "PullSolver(...)": lambda: PullSolver(slowness, spacing, star),
    }
    print(f"2D {args.n}^2 radius {args.radius}, best of 5 (ms):", flush=True)
    for name, run in pieces.items():
        print(f"  {name}: {best_of(run) * 1e3:.2f}", flush=True)
    stats = {}
    solve_pull(slowness, spacing, star, seeds, stats=stats)
    print(
        "  solve_pull stats:", {k: round(v * 1e3, 2) for k, v in stats.items() if k.endswith("_s")}
    )
    # A resident solver's batch: its setup_s is the batch's reset alone (seeds, state).
    solver = PullSolver(slowness, spacing, star)
    for _ in range(3):
        stats = {}
        solver.solve(seeds, stats=stats)
        print(
            "  resident solve stats:",
            {k: round(v * 1e3, 2) for k, v in stats.items() if k.endswith("_s")},
        )

    profile(
        f"solve_pull {args.n}^2 r{args.radius}",
        lambda: solve_pull(slowness, spacing, star, seeds),
        3,
        args.lines,
    )
    models = {}
    profile(
        f"traveltime(backend='cuda') {args.n}^2 r{args.radius}",
        lambda: pipeline_call(models, slowness, spacing, star, seeds),
        2,
        args.lines,
    )
    if args.n3:
        cube = gradient_slowness((args.n3,) * 3)
        spacing3 = np.array([10.0, 10.0, 10.0])
        profile(
            f"solve_pull {args.n3}^3 r2",
            lambda: solve_pull(cube, spacing3, forward_star((2, 2, 2)), top_centre(cube.shape)),
            1,
            args.lines,
        )


if __name__ == "__main__":
    main()
