"""A device work queue of tiles, relaxed in phases of a time band (the ``phases`` schedule).

The launch-per-pass schedule of :mod:`raygrid.kernels.cuda.pull` ends every pass with a
barrier: a pass lasts as long as its slowest tile, and a tile notified during a pass waits
for the next launch (on an H100, SMs were active only 43 % of a pass). Here blocks stay
resident and take the next queued tile as soon as they finish one. Delta-stepping
(Meyer & Sanders 2003) over tiles survives as *phases*: a phase relaxes, in any order and as
soon as they are notified, the tiles whose pending time lies below its threshold (``near``);
later tiles go to a ``far`` list, and the next phase's threshold is the smallest far time
plus ``delta``. The barrier is paid once per phase (about ``T / delta`` of them, ``T`` the
largest time) instead of once per pass.

Each tile has a state, changed only by atomics, so that one block at most relaxes a tile at
a time and no notification is lost:

- ``IDLE`` -> ``NEAR`` (queued in the ring) or ``FAR`` (in the far list) when notified;
- ``NEAR`` -> ``RUNNING`` when a block takes it;
- ``RUNNING`` -> ``DIRTY`` when notified while running (its neighbours wrote after it may
  have loaded their times);
- ``RUNNING`` -> ``IDLE`` when its block finishes, or ``DIRTY`` -> ``NEAR``/``FAR`` (it
  must run again);
- ``FAR`` -> ``NEAR`` when notified below the threshold, or promoted at the next phase.

A phase's kernel ends when no tile is queued or running (``OUTSTANDING``, incremented
before a tile is queued and decremented after its relaxation has notified its neighbours,
reaches zero: only a running tile queues new ones). The queue is a bounded ring of
``(index << 32 | tile)`` slots. A slot free for the writer of index ``i`` holds
``(i << 32) | FREE`` (:func:`free_slot`): a writer waits for its own lap's tag, not for any
free slot, so a writer of a later lap can never take the slot of one still waiting (which
would leave that writer and the reader of its index stuck); a reader waits for its own
index, so a slow reader never takes a later entry (the standard bounded-queue scheme).

Ordering (the PTX memory model; Numba's atomics are relaxed, so every ordering comes from
``cuda.threadfence``, a ``fence.sc.gpu``): every notifier writes its times, fences, then
changes the state; every taker changes the state, fences, then loads: a taker sees every
write whose notification found the tile queued, and a notification that finds the tile
running marks it dirty. A pusher fences between changing a tile's state and writing its
ring slot, and a taker fences between reading the slot and changing the state, so a
tile's NEAR lands before the RUNNING of the block that took it. A block whose tile was
marked dirty fences before it reads the tile's pending time. Spins read through atomics
(never a cached load) and give up after :data:`SPIN_LIMIT` rounds, or as soon as another
block gave up, setting ``ERROR`` for the host rather than hanging the device.
"""

from __future__ import annotations

import time
from functools import cache

import numpy as np
from numba import cuda

from .device import simulating

__all__ = [
    "IDLE", "NEAR", "RUNNING", "DIRTY", "FAR",
    "HEAD", "TAIL", "OUTSTANDING", "EXITED", "FAR_COUNT", "ERROR", "CONTROL_SIZE",
    "notify_phase", "take_tile", "next_tile", "finish_tile", "end_phase", "promote_kernel", "FREE",
    "free_slot", "first_phase",
]  # fmt: skip

# Tile states.
IDLE, NEAR, RUNNING, DIRTY, FAR = 0, 1, 2, 3, 4
# Slots of the int32 control array.
HEAD, TAIL, OUTSTANDING, EXITED, FAR_COUNT, ERROR = 0, 1, 2, 3, 4, 6
CONTROL_SIZE = 8
#: The low word of a free ring slot (no tile has this number).
FREE = 0xFFFFFFFF
#: Rounds a block waits (for a ring slot or for work) before it declares the queue stuck:
#: with the back-off below, a few seconds (a stall then costs a GPU session little).
SPIN_LIMIT = 1 << 20
_LOW = np.int64(FREE)

if simulating():

    @cuda.jit(device=True, inline="always")
    def _pause(rounds):
        time.sleep(0)  # the simulator has no nanosleep: let another thread run

    @cuda.jit(device=True, inline="always")
    def _read(array, index):
        # The simulator guards each kind of atomic with its own lock, so an atomic add of
        # zero could write back a value over a concurrent compare-and-swap; a plain read
        # is atomic under the GIL.
        return array[index]

else:

    @cuda.jit(device=True, inline="always")
    def _pause(rounds):
        # Back off from the contended counters (an idle block polls the words every busy
        # block's pushes and takes hit): 32 ns doubling to about 4 us, against tens of
        # microseconds for a tile's relaxation.
        cuda.nanosleep(np.uint32(32 << min(rounds, 7)))

    @cuda.jit(device=True, inline="always")
    def _read(array, index):
        # A coherent read of a value other blocks change (an atomic reads L2, never a stale
        # L1 line, and the compiler cannot hoist it out of a spin).
        return cuda.atomic.add(array, index, 0)


