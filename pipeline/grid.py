"""Velocity models as grids: validation, units, and the map between coordinates and nodes.

Everything that has a name, a unit or a coordinate is resolved here once, so the kernels see
only a 3D slowness array in s/m and a spacing in m (docs/method.md section 3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr

from ..kernels import (
    best_last_legs,
    forward_star,
    legs_to_node,
    point_box,
    point_leg_times,
    segment_time_cpu,
)
from ..kernels.layout import flat_steps
from ..kernels.place import SNAP_TOL, half_ulp, place_along
from . import modelcheck
from .errors import (
    Z_IS_DEPTH,
    InputError,
    other_case,
)
from .modelcheck import (
    LENGTH_UNITS,
    SPEED_UNITS,
    bad_values,
    check_axis,
    check_extent,
    dims_hint,
    known_unit,
    unit_size,
    warn_elevation,
)
from .nodevalues import NodeValues

__all__ = ["Grid", "grid_from_velocity", "recorded_source", "solved_grid"]

DIMS_2D = ("z", "x")
DIMS_3D = ("z", "y", "x")

#: Ratio of the forward star's longest to shortest reach (radius times spacing, per axis)
#: from which a solve warns that times along the short axis come out late
#: (:meth:`Grid.lopsided_star`).
LOPSIDED_REACH = 2.0

#: How many times the radius-3 star's offsets (in the model's dims: 32 in 2D, 290 in 3D) a
#: star may hold before a solve warns of its cost (:meth:`Grid.costly_star`): 3D radius 8
#: or more (4,034 offsets), 2D radius 11 or more (336).
COSTLY_STAR = 10.0
#: How far apart, in radii on every axis, the nearest nodes of a source and a point may be
#: for the straight leg between them to count (:meth:`Grid.direct_leg`): the zone where
#: their forward-star boxes overlap. Part of every store's fingerprint.
DIRECT_REACH = 2
#: How far apart (relative) two models' :meth:`Grid.model_check` may be and still count as
#: one: the same values stored in km/s and in m/s, or in float32 and float64.
MODEL_CHECK_RTOL = 1e-6
#: How far (relative) a field's time at a node its source seeds may exceed the straight leg
#: there (:meth:`Grid.located_source`): float32 rounding of the seed, with room.
SOURCE_RTOL = 1e-6


@dataclass(frozen=True)
class Grid:
    """A validated velocity model, ready for the kernels.

    Attributes
    ----------
    dims : tuple of str
        ``("z", "x")`` or ``("z", "y", "x")``.
    coords : dict
        The coordinate values along each dim, in the model's length unit.
    origin, spacing : tuple of float
        First coordinate and node spacing along each dim, in the model's length unit.
    length_unit : str
        Unit of the coordinates (``"m"`` or ``"km"``, ...).
    metres_per_unit : float
    slowness : numpy.ndarray, shape (nz, ny, nx), float64, or None
        Slowness in s/m, always 3D (``ny == 1`` for 2D models); ``None`` for a grid
        validated without loading its values (``grid_from_velocity(..., load=False)``).
    velocity : xarray.DataArray
        The model in canonical dim order, as given (possibly lazy).
    speed_factor : float
        m/s per unit of the velocity values.
    rounding : tuple of float
        Machine epsilon of each dim's stored coordinate type (float32's in many NetCDF
        files, 0 for integers).
    deviation : tuple of float
        How far each dim's stored coordinates lie from the uniform grid read from their
        ends (the rounding a float32 ``arange`` gathers). A point within half a unit in the
        last place of a node's stored coordinate, plus twice this, is on the node (and so
        at the model's edges).
    """

    dims: tuple[str, ...]
    coords: dict[str, np.ndarray]
    origin: tuple[float, ...]
    spacing: tuple[float, ...]
    length_unit: str
    metres_per_unit: float
    slowness: np.ndarray | None
    velocity: xr.DataArray
    speed_factor: float
    rounding: tuple[float, ...] = ()
    deviation: tuple[float, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        """Number of nodes along each dim."""
        return tuple(len(self.coords[d]) for d in self.dims)

    @property
    def shape3(self) -> tuple[int, int, int]:
        """Kernel grid shape ``(nz, ny, nx)`` (``ny == 1`` for 2D models)."""
        n = dict(zip(self.dims, self.shape))
        return (n["z"], n.get("y", 1), n["x"])

    def slowness_at(self, values: np.ndarray | da.Array) -> np.ndarray | da.Array:
        """Slowness (s/m, float64) of velocity values, value by value, in their shape.

        The one conversion every path uses (whole models, tiles of a lazy model as dask
        arrays, blocks read for legs): the tiled and plain solves equal each other bitwise
        only while they convert alike.
        """
        if isinstance(values, da.Array):
            return 1.0 / (values.astype(np.float64) * self.speed_factor)
        # In place on one float64 result: the same two roundings, without a second
        # model-sized temporary (a big cube's conversion peaked at twice its result), and
        # no copy first (the ufuncs cast to float64 exactly, as the copy did).
        # C order whatever the input's (a model stored (x, z) or Fortran-ordered): the
        # kernels take it as it is, not through a second, contiguous copy.
        if self.speed_factor == 1.0:  # m/s: v * 1.0 is v exactly, a pass saved (4 ms at 1601^2)
            return np.divide(1.0, values, dtype=np.float64, order="C")
        slowness = np.multiply(values, self.speed_factor, dtype=np.float64, order="C")
        return np.divide(1.0, slowness, out=slowness)

    def model_check(self) -> list[float]:
        """Three numbers that tell this model from another: the mean, a position-weighted
        mean and the root mean square of the slowness on a lattice of up to 17 nodes per
        axis (:data:`MODEL_CHECK_RTOL` apart at most for the same model).

        Recorded with every field solved on a model in memory (``model_check``) and
        compared where a field is read with a model given apart (``traveltime_at(...,
        velocity=)``): a Vs model given for a Vp table came out late by the ratio of the
        two, silently. Cheap (microseconds; a lazy model reads only the lattice), and
        blind to an edit between the lattice's nodes.
        """
        lattice = {
            d: np.unique(np.linspace(0, n - 1, min(n, 17)).round().astype(np.int64))
            for d, n in zip(self.dims, self.shape)
        }
        if self.slowness is not None:
            picked = [lattice.get(d, np.zeros(1, dtype=np.int64)) for d in ("z", "y", "x")]
            sample = self.slowness[np.ix_(*picked)]
        else:  # the same conversion as the loaded slowness: the same floats
            sample = self.slowness_of(np.asarray(self.velocity.isel(lattice).values))
        sample = sample.reshape(-1)
        weight = np.arange(1, sample.size + 1, dtype=np.float64)
        return [
            float(sample.mean()),
            float((sample * weight).sum() / weight.sum()),
            float(np.sqrt((sample * sample).mean())),
        ]

    def slowness_of(self, values: np.ndarray | da.Array) -> np.ndarray | da.Array:
        """Kernel slowness (s/m, 3D: a 2D model's gets ``ny == 1``) of velocity values cut
        from this model, contiguous in memory, or lazy for a dask array (a tile's)."""
        slowness = self.slowness_at(values)
        if len(self.dims) == 2:
            # A reshape, not a new axis (whose stride of 0 the solvers' checked_slowness
            # would otherwise have to make plain: raygrid.kernels.layout).
            slowness = slowness.reshape(slowness.shape[0], 1, slowness.shape[1])
        return slowness if isinstance(slowness, da.Array) else np.ascontiguousarray(slowness)

    def model_box(self, box: tuple[slice, slice, slice]) -> tuple[slice, ...]:
        """The model's own index of a box of the kernel grid ``(z, y, x)``: a 2D model has
        no ``y``."""
        return box if len(self.dims) == 3 else (box[0], box[2])

    def slowness_values(self, client: Any = None) -> NodeValues:
        """The slowness at nodes: in memory, or read from the lazy model block by block
        (cached, each block checked as it is read), for the legs of rays and receivers
        (:meth:`leg_times`)."""
        if self.slowness is not None:
            return NodeValues(self.slowness)
        return NodeValues(self.velocity.data, convert=self._checked_slowness, client=client)

    def _checked_slowness(self, values: np.ndarray, start: tuple[int, int, int]) -> np.ndarray:
        """:meth:`slowness_at` of a block read for legs (3D, its first node at kernel index
        ``start``), refusing bad velocities in it by where the first is."""
        bad = bad_values(values)
        count = int(np.count_nonzero(bad))
        if count:
            inside = np.unravel_index(int(bad.reshape(-1).argmax()), bad.shape)
            node = dict(zip(("z", "y", "x"), (s + int(i) for s, i in zip(start, inside))))
            where = ", ".join(f"{d}={self.coords[d][node[d]]:g}" for d in self.dims)
            raise InputError(
                f"velocity must be finite and positive: {count} bad value(s) (NaN, inf, zero, "
                "negative or subnormal) in the part of the model read for a leg; the first "
                f"found is {float(values[inside])!r} at {where}"
            )
        return self.slowness_at(values)

    @staticmethod
    def leg_box(point3: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The box ``low <= node < high`` of cells the straight legs from a point to ends
        (nodes, or other points) cross."""
        ends = np.asarray(ends, dtype=np.float64).reshape(-1, 3)
        low = np.floor(np.minimum(ends.min(axis=0), point3)).astype(np.int64)
        high = np.ceil(np.maximum(ends.max(axis=0), point3)).astype(np.int64) + 1
        return low, high

    def check_field(self, field: xr.DataArray, attrs: Mapping[str, Any]) -> None:
        """Refuse a traveltime field that was not solved on this grid, as it is.

        Its node positions and predecessors are read on this grid: a field of another
        model, or a subset of its own (thinned or cropped with ``isel``), gave times and
        rays of other places without a word. ``attrs`` are the field's (``nodes_<dim>``:
        how many nodes it was solved on; absent from results of earlier versions).

        Raises
        ------
        InputError
            For other dims or sizes, other coordinates, or fewer nodes than were solved.
        """
        dims = [d for d in field.dims if d != "source"]
        if sorted(dims) != sorted(self.dims) or any(
            field.sizes[d] != n for d, n in zip(self.dims, self.shape)
        ):
            raise InputError(
                f"the field's grid {dict(field.sizes)} is not the model's "
                f"{dict(zip(self.dims, self.shape))}"
            )
        solved = {d: int(attrs[f"nodes_{d}"]) for d in self.dims if f"nodes_{d}" in attrs}
        if any(n != field.sizes[d] for d, n in solved.items()):
            raise InputError(
                f"the field was solved on {solved} nodes and holds {dict(field.sizes)}: a "
                "thinned or cropped field's predecessors and times are read at other places; "
                "look up times and trace rays on the whole field, then select"
            )
        for d, ours in self.coords.items():
            if d not in field.coords:
                continue
            # The field's source position is in its own unit: the same unit, not only the
            # same places (the values then match to rounding at most).
            unit = field[d].attrs.get("units", self.length_unit)
            theirs = np.asarray(field[d].values, dtype=np.float64)
            step = self.spacing[self.dims.index(d)]
            # Compared by size: km and KM are one unit (a file's axes may spell it apart).
            if unit_size(unit, LENGTH_UNITS) != self.metres_per_unit or not np.allclose(
                theirs, ours, rtol=0.0, atol=1e-6 * step
            ):
                raise InputError(
                    f"the field's {d} coordinates ({theirs[0]:.6g} to {theirs[-1]:.6g} "
                    f"{unit}) are not the model's ({ours[0]:.6g} to {ours[-1]:.6g} "
                    f"{self.length_unit}): pass the model the field was solved on"
                )

    @staticmethod
    def on_node(point3: np.ndarray) -> bool:
        """Whether a point in node-index units (:meth:`to_index`, which snaps points within
        rounding of a node onto it) is a node: the one test of sources, receivers and legs."""
        return bool(Grid.on_nodes(point3)[0])

    @staticmethod
    def on_nodes(points3: np.ndarray) -> np.ndarray:
        """:meth:`on_node` of each of the points ``(k, 3)`` (or one point), as a mask."""
        points3 = np.asarray(points3, dtype=np.float64).reshape(-1, 3)
        return np.all(points3 == np.round(points3), axis=1)

    def reach_nodes(self, point3: np.ndarray, radius3: tuple[int, int, int]) -> np.ndarray:
        """The nodes ``(k, 3)`` a point is joined to: its node, or the forward-star box
        around the cell holding it (a source's seeds, a receiver's candidates for
        :meth:`last_leg`)."""
        if self.on_node(point3):
            return np.asarray(point3).astype(np.int64)[np.newaxis]
        return point_box(point3, radius3, self.shape3)

    def reach_box(
        self,
        point3: np.ndarray,
        radius3: tuple[int, int, int],
        source3: np.ndarray | None = None,
        exact: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The box ``low <= node < high`` that a point's time reads (:meth:`last_leg`): its
        node, or the forward-star box around its cell with the cells the legs cross, and
        those of the straight leg from the source when it is joined to it."""
        nodes = self.reach_nodes(point3, radius3)
        joined = source3 is not None and self.joined(source3, point3, radius3, exact)
        if self.on_node(point3) and not joined:
            return nodes[0], nodes[0] + 1
        if joined:
            return self.leg_box(point3, np.vstack([nodes, source3]))
        return self.leg_box(point3, nodes)

    def last_leg(
        self,
        times: NodeValues,
        point3: np.ndarray,
        radius3: tuple[int, int, int],
        slowness: NodeValues | None = None,
        source3: np.ndarray | None = None,
        exact: bool = True,
    ) -> tuple[np.ndarray | None, Any, float]:
        """What a point between nodes is reached from: ``(node, t(node), leg)``.

        The node ``n`` of the forward-star box around the point's cell minimising
        ``t(n) + leg(n, point)`` (docs/method.md section 3): the one rule behind a survey's
        receiver times, :func:`~raygrid.pipeline.traveltime_at` and a ray's last leg. Or
        ``(None, 0, leg)``: the straight leg from the source itself, when the two are
        joined (:meth:`direct_leg`) and it is faster.
        """
        box = self.reach_nodes(point3, radius3)
        legs = self.leg_times(point3, box, slowness)
        values = times.at(box)
        best = int(np.argmin(values + legs))
        found = (box[best], values[best], legs[best])
        return self._straight_if_faster(found, source3, point3, radius3, slowness, exact)

    def last_legs(
        self,
        times: NodeValues,
        points3: np.ndarray,
        radius3: tuple[int, int, int],
        slowness: NodeValues | None = None,
        source3: np.ndarray | None = None,
        exact: bool = True,
    ) -> list[tuple[np.ndarray | None, Any, float]]:
        """:meth:`last_leg` of each point (one on a node: ``(node, t(node), 0.0)``, or the
        straight leg from the source, joined and faster), for a
        survey's receivers, :func:`~raygrid.pipeline.traveltime_at` and rays alike.

        Lazy times or slowness (a tiled solve's) are read a cache-full of blocks at a time,
        each group's blocks in one round trip (:meth:`NodeValues.groups`); in memory there
        is nothing to read ahead.
        """
        lazy = times.lazy or (slowness is not None and slowness.lazy)
        if not lazy:
            model = slowness if slowness is not None else self.slowness_values()
            if not model.lazy:  # the arrays' rows as tuples
                arrays = self.last_leg_arrays(times, points3, radius3, model, source3, exact)
                kind = times.values.dtype.type  # the field's floats, as times.value gives them
                return [
                    (None if node[0] < 0 else node, kind(value), leg)  # (leg: numpy's float64)
                    for node, value, leg in zip(*arrays)
                ]
        boxes = [[self.reach_box(p, radius3, source3, exact)] for p in points3] if lazy else []
        # The points whose legs read the model: between nodes, or joined to the source.
        legged = ~self.on_nodes(points3)
        if source3 is not None:
            legged |= self.joined_points(source3, points3, radius3, exact)
        reader = slowness if slowness is not None and slowness.lazy else times
        groups = reader.groups(boxes) if lazy else [list(range(len(points3)))]
        out: list[tuple[np.ndarray | None, Any, float]] = []
        for group in groups:
            if lazy:
                times.prefetch(boxes[k][0] for k in group)
                if slowness is not None:
                    slowness.prefetch(boxes[k][0] for k in group if legged[k])
            for k in group:
                point3 = points3[k]
                if self.on_node(point3):
                    node = np.asarray(point3).astype(np.int64)
                    out.append(self._straight_if_faster(
                        (node, times.value(node), 0.0), source3, point3, radius3, slowness, exact
                    ))  # fmt: skip
                else:
                    out.append(self.last_leg(times, point3, radius3, slowness, source3, exact))
        return out

    def _straight_if_faster(
        self,
        best: tuple[np.ndarray | None, Any, float],
        source3: np.ndarray | None,
        point3: np.ndarray,
        radius3: tuple[int, int, int],
        slowness: NodeValues | None,
        exact: bool = True,
    ) -> tuple[np.ndarray | None, Any, float]:
        """``best`` (``(node, t(node), leg)``), or ``(None, 0, leg)``, the straight leg from
        the source (:meth:`direct_leg`), where the two are joined and it is faster."""
        if source3 is None:
            return best
        return _straight_or(best, self.direct_leg(source3, point3, radius3, slowness, exact))

    def last_leg_arrays(
        self,
        times: NodeValues,
        points3: np.ndarray,
        radius3: tuple[int, int, int],
        slowness: NodeValues,
        source3: np.ndarray | None,
        exact: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`last_legs` with times and model in memory, as arrays: each point's node
        (``-1`` where the straight leg from the source wins), its time (0 there; float64
        holding the field's floats) and the leg (float64).

        The boxes are searched in compiled code (:func:`~raygrid.kernels.legs.best_last_legs`,
        the same choice and floats as :meth:`last_leg`: 7 us a point at 3D radius 3 rather
        than 0.3 ms), and only the points joined to the source compared with the straight
        leg from it. Whole arrays, not a tuple a point: a lookup of 5000 points spent more
        on building those than on the search.
        """
        points3 = np.asarray(points3, dtype=np.float64).reshape(-1, 3)
        on = self.on_nodes(points3)
        between = np.flatnonzero(~on)
        nodes = np.empty((len(points3), 3), dtype=np.int64)
        values = np.empty(len(points3), dtype=np.float64)
        legs = np.zeros(len(points3), dtype=np.float64)
        node = points3[on].astype(np.int64)
        nodes[on] = node
        values[on] = times.values[node[:, 0], node[:, 1], node[:, 2]]
        nodes[between], values[between], legs[between] = best_last_legs(
            slowness.values, self.spacing3, times.values, points3[between], radius3
        )
        if source3 is not None:
            joined = np.flatnonzero(self.joined_points(source3, points3, radius3, exact))
            if joined.size:
                direct = self._direct_legs(source3, points3[joined], slowness)
                # As _straight_or: the straight leg where it is faster than the node's path.
                wins = direct < values[joined] + legs[joined]
                faster = joined[wins]
                nodes[faster], values[faster], legs[faster] = -1, 0.0, direct[wins]
        return nodes, values, legs

    def _direct_legs(
        self, source3: np.ndarray, points3: np.ndarray, slowness: NodeValues
    ) -> np.ndarray:
        """:meth:`direct_leg` of points joined to the source, the model in memory: those
        with a node end timed in one compiled call on the whole model (the same floats:
        such a leg never lies in a cell face, and an integer shift is exact), the others
        (two off-node ends) one by one. Points within two radii of a station on a node
        took 40 us each one by one."""
        # Each from its off-node end, as leg_ends orders them.
        if self.on_node(source3):
            return legs_to_node(slowness.values, self.spacing3, points3, source3.astype(np.int64))
        out = np.empty(len(points3))
        on = self.on_nodes(points3)
        out[on] = point_leg_times(
            slowness.values, self.spacing3, source3, points3[on].astype(np.int64)
        )
        for k in np.flatnonzero(~on):
            out[k] = self.segment_time(source3, points3[k], slowness)
        return out

    def direct_leg(
        self,
        source3: np.ndarray,
        point3: np.ndarray,
        radius3: tuple[int, int, int],
        slowness: NodeValues | None = None,
        exact: bool = True,
    ) -> float | None:
        """Time of the straight leg between a source and a point whose nearest nodes are at
        most :data:`DIRECT_REACH` radii apart on every axis (:meth:`joined`); ``None`` for
        any other pair.

        Each off-node point is joined to the forward-star box around its nearest node
        (docs/method.md section 3). Where the source's box and the point's overlap (their
        nearest nodes at most two radii apart), the best path through nodes may bend at a
        node both boxes share, a few cells from both ends: a receiver a metre from the
        source came in milliseconds late, and one 2-3 cells away up to 17 % late in 3D at
        radius 2 (5 % in 2D at radius 3). There the straight leg between them counts too;
        beyond, paths through nodes are as accurate as anywhere (tests/test_accuracy.py).
        The leg is a path like any other, timed exactly, so it is never earlier than the
        true time. It is symmetric in the two points (the same floats both ways); whether
        it wins compares it with node paths, which are reciprocal only up to rounding
        (docs/method.md section 4).

        A source or point on a node is joined the same way, unless the other end lies in
        its forward-star box and the weights are exact (the leg is then a seed, a
        candidate or the star's edges already; ``exact=False``, mean-slowness edges, are
        not the leg): a station on a node had times up to 2.9 % late two radii from it (3D,
        radius 3) where a station a millimetre off its node had them exact, and a trial
        hypocentre on a node was late where one a millimetre off was not. The reverse solve
        reads the same leg at that node (:meth:`last_legs`): reciprocity holds.
        """
        if not self.joined(source3, point3, radius3, exact):
            return None
        return self.segment_time(*self.leg_ends(source3, point3), slowness)

    @staticmethod
    def leg_ends(a3: np.ndarray, b3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A straight leg's ends in the order it is timed: from an end between nodes (as
        :meth:`leg_times` times a point's legs to nodes), so that every caller (a source's
        seeds, a receiver's last leg, the straight leg between them, a ray's legs) sums
        the same floats."""
        return (b3, a3) if Grid.on_node(a3) else (a3, b3)

    def located_source(
        self,
        times: NodeValues,
        source: Mapping[str, float],
        radius3: tuple[int, int, int],
        slowness: NodeValues | None = None,
        exact: bool = True,
    ) -> np.ndarray:
        """The recorded ``source`` of the field ``times`` in node units, once checked
        against the field: at each node the source seeds (:func:`source_seeds`, the
        forward-star box around its cell), the field's time may not exceed the straight
        leg from the source, the time the solve seeded it with (a search only lowers a
        seed). An on-node source seeds its node only, at 0; with exact weights (``exact``)
        each node of the box around it is reached through the star's edges along the
        straight leg to it, so may not exceed that either.

        The position rides beside the times (coordinates or attributes), and xarray does
        not always keep the two together: ``xr.concat`` of single-source results may keep
        the first result's position for every source (attributes always, scalar
        coordinates under its newer defaults). A straight leg from the wrong place then
        comes out early by up to the time between the two sources, silently; and rays
        would start there. Every seed is checked, not only the nearest node: a position a
        few cells off passed that. What this cannot see: a position off by a fraction of a
        cell, whose legs fit the field, and a model slower than the field's.

        Raises
        ------
        InputError
            If the field is later than the legs allow at a seed: another field's
            position, times changed since the solve (an origin time added), or a model
            faster than the field's near the source.
        """
        source3 = self.to_index(source, "source")
        # An on-node source's box is reached through its star's edges, each the straight leg
        # (or, reduced, legs along it): checked too, or times scaled since the solve (x 1000,
        # ms read as s) passed, its node's 0 staying 0. (Mean-slowness edges are not legs.)
        box = exact or not self.on_node(source3)
        seeds = (
            point_box(source3, radius3, self.shape3) if box else self.reach_nodes(source3, radius3)
        )
        legs = self.leg_times(source3, seeds, slowness)
        seeded = times.at(seeds).astype(np.float64)
        # A float32 solve rounds a seed's time: half a unit in the last place above its leg.
        allowed = legs * (1.0 + SOURCE_RTOL)
        worst = int(np.argmax(seeded - allowed))
        if seeded[worst] > allowed[worst]:
            where = ", ".join(f"{d}={float(source[d]):g}" for d in self.dims)
            # The seed's own time, not a rounded one: "takes 0 s" read as a rounding of a
            # small leg, where an on-node source's node starts at exactly 0.
            if self.on_node(source3) and np.array_equal(seeds[worst], source3):
                found = f"{seeded[worst]:.6g} s at the source's node, which starts at 0 s"
            else:
                found = (
                    f"{seeded[worst]:.6g} s at a node next to it, where the straight leg from "
                    f"the source takes {legs[worst]:.6g} s"
                )
            raise InputError(
                f"the field's times do not start at its recorded source ({where} "
                f"{self.length_unit}): {found}. The position belongs "
                "to another field (xr.concat or merge of several traveltime() results "
                "keeps one source position for all: solve many sources with "
                "raygrid.pipeline.traveltimes), the times were changed since the solve (an "
                "origin time added: add it to the times read instead), or the velocity is "
                "not the model the field was solved on"
            )
        self._check_earliest(source, source3, seeds, seeded, legs, exact)
        return source3

    def _check_earliest(
        self,
        source: Mapping[str, float],
        source3: np.ndarray,
        seeds: np.ndarray,
        seeded: np.ndarray,
        legs: np.ndarray,
        exact: bool,
    ) -> None:
        """Refuse a field whose times were made earlier since the solve (halved, an origin
        time subtracted, ms read as s the other way), which the bound of
        :meth:`located_source` (a seed no later than its leg) cannot see.

        Nothing reaches the seed of least leg earlier than that leg, whatever the model:
        any path to it starts at a seed, no earlier than that seed's leg, which is no
        shorter. Likewise, with exact weights, the node of least leg around a source on a
        node (its time 0): any path to it starts with a star edge, the straight leg to a
        node of the box. A field earlier than that leg there, beyond the solve's rounding,
        is not the solve's. (By least time, a seed tied by float32 rounding with one behind
        a near-infinite slowness, 1e8 times slower, was taken, and the field refused.)
        """
        on_node = self.on_node(source3)
        source_node = np.all(seeds == source3, axis=1) if on_node else np.zeros(len(seeds), bool)
        if on_node and np.any(seeded[source_node] < 0.0):
            least = int(np.flatnonzero(source_node)[0])
        else:
            # An on-node source's own node starts at 0: the others are reached by its
            # edges (with exact weights; mean-slowness edges are not legs).
            usable = np.isfinite(seeded) & ~source_node
            if not usable.any() or (on_node and not exact):
                return
            least = int(np.flatnonzero(usable)[np.argmin(legs[usable])])
        if seeded[least] >= legs[least] * (1.0 - SOURCE_RTOL):
            return
        where = ", ".join(f"{d}={float(source[d]):g}" for d in self.dims)
        found = (
            f"{seeded[least]:.6g} s at the source's node, which starts at 0 s"
            if source_node[least]
            else f"{seeded[least]:.6g} s at a node next to it, where the straight leg from "
            f"the source takes {legs[least]:.6g} s and no path is faster"
        )
        raise InputError(
            f"the field's times are earlier than its recorded source ({where} "
            f"{self.length_unit}) allows: {found}. The times were changed since the solve "
            "(scaled down, or an origin time subtracted: subtract it from the times read "
            "instead), the position belongs to "
            "another field, or the velocity is not the model the field was solved on (slower "
            "near the source)"
        )

    def joined(
        self,
        source3: np.ndarray,
        point3: np.ndarray,
        radius3: tuple[int, int, int],
        exact: bool = True,
    ) -> bool:
        """Whether :meth:`direct_leg` joins a source and a point."""
        return bool(self.joined_points(source3, point3, radius3, exact)[0])

    def joined_points(
        self,
        source3: np.ndarray,
        points3: np.ndarray,
        radius3: tuple[int, int, int],
        exact: bool = True,
    ) -> np.ndarray:
        """:meth:`joined` of each of the points ``(k, 3)``, as a mask; ``exact``: the
        solve's weights are exact cell crossings (with mean-slowness weights the star's
        edges are not straight legs, and a node end is joined within the box too)."""
        points3 = np.asarray(points3, dtype=np.float64).reshape(-1, 3)
        radius = np.asarray(radius3)
        offset = np.abs(np.floor(np.asarray(source3) + 0.5) - np.floor(points3 + 0.5))
        reach = np.all(offset <= DIRECT_REACH * radius, axis=1)
        # A node end within the other's forward-star box is one of its seeds or candidates,
        # or (both nodes) joined by the star's edges along the leg: with exact weights the
        # straight leg is a path the solve or the box has already. (Mean-slowness edges are
        # not: a station on a node came in 5.4 % late one node and two across from the
        # source, where one a millimetre off its node was reached straight.)
        if not exact:
            return reach
        node_end = self.on_nodes(points3) | self.on_node(source3)
        return reach & ~(node_end & np.all(offset <= radius, axis=1))

    def segment_time(
        self, a3: np.ndarray, b3: np.ndarray, slowness: NodeValues | None = None
    ) -> float:
        """Time of the straight segment between two points (exact cell crossing), read on
        the box of cells it crosses, shifted to its corner (the same floats as on the whole
        model: an integer shift of a point is exact)."""
        block, low = self.leg_block(a3, b3, slowness)
        a, b = np.asarray(a3, dtype=np.float64) - low, np.asarray(b3, dtype=np.float64) - low
        block, a, b = _on_faces(block, a, b)
        return float(segment_time_cpu(block, *a, *b, *self.spacing3))

    def leg_times(
        self, point3: np.ndarray, nodes: np.ndarray, slowness: NodeValues | None = None
    ) -> np.ndarray:
        """Straight-segment times from a point to nodes (first and last legs of rays).

        Computed on the sub-block spanning the point and the nodes, shifted to its corner,
        so the same floats come out whether or not the model is in memory (tiled solves
        read only that block), and every caller sums the same floats. ``slowness``: the
        model's :meth:`slowness_values`, kept by a caller that reads many legs.
        """
        nodes = np.asarray(nodes, dtype=np.int64).reshape(-1, 3)
        block, low = self.leg_block(point3, nodes, slowness)
        return point_leg_times(block, self.spacing3, point3 - low, nodes - low)

    def leg_block(
        self, point3: np.ndarray, ends: np.ndarray, slowness: NodeValues | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The slowness on the box of cells the straight legs from a point to ``ends``
        cross (:meth:`leg_box`), and the box's low corner: legs shifted by it give the same
        floats as on the whole model (an integer shift of a point is exact), which need not
        be in memory. ``slowness``: the model's :meth:`slowness_values`, if kept."""
        low, high = self.leg_box(point3, ends)
        reader = slowness if slowness is not None else self.slowness_values()
        return reader.box(low, high), low

    @property
    def spacing3(self) -> np.ndarray:
        """Spacing ``(hz, hy, hx)`` in metres for the kernels (``hy = 1`` in 2D, unused)."""
        h = dict(zip(self.dims, self.spacing))
        return np.array([h["z"], h.get("y", 1.0), h["x"]], dtype=np.float64) * self.metres_per_unit

    def radius3(self, radius: int | Mapping[str, int]) -> tuple[int, int, int]:
        """Normalise a radius (int or per-dim mapping) to ``(rz, ry, rx)`` and check it
        (:func:`radius3`)."""
        return radius3(radius, {d: len(self.coords[d]) for d in self.dims})

    def star_notes(self, offsets: int, radius3: tuple[int, int, int]) -> list[str]:
        """What to say of a star of ``offsets`` offsets a node, radius ``radius3``, on this
        grid: lopsided for its spacing (:meth:`lopsided_star`), costly
        (:meth:`costly_star`)."""
        said = (self.lopsided_star(radius3), self.costly_star(offsets, radius3))
        return [note for note in said if note is not None]

    def costly_star(self, offsets: int, radius3: tuple[int, int, int]) -> str | None:
        """What to say of a star of ``offsets`` offsets a node (radius ``radius3``) that
        costs many times the radius-3 star, or ``None``: a solve's time grows with the
        offsets (and each offset's exact weight crosses more cells), so a large radius ran
        for minutes without a word (3D radius 30 on 41 x 61 x 61 nodes: 185 s a source,
        against 0.5 s at radius 3), while the error it buys falls little past radius 6."""
        three = forward_star((3, 3 if "y" in self.dims else 0, 3)).size  # 290 in 3D, 32
        if offsets < COSTLY_STAR * three:
            return None
        radius = ", ".join(f"{d}={r}" for d, r in zip(("z", "y", "x"), radius3) if d in self.dims)
        return (
            f"radius {radius} gives {offsets:,} star offsets a node, {offsets / three:.0f} "
            f"times radius 3's {three}: a solve takes at least that many times as long (3D "
            "radius 30: minutes a source where radius 3 took a second) for little less "
            "error (a constant model's worst seen: 0.37 % in 2D at radius 6, 3.14 % in 3D "
            "at 3)"
        )

    def lopsided_star(self, radius3: tuple[int, int, int]) -> str | None:
        """What to say when the star reaches much further along one axis than another (in
        length, radius times spacing), or ``None``.

        Such a star has few directions near the short axis, and times along it come out
        late: measured on a constant 2D model at radius 4, the worst error (beyond 10
        nodes) is 0.75 % at equal reach, 2.8 % at a ratio of 2, 8.2 % at 4 and 18 % at 8.
        The cure is a radius per axis that evens the reach (or a model resampled to more
        even spacing).
        """
        radii = dict(zip(("z", "y", "x"), radius3))
        last = {d: len(self.coords[d]) - 1 for d in self.dims}  # the largest radius allowed
        # An axis the star spans whole (a model a few nodes thick) cannot be evened by a
        # radius: it was told to take one the radius check then refused.
        reach = {d: radii[d] * h for d, h in zip(self.dims, self.spacing) if radii[d] < last[d]}
        if len(reach) < 2:
            return None
        longest, shortest = max(reach, key=reach.get), min(reach, key=reach.get)
        ratio = reach[longest] / reach[shortest]
        if ratio < LOPSIDED_REACH:
            return None
        spacing = dict(zip(self.dims, self.spacing))
        even = {
            d: min(last[d], max(1, int(np.ceil(reach[longest] / spacing[d] - 1e-9))))
            if d in reach
            else radii[d]
            for d in self.dims
        }
        suggested = ", ".join(f"{d}: {even[d]}" for d in self.dims)
        unit = self.length_unit
        return (
            f"the forward star reaches {reach[longest]:g} {unit} along {longest} but only "
            f"{reach[shortest]:g} {unit} along {shortest} (radius x spacing): it has few "
            f"directions near {shortest}, and times there come out late (a constant model "
            "at radius 4: 2.8 % at a ratio of 2, 8 % at 4, against 0.75 % at 1); give a "
            f"radius per axis that evens the reach, e.g. radius: {{{suggested}}}"
        )

    def to_indices(self, points: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`to_index` of many points at once, the same floats: ``(located, slow)``,
        the ``(n, 3)`` positions and the rows left for :meth:`to_index` (points that are
        not mappings of this grid's dims to real numbers, or not finite and inside the
        model: it refuses them, or places one on the model's edge within rounding)."""
        located = np.zeros((len(points), 3))
        columns = _number_columns(points, self.dims)
        if columns is None:
            return located, np.arange(len(points))
        slow = np.zeros(len(points), dtype=bool)
        for dim in self.dims:
            origin, last = self._span(dim)
            value = columns[dim]
            with np.errstate(invalid="ignore"):
                slow |= ~np.isfinite(value) | (value < origin) | (value > last)
        for dim in self.dims:  # (the slow rows' values replaced: placed point by point)
            value = np.where(slow, self._span(dim)[0], columns[dim])
            located[:, "zyx".index(dim)] = self._placed(dim, value)
        return located, np.flatnonzero(slow)

    def to_index(self, point: Mapping[str, Any], what: str = "source") -> np.ndarray:
        """Position in fractional node-index units ``(iz, iy, ix)`` of a point in coordinates.

        Raises
        ------
        InputError
            If dims are missing or unknown, or the point lies outside the model.
        """
        if not isinstance(point, Mapping):
            raise InputError(f"{what} must be a mapping from dim name to coordinate, got {point!r}")
        unknown = set(point) - set(self.dims)
        missing = set(self.dims) - set(point)
        if unknown or missing:
            flat = ""
            if unknown and not missing and len(self.dims) < 3:
                # A 3D point (or station file) given to a 2D model: say so, not just "y".
                flat = f"; the model is {len(self.dims)}D: leave out {sorted(unknown)}"
            raise InputError(
                f"{what} must give a coordinate for exactly the dims {self.dims}; "
                f"unknown: {sorted(unknown)}, missing: {sorted(missing)}"
                f"{other_case(sorted(unknown), sorted(missing))}{flat}"
            )
        index = {}
        rounding = self.rounding or (0.0,) * len(self.dims)
        deviation = self.deviation or (0.0,) * len(self.dims)
        for dim, origin, h, stored, off in zip(
            self.dims, self.origin, self.spacing, rounding, deviation
        ):
            given = point[dim]
            if given is None:  # a catalogue's missing depth (JSON's null): as NaN is
                raise OutsideModel(f"{what} {dim} is missing (None)")
            try:
                # Text and yes/no are not coordinates (float() took "50" and True), as in
                # a workflow file; NumPy numbers and Decimals are.
                if isinstance(given, (str, bytes, bool, np.bool_)):
                    raise TypeError
                value = float(given)
            except (TypeError, ValueError):
                raise InputError(f"{what} {dim}={given!r} is not a number") from None
            except OverflowError:  # an integer past float's range (10**400)
                value = math.inf
            if not math.isfinite(value):  # was "z=nan is outside the model"
                raise OutsideModel(f"{what} {dim}={value} is not a finite number")
            last = self._span(dim)[1]
            # Within the rounding of the stored coordinates (float32 in many NetCDF files:
            # 3e-5 km at 500 km) a point is on the edge, or on a node: x=516.3 km was
            # "outside [512.2999878, 516.2999878]", and the node at x=512.5 was 1e-4 nodes
            # off it. Only within half a unit in the last place, the most the stored type
            # moved the node: four units (1.9 m at a UTM northing of 4e6 m) moved a source
            # 1.8 m east of a node onto it, its times 1.8 % late 98 m away.
            if (value < origin or value > last) and not self._at_edge(
                value, origin, last, h, stored, off
            ):
                raise OutsideModel(self._outside(what, dim, value, origin, last))
            index[dim] = float(self._placed(dim, np.array([value]))[0])
        return np.array([index["z"], index.get("y", 0.0), index["x"]], dtype=np.float64)

    def _span(self, dim: str) -> tuple[float, float]:
        """The first and last coordinates of ``dim``, as the model's origin and spacing
        place them."""
        k = self.dims.index(dim)
        origin, h = self.origin[k], self.spacing[k]
        return origin, origin + h * (len(self.coords[dim]) - 1)

    def _placed(self, dim: str, value: np.ndarray) -> np.ndarray:
        """Node-index positions along ``dim`` of coordinates inside the model (or on its
        edge within rounding): :meth:`to_index`'s and :meth:`to_indices`' one rule,
        :func:`~raygrid.kernels.place.place_along` (snapped onto nodes and cell faces
        within rounding)."""
        k = self.dims.index(dim)
        return place_along(
            value, self.origin[k], self.spacing[k], np.asarray(self.coords[dim]),
            self.rounding[k] if self.rounding else 0.0,
            self.deviation[k] if self.deviation else 0.0,
        )  # fmt: skip

    @staticmethod
    def _at_edge(
        value: float, origin: float, last: float, h: float, stored: float, off: float
    ) -> bool:
        """Whether a value just outside a dim's span is on its edge, to rounding (as a
        point on a node: :attr:`deviation`)."""
        magnitude = max(abs(h), abs(origin), abs(last))
        edge = origin if value < origin else last
        return abs(value - edge) <= max(SNAP_TOL * magnitude, half_ulp(edge, stored) + 2 * off)

    def _outside(self, what: str, dim: str, value: float, origin: float, last: float) -> str:
        """Why a point is outside the model, with the likely slip where one fits: a
        coordinate in the other length unit, or a z above the model's top."""
        unit = self.length_unit
        # 10 digits: with 6, x=400.0001 "is outside [0, 400]".
        said = (
            f"{what} {dim}={value:.10g} is outside the model: {dim} spans "
            f"[{origin:.10g}, {last:.10g}] {unit}"
        )
        # (A point in km on a model in m mostly lands inside: that slip is not seen here.)
        # Not a km slightly off. (At 100 times the span, as it was, y=5000 on a 60 km model
        # went unnamed beside y=30000, named, in one call.)
        far = abs(value) > 10 * max(abs(origin), abs(last))
        if self.metres_per_unit == 1e3 and far and origin <= value * 1e-3 <= last:
            return (
                f"{said}; is it in m? Points are in the model's unit, km ({dim}={value / 1e3:.10g})"
            )
        if dim == "z" and value < origin:
            return (
                f"{said}; {Z_IS_DEPTH}: a station above "
                "the top (an elevation) must be placed on it, or the model extended upward"
            )
        return said

    def km_in_m(self, points3: np.ndarray, what: str) -> str | None:
        """What to say of points that look given in km on a model in m, or ``None``: at
        least two apart, all within one cell's span on every axis, and inside the model
        again at 1000 times their coordinates. (Points in m on a model in km land outside
        it, and :meth:`_outside` says so; these land inside, near the origin, and a run
        went on with ten stations in one 500 m cell.) A warning, not a refusal: a dense
        array of geophones a metre apart near the origin looks the same."""
        if self.metres_per_unit != 1.0 or len(np.unique(points3, axis=0)) < 2:
            return None
        coords = self.to_coords(points3)
        for d, origin, h, n in zip(self.dims, self.origin, self.spacing, self.shape):
            values = coords[d]
            last = origin + h * (n - 1)
            if np.ptp(values) >= h or not np.all((origin <= values * 1e3) & (values * 1e3 <= last)):
                return None
        spans = ", ".join(f"{d} {coords[d].min():.6g} to {coords[d].max():.6g}" for d in self.dims)
        return (
            f"all {len(points3)} {what}s lie within one cell ({spans} m); at 1000 times "
            "their coordinates they would spread over the model: are they in km? Points are "
            "in the model's unit, m"
        )

    def to_coords(self, index3: np.ndarray) -> dict[str, np.ndarray]:
        """Coordinates (model units) of fractional node indices, shape (..., 3)."""
        index3 = np.asarray(index3, dtype=np.float64)
        column = {"z": 0, "y": 1, "x": 2}
        return {
            dim: origin + h * index3[..., column[dim]]
            for dim, origin, h in zip(self.dims, self.origin, self.spacing)
        }

    def flat(self, node3: np.ndarray) -> np.ndarray:
        """Flat kernel index of integer node indices, shape (..., 3)."""
        return flat_steps(node3, self.shape3)


def _on_faces(
    block: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A segment between two points that lies in a cell face (along an axis on which
    neither end moves, both halfway between nodes), made one through the faster of the
    cells on either side, piece by piece.

    The segment borders both cells; paths just beside it take the faster side, so that is
    its time (the infimum). ``segment_time`` takes the cell of higher index on a face
    whatever the slownesses: two stations 5 m deep on a 10 m grid, under a slow top row,
    were joined through it, 2.7 % late, and the model's mirror image through the fast row.
    Only legs between two off-node points can lie in a face (a node end is never halfway).
    Symmetric in ``a`` and ``b``, as the rest of the leg.
    """
    for k in range(3):
        if a[k] == b[k] and a[k] % 1.0 == 0.5:
            low = int(a[k] - 0.5)  # the cells low and low + 1 meet at the face
            block = np.minimum(np.take(block, [low], axis=k), np.take(block, [low + 1], axis=k))
            a, b = a.copy(), b.copy()
            a[k] = b[k] = 0.0  # the middle of the one slab of faster cells
    return block, a, b


def _straight_or(
    best: tuple[np.ndarray | None, Any, float], direct: float | None
) -> tuple[np.ndarray | None, Any, float]:
    """``best`` (``(node, t(node), leg)``), or ``(None, 0, direct)`` where the straight leg
    from the source is faster (:meth:`Grid.direct_leg`; ``None``: not joined)."""
    if direct is not None and direct < np.float64(best[1]) + best[2]:
        return None, np.asarray(best[1]).dtype.type(0), direct
    return best


def _number_columns(points: Sequence[Any], dims: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The points' coordinates by dim, as float64 columns, where every point is a mapping of
    exactly ``dims`` to real numbers (not text or yes/no, which :meth:`Grid.to_index`
    refuses); else ``None``."""
    wanted = set(dims)
    real = (float, int, np.floating, np.integer)
    columns: dict[str, list] = {d: [] for d in dims}
    for point in points:
        if not isinstance(point, Mapping) or point.keys() != wanted:
            return None
        for d in dims:
            value = point[d]
            if not isinstance(value, real) or isinstance(value, bool):
                return None
            columns[d].append(value)
    try:
        return {d: np.array(column, dtype=np.float64) for d, column in columns.items()}
    except OverflowError:  # an integer past float's range: refused point by point
        return None


def recorded_source(
    field: xr.DataArray | xr.Dataset, dims: tuple[str, ...]
) -> dict[str, float] | None:
    """One source's position as a field records it: its scalar ``source_<dim>``
    coordinates (every raygrid result's, one source of a survey store) or attributes
    (where a single-source result kept it before it was a coordinate, as saved files may
    still); ``None`` if a dim's is missing. Checked against the times where it is used
    (:meth:`Grid.located_source`)."""
    position = {}
    for d in dims:
        name = f"source_{d}"
        if name in field.coords and field[name].ndim == 0:
            position[d] = float(field[name])
        elif name in field.attrs:
            position[d] = float(field.attrs[name])
        else:
            return None
    return position


def recorded_radius(attrs: Mapping, dims: tuple[str, ...]) -> dict[str, int]:
    """The forward-star radius a field's attributes record (``radius_<dim>``), for the
    dims that have one.

    Raises
    ------
    InputError
        For a recorded radius that is not a whole number (an attribute edited or lost to
        ``None``: ``int()`` raised a bare ``TypeError``).
    """
    radius = {}
    for d in dims:
        value = attrs.get(f"radius_{d}")
        if value is None and f"radius_{d}" not in attrs:
            continue
        try:
            whole = int(value) == float(value)
        except (TypeError, ValueError, OverflowError):
            whole = False
        if not whole or isinstance(value, bool):
            raise InputError(
                f"the field's attribute radius_{d} = {value!r} is not a radius: a result's "
                "attributes record how it was solved, and must be kept as raygrid wrote them"
            )
        radius[d] = int(value)
    return radius


class OutsideModel(InputError):
    """A point outside the model, or with a coordinate that is not finite (NaN): what a
    lookup with ``outside="nan"`` reads as NaN rather than refuses."""


def radius3(radius: int | Mapping[str, int], sizes: Mapping[str, int]) -> tuple[int, int, int]:
    """Normalise a radius (int or per-dim mapping) to ``(rz, ry, rx)`` and check it against
    a model of ``sizes`` nodes per dim (``{"z": nz, "x": nx}`` or with ``"y"``): known
    before the model's values are read."""
    if isinstance(radius, Mapping):
        unknown = set(radius) - set(sizes)
        missing = set(sizes) - set(radius)
        if unknown or missing:
            raise InputError(
                f"radius mapping must name exactly the dims {tuple(sizes)}; "
                f"unknown: {sorted(unknown)}, missing: {sorted(missing)}"
            )
        per_dim = dict(radius)
    elif isinstance(radius, list | tuple) or np.ndim(radius):  # in which dims' order?
        raise InputError(
            f"radius must be one integer or a mapping from dim name to integer (e.g. "
            f"{dict.fromkeys(sizes, 3)}), got {radius!r}"
        )
    else:
        per_dim = dict.fromkeys(sizes, radius)
    for dim, r in per_dim.items():
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise InputError(f"radius along {dim!r} must be an integer, got {r!r}")
        n = sizes[dim]
        if r < 1:
            raise InputError(f"radius along {dim!r} must be >= 1, got {r}")
        if r >= n:
            raise InputError(
                f"radius along {dim!r} is {r} but the model has only {n} nodes along it: "
                "the radius must be smaller than the model"
            )
    return (int(per_dim["z"]), int(per_dim.get("y", 0)), int(per_dim["x"]))


def grid_from_velocity(
    velocity: xr.DataArray, *, load: bool = True, check_values: bool = True
) -> Grid:
    """Validate a velocity model and convert it to a :class:`Grid`.

    Parameters
    ----------
    velocity : xarray.DataArray
        Dims ``("z", "x")`` or ``("z", "y", "x")`` in any order, uniform increasing
        coordinates with a length ``units`` attribute, data with a speed ``units`` attribute,
        every value finite and positive.
    load : bool, default True
        Load the slowness into memory. With ``False`` a dask-backed model is validated by
        reductions on the workers (one number comes back) and ``Grid.slowness`` is ``None``;
        tiled solves read their tiles from ``Grid.velocity``.
    check_values : bool, default True
        Check every value (finite, positive, a plausible speed) and warn about a z axis
        that looks like an elevation. ``False`` for a model checked already
        (:func:`~raygrid.pipeline.load_velocity` checks a file as it opens it): a lazy
        model's file is not read again for them, nor its warnings repeated.

    Raises
    ------
    InputError
        Naming the problem: wrong dims, missing or mixed units, non-uniform or non-monotonic
        coordinates, or bad velocities (how many and the first bad coordinate).
    """
    if not isinstance(velocity, xr.DataArray):
        pick = ""
        if isinstance(velocity, xr.Dataset):  # a file's dataset, its variable not picked
            names = [str(name) for name in velocity.data_vars]
            # A velocity's likely name first: a raygrid result's or store's "velocity" was
            # passed over for its first variable ("ray_x", "traveltime").
            likely = [n for n in names if n.lower() in ("velocity", "vp", "vs", "v")]
            pick = f": pick its velocity, e.g. dataset[{(likely or names)[0]!r}]" if names else ""
            pick += f" (it holds {names})" if len(names) > 1 else ""
        if isinstance(velocity, np.ndarray) and velocity.ndim in (2, 3):
            # What a user of scikit-fmm, pykonal or fteikpy has: an array and a spacing.
            pick = (
                ": give a NumPy array its grid with raygrid.pipeline.load_velocity(array, "
                "spacing=10.0, length_unit='m', units='m/s') (axes (z, x) or (z, y, x); "
                "origin= and dims= for others)"
            )
        raise InputError(
            f"velocity must be an xarray.DataArray, got {type(velocity).__name__}{pick}"
        )
    dims = set(velocity.dims)
    if dims == set(DIMS_2D):
        order = DIMS_2D
    elif dims == set(DIMS_3D):
        order = DIMS_3D
    else:
        raise InputError(
            f"velocity dims must be ('z', 'x') or ('z', 'y', 'x'), got {tuple(velocity.dims)}"
            + dims_hint(velocity)
        )
    if velocity.dtype.kind not in "iuf":
        # Complex values lost their imaginary part with only NumPy's warning; objects
        # failed deep in a check with a TypeError.
        raise InputError(
            f"velocity must hold real numbers (floats or integers), got dtype {velocity.dtype}"
        )
    velocity = velocity.transpose(*order)
    speed_unit = velocity.attrs.get("units")
    if speed_unit is None:
        raise InputError(f"velocity has no 'units' attribute (one of {sorted(SPEED_UNITS)})")
    if not known_unit(speed_unit, SPEED_UNITS):
        raise InputError(
            f"velocity has units {speed_unit!r}; expected a speed, one of {sorted(SPEED_UNITS)} "
            "(in any case; a file's other spelling of m/s or km/s is corrected by loading it "
            "with units=, model.units in a workflow)"
        )

    axes = {dim: check_axis(velocity, dim) for dim in order}
    length_units = {axes[d][3] for d in order}
    if len({unit_size(u, LENGTH_UNITS) for u in length_units}) > 1:
        raise InputError(
            "coordinates use inconsistent units "
            + ", ".join(f"{d}: {axes[d][3]!r}" for d in order)
            + "; give every axis the same length unit"
        )
    for d in order:  # from the coordinates alone: before any value is read
        check_extent(d, axes[d][0].size, axes[d][2], axes[d][3])
    values = velocity.values if load else None  # read once: checked, then converted
    if check_values:
        warn_elevation(velocity["z"], axes["z"][0], axes["z"][3])
        checked = velocity if values is None else velocity.copy(data=values)
        # (qualified: the parameter check_values shadows the name)
        modelcheck.check_values(checked, axes, order, unit_size(speed_unit, SPEED_UNITS))
    unit = axes[order[0]][3]
    grid = Grid(
        dims=order,
        coords={d: axes[d][0] for d in order},
        origin=tuple(axes[d][1] for d in order),
        spacing=tuple(axes[d][2] for d in order),
        length_unit=unit,
        metres_per_unit=unit_size(unit, LENGTH_UNITS),
        slowness=None,
        velocity=velocity,
        speed_factor=unit_size(speed_unit, SPEED_UNITS),
        rounding=tuple(axes[d][4] for d in order),
        deviation=tuple(axes[d][5] for d in order),
    )
    if values is not None:
        grid = replace(grid, slowness=grid.slowness_of(values))
    return grid


def in_memory(velocity: xr.DataArray) -> bool:
    """Whether a model's values are in memory: not dask-backed, nor a file read lazily
    without dask (:func:`~raygrid.pipeline.load_velocity`'s ``.npy`` and NetCDF models),
    whose values a rewrite of the file changes under it."""
    # Private, but the only test that does not itself read a lazily indexed array.
    return velocity.chunks is None and velocity.variable._in_memory


def solved_grid(velocity: xr.DataArray) -> Grid:
    """The grid of a model a field was solved on, for reading points and rays off it.

    A lazy model (a tiled result's, a store opened lazily) is read only where the points'
    legs are, and checked there (:meth:`Grid.slowness_values`), not loaded or scanned
    whole; a model in memory is checked and converted as for a solve.
    """
    lazy = velocity.chunks is not None
    return grid_from_velocity(velocity, load=not lazy, check_values=not lazy)
