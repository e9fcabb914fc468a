"""The cell-crossing edge weight: exact cases, symmetry, and a quadrature cross-check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raygrid.kernels import mean_slowness_time_cpu, segment_time_cpu


def quadrature(slowness, p, q, h, samples=200_000):
    """Midpoint rule along the segment: slow, approximate and obviously right."""
    p, q, h = map(np.asarray, (p, q, h))
    lam = (np.arange(samples) + 0.5) / samples
    points = p + lam[:, None] * (q - p)
    cells = np.floor(points + 0.5).astype(int)
    length = np.linalg.norm((q - p) * h)
    return slowness[cells[:, 0], cells[:, 1], cells[:, 2]].sum() * length / samples


def test_constant_slowness_is_slowness_times_length():
    slowness = np.full((6, 5, 7), 0.25)
    t = segment_time_cpu(slowness, 0.0, 0.0, 0.0, 5.0, 3.0, 6.0, 2.0, 3.0, 0.5)
    assert t == pytest.approx(0.25 * np.sqrt(10.0**2 + 9.0**2 + 3.0**2), rel=1e-15)


def test_axis_segment_splits_at_the_face():
    slowness = np.array([[[1.0, 3.0]]])
    assert segment_time_cpu(slowness, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0) == 4.0


def test_diagonal_through_a_corner_avoids_the_side_cells():
    # Node (0,0) -> (1,1) crosses both faces at lambda = 1/2: only the end cells count.
    slowness = np.array([[[1.0, 100.0]], [[100.0, 3.0]]]).reshape(2, 1, 2)
    t = segment_time_cpu(slowness, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0)
    assert t == pytest.approx(2.0 * np.sqrt(2.0), rel=1e-15)


def test_mean_rule():
    slowness = np.array([[[1.0, 3.0, 5.0]]])
    assert mean_slowness_time_cpu(slowness, 0, 0, 0, 0, 0, 2, 1.0, 1.0, 2.0) == 12.0


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    p=st.tuples(*(st.floats(0, 4) for _ in range(3))),
    q=st.tuples(*(st.floats(0, 4) for _ in range(3))),
)
def test_symmetric_bitwise_and_matches_quadrature(seed, p, q):
    rng = np.random.default_rng(seed)
    slowness = rng.uniform(0.1, 2.0, (5, 5, 5))
    h = (1.5, 0.5, 1.0)
    forward = segment_time_cpu(slowness, *p, *q, *h)
    backward = segment_time_cpu(slowness, *q, *p, *h)
    assert forward == backward  # bitwise, not approximately
    length = np.linalg.norm((np.subtract(q, p)) * h)
    # The midpoint rule misplaces at most one sample per crossing.
    assert forward == pytest.approx(quadrature(slowness, p, q, h), abs=2e-4 * max(length, 1e-9))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    u=st.tuples(*(st.integers(0, 6) for _ in range(3))),
    v=st.tuples(*(st.integers(0, 6) for _ in range(3))),
)
def test_node_to_node_symmetric_bitwise(seed, u, v):
    rng = np.random.default_rng(seed)
    slowness = rng.uniform(0.1, 2.0, (7, 7, 7))
    h = (0.3, 0.7, 1.1)
    uf, vf = tuple(map(float, u)), tuple(map(float, v))
    assert segment_time_cpu(slowness, *uf, *vf, *h) == segment_time_cpu(slowness, *vf, *uf, *h)
    assert mean_slowness_time_cpu(slowness, *u, *v, *h) == mean_slowness_time_cpu(
        slowness, *v, *u, *h
    )