@cuda.jit(device=True, inline="always")
def free_slot(index):
    """The value of a ring slot free for the writer of ``index``."""
    return (np.int64(index) << 32) | _LOW


@cuda.jit(device=True, inline="always")
def _push_near(tile, near, control):
    # The caller's change of the tile's state lands before the entry can be read.
    cuda.threadfence()
    # Counted before it is queued, so OUTSTANDING never reads zero while a tile waits.
    cuda.atomic.add(control, OUTSTANDING, 1)
    index = cuda.atomic.add(control, TAIL, 1)
    slot = index % near.shape[0]
    entry = (np.int64(index) << 32) | np.int64(tile)
    free = free_slot(index)
    rounds = 0
    # The slot is this writer's once the reader of the entry one lap earlier has taken it
    # and tagged it free for this index.
    while cuda.atomic.cas(near, slot, free, entry) != free:
        rounds += 1
        if rounds > SPIN_LIMIT or _read(control, ERROR) != 0:
            control[ERROR] = 1
            return
        _pause(rounds)


@cuda.jit(device=True, inline="always")
def _push_far(tile, value, phase, far, far_mark, control, bounds, relaxed):
    # Into the next phase's far list, once per phase (the mark), keyed by its pending time.
    parity = (phase + 1) % 2
    cuda.atomic.min(bounds, parity, value)
    if cuda.atomic.exch(far_mark, tile, phase + 1) != phase + 1:
        index = cuda.atomic.add(control, FAR_COUNT + parity, 1)
        far[parity, index] = tile
        cuda.atomic.add(relaxed, 4, 1)


@cuda.jit(device=True, inline="always")
def notify_phase(tile, value, phase, worklist):
    """Tile ``tile`` must pull again from a change whose smallest time is ``value``.

    Called after the caller's writes and a fence (see the module docstring)."""
    pending, state, near, far, far_mark, control, bounds, threshold, relaxed = worklist
    cuda.atomic.min(pending, tile, value)
    cuda.threadfence()
    while True:
        current = _read(state, tile)
        if current == IDLE:
            if value <= threshold:
                if cuda.atomic.cas(state, tile, IDLE, NEAR) == IDLE:
                    _push_near(tile, near, control)
                    return
            elif cuda.atomic.cas(state, tile, IDLE, FAR) == IDLE:
                _push_far(tile, value, phase, far, far_mark, control, bounds, relaxed)
                return
        elif current == RUNNING:
            if cuda.atomic.cas(state, tile, RUNNING, DIRTY) == RUNNING:
                return
        elif current == FAR:
            if value <= threshold:
                if cuda.atomic.cas(state, tile, FAR, NEAR) == FAR:
                    _push_near(tile, near, control)  # its far entry is skipped later
                    return
            else:
                _push_far(tile, value, phase, far, far_mark, control, bounds, relaxed)
                return
        else:
            return  # NEAR or DIRTY: it will run, after this write


@cuda.jit(device=True, inline="always")
def take_tile(near, state, pending, control, rounds, stalled):
    """For one thread of a block: ``(tile, head)``, the next queued tile (now ``RUNNING``),
    ``-1`` to try again, or ``-2`` when the phase is over (nothing queued or running) or
    stuck; ``head`` the queue's head as read. ``rounds`` counts this block's polls without
    a tile (its back-off), ``stalled`` the polls in which no block took one (the bound: a
    block idle while others work is not stuck, however long the phase)."""
    if _read(control, ERROR) != 0:
        return -2, -1
    head = _read(control, HEAD)
    if head < _read(control, TAIL):
        if cuda.atomic.cas(control, HEAD, head, head + 1) != head:
            return -1, head  # another block took it
        slot = head % near.shape[0]
        waited = 0
        while True:
            entry = _read(near, slot)
            if (entry >> 32) == head and (entry & _LOW) != _LOW:
                break
            waited += 1  # its writer has claimed the index but not yet written the slot
            if waited > SPIN_LIMIT or _read(control, ERROR) != 0:
                control[ERROR] = 1
                return -2, head
            _pause(waited)
        # The pusher's change of the state (before its fence) lands before this block's.
        cuda.threadfence()
        cuda.atomic.exch(near, slot, free_slot(head + near.shape[0]))
        tile = entry & _LOW
        cuda.atomic.exch(state, tile, RUNNING)
        cuda.threadfence()
        # Consumed; a notification racing with this finds the tile RUNNING and marks it
        # DIRTY, so its value is never needed. (An atomic, not a plain store racing with
        # the notifiers' atomic min; float atomic exchange is missing in numba-cuda.)
        cuda.atomic.max(pending, tile, np.inf)
        cuda.threadfence()
        return tile, head
    if _read(control, OUTSTANDING) == 0:
        return -2, head
    if stalled > SPIN_LIMIT:
        control[ERROR] = 1
        return -2, head
    _pause(rounds)
    return -1, head


