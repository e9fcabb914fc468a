"""Traveltime-table lookups for earthquake location: ``traveltime_at`` at many hypocentres.

A location code grid-searches trial hypocentres against each station's traveltime field (a
source at the station, by reciprocity). This times ``raygrid.pipeline.traveltime_at`` on
such a table, side by side in one run with

- the per-point rule it replaced (``Grid.last_leg`` point by point, the path before
  2026-11-27; its results must be bitwise equal), on a subset of the points;
- xarray's linear interpolation of the same fields (``DataArray.interp``), the cheap
  alternative a user reaches for;

and gives each one's error against the analytic gradient traveltime
``t = arccosh(1 + g^2 d^2 / (2 v_s v_r)) / g`` (signed: interpolation can come out early,
the method's own rule cannot).

Run::

    .venv/bin/python benchmarks/lookup_table.py           # ~1 min, writes results/lookup_table.*
    .venv/bin/python benchmarks/lookup_table.py --quick   # seconds, writes nothing
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import machine, machine_lines, write_results  # noqa: E402  (one for all scripts)

RESULTS = Path(__file__).resolve().parent / "results" / "lookup_table"
SPACING, TOP, BOTTOM = 100.0, 3000.0, 6000.0  # m, m/s at z = 0 and at the deepest node
RADIUS = 3


def analytic(stations: list[dict], points: dict, gradient: float) -> np.ndarray:
    """``(station, point)`` analytic times, SI units."""
    from raygrid.pipeline import gradient_traveltime

    return np.stack([gradient_traveltime(s, points, TOP, gradient) for s in stations])


def errors(found: np.ndarray, exact: np.ndarray) -> dict:
    """Relative error statistics of ``found`` against ``exact`` (signed: < 0 is early)."""
    relative = (found - exact) / exact
    return {
        "rms_rel": float(np.sqrt(np.mean(relative**2))),
        "max_late_rel": float(relative.max()),
        "max_early_rel": float(max(0.0, -relative.min())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="31 x 41 x 41, 2000 points")
    parser.add_argument("--points", type=int, default=None, help="hypocentres (20000)")
    parser.add_argument("--stations", type=int, default=12)
    parser.add_argument("--old", type=int, default=500, help="points for the per-point rule")
    parser.add_argument("--events", type=int, default=200, help="events read one at a time")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    shape = {"z": 31, "y": 41, "x": 41} if args.quick else {"z": 61, "y": 81, "x": 81}
    n_points = args.points or (2000 if args.quick else 20000)
    stem = args.results if args.results is not None else (None if args.quick else RESULTS)

    import raygrid.pipeline as rg
    from raygrid.kernels import forward_star
    from raygrid.pipeline.grid import grid_from_velocity
    from raygrid.pipeline.nodevalues import NodeValues

    warnings.simplefilter("ignore")  # the lopsided-star advice and such are not results
    velocity = rg.gradient_model(shape, SPACING, TOP, BOTTOM)
    gradient = (BOTTOM - TOP) / (SPACING * (shape["z"] - 1))
    extent = {d: SPACING * (n - 1) for d, n in shape.items()}
    rng = np.random.default_rng(2026)
    stations = [
        {"z": 0.0, "y": float(rng.uniform(0, extent["y"])), "x": float(rng.uniform(0, extent["x"]))}
        for _ in range(args.stations)
    ]
    points = {d: rng.uniform(0, extent[d], n_points) for d in ("z", "y", "x")}
    packages = ("raygrid", "numpy", "numba", "xarray")
    report = {"machine": machine(packages), "args": " ".join(sys.argv[1:]), "rows": []}
    report["case"] = {"shape": shape, "spacing_m": SPACING, "radius": RADIUS,
                      "stations": args.stations, "points": n_points}  # fmt: skip
    print(json.dumps(report["machine"], indent=1), flush=True)

    start = time.perf_counter()
    table = rg.traveltimes(velocity, stations, radius=RADIUS, threads=1)
    report["table_s"] = time.perf_counter() - start
    exact = analytic(stations, points, gradient)
    pairs = n_points * args.stations
    rows = report["rows"]

    rg.traveltime_at(table, {d: v[:5] for d, v in points.items()}, velocity=velocity)  # JIT
    start = time.perf_counter()
    found = rg.traveltime_at(table, points, velocity=velocity).values
    seconds = time.perf_counter() - start
    rows.append({"method": "raygrid traveltime_at (compiled box search)", "seconds": seconds,
                 "us_per_pair": seconds / pairs * 1e6, **errors(found, exact)})  # fmt: skip
    print(rows[-1], flush=True)

    # The per-point rule on a subset: Grid.last_leg, one point and station at a time.
    grid = grid_from_velocity(velocity)
    star = forward_star(grid.radius3(RADIUS))
    n_old = min(args.old, n_points)
    subset = {d: v[:n_old] for d, v in points.items()}
    index = np.array([grid.to_index({d: float(subset[d][k]) for d in subset}, "point")
                      for k in range(n_old)])  # fmt: skip
    slowness = grid.slowness_values()
    start = time.perf_counter()
    old = np.empty((args.stations, n_old))
    for s in range(args.stations):
        times = NodeValues(table.isel(source=s).transpose(*grid.dims).values)
        source3 = grid.to_index(stations[s], "source")
        for k, point3 in enumerate(index):
            _, time_at, leg = grid.last_leg(times, point3, star.radius, slowness, source3)
            old[s, k] = time_at + leg
    seconds = time.perf_counter() - start
    same = bool(np.array_equal(old, found[:, :n_old]))
    rows.append({"method": f"per-point rule (Grid.last_leg), first {n_old} points",
                 "seconds": seconds, "us_per_pair": seconds / (n_old * args.stations) * 1e6,
                 "bitwise_equal": same,
                 **errors(old, exact[:, :n_old])})  # fmt: skip
    print(rows[-1], flush=True)

    import xarray as xr

    at = {d: xr.DataArray(v, dims="point") for d, v in points.items()}
    start = time.perf_counter()
    interpolated = table.interp(at, method="linear").transpose("source", "point").values
    seconds = time.perf_counter() - start
    rows.append({"method": "xarray DataArray.interp (linear)", "seconds": seconds,
                 "us_per_pair": seconds / pairs * 1e6,
                 **errors(interpolated, exact)})  # fmt: skip
    print(rows[-1], flush=True)

    # Events located one after another: a call per event, by traveltime_at (which checks
    # and converts the model every call) and by a TraveltimeTable built once.
    n_events = min(args.events, n_points)
    events = [{d: float(points[d][k]) for d in points} for k in range(n_events)]
    start = time.perf_counter()
    prepared = rg.TraveltimeTable(table, velocity=velocity)
    build_ms = (time.perf_counter() - start) * 1e3
    one = {}
    for name, lookup in (
        ("traveltime_at", lambda e: rg.traveltime_at(table, e, velocity=velocity)),
        ("TraveltimeTable.at", prepared.at),
    ):
        start = time.perf_counter()
        each = np.stack([lookup(event).values for event in events], axis=1)
        one[name] = (time.perf_counter() - start) / n_events * 1e3
        one[f"{name} bitwise_equal"] = bool(np.array_equal(each, found[:, :n_events]))
    report["one_at_a_time"] = {"events": n_events, "ms_per_event": one, "build_ms": build_ms}
    print(report["one_at_a_time"], flush=True)

    text = markdown(report)
    write_results(stem, report, text)
    return 0 if rows[1]["bitwise_equal"] and all(v for k, v in one.items() if "equal" in k) else 1


def markdown(report: dict) -> str:
    m, case = report["machine"], report["case"]
    shape = " x ".join(str(n) for n in case["shape"].values())
    lines = [
        "# Traveltime-table lookups",
        "",
        f"Written by `benchmarks/lookup_table.py {report['args']}` on {m['date']}.",
        "",
        *machine_lines(m),
        f"- Case: 3D linear gradient {TOP:g} -> {BOTTOM:g} m/s, {shape} nodes, "
        f"{case['spacing_m']:g} m spacing; {case['stations']} stations at the surface, a "
        f"field each (radius {case['radius']}, `traveltimes`, one thread: "
        f"{report['table_s']:.2f} s); {case['points']} random hypocentres. Errors are "
        "relative to the analytic time, over every (station, hypocentre) pair.",
        "",
        "| method | s | us per pair | RMS | max late | max early | notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["rows"]:
        notes = "bitwise equal to traveltime_at" if row.get("bitwise_equal") else ""
        if row.get("bitwise_equal") is False:
            notes = "**differs from traveltime_at**"
        lines.append(
            f"| {row['method']} | {row['seconds']:.3f} | {row['us_per_pair']:.1f} | "
            f"{row['rms_rel']:.3%} | {row['max_late_rel']:.3%} | {row['max_early_rel']:.3%} "
            f"| {notes} |"
        )
    if "one_at_a_time" in report:
        one = report["one_at_a_time"]
        ms = one["ms_per_event"]
        lines += [
            "",
            f"One event at a time ({one['events']} events, a call each, against every "
            f"station): `traveltime_at` {ms['traveltime_at']:.2f} ms an event (it checks and "
            f"converts the model every call), a `TraveltimeTable` built once (in "
            f"{one['build_ms']:.1f} ms) {ms['TraveltimeTable.at']:.2f} ms; "
            + (
                "both bitwise equal to the batch call."
                if ms["traveltime_at bitwise_equal"] and ms["TraveltimeTable.at bitwise_equal"]
                else "**not equal to the batch call**."
            ),
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
