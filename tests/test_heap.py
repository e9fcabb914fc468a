"""The indexed 4-ary heap: pops come out in key order, lowering a key moves the node's one
entry, and the position index always tells where each node is."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from raygrid.kernels.heap import ARITY, heap_grow, heap_lower, heap_new, heap_pop


def check_index(keys, nodes, position, size):
    for i in range(size):
        assert position[nodes[i]] == i
        if i:
            assert keys[(i - 1) // ARITY] <= keys[i]
    assert np.count_nonzero(position >= 0) == size


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 19), st.floats(0, 100), st.booleans()), max_size=80))
def test_heap_matches_a_dictionary(operations):
    keys, nodes = heap_new(1, np.zeros(1))
    position = np.full(20, -1, dtype=np.int32)
    size = 0
    current = {}  # node -> key, the reference
    for node, key, pop in operations:
        if pop and size:
            key_out, node_out, size = heap_pop(keys, nodes, position, size)
            assert key_out == min(current.values())
            assert current.pop(node_out) == key_out
        elif node not in current or key <= current[node]:
            if size == keys.shape[0]:
                keys, nodes = heap_grow(keys, nodes)
            size = heap_lower(keys, nodes, position, size, key, node)
            current[node] = key
        check_index(keys, nodes, position, size)
    assert size == len(current)
