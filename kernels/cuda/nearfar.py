"""Near-Far ("two buckets") GPU shortest paths: push relaxation by atomic min (float64) or a
compare-and-swap of the packed time and predecessor (float32).

The whole search runs on the device as a chain of identical *step* kernels; each step reads
a small control array that the previous steps wrote and either relaxes the near frontier or,
when the near frontier is empty, splits the far pile at the next threshold. The host only
launches steps in batches and reads the control array once per batch, so there is no host
round trip per relaxation, per frontier count or per bucket.

Memory per padded node: the time (8 bytes), two near frontiers and three far piles of node
indices and two de-duplication stamps (4 bytes each): about 36 bytes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
from numba import cuda, float32, float64, int32, uint64

from ..layout import PaddedLayout, checked_slowness, checked_spacing
from ..rules import EXACT, checked_rule
from ..seeds import checked_precision, checked_seeds
from ..star import Star
from .arrays import from_padded, padded_slowness
from .device import edge_weight_gpu, simulating
from .launch import prepared_launch
from .memory import check_device_memory
from .predecessor import recover_predecessors, star_tables
from .weights import precompute_weights_gpu

__all__ = [
    "DELTA_FACTOR",
    "default_delta",
    "NearFarSolver",
    "near_far_device_bytes",
    "solve_near_far",
    "near_far_kernels",
]

#: Default bucket width in units of the model's mean edge weight (see :func:`default_delta`).
DELTA_FACTOR = 2.0

# Control array (int64, on the device). Three-slot rings indexed by step number n: step n
# reads slot n % 3, appends to slot (n + 1) % 3 and clears slot (n + 2) % 3, which no kernel
# of step n touches, so no step needs a host write or a second kernel to reset a counter.
NEAR = 0  # 0..2: size of the near frontier read by step n
EPOCH = 3  # 3..5: bucket (epoch) number of step n
REMAIN = 6  # 6..8: 1 + number of targets not yet settled, 0 where not counted
FAR = 9  # 9..11: size of far pile e % 3 (three piles, indexed by epoch)
DONE = 12  # set once the search is over; later steps return at once
RELAX_STEPS = 13  # statistics: steps that relaxed a near frontier
SPLITS = 14  # steps that split the far pile (buckets opened)
EDGES = 15  # edge relaxations attempted (frontier nodes x star size)
CONTROL_SIZE = 16

# The float32 time and its predecessor share one uint64, time bits high, so one 64-bit
# compare-and-swap updates both together: non-negative IEEE floats order like their bit
# patterns. The low word holds k + 1 (0 for a seed).
if simulating():
    # The simulator's libdevice has no bit casts; NumPy views do the same.
    def float_as_int(x):
        return np.float32(x).view(np.int32)

    def int_as_float(i):
        return np.int32(i).view(np.float32)

else:
    from numba.cuda.libdevice import float_as_int, int_as_float

#: Packed value of an unreached node: ``+inf`` time, no predecessor.
PACKED_INF = np.uint64(np.float32(np.inf).view(np.uint32)) << np.uint64(32)


@cuda.jit(device=True, inline="always")
def load_time32(packed, u):
    """The float32 time in the high word of ``packed[u]``."""
    return int_as_float(int32(packed[u] >> uint64(32)))


@cuda.jit(device=True, inline="always")
def push_time32(packed, v, t, k):
    """Install ``(t, k)`` in ``packed[v]`` if ``t`` is below its time; True when it did.

    A compare-and-swap loop, not a 64-bit atomic min: the min would also swap in a smaller
    ``k`` at an equal time, and in float32 an edge whose weight rounds away (``t + w == t``)
    could then make two nodes each other's predecessor (a cycle: no ray) whenever a stale
    plain read let an equal-time push through. Here, as in the pull kernels, a predecessor
    changes only with a strict drop of its time, so predecessors always lead to a seed (a
    seed keeps its -1); at an exact tie the first to arrive stays.
    """
    new = (uint64(float_as_int(t)) << uint64(32)) | uint64(k + 1)
    old = packed[v]
    while (new >> uint64(32)) < (old >> uint64(32)):
        seen = cuda.atomic.cas(packed, v, old, new)
        if seen == old:
            return True
        old = seen  # another thread lowered it first: try again while still better
    return False


@cuda.jit(device=True, inline="always")
def load_time64(times, u):
    return times[u]


@cuda.jit(device=True, inline="always")
def push_time64(times, v, t, k):
    """Atomic min of ``t`` into ``times[v]``; True when it dropped (k is recovered later)."""
    return t < cuda.atomic.min(times, v, t)


@cache
def near_far_kernels(rule: int, precomputed: bool, dtype_name: str):
    """The Near-Far kernels for one weight rule, weight source and precision.

    Compiled lazily on first launch (no eager signature) and cached here, so repeated solves
    do not recompile; each kernel's ``.py_func`` is the plain function for
    ``cuda.compile_ptx``.

    Returns
    -------
    dict
        ``"reset"``, ``"seed"`` and ``"step"`` kernels (see :func:`solve_near_far`).
    """
    single = dtype_name == "float32"
    load_time = load_time32 if single else load_time64
    push_time = push_time32 if single else push_time64
    to_time = float32 if single else float64
    unreached = PACKED_INF if single else np.inf

    def reset(times, near_stamp, far_stamp, control):
        """Every node unreached and unqueued; control cleared."""
        i = cuda.grid(1)
        if i < times.shape[0]:
            times[i] = unreached
            near_stamp[i] = -1
            far_stamp[i] = -1
        if i < control.shape[0]:
            control[i] = 0

    def seed(times, seed_nodes, seed_times, bounds, near, far, near_stamp, far_stamp, control):
        """Seeds (distinct nodes) get their times and enter the near frontier of step 0 if
        below the first threshold, else far pile 0."""
        i = cuda.grid(1)
        if i >= seed_nodes.shape[0]:
            return
        s = seed_nodes[i]
        t = seed_times[i]
        if single:
            times[s] = uint64(float_as_int(t)) << uint64(32)
        else:
            times[s] = t
        if t < bounds[0]:
            near_stamp[s] = 0
            near[0, cuda.atomic.add(control, NEAR, 1)] = s
        else:
            far_stamp[s] = 0
            far[0, cuda.atomic.add(control, FAR, 1)] = s

    def step(
        n,
        control,
        bounds,
        times,
        near,
        far,
        near_stamp,
        far_stamp,
        slowness,
        spacing,
        offsets,
        steps,
        half,
        is_forward,
        weights,
        targets,
        n_targets,
        delta,
    ):
        """Step ``n``: relax the near frontier, or split the far pile when it is empty.

        Every block takes the same decision from control slots written by earlier steps
        (never by this one), so no grid-wide synchronisation is needed inside a step.
        """
        tid = cuda.grid(1)
        stride = cuda.gridsize(1)
        if control[DONE] != 0:
            return
        slot = n % 3
        epoch = control[EPOCH + slot]
        n_near = control[NEAR + slot]
        n_far = control[FAR + epoch % 3]
        settled = n_targets > 0 and control[REMAIN + slot] == 1
        if settled or (n_near == 0 and n_far == 0):
            # Early exit (the previous step, a split, found every target below the
            # threshold with the near frontier empty) or nothing left to relax.
            if tid == 0:
                control[DONE] = 1
            return
        n_offsets = offsets.shape[0]
        if tid == 0:
            # Clear the slots that step n + 1 appends to (no kernel of this step reads them).
            control[NEAR + (n + 2) % 3] = 0
            control[REMAIN + (n + 2) % 3] = 0
        if n_near > 0:
            # --- Relax: one thread per (frontier node, offset) pair, pushing t(u) + w(u, v)
            # into v atomically (push_time; Davidson et al. 2014, Near-Far pile).
            if tid == 0:
                control[EPOCH + (n + 1) % 3] = epoch
                control[RELAX_STEPS] += 1
                control[EDGES] += n_near * n_offsets
            threshold = bounds[epoch % 3]
            frontier = n % 2
            pz, py, px = slowness.shape
            for item in range(tid, n_near * n_offsets, stride):
                j = item // n_offsets
                k = item - j * n_offsets
                u = near[frontier, j]
                v = u + steps[k]
                if precomputed:
                    # Dummy nodes' edges weigh inf, so no bounds test is needed.
                    w = weights[u, half[k]] if is_forward[k] else weights[v, half[k]]
                else:
                    uz = u // (py * px)
                    uy = (u // px) % py
                    ux = u % px
                    vz = uz + offsets[k, 0]
                    vy = uy + offsets[k, 1]
                    vx = ux + offsets[k, 2]
                    if not slowness[vz, vy, vx] < np.inf:
                        continue  # a dummy node: the padding is one radius wide
                    w = to_time(
                        edge_weight_gpu(
                            slowness, rule, uz, uy, ux, vz, vy, vx,
                            spacing[0], spacing[1], spacing[2],
                        )
                    )  # fmt: skip
                t = load_time(times, u) + w
                # A plain read first: most pushes do not improve, and then no atomic is spent.
                if not t < load_time(times, v):
                    continue
                if not push_time(times, v, t, k):
                    continue
                if t < threshold:
                    # Near: de-duplicated per step by the stamp (atomic max of the step
                    # number), so a node enters the next frontier once however many
                    # neighbours improve it.
                    if cuda.atomic.max(near_stamp, v, int32(n + 1)) < n + 1:
                        near[1 - frontier, cuda.atomic.add(control, NEAR + (n + 1) % 3, 1)] = v
                elif cuda.atomic.max(far_stamp, v, int32(epoch)) < epoch:
                    # Far: once per bucket; the split reads its time then.
                    far[epoch % 3, cuda.atomic.add(control, FAR + epoch % 3, 1)] = v
        else:
            # --- Split (the near frontier is empty): the next bucket's threshold is
            # bounds[e + 1]; far entries below it move to near, those still above stay in
            # the next far pile, and those below the old threshold are stale (they were
            # relaxed through the near frontier when they improved) and are dropped.
            if tid == 0:
                control[EPOCH + (n + 1) % 3] = epoch + 1
                control[FAR + (epoch + 2) % 3] = 0  # pile e + 2, last read two splits ago
                control[SPLITS] += 1
                # Thresholds as a running sum, one epoch ahead, so every kernel compares
                # with the very same floats; if delta no longer moves it, open everything.
                following = bounds[(epoch + 1) % 3] + delta
                if not following > bounds[(epoch + 1) % 3]:
                    following = np.inf
                bounds[(epoch + 2) % 3] = following
                if n_targets > 0:
                    cuda.atomic.add(control, REMAIN + (n + 1) % 3, 1)
            old_threshold = bounds[epoch % 3]
            threshold = bounds[(epoch + 1) % 3]
            for item in range(tid, n_far + n_targets, stride):
                if item < n_far:
                    v = far[epoch % 3, item]
                    t = load_time(times, v)
                    if t < old_threshold:
                        continue
                    if t < threshold:
                        if cuda.atomic.max(near_stamp, v, int32(n + 1)) < n + 1:
                            near[(n + 1) % 2, cuda.atomic.add(control, NEAR + (n + 1) % 3, 1)] = v
                    elif cuda.atomic.max(far_stamp, v, int32(epoch + 1)) < epoch + 1:
                        far[(epoch + 1) % 3, cuda.atomic.add(control, FAR + (epoch + 1) % 3, 1)] = v
                elif not load_time(times, targets[item - n_far]) < old_threshold:
                    # Below the threshold with the near frontier empty means settled
                    # (weights are positive); the next step reads this count.
                    cuda.atomic.add(control, REMAIN + (n + 1) % 3, 1)

    return {"reset": cuda.jit(reset), "seed": cuda.jit(seed), "step": cuda.jit(step)}


def default_delta(slowness: np.ndarray, spacing, star: Star) -> float:
    """Default bucket width: ``DELTA_FACTOR`` times the mean edge weight.

    The mean edge weight is estimated as the mean slowness times the mean physical length
    of the star's offsets. A bucket then holds a band of the wavefront a couple of edge
    lengths thick: wide enough that each relax step has many nodes to give the GPU's
    threads, narrow enough that few nodes are relaxed with a time that later drops
    (Meyer & Sanders 2003: with every edge about as heavy as the bucket width, a node is
    reinserted O(1) times).
    """
    lengths = np.sqrt(((star.offsets * np.asarray(spacing, dtype=np.float64)) ** 2).sum(axis=1))
    return float(DELTA_FACTOR * np.mean(slowness) * np.mean(lengths))


class NearFarSolver:
    """A model resident on the GPU, solved by Near-Far delta-stepping source by source.

    Building it checks the model and puts it on the device once (padded slowness, star
    tables, precomputed weights if asked) with one source's search state (times, frontiers,
    piles, stamps, control); :meth:`solve` then pays per source only for its seeds, a reset
    of that state, the search and the copy back. One solve runs at a time: calls from
    several threads wait for each other (they share the device buffers).

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx), float64
        Cell slownesses (s/m), finite and positive.
    spacing : array, shape (3,)
        Node spacing ``(hz, hy, hx)`` (m).
    star : Star
        Forward star (:func:`raygrid.kernels.forward_star`).
    rule : int
        :data:`raygrid.kernels.EXACT` or :data:`raygrid.kernels.MEAN`.
    precomputed : bool
        Precompute the half-star weight table once on the device and reuse it for every
        source, instead of computing each weight when it is pushed.
    dtype : numpy dtype
        ``float64`` or ``float32``: the precision of the times and weights.
    delta : float, optional
        Bucket width (s); ``inf`` gives plain frontier Bellman-Ford. Default
        :func:`default_delta`.
    threads : int, optional
        Threads per block. Default 128 (32 under the simulator: :func:`_default_launch`).
    blocks : int, optional
        Blocks of each step launch; the step kernels loop over their work with a grid
        stride. Default: enough to fill the device (4 under the simulator).
    sync_every : int, optional
        Steps launched between two reads of the control array by the host. Default 32 (4
        under the simulator).

    Attributes
    ----------
    setup_s : float
        Wall seconds spent building the solver.

    Notes
    -----
    Davidson, Baxter, Garland & Owens (2014), "Work-efficient parallel GPU methods for
    single-source shortest paths", IPDPS, section on the Near-Far pile; Meyer & Sanders
    (2003), "Delta-stepping: a parallelizable shortest path algorithm", J. Algorithms 49.
    docs/method.md section 1, "Near-Far / delta-stepping".

    Nodes whose time is below the current threshold are relaxed in the *near* frontier,
    one thread per (node, offset) pair, by atomic min; improved nodes join the next near
    frontier (below the threshold) or the *far* pile. Both are compacted by an atomic
    counter and de-duplicated by per-node stamps. When the near frontier empties, the
    threshold grows by ``delta`` and the far pile is split. With the near frontier empty,
    every node below the threshold is settled (weights are positive), which is the early
    exit test for ``targets``.

    float64 atomic-mins the time alone and recovers predecessors afterwards with one pull
    pass (:func:`raygrid.kernels.cuda.predecessor.recover_predecessors`). float32 packs
    ``(time bits << 32) | (k + 1)`` in one uint64 and swaps that in by compare-and-swap
    where the time strictly drops, so the time and its predecessor change together
    (:func:`push_time32`).

    Any order of relaxations reaches the same fixed point, the minimum over paths of the
    float sums of the same weights (weights in float64, rounded once to ``dtype``), so the
    times equal :func:`raygrid.kernels.dijkstra`'s exactly in either precision (docs/method.md
    section 1, "Why bitwise matters"). On a real GPU the weights' products are rounded
    on their own, as on the CPU, never fused into a sum (:mod:`raygrid.kernels.segment`'s
    notes; checked on the PTX, not yet compared on a device).

    See Also
    --------
    raygrid.kernels.dijkstra : the CPU reference.
    raygrid.kernels.cuda.pull_solver.PullSolver : the pull solver, resident the same way.
    raygrid.kernels.cuda.predecessor.recover_predecessors
    """

    def __init__(
        self,
        slowness: np.ndarray,
        spacing,
        star: Star,
        *,
        rule: int = EXACT,
        precomputed: bool = False,
        dtype: np.dtype | type = np.float64,
        delta: float | None = None,
        threads: int | None = None,
        blocks: int | None = None,
        sync_every: int | None = None,
    ) -> None:
        clock = time.perf_counter()
        dtype = checked_precision(dtype)
        slowness = checked_slowness(slowness, values=False)  # values: checked on the device
        spacing, rule = checked_spacing(spacing), checked_rule(rule)  # as star_crossings
        if delta is not None and not delta > 0:
            raise ValueError(f"delta must be positive, got {delta}")
        default_threads, default_sync = _default_launch()
        threads = default_threads if threads is None else threads
        sync_every = default_sync if sync_every is None else sync_every
        if threads < 1 or sync_every < 1:
            raise ValueError("threads and sync_every must be >= 1")
        self.star, self.dtype, self.rule, self.precomputed = star, dtype, rule, precomputed
        self.spacing, self.delta = spacing, delta
        self.threads, self.sync_every = threads, sync_every
        self.n_real = slowness.size
        self._lock = threading.Lock()

        # Padding by the radius gives every real node all its star neighbours in the array;
        # dummy neighbours have infinite slowness (weight inf), so no thread tests the border.
        layout = PaddedLayout(slowness.shape, star.radius, tuple(max(r, 1) for r in star.radius))
        self.layout = layout
        n_padded = int(np.prod(layout.padded))
        if n_padded >= np.iinfo(np.int32).max:
            raise ValueError(f"grid too large for int32 node indices ({n_padded} padded nodes)")
        check_device_memory(
            near_far_device_bytes(layout, star, precomputed=precomputed, dtype=dtype),
            f"the CUDA Near-Far solver of {self.n_real:,} nodes",
        )
        self._slowness = padded_slowness(layout, slowness)  # padded on the device
        if delta is None:  # (from a model now known to be finite and positive)
            self.delta = delta = default_delta(slowness, spacing, star)
            if not delta > 0:  # a spacing so small its product underflows (1e-320 m)
                raise ValueError(f"delta must be positive, got {delta} (from the spacing)")
        self._spacing = cuda.to_device(spacing)
        self._tables = star_tables(star, layout)
        if precomputed:
            self._weights = precompute_weights_gpu(
                self._slowness, spacing, star.forward, rule, dtype
            )
        else:
            self._weights = cuda.device_array((1, 1), dtype=dtype)
        self._kernels = near_far_kernels(int(rule), bool(precomputed), dtype.name)
        packed = np.uint64 if dtype == np.float32 else np.float64
        self._times = cuda.device_array(n_padded, dtype=packed)
        # The real grid leaves through these (cut out of the padded one on the device).
        self._times_real = cuda.device_array((1, *layout.shape), dtype=packed)
        self._predecessor_real = cuda.device_array((1, *layout.shape), star.predecessor_dtype)
        # Every node enters a near frontier at most once per step and a far pile at most
        # once per bucket (the stamps), so n_real entries bound each of them.
        self._near = cuda.device_array((2, self.n_real), dtype=np.int32)
        self._far = cuda.device_array((3, self.n_real), dtype=np.int32)
        self._near_stamp = cuda.device_array(n_padded, dtype=np.int32)
        self._far_stamp = cuda.device_array(n_padded, dtype=np.int32)
        self._control = cuda.device_array(CONTROL_SIZE, dtype=np.int64)
        if blocks is None:
            blocks = _default_blocks(threads)
        self.blocks = max(1, min(blocks, -(-self.n_real * star.size // threads)))
        # A safety net that turns a bug into an error instead of a hang: every relax step
        # relaxes at least one node that improved, and a node seldom improves more than a
        # few times, so real solves stay far below this.
        self._max_relax_steps = 4 * self.n_real * star.size + 64
        cuda.synchronize()
        self.setup_s = time.perf_counter() - clock

    def solve(
        self,
        seeds,
        *,
        targets: np.ndarray | None = None,
        predecessors: bool = True,
        stats: list | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Traveltimes and predecessors of several sources, one after another.

        Parameters
        ----------
        seeds : sequence of (seed_nodes, seed_times)
            One pair per source: flat real indices (int64) and their times (s, ``>= 0``).
        targets : numpy.ndarray of int64, optional
            Flat real indices of receivers: stop once all of them are settled. Other nodes
            may then hold upper bounds or ``inf`` (as with the CPU Dijkstra's
            ``target_nodes``).
        predecessors : bool, default True
            Also return the predecessors; ``False`` returns ``None`` for them and, in
            float64, skips the pull pass that recovers them.
        stats : list, optional
            Appended with one dict per source: ``steps`` launched, ``relax_steps``,
            ``buckets``, ``edges`` (edge relaxations attempted) and ``delta``.

        Returns
        -------
        times : numpy.ndarray, shape (S, nz * ny * nx), dtype
        predecessor : numpy.ndarray, shape (S, nz * ny * nx), or None
            The previous node of ``v`` is ``v - star.offsets[predecessor[v]]``; ``-1`` for
            seeds and unreached nodes.
        """
        sources = [checked_seeds(nodes, times, self.n_real, self.dtype) for nodes, times in seeds]
        if any(not len(nodes) for nodes, _ in sources):
            raise ValueError("each source needs at least one seed")
        if targets is None or len(targets) == 0:
            targets_d, n_targets = cuda.to_device(np.zeros(1, dtype=np.int64)), 0
        else:
            targets = np.unique(np.asarray(targets, dtype=np.int64))
            if targets.min() < 0 or targets.max() >= self.n_real:
                raise ValueError(f"target nodes must be in [0, {self.n_real})")
            n_targets = targets.size
            targets_d = cuda.to_device(self.layout.padded_flat(targets).astype(np.int64))
        out_times = np.empty((len(sources), self.n_real), dtype=self.dtype)
        out_predecessor = None
        if predecessors:
            out_predecessor = np.empty((len(sources), self.n_real), self.star.predecessor_dtype)
        with self._lock:
            for s, (seed_nodes, seed_times) in enumerate(sources):
                found = self._search(seed_nodes, seed_times, targets_d, n_targets)
                if stats is not None:
                    stats.append(found)
                self._copy_back(s, out_times, out_predecessor)
        return out_times, out_predecessor

    def _search(self, seed_nodes, seed_times, targets_d, n_targets) -> dict:
        """One source's search, left in the device state; its statistics."""
        kernels, threads, delta = self._kernels, self.threads, self.delta
        n_padded = self._times.shape[0]
        control = self._control
        frontiers = (self._near, self._far, self._near_stamp, self._far_stamp)
        kernels["reset"][-(-max(n_padded, CONTROL_SIZE) // threads), threads](
            self._times, self._near_stamp, self._far_stamp, control
        )
        first = float(seed_times.min()) + delta
        bounds = cuda.to_device(np.array([first, first + delta, np.inf]))
        kernels["seed"][-(-seed_nodes.size // threads), threads](
            self._times,
            cuda.to_device(self.layout.padded_flat(seed_nodes).astype(np.int64)),
            cuda.to_device(seed_times),
            bounds,
            *frontiers,
            control,
        )
        arguments = (
            0, control, bounds, self._times, *frontiers, self._slowness, self._spacing,
            *self._tables, self._weights, targets_d, n_targets, delta,
        )  # fmt: skip
        step = prepared_launch(kernels["step"], self.blocks, threads, arguments, variable=0)
        n = 0
        while True:
            # Launch a batch of steps, then one host read: steps after the end are no-ops.
            for _ in range(self.sync_every):
                step(n)
                n += 1
            state = control.copy_to_host()
            if state[DONE]:
                break
            if state[RELAX_STEPS] > self._max_relax_steps:
                raise RuntimeError(f"Near-Far did not converge in {n} steps (a bug)")
        return {
            "steps": n,
            "relax_steps": int(state[RELAX_STEPS]),
            "buckets": int(state[SPLITS]) + 1,
            "edges": int(state[EDGES]),
            "delta": float(delta),
        }

    def _copy_back(self, row: int, out_times: np.ndarray, out_predecessor) -> None:
        """The last search's times (and predecessors) into row ``row`` of the outputs; only
        the real grid crosses the bus."""
        layout, rows = self.layout, slice(row, row + 1)
        if self.dtype == np.float32:
            packed = np.empty((1, self.n_real), dtype=np.uint64)
            from_padded(layout, self._times, packed, self._times_real)
            out_times[rows] = (packed >> np.uint64(32)).astype(np.uint32).view(np.float32)
            if out_predecessor is not None:
                out_predecessor[rows] = (packed & np.uint64(0xFFFFFFFF)).astype(np.int64) - 1
            return
        from_padded(layout, self._times, out_times[rows], self._times_real)
        if out_predecessor is not None:
            padded_predecessor = recover_predecessors(
                layout, self._slowness, self.spacing, self.star, self._times, self.rule,
                self._weights if self.precomputed else None, threads=self.threads,
            )  # fmt: skip
            from_padded(layout, padded_predecessor, out_predecessor[rows], self._predecessor_real)


def near_far_device_bytes(
    layout: PaddedLayout, star: Star, *, precomputed: bool = False, dtype: type = np.float64
) -> int:
    """Device memory a :class:`NearFarSolver` on ``layout`` holds (as its constructor
    allocates it), checked before it allocates any.

    Per padded node: the slowness (8 bytes), the time (8: a float64, or a float32 packed
    with its predecessor), two frontier stamps (4 each), precomputed, half the star's
    weights and, in float64, the predecessors a solve recovers after its search; per real
    node: two near and three far frontier slots (4 each) and one source's times and
    predecessors on their way out.
    """
    itemsize, predecessor = np.dtype(dtype).itemsize, star.predecessor_dtype.itemsize
    padded = int(np.prod(layout.padded, dtype=np.int64))
    nodes = int(np.prod(layout.shape, dtype=np.int64))
    weights = padded * star.forward.shape[0] if precomputed else 1
    tables = star.offsets.shape[0] * (24 + 8 + 8 + 1)  # offsets, steps, half, is_forward
    # In float64 a solve recovers the predecessors in a pass of its own, with its own tables.
    recovered = padded * predecessor + tables + itemsize if np.dtype(dtype) == np.float64 else 0
    return (
        padded * (8 + 8 + 4 + 4)
        + weights * itemsize
        + recovered
        + nodes * (5 * 4 + 8 + predecessor)
        + 8 * CONTROL_SIZE
        + tables
    )


def solve_near_far(
    slowness: np.ndarray,
    spacing: np.ndarray,
    star: Star,
    seeds: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    targets: np.ndarray | None = None,
    predecessors: bool = True,
    return_stats: bool = False,
    **settings: Any,
) -> tuple:
    """Traveltimes and predecessors by Near-Far delta-stepping on the GPU, source by source:
    one :class:`NearFarSolver` (``settings``: its keyword arguments), used once.

    ``targets`` and ``predecessors`` are :meth:`NearFarSolver.solve`'s; with
    ``return_stats`` a third value, the list of each source's statistics, is returned.
    """
    solver = NearFarSolver(slowness, spacing, star, **settings)
    stats: list = []
    times, predecessor = solver.solve(
        seeds, targets=targets, predecessors=predecessors, stats=stats
    )
    if return_stats:
        return times, predecessor, stats
    return times, predecessor


def _default_launch() -> tuple[int, int]:
    """Threads per block and steps per host read: 128 and 32 on a GPU.

    Under the simulator every thread is a Python thread started anew for each launch, and
    the steps launched after the search ends (up to ``sync_every - 1``) still start them
    all: 32 threads and 4 steps a read run the same kernels with a few thousand threads a
    search instead of tens of thousands.
    """
    return (32, 4) if simulating() else (128, 32)


def _default_blocks(threads: int) -> int:
    """Blocks that fill the device for grid-stride step kernels; a few in the simulator."""
    if simulating():
        return 4
    device = cuda.get_current_device()
    return int(device.MULTIPROCESSOR_COUNT) * max(1, 2048 // threads)
