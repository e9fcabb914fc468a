"""One resident pull solve of the study's 2D model, for a kernel profiler to look at.

The relaxation at 1601^2 is a few hundred passes of one kernel, each as long as its slowest
tile, and at radius 3 it is half of a whole call (``results/gpu_targets_h100.md``):
what holds a pass back (latency of the in-block iterations, barriers, the blocks that exit
at once) is a question for Nsight Compute, not for wall clocks. Run on the GPU host from the
repository root, e.g. three passes from the middle of the solve::

    ncu -k regex:per_pass --launch-skip 100 --launch-count 3 --set full \\
        python benchmarks/gpu_pass.py --radius 3

Without a profiler it prints the solve's statistics (passes, tiles relaxed, the split of
the wall time).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_study import gradient_slowness, top_centre  # noqa: E402

from raygrid.kernels import forward_star  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Prints the solve's statistics as JSON; needs an NVIDIA GPU.",
    )
    parser.add_argument("--n", type=int, default=1601, help="2D size (default 1601)")
    parser.add_argument("--radius", type=int, default=3, help="2D radius (default 3)")
    parser.add_argument("--solves", type=int, default=1, help="resident solves (default 1)")
    args = parser.parse_args(argv)

    from raygrid.kernels.cuda.pull_solver import PullSolver

    shape = (args.n, 1, args.n)
    slowness = gradient_slowness(shape)
    star = forward_star((args.radius, 0, args.radius))
    solver = PullSolver(slowness, np.array([10.0, 1.0, 10.0]), star)
    for _ in range(args.solves):
        stats = {}
        solver.solve(top_centre(shape), stats=stats)
        print(json.dumps(stats, default=str), flush=True)


if __name__ == "__main__":
    main()
