"""CPU benchmark: one source, the full traveltime field, raygrid against its peers.

What it measures
----------------
Two cases on a linear-gradient model (0.5 km/s at the top to 4 km/s at the bottom, 16 km
wide and deep, source on the top surface at the centre), solved in one process run, side
by side:

- **2D**: 1601 x 1601 nodes, 10 m spacing, forward-star radius 5.
- **3D**: 161^3 nodes, 100 m spacing, radius 2.

For every solver it reports the wall time (setup, solve and total), the RMS and maximum
error against the analytic traveltime ``t = arccosh(1 + g^2 d^2 / (2 v_s v_r)) / g``, the
ratio of its total time to raygrid's, and the peak resident memory the call added (Linux
``VmHWM`` after resetting it through ``/proc/self/clear_refs``), also per grid node.

The solvers:

- **raygrid** ``traveltime()``: the public call, weights computed on the fly, timed
  cold (first call: Numba compilation or cache load) and warm. Beside it the kernel alone
  (``raygrid.kernels.dijkstra``) and the precomputed-weights mode
  (``precompute_weights`` + ``dijkstra(weights=...)``), which split the time between weights
  and heap.
- **scipy** ``scipy.sparse.csgraph.dijkstra`` on the *same* explicit graph: every directed
  edge of the reduced forward star with raygrid's weights, built straight into CSR
  (``int32`` indices); building and solving are timed apart and the times are checked to be
  bitwise equal to raygrid's.
- **ttcrpy** SPM (``Grid2d``/``Grid3d``, slowness at the nodes, one thread), **scikit-fmm**
  ``travel_time``, **fteikpy** ``Eikonal2D``/``Eikonal3D`` and **pykonal** (plain
  ``EikonalSolver``; in 3D also ``PointSourceSolver``). A peer that cannot be imported or
  fails is recorded with its error and the run goes on.

Targets (issue 2): raygrid's total <= scipy's solve alone, and raygrid >= 30x faster than
ttcrpy SPM with 5 secondary nodes at equal or better RMS error (2D).

How to run
----------
From the repository root, in the benchmark environment (see ``benchmarks/README.md``)::

    .venv-bench/bin/python benchmarks/cpu_single_source.py            # full, minutes
    .venv-bench/bin/python benchmarks/cpu_single_source.py --quick    # smoke, seconds

The full run writes ``benchmarks/results/cpu_single_source.{json,md}``; ``--quick`` writes
nothing unless ``--results`` is given.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
import xarray as xr
from report import machine as machine_of
from report import write_results

from raygrid.kernels import Star, dijkstra, forward_star, precompute_weights
from raygrid.pipeline import gradient_model, grid_from_velocity, traveltime

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_single_source"
TOP, BOTTOM = 500.0, 4000.0  # m/s
TTCRPY_SECONDARY = 5  # the ttcrpy SPM setting
# Share of the available memory a peer may be predicted to need before it is skipped.
MEMORY_HEADROOM = 0.7


# --------------------------------------------------------------------------------------
# Cases, rows, measurement helpers
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One benchmark problem: a gradient model, a radius and a source at the top centre."""

    name: str
    shape: dict[str, int]
    spacing: float  # m, the same on every axis
    radius: int
    ttcrpy_secondary: tuple[int, ...]  # secondary-node counts to try, the first
    larger_radii: tuple[int, ...] = ()  # also timed: the accuracy-matched comparison

    @property
    def n_nodes(self) -> int:
        return int(np.prod(list(self.shape.values())))

    @property
    def size(self) -> str:
        return " x ".join(str(n) for n in self.shape.values())


@dataclass
class Row:
    """One solver's result on one case (times in s, errors in s, memory in bytes)."""

    solver: str
    choice: str
    status: str = "ok"  # ok | failed | skipped
    setup_s: float | None = None
    solve_s: float | None = None
    total_s: float | None = None
    ratio: float | None = None  # total_s / raygrid warm total_s
    rms_s: float | None = None
    max_s: float | None = None
    peak_rss: int | None = None
    bytes_per_node: float | None = None
    notes: str = ""


@dataclass
class Memory:
    """Peak resident memory added while a block runs (``VmHWM`` minus the starting RSS)."""

    peak: int = 0
    method: str = ""


_LIBC = ctypes.CDLL(None)  # the C library this process already uses (glibc on Linux)


def fixed_mmap_threshold() -> bool:
    """Make glibc return every large block to the kernel when it is freed.

    glibc raises its mmap threshold after a large block is freed, so later large arrays
    come from the heap and stay resident after ``free``: the next call's peak RSS would then
    read as zero. Fixing the threshold at 128 KiB (``mallopt(M_MMAP_THRESHOLD)``) keeps
    every array over that size in its own mapping, so each call's peak is its own.
    """
    return bool(_LIBC.mallopt(-3, 128 * 1024))  # -3 = M_MMAP_THRESHOLD


