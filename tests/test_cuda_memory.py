"""The GPU solvers count their device memory before they allocate it, and a model too large
for the GPU is refused with what would fit, not the driver's out-of-memory error.

Under the simulator, which reports infinite free memory: each solver's count is checked
against the arrays it really allocates (every ``cuda.device_array`` and ``cuda.to_device``
recorded while it is built and solves, with the most held at once), and a small GPU is
stood in for by :func:`raygrid.kernels.cuda.memory.device_memory`.
"""

from __future__ import annotations

import importlib.util
import os
import weakref
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import raygrid.pipeline as rg
from raygrid.kernels import forward_star
from raygrid.kernels.cuda import memory
from raygrid.kernels.cuda.memory import DEVICE_HEADROOM, DeviceMemoryError
from raygrid.kernels.cuda.nearfar import NearFarSolver, near_far_device_bytes
from raygrid.kernels.cuda.pull_solver import PullSolver, pull_device_bytes, pull_layout
from raygrid.kernels.layout import PaddedLayout
from raygrid.pipeline.errors import InputError

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="runs in the CUDA simulator"
)

SHAPE = (13, 1, 17)
SPACING = np.array([10.0, 1.0, 10.0])


class DeviceBytes:
    """Device arrays allocated while it is on: the bytes held now and the most held."""

    def __init__(self, monkeypatch) -> None:
        self.held = self.most = self.calls = 0
        for name in ("device_array", "to_device"):
            monkeypatch.setattr(cuda, name, self._counted(getattr(cuda, name)))

    def _counted(self, allocate):
        def counted(*args, **kwargs):
            array = allocate(*args, **kwargs)
            self.calls += 1
            self.held += array.nbytes
            self.most = max(self.most, self.held)
            weakref.finalize(array, self._freed, array.nbytes)
            return array

        return counted

    def _freed(self, nbytes: int) -> None:
        self.held -= nbytes


def assert_counted(expected: int, counted: DeviceBytes) -> None:
    """Every array a solver keeps is counted, to within what a solve's seeds and bounds
    take now and then (a few hundred bytes, left to the headroom)."""
    assert counted.most > 0
    assert counted.most - 256 <= expected <= counted.most + 1024, (expected, counted.most)


def slowness_model():
    rng = np.random.default_rng(3)
    return 1.0 / rng.uniform(1500.0, 3000.0, SHAPE)


def seeds():
    return [(np.array([40]), np.array([0.0])), (np.array([7, 150]), np.array([0.0, 0.001]))]


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"dtype": np.float32, "precomputed": True, "batch": 2, "block": (2, 1, 4)},
        {"schedule": "phases", "batch": 3, "block": (2, 1, 4)},
    ],
    ids=["default-tiles", "float32-precomputed-batch", "phases"],
)
def test_a_pull_solver_holds_what_it_counted(monkeypatch, settings):
    star = forward_star((2, 0, 3))
    slowness = slowness_model()
    counted = DeviceBytes(monkeypatch)
    solver = PullSolver(slowness, SPACING, star, **settings)
    if "block" in settings:  # (the simulator runs a thread per tile node: small tiles only)
        solver.solve(seeds())  # a phases solve sends its tile queue
    layout = pull_layout(
        SHAPE, star.radius, settings.get("block"), settings.get("batch", 1),
        settings.get("dtype", np.float64),
    )  # fmt: skip
    keys = ("precomputed", "dtype", "batch", "schedule")
    expected = pull_device_bytes(layout, star, **{k: settings[k] for k in keys if k in settings})
    assert_counted(expected, counted)


@pytest.mark.parametrize(
    "dtype, precomputed", [(np.float64, False), (np.float32, False), (np.float64, True)]
)
def test_a_near_far_solver_holds_what_it_counted(monkeypatch, dtype, precomputed):
    star = forward_star((2, 0, 2))
    counted = DeviceBytes(monkeypatch)
    solver = NearFarSolver(
        slowness_model(), SPACING, star, dtype=dtype, precomputed=precomputed, threads=32
    )
    solver.solve(seeds()[:1])  # float64: predecessors recovered after the search
    layout = PaddedLayout(SHAPE, star.radius, (2, 1, 2))
    expected = near_far_device_bytes(layout, star, precomputed=precomputed, dtype=dtype)
    assert_counted(expected, counted)


