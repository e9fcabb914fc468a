"""A model's Moser graph on the padded grid, prepared once and solved for many sources.

Everything the CPU Dijkstra derives from the model and the star, but not from a source: the
slownesses padded by the radius with dummy nodes, the flat step of every offset, the
crossing tables, the slowness floor of the edge lower bound and, optionally, precomputed
edge weights. A survey builds it once and sends it to every worker; each source's solve then
starts at the heap (:func:`raygrid.kernels.dijkstra_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .bounds import reach_lengths, slowness_floor
from .crossings import Crossings, star_crossings
from .layout import PaddedLayout, checked_slowness, flat_steps
from .rules import EXACT, checked_rule
from .star import Star

__all__ = ["MoserGraph", "moser_graph", "with_weights"]


@dataclass(frozen=True)
class MoserGraph:
    """The shortest-path graph of a model and forward star (Moser 1991), on the padded grid.

    Attributes
    ----------
    shape : tuple of int
        Real grid ``(nz, ny, nx)``.
    star : Star
    rule : int
        Weight rule of the crossing tables (:data:`raygrid.kernels.EXACT` or ``MEAN``).
    layout : PaddedLayout
        The padding (one tile): real node ``(i, j, k)`` sits at ``(i + rz, j + ry, k + rx)``.
    slowness : numpy.ndarray, float64, flat
        Padded slownesses, ``inf`` at the dummy nodes.
    interior : numpy.ndarray of int64
        Padded flat index of every real node, in real flat order.
    step : numpy.ndarray of int64
        Padded flat step of every star offset.
    crossings : Crossings
        Crossing tables with steps in the padded grid.
    floor : numpy.ndarray, float64, flat
        Smallest slowness within the radius of every padded node (the edge lower bound's
        factor, :mod:`raygrid.kernels.bounds`).
    reach : numpy.ndarray, float64
        Edge lengths shrunk so ``floor * reach`` never exceeds a weight.
    weights : numpy.ndarray or None
        From :func:`raygrid.kernels.precompute_weights`, or ``None`` for weights on the fly.
    unpadded : numpy.ndarray of int64
        Real flat index of every padded node (``-1`` at dummies); only with ``weights``.
    """

    shape: tuple[int, int, int]
    star: Star
    rule: int
    layout: PaddedLayout
    slowness: np.ndarray
    interior: np.ndarray
    step: np.ndarray
    crossings: Crossings
    floor: np.ndarray
    reach: np.ndarray
    weights: np.ndarray | None
    unpadded: np.ndarray

    @property
    def n_nodes(self) -> int:
        """Real nodes."""
        return int(np.prod(self.shape))


def moser_graph(
    slowness: np.ndarray,
    spacing: np.ndarray,
    star: Star,
    rule: int = EXACT,
    weights: np.ndarray | None = None,
) -> MoserGraph:
    """Prepare a model's graph for :func:`raygrid.kernels.dijkstra_graph`.

    Parameters
    ----------
    slowness : numpy.ndarray, shape (nz, ny, nx)
        Cell slownesses (s/m), all finite and positive.
    spacing : numpy.ndarray, shape (3,)
        Node spacing ``(hz, hy, hx)`` (m).
    star : Star
    rule : int
        :data:`raygrid.kernels.EXACT` or ``MEAN`` (or ``"exact"``, ``"mean"``); unused by a
        solve given ``weights`` (still checked).
    weights : numpy.ndarray, optional
        From :func:`raygrid.kernels.precompute_weights` for the same model, star and rule,
        in the solve's precision.

    Raises
    ------
    ValueError
        If a slowness is not finite and positive
        (:func:`~raygrid.kernels.layout.checked_slowness`), or the spacing or rule is not
        one the solvers take (:func:`~raygrid.kernels.star_crossings`).

    Returns
    -------
    MoserGraph
        About ``3 * 8`` bytes a node (padded slowness, floor, interior index), plus the
        weights and 8 bytes a node for their index when given.
    """
    slowness = checked_slowness(slowness)
    rule = checked_rule(rule)  # (a name kept as the code the solvers compare with)
    shape = tuple(int(n) for n in slowness.shape)
    layout = PaddedLayout.unblocked(shape, star.radius)
    padded = layout.padded
    padded_slowness = layout.pad(slowness, np.inf)
    interior = layout.interior_flat()
    crossings = star_crossings(star, spacing, rule, padded)
    step = flat_steps(star.offsets, padded)
    graph = MoserGraph(
        shape=shape,
        star=star,
        rule=rule,
        layout=layout,
        slowness=padded_slowness.reshape(-1),
        interior=interior,
        step=step,
        crossings=crossings,
        floor=slowness_floor(padded_slowness, star.radius).reshape(-1),
        reach=reach_lengths(crossings.length),
        weights=None,
        unpadded=np.empty(0, dtype=np.int64),
    )
    return graph if weights is None else with_weights(graph, weights)


def with_weights(graph: MoserGraph, weights: np.ndarray) -> MoserGraph:
    """``graph`` solving with precomputed ``weights`` (e.g. from
    :func:`raygrid.kernels.graph_weights` of the same graph) instead of on the fly.

    Parameters
    ----------
    graph : MoserGraph
        The prepared graph; it is not changed.
    weights : numpy.ndarray, shape (n_nodes, n_forward_offsets)
        One weight per undirected edge, at its lower node (docs/method.md section 1,
        "Weights: precomputed or on the fly").

    Returns
    -------
    MoserGraph
        A copy holding ``weights``, for :func:`~raygrid.kernels.dijkstra_graph`.

    Raises
    ------
    ValueError
        If ``weights`` does not have a row per node and a column per forward offset.
    """
    n_forward = graph.star.forward.shape[0]
    if weights.shape != (graph.n_nodes, n_forward):
        raise ValueError(
            f"weights of shape {weights.shape} do not fit this model and star "
            f"({graph.n_nodes} nodes, {n_forward} forward offsets)"
        )
    unpadded = np.full(graph.slowness.size, -1, dtype=np.int64)
    unpadded[graph.interior] = np.arange(graph.n_nodes)
    return replace(graph, weights=weights, unpadded=unpadded)
