"""raygrid.kernels: numeric kernels only (no Dask, no xarray, no I/O).

Arrays and numbers in, arrays out. Grids are 3D ``(nz, ny, nx)``; a 2D model is a grid with
``ny == 1`` and zero radius along ``y``.
"""

from .cpu import (
    dijkstra,
    dijkstra_graph,
    graph_weights,
    mean_slowness_time_cpu,
    precompute_weights,
    segment_time_cpu,
)
from .crossings import Crossings, star_crossings
from .graph import MoserGraph, moser_graph, with_weights
from .layout import PaddedLayout
from .legs import best_last_legs, legs_to_node, node_leg_times, point_box, point_leg_times
from .paths import walk_paths
from .rules import EXACT, MEAN, WEIGHT_RULES
from .segment import mean_slowness_time, segment_time
from .star import Star, forward_star, star_offsets

__all__ = [
    "Crossings",
    "EXACT",
    "MEAN",
    "MoserGraph",
    "PaddedLayout",
    "WEIGHT_RULES",
    "Star",
    "best_last_legs",
    "dijkstra",
    "dijkstra_graph",
    "forward_star",
    "graph_weights",
    "mean_slowness_time",
    "mean_slowness_time_cpu",
    "moser_graph",
    "node_leg_times",
    "point_box",
    "point_leg_times",
    "legs_to_node",
    "precompute_weights",
    "segment_time",
    "segment_time_cpu",
    "star_crossings",
    "star_offsets",
    "walk_paths",
    "with_weights",
]