def small_gpu(monkeypatch, free: int, total: int = 16 * 2**30, held=None) -> None:
    """A GPU with ``free`` bytes free, less what ``held`` (:class:`DeviceBytes`) holds now."""
    monkeypatch.setattr(memory, "device_memory", lambda: (free - (held.held if held else 0), total))


@pytest.mark.parametrize("solver", [PullSolver, NearFarSolver])
def test_a_model_too_large_for_the_gpu_is_refused_before_anything_is_allocated(monkeypatch, solver):
    star = forward_star((2, 0, 2))
    slowness = slowness_model()
    needed = (
        pull_device_bytes(pull_layout(SHAPE, star.radius), star)
        if solver is PullSolver
        else near_far_device_bytes(PaddedLayout(SHAPE, star.radius, (2, 1, 2)), star)
    )
    small_gpu(monkeypatch, free=needed + DEVICE_HEADROOM - 1)
    counted = DeviceBytes(monkeypatch)
    with pytest.raises(DeviceMemoryError, match=r"needs about .* of GPU memory and the GPU has"):
        solver(slowness, SPACING, star)
    assert counted.calls == 0
    # One byte more and it is built.
    small_gpu(monkeypatch, free=needed + DEVICE_HEADROOM)
    solver(slowness, SPACING, star)


def test_the_api_says_what_would_fit_on_the_gpu(monkeypatch):
    velocity = rg.gradient_model({"z": 21, "x": 31}, 10.0)
    small_gpu(monkeypatch, free=DEVICE_HEADROOM + 1000, total=80 * 2**30)
    with pytest.raises(InputError) as refused:
        rg.traveltimes(velocity, [{"x": 50.0, "z": 0.0}], backend="cuda", radius=3, precompute=True)
    assert str(refused.value).startswith(
        "the model (21 x 31 nodes, 32 star offsets) does not fit on this GPU: the CUDA pull "
        "solver of 651 nodes needs about "
    )
    assert str(refused.value).endswith(
        "of GPU memory and the GPU has 256.00 MiB free (of 80.00 GiB); try precompute=False, "
        'precision="float32", or traveltime(..., tiles=) for one source at a time on a Dask '
        "cluster"
    )
    only_pull = r'try algorithm="pull" \(less memory per node, and it can be tiled\)$'
    with pytest.raises(InputError, match=only_pull):
        rg.traveltime(
            velocity, {"x": 50.0, "z": 0.0}, backend="cuda", algorithm="near-far",
            precision="float32",
        )  # fmt: skip


def test_a_tile_too_large_for_the_gpu_says_smaller_tiles(monkeypatch):
    # A tiled solve's tile task on a worker, as decompose.solve_tiled runs it.
    from raygrid.kernels import EXACT
    from raygrid.pipeline.decompose import solve_tile, start_tile
    from raygrid.pipeline.tiles import TileGrid

    star = forward_star((2, 0, 2))
    geometry = TileGrid(SHAPE, (8, 1, 8), star.radius)
    slowness = slowness_model()[geometry.extended((0, 0, 0))]
    state = start_tile((0, 0, 0), slowness, np.float64, star.predecessor_dtype)
    seeds = (np.array([[0, 0, 1]]), np.array([0.0]))
    small_gpu(monkeypatch, free=DEVICE_HEADROOM + 1000)
    with pytest.raises(InputError) as refused:
        solve_tile(state, geometry, star, SPACING, EXACT, "cuda", seeds)
    assert str(refused.value).startswith(
        f"a tile ({' x '.join(map(str, slowness.shape))} nodes with its halo) does not fit on "
        "this GPU: the CUDA pull solver of"
    )
    assert str(refused.value).endswith('try smaller tiles=, or precision="float32"')
    # A tiled survey's tile task is told it is a workflow's (its context stays on the
    # client): the settings as the workflow file spells them.
    state = start_tile((0, 0, 0), slowness, np.float64, star.predecessor_dtype)
    with pytest.raises(InputError) as refused:
        solve_tile(state, geometry, star, SPACING, EXACT, "cuda", seeds, workflow=True)
    assert str(refused.value).endswith("try smaller compute.tiles, or grid.precision: float32")


