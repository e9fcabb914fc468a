"""A binary min-heap of ``(time, node)`` pairs in two flat arrays, for Numba.

Lazy deletion: a node is pushed again whenever its time improves and stale entries are
skipped when popped, so no position index is kept (the sequential baseline of both GPU
papers; Monsegny & Agudelo 2013, section 2).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["heap_push", "heap_pop", "heap_new", "heap_grow"]


@numba.njit(cache=True)
def heap_new(capacity, key_like):
    """Empty heap storage with room for ``capacity`` entries; keys of ``key_like``'s type."""
    keys = np.empty(max(capacity, 16), dtype=key_like.dtype)
    nodes = np.empty(max(capacity, 16), dtype=np.int64)
    return keys, nodes


@numba.njit(cache=True)
def heap_grow(keys, nodes):
    """Twice the room, same entries: pushes can exceed the node count (lazy deletion)."""
    grown_keys = np.empty(2 * keys.shape[0], dtype=keys.dtype)
    grown_nodes = np.empty(2 * nodes.shape[0], dtype=nodes.dtype)
    grown_keys[: keys.shape[0]] = keys
    grown_nodes[: nodes.shape[0]] = nodes
    return grown_keys, grown_nodes


# inline="always" and scalar results: in the hot loop, a call that returns arrays costs
# reference counting on every push and pop (about 30 % of a solve).
@numba.njit(cache=True, inline="always")
def heap_push(keys, nodes, size, key, node):
    """Push ``(key, node)``; returns the new size. The caller grows full storage first."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] <= key:
            break
        keys[i] = keys[parent]
        nodes[i] = nodes[parent]
        i = parent
    keys[i] = key
    nodes[i] = node
    return size + 1


@numba.njit(cache=True, inline="always")
def heap_pop(keys, nodes, size):
    """Remove the smallest entry; returns ``(key, node, new_size)``. ``size`` must be > 0."""
    top_key = keys[0]
    top_node = nodes[0]
    size -= 1
    last_key = keys[size]
    last_node = nodes[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and keys[child + 1] < keys[child]:
            child += 1
        if keys[child] >= last_key:
            break
        keys[i] = keys[child]
        nodes[i] = nodes[child]
        i = child
    keys[i] = last_key
    nodes[i] = last_node
    return top_key, top_node, size