@cuda.jit(device=True, inline="always")
def next_tile(near, state, pending, control, rounds, stalled, seen):
    """:func:`take_tile` for the thread of a block that polls the queue, its counts kept:
    ``(tile, rounds, stalled, seen)``, to pass back at the next poll (start from
    ``0, 0, -1``). ``rounds`` counts the block's polls without a tile (its back-off),
    ``stalled`` the polls in which no block took one (the stall bound: a block idle while
    others work is not stuck, however long the phase), ``seen`` the queue's head."""
    tile, head = take_tile(near, state, pending, control, rounds, stalled)
    rounds = 0 if tile >= 0 else rounds + 1
    stalled = 0 if tile >= 0 or head != seen else stalled + 1
    return tile, rounds, stalled, head


@cuda.jit(device=True, inline="always")
def finish_tile(tile, phase, worklist):
    """For one thread, after the block's relaxation of ``tile`` has notified its neighbours:
    release it, or queue it again if it was notified while running."""
    pending, state, near, far, far_mark, control, bounds, threshold, relaxed = worklist
    cuda.threadfence()
    if cuda.atomic.cas(state, tile, RUNNING, IDLE) != RUNNING:
        # DIRTY: only this thread changes it now. The fence: the notifier whose CAS set
        # DIRTY lowered the pending time before its fence, which this read sees. A later
        # notifier that found DIRTY and returned may not be seen yet: the tile may then go
        # to the far list though its time is near, and runs one phase late, with the same
        # floats (a fixed point of the relaxations). An infinite value means the
        # notification raced with the reset in take_tile: run it in this phase.
        cuda.threadfence()
        value = _read(pending, tile)
        if value <= threshold or value == np.inf:
            cuda.atomic.exch(state, tile, NEAR)
            _push_near(tile, near, control)
        else:
            cuda.atomic.exch(state, tile, FAR)
            _push_far(tile, value, phase, far, far_mark, control, bounds, relaxed)
    cuda.atomic.add(control, OUTSTANDING, -1)


@cuda.jit(device=True, inline="always")
def end_phase(phase, control, bounds):
    """For one thread of each block, as it leaves the phase: the last one out clears the
    far list this phase consumed, for the phase after next."""
    cuda.threadfence()
    if cuda.atomic.add(control, EXITED, 1) == cuda.gridDim.x - 1:
        control[FAR_COUNT + phase % 2] = 0
        bounds[phase % 2] = np.inf
        control[EXITED] = 0


def first_phase(pending: np.ndarray) -> tuple[np.ndarray, ...]:
    """Host arrays of a queue whose tiles with a finite ``pending`` time wait in phase 0's
    far list: ``(pending, state, near, far, far_mark, control, bounds)``, in the order the
    kernels take them. The ring has one slot per tile and one more: a tile is queued at
    most once at a time."""
    n_tiles = len(pending)
    first = np.flatnonzero(np.isfinite(pending)).astype(np.int32)
    state = np.full(n_tiles, IDLE, dtype=np.int32)
    state[first] = FAR
    far = np.zeros((2, n_tiles), dtype=np.int32)
    far[0, : len(first)] = first
    far_mark = np.full(n_tiles, -1, dtype=np.int32)
    far_mark[first] = 0
    control = np.zeros(CONTROL_SIZE, dtype=np.int32)
    control[FAR_COUNT] = len(first)
    bounds = np.array([pending.min(initial=np.inf), np.inf])
    # Slot i is free for the writer of index i (the first lap).
    near = (np.arange(n_tiles + 1, dtype=np.int64) << 32) | FREE
    return np.asarray(pending, np.float64), state, near, far, far_mark, control, bounds


@cache
def promote_kernel():
    """The kernel that opens phase ``phase``: far tiles within ``delta`` of the smallest far
    time are queued, the others carried over to the next far list."""

    def promote(pending, state, near, far, far_mark, control, bounds, relaxed, delta, phase):
        i = cuda.grid(1)
        parity = phase % 2
        if i >= control[FAR_COUNT + parity] or control[ERROR] != 0:
            return  # (after a stall the ring may be left full: the host raises)
        threshold = bounds[parity] + delta
        tile = far[parity, i]
        if state[tile] != FAR:
            return  # queued by a notification since; its entry here is stale
        value = pending[tile]
        if value <= threshold:
            state[tile] = NEAR
            _push_near(tile, near, control)
        else:
            _push_far(tile, value, phase, far, far_mark, control, bounds, relaxed)

    return cuda.jit(promote)