def test_free_memory_is_read_after_numbas_deferred_frees_and_may_be_unknown(monkeypatch):
    # Numba's layout (numba-cuda 0.30): a dropped device array's free waits on the memory
    # manager's list, streams' and events' on the context's. Flushing the context's alone
    # left a dropped 46 MiB array counted as taken on an H200.
    events = []

    class Deallocations:
        def __init__(self, name):
            self.name = name

        def clear(self):
            events.append(f"cleared {self.name}")

    class MemoryManager:
        deallocations = Deallocations("arrays")

    class Context:
        deallocations = Deallocations("streams")
        memory_manager = MemoryManager()

        def get_memory_info(self):
            events.append("read")
            return 5 * 2**30, 80 * 2**30

    monkeypatch.setattr(cuda, "current_context", Context)
    assert memory.device_memory() == (5 * 2**30, 80 * 2**30)
    # A dropped solver's memory counts as free.
    assert events == ["cleared streams", "cleared arrays", "read"]
    # The real driver (read, not imported: the tests run the simulator) queues array frees
    # where this flushes them.
    package = Path(importlib.util.find_spec("numba_cuda").origin).parent
    driver = (package / "numba" / "cuda" / "cudadrv" / "driver.py").read_text()
    finalizer = driver[driver.index("def _alloc_finalizer(") :].split("\n\n\n")[0]
    assert "deallocations = memory_manager.deallocations" in finalizer

    def unknown(self):
        raise NotImplementedError  # an external memory manager that cannot say

    monkeypatch.setattr(Context, "get_memory_info", unknown)
    assert memory.device_memory() == (float("inf"), float("inf"))
    memory.check_device_memory(2**50, "a solve")  # not checked


def test_a_tile_solve_counts_its_boundary_seeds_and_starting_times(monkeypatch):
    # A decomposition tile is seeded along its boundary strips (thousands of nodes on a
    # large tile) and starts from its last times: both are device memory too.
    from raygrid.kernels.cuda.pull_solver import solve_pull

    star = forward_star((2, 0, 2))
    slowness = slowness_model()
    nodes = np.arange(0, slowness.size, 2)  # 111 seeds, more than the default room (64)
    seeds = [(nodes, np.full(nodes.size, 0.01))]
    times = np.full((1, slowness.size), np.inf)
    block = (2, 1, 4)
    counted = DeviceBytes(monkeypatch)
    start = np.full((1, slowness.size), -1, star.predecessor_dtype)
    solve_pull(slowness, SPACING, star, seeds, block=block, times=times, predecessor=start)
    layout = pull_layout(SHAPE, star.radius, block)
    expected = pull_device_bytes(layout, star, seed_room=nodes.size)
    # The starting times and predecessors are uploaded on top, one at a time.
    assert_counted(expected + times.nbytes, counted)
    # A GPU that holds the solver but not its starting times on top refuses the solve.
    counted = DeviceBytes(monkeypatch)
    small_gpu(monkeypatch, free=expected + DEVICE_HEADROOM + times.nbytes - 1, held=counted)
    with pytest.raises(DeviceMemoryError, match=r"^the starting times of 1 source\(s\) on 221"):
        solve_pull(slowness, SPACING, star, seeds, block=block, times=times, predecessor=start)


def test_a_device_memory_error_travels_from_a_worker_whole():
    import pickle

    error = DeviceMemoryError("the CUDA pull solver of 5 nodes", 3 * 2**30, 2**30, 80 * 2**30)
    said = "the CUDA pull solver of 5 nodes needs about 3.00 GiB of GPU memory and the GPU has "
    assert str(error) == said + "1.00 GiB free (of 80.00 GiB)"
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.needed == error.needed