def _status_kib(key: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024


@contextmanager
def peak_memory() -> Iterator[Memory]:
    """Measure the peak RSS increase of the block, C/C++/Numba allocations included.

    Writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark ``VmHWM`` to the
    current RSS (Linux >= 4.0), so the peak *during* the block is seen even when it is freed
    before the block ends; tracemalloc would miss Numba's and the C++ peers' allocations.
    """
    gc.collect()
    # Hand memory freed by earlier solvers (e.g. ttcrpy's millions of small C++ nodes) back
    # to the kernel, or this block would reuse it without its RSS growing.
    _LIBC.malloc_trim(0)
    result = Memory()
    try:
        Path("/proc/self/clear_refs").write_text("5")
        result.method = "VmHWM"
    except OSError:
        result.method = "RSS at end (VmHWM reset not allowed)"
    start = _status_kib("VmRSS")
    try:
        yield result
    finally:
        end = _status_kib("VmHWM") if result.method == "VmHWM" else _status_kib("VmRSS")
        result.peak = max(end - start, 0)


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Call ``fn(*args, **kwargs)`` once; return its result and the wall time."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def available_memory() -> int:
    return _status_kib_meminfo("MemAvailable")


def _status_kib_meminfo(key: str) -> int:
    text = Path("/proc/meminfo").read_text()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024


def analytic_gradient(points: dict[str, np.ndarray], source: dict[str, float]) -> np.ndarray:
    """Analytic first-arrival time in ``v = TOP + g z`` (circular rays), on a grid.

    ``t = arccosh(1 + g^2 d^2 / (2 v_s v_r)) / g``; written here, apart from raygrid, so the
    benchmark checks against an independent formula.
    """
    z_max = float(np.max(points["z"]))
    gradient = (BOTTOM - TOP) / z_max
    d2 = sum((points[d] - source[d]) ** 2 for d in points)
    v_source = TOP + gradient * source["z"]
    v_receiver = TOP + gradient * points["z"]
    return np.arccosh(1.0 + gradient**2 * d2 / (2.0 * v_source * v_receiver)) / gradient


def errors(times: np.ndarray, exact: np.ndarray) -> tuple[float, float]:
    """RMS and maximum absolute error over every node (s)."""
    diff = np.asarray(times, dtype=np.float64).reshape(exact.shape) - exact
    return float(np.sqrt(np.mean(diff * diff))), float(np.max(np.abs(diff)))


def fill(row: Row, times: np.ndarray, exact: np.ndarray, memory: Memory, n_nodes: int) -> Row:
    """Complete a row with errors and memory."""
    row.rms_s, row.max_s = errors(times, exact)
    row.peak_rss = memory.peak
    row.bytes_per_node = memory.peak / n_nodes
    if row.total_s is None:
        row.total_s = (row.setup_s or 0.0) + (row.solve_s or 0.0)
    return row


def failed(solver: str, choice: str, exc: BaseException) -> Row:
    """A row for a peer that could not run; the message names the exception."""
    message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
    print(f"  ! {solver} failed: {message}", file=sys.stderr)
    if not isinstance(exc, ImportError):
        traceback.print_exc(limit=3)
    return Row(solver=solver, choice=choice, status="failed", notes=message)


# --------------------------------------------------------------------------------------
# The explicit graph for scipy (raygrid's weights, straight into CSR)
# --------------------------------------------------------------------------------------


@numba.njit(cache=False)
def _degrees(shape, offsets, indptr):
    nz, ny, nx = shape[0], shape[1], shape[2]
    for u in range(nz * ny * nx):
        uz = u // (ny * nx)
        uy = (u // nx) % ny
        ux = u % nx
        count = 0
        for k in range(offsets.shape[0]):
            vz = uz + offsets[k, 0]
            vy = uy + offsets[k, 1]
            vx = ux + offsets[k, 2]
            if 0 <= vz < nz and 0 <= vy < ny and 0 <= vx < nx:
                count += 1
        indptr[u + 1] = count


@numba.njit(parallel=True, cache=False)
def _fill_csr(shape, offsets, half, is_forward, weights, indptr, indices, data):
    nz, ny, nx = shape[0], shape[1], shape[2]
    for u in numba.prange(nz * ny * nx):
        uz = u // (ny * nx)
        uy = (u // nx) % ny
        ux = u % nx
        e = indptr[u]
        # Offsets are sorted lexicographically, so each row's columns come out sorted.
        for k in range(offsets.shape[0]):
            vz = uz + offsets[k, 0]
            vy = uy + offsets[k, 1]
            vx = ux + offsets[k, 2]
            if 0 <= vz < nz and 0 <= vy < ny and 0 <= vx < nx:
                v = (vz * ny + vy) * nx + vx
                indices[e] = v
                # The weight of an undirected edge is stored once, at its lower node.
                data[e] = weights[u, half[k]] if is_forward[k] else weights[v, half[k]]
                e += 1


def explicit_csr(shape3: tuple[int, int, int], star: Star, weights: np.ndarray):
    """Every directed edge ``u -> u + o`` of the star inside the grid, as a CSR array.

    Built in two passes (degrees, then columns and weights) with ``int32`` indices, so the
    1601^2 radius-5 graph (~2e8 edges) costs 12 bytes per edge and no COO detour.
    """
    from scipy.sparse import csr_array

    n_nodes = int(np.prod(shape3))
    shape = np.asarray(shape3, dtype=np.int64)
    indptr64 = np.zeros(n_nodes + 1, dtype=np.int64)
    _degrees(shape, star.offsets, indptr64)
    np.cumsum(indptr64, out=indptr64)
    n_edges = int(indptr64[-1])
    if n_edges >= np.iinfo(np.int32).max or n_nodes >= np.iinfo(np.int32).max:
        raise ValueError(f"graph too large for int32 CSR indices: {n_edges} edges")
    indptr = indptr64.astype(np.int32)
    del indptr64
    indices = np.empty(n_edges, dtype=np.int32)
    data = np.empty(n_edges, dtype=np.float64)
    _fill_csr(shape, star.offsets, star.half, star.is_forward, weights, indptr, indices, data)
    graph = csr_array((data, indices, indptr), shape=(n_nodes, n_nodes), copy=False)
    graph.has_sorted_indices = True
    return graph


def warm_graph_builder() -> None:
    """Compile the CSR builder on a tiny grid so its JIT time is not counted."""
    star = forward_star((1, 0, 1))
    slowness = np.ones((3, 1, 3))
    weights = precompute_weights(slowness, np.ones(3), star)
    explicit_csr((3, 1, 3), star, weights)


# --------------------------------------------------------------------------------------
# Solvers
# --------------------------------------------------------------------------------------


def run_raygrid(
    case: Case, velocity: xr.DataArray, source: dict[str, float], exact: np.ndarray
) -> tuple[list[Row], dict[str, Any]]:
    """raygrid's public call (cold and warm), the kernel alone, and precomputed weights."""
    from raygrid.kernels import cpu as kernels_cpu

    rows: list[Row] = []
    n = case.n_nodes
    n_signatures = len(kernels_cpu._dijkstra.signatures)
    stats = getattr(kernels_cpu._dijkstra, "stats", None)
    hits_before = dict(stats.cache_hits) if stats is not None else {}

    with peak_memory() as mem:
        cold, seconds = timed(traveltime, velocity, source, radius=case.radius)
    if len(kernels_cpu._dijkstra.signatures) == n_signatures:
        jit = "already compiled in this process"
    elif stats is not None and dict(stats.cache_hits) != hits_before:
        jit = "loaded from Numba's disk cache"
    else:
        jit = "compiled"
    row = Row("raygrid", f"traveltime() first call (kernel {jit})", total_s=seconds)
    rows.append(fill(row, cold.values, exact, mem, n))
    del cold

    with peak_memory() as mem:
        warm, seconds = timed(traveltime, velocity, source, radius=case.radius)
    reference = np.asarray(warm.values).ravel()
    star_size = int(warm.attrs.get("star_offsets", -1))
    row = Row("raygrid", "traveltime() warm: total incl. weights", total_s=seconds)
    rows.append(fill(row, reference, exact, mem, n))
    del warm

    # The same solve, piece by piece: setup (validation, slowness), kernel with weights on
    # the fly, and the precomputed-weights mode (weights, then heap only).
    grid, setup = timed(grid_from_velocity, velocity)
    star = forward_star(grid.radius3(case.radius))
    seed = grid.flat(grid.to_index(source).astype(np.int64))[np.newaxis]
    zero = np.zeros(1)
    with peak_memory() as mem:
        (kernel_times, _), seconds = timed(dijkstra, grid.slowness, grid.spacing3, star, seed, zero)
    row = Row(
        "raygrid",
        "kernel dijkstra(), weights on the fly",
        setup_s=setup,
        solve_s=seconds,
        notes=f"setup = grid_from_velocity(); bitwise equal to traveltime(): "
        f"{np.array_equal(kernel_times, reference)}",
    )
    rows.append(fill(row, kernel_times, exact, mem, n))
    del kernel_times

    with peak_memory() as mem:
        weights, weight_seconds = timed(precompute_weights, grid.slowness, grid.spacing3, star)
        (pre_times, _), seconds = timed(
            dijkstra, grid.slowness, grid.spacing3, star, seed, zero, weights=weights
        )
    row = Row(
        "raygrid",
        f"precompute_weights() ({numba.get_num_threads()} threads) + dijkstra(weights=)",
        setup_s=weight_seconds,
        solve_s=seconds,
        notes=f"setup = weights; bitwise equal: {np.array_equal(pre_times, reference)}",
    )
    rows.append(fill(row, pre_times, exact, mem, n))
    del pre_times

    # The radius is the accuracy knob: larger radii, for the comparison at equal accuracy.
    for radius in case.larger_radii:
        with peak_memory() as mem:
            larger, seconds = timed(traveltime, velocity, source, radius=radius)
        row = Row("raygrid", f"traveltime() warm, radius {radius}", total_s=seconds,
                  notes=f"{larger.attrs['star_offsets']} star offsets")  # fmt: skip
        rows.append(fill(row, larger.values, exact, mem, n))
        del larger
    shared = {
        "reference": reference,
        "grid": grid,
        "star": star,
        "seed": int(seed[0]),
        "weights": weights,
        "weight_seconds": weight_seconds,
        "star_size": star.size if star_size < 0 else star_size,
    }
    return rows, shared


def run_scipy(case: Case, shared: dict[str, Any], exact: np.ndarray) -> Row:
    """scipy's Dijkstra on the explicit graph; graph building and solve timed apart."""
    try:
        from scipy.sparse.csgraph import dijkstra as scipy_dijkstra

        grid, star = shared["grid"], shared["star"]
        weights = shared.pop("weights")
        with peak_memory() as build_mem:
            graph, assemble = timed(explicit_csr, grid.slowness.shape, star, weights)
        del weights
        gc.collect()
        n_edges = graph.nnz
        graph_bytes = graph.data.nbytes + graph.indices.nbytes + graph.indptr.nbytes
        with peak_memory() as mem:
            times, seconds = timed(scipy_dijkstra, graph, directed=True, indices=shared["seed"])
        del graph
        gc.collect()
        times = np.asarray(times).ravel()
        equal = bool(np.array_equal(times, shared["reference"]))
        differ = int(np.count_nonzero(times != shared["reference"]))
        row = Row(
            "scipy",
            "csgraph.dijkstra, same explicit graph (directed CSR, int32 indices)",
            setup_s=shared["weight_seconds"] + assemble,
            solve_s=seconds,
            total_s=shared["weight_seconds"] + assemble + seconds,
            notes=f"bitwise equal to raygrid: {equal} ({differ} nodes differ); "
            f"{n_edges:,} directed edges; graph {graph_bytes / 2**30:.2f} GiB; "
            f"setup = raygrid weights {shared['weight_seconds']:.2f} s + CSR assembly "
            f"{assemble:.2f} s (peak +{build_mem.peak / 2**30:.2f} GiB)",
        )
        row = fill(row, times, exact, mem, case.n_nodes)
        row.peak_rss = mem.peak  # the solve alone; the graph is reported in notes
        row.bytes_per_node = mem.peak / case.n_nodes
        shared["scipy_equal"] = equal
        shared["scipy_edges"] = n_edges
        return row
    except Exception as exc:  # a peer's failure is a result, not the end of the run
        shared.pop("weights", None)
        return failed("scipy", "csgraph.dijkstra", exc)


def _ttcrpy_grid(velocity: np.ndarray, coords: dict[str, np.ndarray], nsn: int):
    """A node-based ttcrpy SPM grid and its slowness in ttcrpy's (x, [y,] z) order."""
    import ttcrpy.rgrid as rgrid

    slowness = 1.0 / velocity
    if velocity.ndim == 2:
        grid = rgrid.Grid2d(
            coords["x"],
            coords["z"],
            n_threads=1,
            cell_slowness=False,
            method="SPM",
            nsnx=nsn,
            nsnz=nsn,
        )
        return grid, np.ascontiguousarray(slowness.T)
    grid = rgrid.Grid3d(
        coords["x"],
        coords["y"],
        coords["z"],
        n_threads=1,
        cell_slowness=False,
        method="SPM",
        nsnx=nsn,
        nsny=nsn,
        nsnz=nsn,
    )
    return grid, np.ascontiguousarray(np.transpose(slowness, (2, 1, 0)))


def _ttcrpy_points(source: dict[str, float], coords: dict[str, np.ndarray], ndim: int):
    order = ("x", "z") if ndim == 2 else ("x", "y", "z")
    src = np.array([[source[d] for d in order]])
    # One receiver one node below the source: the SPM solve covers the whole grid anyway
    # and get_grid_traveltimes() reads every primary node.
    rcv = np.array([[source[d] if d != "z" else coords["z"][1] for d in order]])
    return src, rcv


def _ttcrpy_solve(
    velocity: np.ndarray, coords: dict[str, np.ndarray], source: dict[str, float], nsn: int
) -> tuple[np.ndarray, float, float]:
    """Build, solve and read back the node times; returns times, setup and solve seconds."""
    (grid, slowness), setup = timed(_ttcrpy_grid, velocity, coords, nsn)
    src, rcv = _ttcrpy_points(source, coords, velocity.ndim)
    _, solve = timed(grid.raytrace, src, rcv, slowness=slowness)
    times = grid.get_grid_traveltimes()
    times = times.T if velocity.ndim == 2 else np.transpose(times, (2, 1, 0))
    del grid
    return np.ascontiguousarray(times), setup, solve


def _ttcrpy_pilot(velocity: np.ndarray, nsn: int, n_nodes: int) -> int:
    """Predict ttcrpy's memory from a small grid of the same kind (bytes per node x nodes).

    The pilot must be large enough for fixed costs not to dominate: 151^2 in 2D (measured
    2.7 kB/node there and at 801^2 for 5 secondary nodes), 15^3 in 3D.
    """
    n = 151 if velocity.ndim == 2 else 15
    dims = ("z", "x") if velocity.ndim == 2 else ("z", "y", "x")
    pilot_coords = {d: np.arange(n) * 100.0 for d in dims}
    pilot = np.full((n,) * velocity.ndim, 2000.0)
    src = {d: float(c[n // 2]) for d, c in pilot_coords.items()}
    src["z"] = 0.0
    with peak_memory() as mem:
        _ttcrpy_solve(pilot, pilot_coords, src, nsn)
    return int(mem.peak / pilot.size * n_nodes)


def run_ttcrpy(
    case: Case,
    velocity: np.ndarray,
    coords: dict[str, np.ndarray],
    source: dict[str, float],
    exact: np.ndarray,
) -> list[Row]:
    """ttcrpy's shortest-path method with slowness at the nodes, one thread."""
    rows = []
    for nsn in case.ttcrpy_secondary:
        kind = "Grid2d" if velocity.ndim == 2 else "Grid3d"
        choice = f"{kind} SPM, {nsn} secondary nodes, node slowness, 1 thread"
        try:
            predicted = _ttcrpy_pilot(velocity, nsn, case.n_nodes)
            budget = MEMORY_HEADROOM * available_memory()
            if predicted > budget:
                rows.append(
                    Row(
                        "ttcrpy",
                        choice,
                        status="skipped",
                        notes=f"predicted memory {predicted / 2**30:.1f} GiB (pilot grid, "
                        f"bytes/node x nodes) > {budget / 2**30:.1f} GiB allowed",
                    )
                )
                print(f"  - ttcrpy nsn={nsn} skipped: ~{predicted / 2**30:.1f} GiB needed")
                continue
            with peak_memory() as mem:
                times, setup, solve = _ttcrpy_solve(velocity, coords, source, nsn)
            row = Row("ttcrpy", choice, setup_s=setup, solve_s=solve)
            row.notes = f"pilot predicted {predicted / 2**30:.1f} GiB"
            rows.append(fill(row, times, exact, mem, case.n_nodes))
            del times
        except Exception as exc:
            rows.append(failed("ttcrpy", choice, exc))
        gc.collect()
    return rows


def run_skfmm(
    case: Case, velocity: np.ndarray, source_index: tuple[int, ...], exact: np.ndarray
) -> Row:
    """scikit-fmm's second-order fast marching from a zero level set at the source node."""
    choice = "travel_time(order=2), phi = 0 at the source node, 1 elsewhere"
    try:
        import skfmm

        with peak_memory() as mem:
            phi, setup = timed(_phi, velocity.shape, source_index)
            times, solve = timed(skfmm.travel_time, phi, velocity, dx=case.spacing, order=2)
        return fill(
            Row("scikit-fmm", choice, setup_s=setup, solve_s=solve), times, exact, mem, case.n_nodes
        )
    except Exception as exc:
        return failed("scikit-fmm", choice, exc)


def _phi(shape: tuple[int, ...], source_index: tuple[int, ...]) -> np.ndarray:
    # phi = 0 on the source node puts the zero contour exactly there; phi = -1 would put it
    # half a cell away and add ~h/2/v to every time (measured: 3x the RMS error).
    phi = np.ones(shape)
    phi[source_index] = 0.0
    return phi


def run_fteikpy(
    case: Case, velocity: np.ndarray, source: dict[str, float], exact: np.ndarray
) -> Row:
    """fteikpy's sweeping solver; its velocity is per cell, so cells sit between our nodes."""
    choice = "cell velocity = mean of its corner nodes (exact for linear v), nsweep=2"
    try:
        import fteikpy

        def model():
            # fteikpy's traveltimes live on the cell corners: (n-1) cells per axis put those
            # corners on our nodes. A cell's velocity is the mean of its corner nodes, which
            # is the velocity at the cell centre for a linear gradient.
            cells = velocity
            for axis in range(velocity.ndim):
                lower = np.take(cells, np.arange(cells.shape[axis] - 1), axis=axis)
                upper = np.take(cells, np.arange(1, cells.shape[axis]), axis=axis)
                cells = 0.5 * (lower + upper)
            h = case.spacing
            if velocity.ndim == 2:
                return fteikpy.Eikonal2D(cells, gridsize=(h, h)), (source["z"], source["x"])
            # fteikpy 3D order is (z, x, y).
            cells = np.ascontiguousarray(np.transpose(cells, (0, 2, 1)))
            return fteikpy.Eikonal3D(cells, gridsize=(h, h, h)), (
                source["z"],
                source["x"],
                source["y"],
            )

        # Compile fteikpy's Numba code on a tiny grid first.
        tiny = np.full((4,) * velocity.ndim, 1000.0)
        tiny_solver = (fteikpy.Eikonal2D if velocity.ndim == 2 else fteikpy.Eikonal3D)(
            tiny, gridsize=(1.0,) * velocity.ndim
        )
        tiny_solver.solve((0.0,) * velocity.ndim, nsweep=2)
        with peak_memory() as mem:
            (solver, src), setup = timed(model)
            result, solve = timed(solver.solve, src, nsweep=2)
            times = np.asarray(result.grid)
            if velocity.ndim == 3:
                times = np.transpose(times, (0, 2, 1))
        row = Row("fteikpy", choice, setup_s=setup, solve_s=solve, notes="warm (JIT excluded)")
        return fill(row, times, exact, mem, case.n_nodes)
    except Exception as exc:
        return failed("fteikpy", choice, exc)


def run_pykonal(
    case: Case,
    velocity: np.ndarray,
    source: dict[str, float],
    source_index: tuple[int, ...],
    exact: np.ndarray,
) -> list[Row]:
    """pykonal's fast marching: the plain solver, and in 3D its point-source solver."""
    rows = []
    variants = ["EikonalSolver"] + (["PointSourceSolver"] if velocity.ndim == 3 else [])
    for variant in variants:
        choice = (
            f"{variant}, cartesian, source node t = 0"
            if variant == "EikonalSolver"
            else f"{variant}, cartesian, refined spherical near field"
        )
        try:
            import pykonal

            def model(variant=variant):
                solver = getattr(pykonal.solver, variant)(coord_sys="cartesian")
                h = case.spacing
                # pykonal's grids are 3D; a 2D model is one node thick along the last axis.
                values = velocity if velocity.ndim == 3 else velocity[:, :, np.newaxis]
                solver.velocity.min_coords = 0.0, 0.0, 0.0
                solver.velocity.node_intervals = h, h, (h if velocity.ndim == 3 else 1.0)
                solver.velocity.npts = values.shape
                solver.velocity.values = np.ascontiguousarray(values)
                if variant == "EikonalSolver":
                    index = tuple(source_index) + ((0,) if velocity.ndim == 2 else ())
                    solver.traveltime.values[index] = 0.0
                    solver.unknown[index] = False
                    solver.trial.push(*index)
                else:
                    order = ("z", "y", "x")
                    solver.src_loc = np.array([source[d] for d in order])
                return solver

            with peak_memory() as mem:
                solver, setup = timed(model)
                _, solve = timed(solver.solve)
                times = np.asarray(solver.traveltime.values).reshape(velocity.shape)
            row = Row("pykonal", choice, setup_s=setup, solve_s=solve)
            if not np.all(np.isfinite(times)):
                row.notes = f"{np.count_nonzero(~np.isfinite(times))} nodes not reached"
            rows.append(fill(row, times, exact, mem, case.n_nodes))
            del solver, times
        except Exception as exc:
            rows.append(failed("pykonal", choice, exc))
    return rows


# --------------------------------------------------------------------------------------
# One case, the machine, the report
# --------------------------------------------------------------------------------------


def run_case(case: Case, skip: set[str]) -> dict[str, Any]:
    """Run every solver on one case; return the rows and the target verdicts."""
    print(f"\n== {case.name}: {case.size} nodes, {case.spacing:g} m, radius {case.radius} ==")
    velocity = gradient_model(case.shape, case.spacing, TOP, BOTTOM)
    values = np.ascontiguousarray(velocity.values)
    coords = {d: np.asarray(velocity[d].values, dtype=np.float64) for d in velocity.dims}
    source_index = tuple(0 if d == "z" else (len(coords[d]) - 1) // 2 for d in velocity.dims)
    source = {d: float(coords[d][i]) for d, i in zip(velocity.dims, source_index)}
    mesh = dict(zip(velocity.dims, np.meshgrid(*coords.values(), indexing="ij", sparse=True)))
    exact = analytic_gradient(mesh, source)

    rows, shared = run_raygrid(case, velocity, source, exact)
    for row in rows:
        print(f"  {row.solver:10s} {row.total_s:8.2f} s  {row.choice}")
    if "scipy" not in skip:
        rows.append(run_scipy(case, shared, exact))
        print(f"  scipy      solve {rows[-1].solve_s or float('nan'):.2f} s")
    shared.pop("weights", None)
    gc.collect()
    peers: list[Row] = []
    if "ttcrpy" not in skip:
        peers += run_ttcrpy(case, values, coords, source, exact)
    if "skfmm" not in skip:
        peers.append(run_skfmm(case, values, source_index, exact))
    if "fteikpy" not in skip:
        peers.append(run_fteikpy(case, values, source, exact))
    if "pykonal" not in skip:
        peers += run_pykonal(case, values, source, source_index, exact)
    for row in peers:
        if row.status == "ok":
            print(f"  {row.solver:10s} {row.total_s:8.2f} s  {row.choice}")
    rows += peers

    warm = rows[1]
    for row in rows:
        if row.status == "ok" and row.total_s:
            row.ratio = row.total_s / warm.total_s
    targets = verdicts(case, rows, warm)
    return {
        "case": asdict(case),
        "nodes": case.n_nodes,
        "star_offsets": shared["star_size"],
        "source": source,
        "rows": [asdict(r) for r in rows],
        "targets": targets,
    }


def verdicts(case: Case, rows: list[Row], warm: Row) -> list[dict[str, Any]]:
    """The issue's two targets, each with the numbers it was judged on."""
    targets = []
    scipy_row = next((r for r in rows if r.solver == "scipy" and r.status == "ok"), None)
    if scipy_row is not None:
        targets.append(
            {
                "target": "raygrid traveltime() total <= scipy dijkstra solve alone",
                "raygrid_s": warm.total_s,
                "peer_s": scipy_row.solve_s,
                "margin": scipy_row.solve_s / warm.total_s,
                "passed": warm.total_s <= scipy_row.solve_s,
            }
        )
    spm = next(
        (
            r
            for r in rows
            if r.solver == "ttcrpy"
            and r.status == "ok"
            and f", {TTCRPY_SECONDARY} secondary" in r.choice
        ),
        None,
    )
    if spm is not None:
        speedup = spm.total_s / warm.total_s
        targets.append(
            {
                "target": f"raygrid >= 30x faster than ttcrpy SPM ({TTCRPY_SECONDARY} secondary "
                "nodes) at equal or better RMS error",
                "raygrid_s": warm.total_s,
                "peer_s": spm.total_s,
                "speedup": speedup,
                "raygrid_rms_s": warm.rms_s,
                "peer_rms_s": spm.rms_s,
                "passed_speed": speedup >= 30.0,
                "passed_rms": warm.rms_s <= spm.rms_s,
                "passed": speedup >= 30.0 and warm.rms_s <= spm.rms_s,
            }
        )
    if spm is not None and case.larger_radii:
        # The same target at matched accuracy: raygrid's fastest traveltime() (any radius
        # timed) whose RMS error is equal or better than ttcrpy's.
        matched = [
            r for r in rows
            if r.solver == "raygrid" and r.status == "ok" and r.choice.startswith(
                "traveltime() warm") and r.rms_s <= spm.rms_s
        ]  # fmt: skip
        best = min(matched, key=lambda r: r.total_s, default=None)
        target = {
            "target": f"at matched accuracy: the fastest raygrid traveltime() (radius "
            f"{case.radius} or {', '.join(map(str, case.larger_radii))}) with RMS <= ttcrpy SPM "
            f"({TTCRPY_SECONDARY} secondary nodes) is >= 30x faster",
            "peer_s": spm.total_s,
            "peer_rms_s": spm.rms_s,
            "passed": None if best is None else spm.total_s / best.total_s >= 30.0,
        }
        if best is not None:
            target |= {
                "raygrid_choice": best.choice,
                "raygrid_s": best.total_s,
                "raygrid_rms_s": best.rms_s,
                "speedup": spm.total_s / best.total_s,
            }
        else:
            target["why"] = "no raygrid radius timed reached ttcrpy's RMS"
        targets.append(target)
    if spm is None and case.ttcrpy_secondary and TTCRPY_SECONDARY in case.ttcrpy_secondary:
        targets.append(
            {
                "target": f"raygrid >= 30x faster than ttcrpy SPM ({TTCRPY_SECONDARY} secondary "
                "nodes) at equal or better RMS error",
                "passed": None,
                "why": "ttcrpy SPM with 5 secondary nodes did not run (see its row)",
            }
        )
    return targets


#: The packages whose versions a report names: raygrid and its peers.
PACKAGES = ("raygrid", "numpy", "numba", "scipy", "xarray", "ttcrpy", "scikit-fmm", "fteikpy",
            "pykonal")  # fmt: skip


def machine() -> dict[str, Any]:
    """What this ran on: :func:`report.machine`, plus the cores this process may use and
    Numba's threads."""
    return {
        **machine_of(PACKAGES),
        "cores_usable": len(os.sched_getaffinity(0)),
        "numba_threads": numba.get_num_threads(),
    }


def _fmt(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "" if value is None else f"{value * scale:.{digits}f}"


def table(result: dict[str, Any]) -> str:
    """A Markdown table of one case."""
    lines = [
        "| solver | choice | setup s | solve s | total s | x raygrid | RMS ms | max ms "
        "| peak RSS MiB | B/node | notes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        status = "" if r["status"] == "ok" else f"**{r['status']}**: "
        lines.append(
            "| "
            + " | ".join(
                [
                    r["solver"],
                    r["choice"],
                    _fmt(r["setup_s"]),
                    _fmt(r["solve_s"]),
                    _fmt(r["total_s"]),
                    _fmt(r["ratio"]),
                    _fmt(r["rms_s"], 1e3, 3),
                    _fmt(r["max_s"], 1e3, 3),
                    _fmt(r["peak_rss"], 1 / 2**20, 0),
                    _fmt(r["bytes_per_node"], 1.0, 1),
                    status + r["notes"].replace("|", "/"),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    """The whole report as Markdown."""
    m = report["machine"]
    command = " ".join(["benchmarks/cpu_single_source.py", report["args"]]).strip()
    out = [
        "# CPU single-source benchmark",
        "",
        f"Written by `{command}` on {m['date']}.",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), "
        f"{m['ram_gib']} GiB RAM, {m['platform']}",
        f"- Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        + f"; Numba threads {m['numba_threads']} (used by `precompute_weights` and the CSR "
        "build only; every solve is single-threaded)",
        f"- Model: v = {TOP / 1e3:g} km/s at z = 0, linear to {BOTTOM / 1e3:g} km/s at the "
        "deepest node; source on the top surface at the centre node; errors against "
        "`t = arccosh(1 + g^2 d^2 / (2 v_s v_r)) / g` over every node.",
        "- Times are one wall-clock run each; `x raygrid` = total / raygrid's warm "
        "`traveltime()` total. Peak RSS = high-water mark added during the call "
        "(VmHWM reset through /proc/self/clear_refs).",
        "",
    ]
    for result in report["cases"]:
        case = result["case"]
        shape = " x ".join(str(n) for n in case["shape"].values())
        out += [
            f"## {case['name']}: {shape} nodes, {case['spacing']:g} m spacing, radius "
            f"{case['radius']} ({result['star_offsets']} star offsets)",
            "",
            table(result),
            "",
        ]
        for t in result["targets"]:
            verdict = {True: "PASS", False: "FAIL", None: "NOT RUN"}[t["passed"]]
            detail = ""
            if "margin" in t:
                detail = f"raygrid {t['raygrid_s']:.2f} s vs scipy solve {t['peer_s']:.2f} s"
            elif "speedup" in t:
                detail = (
                    f"{t['speedup']:.1f}x faster (ttcrpy {t['peer_s']:.2f} s); RMS raygrid "
                    f"{t['raygrid_rms_s'] * 1e3:.3f} ms vs ttcrpy {t['peer_rms_s'] * 1e3:.3f} ms"
                )
                if "raygrid_choice" in t:
                    detail += f" (raygrid row: {t['raygrid_choice']})"
            elif "why" in t:
                detail = t["why"]
            out.append(f"- **{verdict}** {t['target']}: {detail}")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", choices=("2d", "3d"), help="run one case")
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=("scipy", "ttcrpy", "skfmm", "fteikpy", "pykonal"),
        help="peers to leave out",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="path stem for the .json and .md results (default: "
        "benchmarks/results/cpu_single_source for a full run, none for --quick)",
    )
    args = parser.parse_args(argv)

    if args.quick:
        cases = [
            Case("2D", {"z": 201, "x": 201}, 80.0, 5, (TTCRPY_SECONDARY,), (6,)),
            Case("3D", {"z": 21, "y": 21, "x": 21}, 800.0, 2, (TTCRPY_SECONDARY, 1)),
        ]
    else:
        cases = [
            Case("2D", {"z": 1601, "x": 1601}, 10.0, 5, (TTCRPY_SECONDARY,), (6,)),
            Case("3D", {"z": 161, "y": 161, "x": 161}, 100.0, 2, (TTCRPY_SECONDARY, 1)),
        ]
    if args.only:
        cases = [c for c in cases if c.name.lower() == args.only]
    stem = args.results if args.results is not None else (None if args.quick else RESULTS)

    report = {"machine": machine(), "args": " ".join(sys.argv[1:]), "cases": []}
    report["machine"]["fixed_mmap_threshold"] = fixed_mmap_threshold()
    print(json.dumps(report["machine"], indent=1))
    warm_graph_builder()
    for case in cases:
        report["cases"].append(run_case(case, set(args.skip)))
        gc.collect()

    text = markdown(report)
    write_results(stem, report, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
