"""Near-Far GPU solver: same floats as the CPU Dijkstra, valid rays, early exit, PTX.

Run in Numba's CUDA simulator (tests/conftest.py) on small grids with shrunk launches
(a few blocks of a few threads), plus a compile of every kernel variant to sm_90 PTX and a
``gpu``-marked run on a real device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ptx import compile_in_parts
from realgpu import real_gpu

from raygrid.kernels import (
    EXACT,
    MEAN,
    dijkstra,
    forward_star,
    mean_slowness_time_cpu,
    precompute_weights,
    segment_time_cpu,
)
from raygrid.kernels.cuda import PaddedLayout, simulating
from raygrid.kernels.cuda.nearfar import default_delta, solve_near_far
from raygrid.kernels.cuda.predecessor import recover_predecessors

# Shrunk launches: the simulator runs one Python thread per CUDA thread, so few threads
# keep it fast, and three blocks still share every step's work.
LAUNCH = {"threads": 16, "blocks": 3, "sync_every": 4}

simulator_only = pytest.mark.skipif(not simulating(), reason="runs in the CUDA simulator")

CASES = {
    # name: shape (nz, ny, nx), radius (rz, ry, rx), spacing (hz, hy, hx)
    "2d": ((11, 1, 13), (2, 0, 3), (10.0, 1.0, 7.0)),
    "3d": ((5, 4, 6), (1, 2, 1), (3.0, 2.0, 2.5)),
}


def random_slowness(shape, seed):
    rng = np.random.default_rng(seed)
    return 1.0 / rng.uniform(300.0, 6000.0, shape)


def sources_for(shape):
    """An on-node source and a multi-node one (as an off-node source seeds its box)."""
    n = int(np.prod(shape))
    return [
        (np.array([n // 2 + 1]), np.array([0.0])),
        (np.array([0, n // 3, n - 2]), np.array([0.004, 0.0, 0.0025])),
    ]


def weight(slowness, spacing, rule, u, v, dtype):
    """CPU edge weight between real nodes u and v (3D indices), rounded to ``dtype``."""
    if rule == EXACT:
        w = segment_time_cpu(slowness, *map(float, u), *map(float, v), *spacing)
    else:
        w = mean_slowness_time_cpu(slowness, *u, *v, *spacing)
    return dtype(w)


def check_rays(slowness, spacing, star, rule, times, predecessor, seed_nodes, dtype, rtol=0.0):
    """Every reached node's predecessor chain ends at a seed, each link exact:
    ``t(v) == t(u) + w(u, v)`` with the CPU's weight, rounded as the solver rounds it
    (or within ``rtol`` where the weights are a real GPU's)."""
    shape = slowness.shape
    seeds = set(int(s) for s in seed_nodes)
    for start in np.flatnonzero(np.isfinite(times)):
        v = int(start)
        for _ in range(times.size):
            k = int(predecessor[v])
            if k < 0:
                break
            node = np.array(np.unravel_index(v, shape))
            prev = node - star.offsets[k]
            assert np.all(prev >= 0) and np.all(prev < shape), f"ray leaves the grid at {v}"
            u = int(np.ravel_multi_index(tuple(prev), shape))
            link = times[u] + weight(slowness, spacing, rule, prev, node, dtype)
            if rtol == 0.0:
                assert times[v] == link, f"link {u} -> {v} does not add up"
            else:
                assert abs(times[v] - link) <= rtol * times[v]
            assert times[u] < times[v]
            v = u
        assert v in seeds, f"ray from node {start} ends at {v}, not at a seed"


@simulator_only
@pytest.mark.parametrize("precomputed", [False, True], ids=["on-the-fly", "precomputed"])
@pytest.mark.parametrize("rule", [EXACT, MEAN], ids=["exact", "mean"])
@pytest.mark.parametrize("case", list(CASES))
def test_float64_equals_cpu_dijkstra_exactly(case, rule, precomputed):
    shape, radius, spacing = CASES[case]
    spacing = np.array(spacing)
    slowness = random_slowness(shape, seed=len(case) + rule)
    star = forward_star(radius)
    sources = sources_for(shape)
    times, predecessor = solve_near_far(
        slowness, spacing, star, sources, rule=rule, precomputed=precomputed, **LAUNCH
    )
    assert times.shape == predecessor.shape == (2, slowness.size)
    assert predecessor.dtype == star.predecessor_dtype
    for s, (nodes, seed_times) in enumerate(sources):
        expected, _ = dijkstra(slowness, spacing, star, nodes, seed_times, rule=rule)
        np.testing.assert_array_equal(times[s], expected)
        check_rays(slowness, spacing, star, rule, times[s], predecessor[s], nodes, np.float64)


@simulator_only
@pytest.mark.parametrize("precomputed", [False, True], ids=["on-the-fly", "precomputed"])
@pytest.mark.parametrize("case", list(CASES))
def test_float32_equals_cpu_dijkstra_exactly(case, precomputed):
    """float32 packs time and predecessor in one 64-bit atomic min; weights are rounded
    once from float64 and summed in float32, as the CPU does, so the floats are the same."""
    shape, radius, spacing = CASES[case]
    spacing = np.array(spacing)
    slowness = random_slowness(shape, seed=7)
    star = forward_star(radius)
    sources = sources_for(shape)
    times, predecessor = solve_near_far(
        slowness, spacing, star, sources, dtype=np.float32, precomputed=precomputed, **LAUNCH
    )
    assert times.dtype == np.float32
    for s, (nodes, seed_times) in enumerate(sources):
        expected, _ = dijkstra(slowness, spacing, star, nodes, seed_times, dtype=np.float32)
        np.testing.assert_array_equal(times[s], expected)
        check_rays(slowness, spacing, star, EXACT, times[s], predecessor[s], nodes, np.float32)


@simulator_only
@pytest.mark.parametrize("scale", [0.125, np.inf], ids=["narrow-buckets", "bellman-ford"])
def test_bucket_width_changes_the_work_not_the_times(scale):
    shape, radius, spacing = CASES["2d"]
    spacing = np.array(spacing)
    slowness = random_slowness(shape, seed=11)
    star = forward_star(radius)
    delta = scale * default_delta(slowness, spacing, star)
    times, _, stats = solve_near_far(
        slowness, spacing, star, [([3], [0.0])], delta=delta, return_stats=True, **LAUNCH
    )
    expected, _ = dijkstra(slowness, spacing, star, [3], [0.0])
    np.testing.assert_array_equal(times[0], expected)
    if np.isinf(delta):
        assert stats[0]["buckets"] <= 2  # one bucket, then the split that finds far empty
    else:
        assert stats[0]["buckets"] > 8


@simulator_only
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_early_exit_settles_the_targets(dtype):
    shape, radius, spacing = (16, 1, 16), (2, 0, 2), np.array([5.0, 1.0, 5.0])
    slowness = random_slowness(shape, seed=4)
    star = forward_star(radius)
    source = [([0], [0.0])]
    targets = np.array([17, 40])
    full, _, full_stats = solve_near_far(
        slowness, spacing, star, source, dtype=dtype, return_stats=True, **LAUNCH
    )
    times, predecessor, stats = solve_near_far(
        slowness, spacing, star, source, dtype=dtype, targets=targets, return_stats=True, **LAUNCH
    )
    np.testing.assert_array_equal(times[0, targets], full[0, targets])
    assert np.isinf(times[0]).sum() > 0  # it did stop early
    assert stats[0]["relax_steps"] < full_stats[0]["relax_steps"]
    assert stats[0]["edges"] < full_stats[0]["edges"]
    # The targets' rays are complete and run through settled (final) times only.
    for target in targets:
        v = int(target)
        while predecessor[0, v] >= 0:
            assert times[0, v] == full[0, v]
            node = np.array(np.unravel_index(v, shape)) - star.offsets[predecessor[0, v]]
            v = int(np.ravel_multi_index(tuple(node), shape))
        assert v == 0, f"ray from target {target} ends at {v}, not at the source"


@simulator_only
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("precomputed", [False, True], ids=["on-the-fly", "precomputed"])
def test_recover_predecessors_of_cpu_times(dtype, precomputed):
    """The pull pass gives valid rays for any solver's times, here the CPU Dijkstra's."""
    from raygrid.kernels.cuda.weights import precompute_weights_gpu

    shape, radius, spacing = CASES["3d"]
    spacing = np.array(spacing)
    slowness = random_slowness(shape, seed=5)
    star = forward_star(radius)
    nodes, seed_times = sources_for(shape)[1]
    times, _ = dijkstra(slowness, spacing, star, nodes, seed_times, dtype=dtype)
    layout = PaddedLayout(shape, star.radius, (1, 2, 1))
    slowness_padded = layout.pad(slowness, np.inf)
    weights = None
    if precomputed:
        weights = precompute_weights_gpu(slowness_padded, spacing, star.forward, EXACT, dtype)
    padded = recover_predecessors(
        layout,
        slowness_padded,
        spacing,
        star,
        layout.pad(times.reshape(shape), np.inf),
        EXACT,
        weights,
        threads=LAUNCH["threads"],
    )
    predecessor = layout.unpad(padded.copy_to_host()).reshape(-1)
    assert predecessor.dtype == star.predecessor_dtype
    check_rays(slowness, spacing, star, EXACT, times, predecessor, nodes, dtype)
    # Seeds that no earlier neighbour reaches keep -1.
    assert np.all(predecessor[nodes[seed_times == seed_times.min()]] == -1)


@simulator_only
def test_precomputed_cpu_and_gpu_weights_agree():
    """The GPU weight table on the padded grid holds the CPU's floats (the base of every
    exact-equality test above)."""
    from raygrid.kernels.cuda.weights import precompute_weights_gpu

    shape, radius, spacing = CASES["3d"]
    spacing = np.array(spacing)
    slowness = random_slowness(shape, seed=6)
    star = forward_star(radius)
    layout = PaddedLayout(shape, star.radius, (1, 2, 1))
    gpu = precompute_weights_gpu(layout.pad(slowness, np.inf), spacing, star.forward, EXACT, float)
    gpu = layout.unpad(gpu.copy_to_host().T.reshape((-1,) + layout.padded))
    cpu = precompute_weights(slowness, spacing, star).T.reshape((-1,) + shape)
    np.testing.assert_array_equal(gpu, cpu)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dtype": np.int32}, "dtype must be float32 or float64"),
        ({"delta": 0.0}, "delta must be positive"),
        ({"targets": np.array([10**6])}, "target nodes"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, message):
    slowness = np.full((4, 1, 4), 1e-3)
    star = forward_star((1, 0, 1))
    with pytest.raises(ValueError, match=message):
        solve_near_far(slowness, np.ones(3), star, [([0], [0.0])], **kwargs)


def _cpu(slowness, spacing, star, seeds):
    from raygrid.kernels import dijkstra

    return dijkstra(slowness, spacing, star, *seeds[0])


def _pull(slowness, spacing, star, seeds):
    from raygrid.kernels.cuda.pull_solver import solve_pull

    return solve_pull(slowness, spacing, star, seeds, block=(2, 1, 2))


@pytest.mark.parametrize("solve", [_cpu, _pull, solve_near_far], ids=["cpu", "pull", "near-far"])
@pytest.mark.parametrize(
    "seeds, message",
    [
        ([([0], [-1.0])], "seed times must be finite and >= 0"),
        ([([0], [np.inf])], "seed times must be finite and >= 0"),
        ([([16], [0.0])], r"seed nodes must be in \[0, 16\)"),
        ([([-1], [0.0])], r"seed nodes must be in \[0, 16\)"),  # wrapped to node 15
        ([([0, 1], [0.0])], "2 seed nodes but 1 seed times"),
    ],
)
def test_bad_seeds_are_clear_errors_in_every_solver(solve, seeds, message):
    slowness = np.full((4, 1, 4), 1e-3)
    with pytest.raises(ValueError, match=message):
        solve(slowness, np.ones(3), forward_star((1, 0, 1)), seeds)


@pytest.mark.parametrize("solve", [_cpu, _pull, solve_near_far], ids=["cpu", "pull", "near-far"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, 0.0, -1e-3])
def test_a_bad_slowness_is_refused_by_every_solver(solve, bad):
    # The CPU took them: NaN and inf as walls, 0 as free edges, a negative slowness as
    # negative weights (a wrong time); only Near-Far refused them.
    slowness = np.full((4, 1, 4), 1e-3)
    slowness[2, 0, 2] = bad
    with pytest.raises(ValueError, match="slowness must be finite and positive everywhere"):
        solve(slowness, np.ones(3), forward_star((1, 0, 1)), [([0], [0.0])])


@pytest.mark.parametrize("solve", [_cpu, _pull, solve_near_far], ids=["cpu", "pull", "near-far"])
@pytest.mark.parametrize(
    "spacing", [np.zeros(3), [np.nan, 1.0, 1.0], [-1.0, 1.0, 1.0], [1.0, 1.0], "abc"]
)
def test_a_bad_spacing_is_refused_by_every_solver(solve, spacing):
    # The CPU took a zero spacing for free edges (every time 0) and a NaN one for no edges
    # (inf below the source); Near-Far's default band came out zero (it would have run
    # for ever, and was refused for that alone); two numbers failed to unpack.
    with pytest.raises(ValueError, match="spacing must be three finite positive numbers"):
        solve(np.full((4, 1, 4), 1e-3), spacing, forward_star((1, 0, 1)), [([0], [0.0])])


def test_a_default_band_that_is_not_positive_is_refused():
    # A spacing too small for its squares (checked positive, but the edges' lengths
    # underflow to 0) makes the default bucket width zero: refused, not run for ever.
    with pytest.raises(ValueError, match="delta must be positive, got 0.0 \\(from the spacing"):
        solve_near_far(np.full((4, 1, 4), 1e-3), np.full(3, 5e-324), forward_star((1, 0, 1)),
                       [([0], [0.0])])  # fmt: skip


@pytest.mark.parametrize("make", ["cpu", "pull", "near-far"])
@pytest.mark.parametrize("rule", [2, -1, 1.5, None, True, "Exact"])
def test_an_unknown_weight_rule_is_refused_by_every_solver(make, rule):
    # Every value but EXACT (0) silently meant the mean rule, "exact" among them.
    from raygrid.kernels import dijkstra
    from raygrid.kernels.cuda.pull_solver import solve_pull

    solve = {"cpu": dijkstra, "pull": solve_pull, "near-far": solve_near_far}[make]
    slowness, star = np.full((4, 1, 4), 1e-3), forward_star((1, 0, 1))
    with pytest.raises(ValueError, match="rule must be raygrid.kernels.EXACT"):
        if make == "cpu":
            solve(slowness, np.ones(3), star, [0], [0.0], rule=rule)
        else:
            solve(slowness, np.ones(3), star, [([0], [0.0])], rule=rule)


def test_a_negative_target_is_refused():
    from raygrid.kernels import dijkstra

    with pytest.raises(ValueError, match=r"target nodes must be in \[0, 16\)"):
        dijkstra(np.full((4, 1, 4), 1e-3), np.ones(3), forward_star((1, 0, 1)), [0], [0.0],
                 target_nodes=np.array([-1]))  # fmt: skip


# Compiled for the H100/H200 (sm_90) with no GPU and no driver, in a subprocess because
# the simulator, once on, replaces numba.cuda for the whole process.
PTX_CHECK = textwrap.dedent(
    """
    import itertools
    import sys
    from pathlib import Path
    from numba import cuda, types
    from raygrid.kernels import __file__ as kernels_path
    sys.path.insert(0, str(Path(kernels_path).parents[1] / "benchmarks"))
    from gpu_static import fused_sums
    from raygrid.kernels.cuda.nearfar import near_far_kernels
    from raygrid.kernels.cuda.predecessor import predecessor_kernel

    def array(dtype, ndim):
        return types.Array(dtype, ndim, "C")

    i32, i64, f64, u8 = types.int32, types.int64, types.float64, types.uint8
    count = 0
    part = int(sys.argv[1])  # two processes share the work (tests/ptx.py)
    combinations = itertools.product((0, 1), (False, True), ("float32", "float64"))
    for rule, precomputed, name in list(combinations)[part::2]:
        real = getattr(types, name)
        # float32 times live in the high word of a packed uint64 (time, predecessor).
        times = array(types.uint64 if name == "float32" else f64, 1)
        kernels = near_far_kernels(rule, precomputed, name)
        signatures = {
            "reset": (times, array(i32, 1), array(i32, 1), array(i64, 1)),
            "seed": (times, array(i64, 1), array(real, 1), array(f64, 1), array(i32, 2),
                     array(i32, 2), array(i32, 1), array(i32, 1), array(i64, 1)),
            "step": (i64, array(i64, 1), array(f64, 1), times, array(i32, 2), array(i32, 2),
                     array(i32, 1), array(i32, 1), array(f64, 3), array(f64, 1),
                     array(i64, 2), array(i64, 1), array(i64, 1), array(u8, 1),
                     array(real, 2), array(i64, 1), i64, f64),
        }
        kernels["pull"] = predecessor_kernel(rule, precomputed, name)
        signatures["pull"] = (array(real, 1), array(f64, 3), array(f64, 1), array(i64, 2),
                              array(i64, 1), array(i64, 1), array(u8, 1), array(real, 2),
                              array(types.int16, 1))
        for kernel_name, signature in signatures.items():
            ptx, _ = cuda.compile_ptx(kernels[kernel_name].py_func, signature, cc=(9, 0))
            assert ".target sm_90" in ptx and ".entry" in ptx, kernel_name
            # A weight fused into the time it is added to (the step's and the predecessor
            # recovery's alike, so far) rounds otherwise than the CPU: recovery of another
            # solver's times then found no predecessor.
            assert not fused_sums(ptx), (kernel_name, fused_sums(ptx))
            if kernel_name == "step" and name == "float32":
                # The packed (time, predecessor) pair by compare-and-swap, not a 64-bit min
                # (which would swap predecessors at equal times).
                assert "atom.global.cas.b64" in ptx and "atom.global.min.u64" not in ptx
            count += 1
    print("compiled", count)
    """
)


def nvvm_available() -> bool:
    probe = "from numba.cuda.cudadrv.nvvm import NVVM; NVVM()"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    return (
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0
    )


def test_every_kernel_compiles_to_sm90_ptx():
    if not nvvm_available():
        pytest.skip("NVVM is not installed (pip install 'numba-cuda[cu13]')")
    for returncode, out, err in compile_in_parts(PTX_CHECK):
        assert returncode == 0, err[-4000:]
        assert "compiled 16" in out  # 4 kernels x 4 of the 8 rule/weights/precision cases


@pytest.mark.gpu
@real_gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("precomputed", [False, True], ids=["on-the-fly", "precomputed"])
def test_on_a_real_gpu(dtype, precomputed):
    """On a device the compiler contracted the weight arithmetic into FMAs, so the weights
    differed from the CPU's in the last bits (relative 1e-12 in float64 passed); every
    product is now rounded on its own (kernels/segment.py), so times and rays are the
    CPU's floats exactly."""
    shape, radius, spacing = (64, 1, 80), (4, 0, 4), np.array([10.0, 1.0, 10.0])
    slowness = random_slowness(shape, seed=9)
    star = forward_star(radius)
    sources = sources_for(shape)
    times, predecessor = solve_near_far(
        slowness, spacing, star, sources, dtype=dtype, precomputed=precomputed
    )
    for s, (nodes, seed_times) in enumerate(sources):
        expected, _ = dijkstra(slowness, spacing, star, nodes, seed_times, dtype=dtype)
        np.testing.assert_array_equal(times[s], expected)
        check_rays(slowness, spacing, star, EXACT, times[s], predecessor[s], nodes, dtype)


@simulator_only
def test_a_float32_push_changes_a_predecessor_only_with_a_strict_drop():
    # At an equal time the stored pair stays, whatever its offset index: a smaller k used
    # to win (a 64-bit min of the packed pair), and where a float32 weight rounds away
    # (t + w == t), a push through a stale read could then make two nodes each other's
    # predecessor. A strict drop installs the new pair.
    from numba import cuda

    from raygrid.kernels.cuda.nearfar import PACKED_INF, push_time32

    @cuda.jit
    def push(packed, times, ks, dropped):
        for i in range(times.shape[0]):
            dropped[i] = push_time32(packed, 0, times[i], ks[i])

    def pair(t, k):
        return (np.uint64(np.float32(t).view(np.uint32)) << np.uint64(32)) | np.uint64(k + 1)

    packed = np.array([PACKED_INF], dtype=np.uint64)
    times = np.array([2.0, 2.0, 1.5, 1.5, 3.0], dtype=np.float32)
    ks = np.array([7, 3, 9, 2, 0], dtype=np.int32)
    dropped = np.zeros(5, dtype=np.bool_)
    push[1, 1](packed, times, ks, dropped)
    assert dropped.tolist() == [True, False, True, False, False]
    assert packed[0] == pair(1.5, 9)
