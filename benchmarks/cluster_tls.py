"""What TLS costs raygrid's own clusters: TCP against TLS, side by side, in one run.

What it measures
----------------
Every cluster raygrid starts speaks TLS with credentials of its own by default (``tls:
true`` in its cluster file; :mod:`raygrid.pipeline.credentials`). On two local worker
processes of one thread each (``LocalCluster``, loopback), alternately without and with
temporary credentials (``Security.temporary()``, as ``tls: true`` makes them):

- the cluster's start (with the credentials' RSA key);
- a model-sized broadcast (``--mb`` MB of float64 to every worker, as a survey sends its
  model) and a gather of 8 arrays of ``--mb / 8`` MB (as ``traveltimes(client=)`` brings
  fields home);
- a tiled survey, raygrid's heaviest exchange between workers: 301 x 601 nodes in 18 tiles
  of 101 x 201, radius 3, 6 sources, boundary strips exchanged every round, written to a
  Zarr store (:func:`raygrid.pipeline.workflow.run_workflow` on the cluster; its first run
  compiles and is left out).

Each round starts a TCP and a TLS cluster in turn; the medians over the rounds, and their
ratio, are reported.

How to run
----------
From the repository root, in raygrid's environment (no peers needed)::

    .venv/bin/python benchmarks/cluster_tls.py            # ~3 min on 2 cores
    .venv/bin/python benchmarks/cluster_tls.py --quick    # smoke, one round, small

The full run writes ``benchmarks/results/cluster_tls.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from report import machine as machine_of
from report import machine_lines, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "cluster_tls"

WORKFLOW = """\
model: {{synthetic: gradient, shape: {{z: {nz}, x: {nx}}}, spacing: 10.0}}
sources: [{sources}]
grid: {{radius: 3}}
compute: {{tiles: {{z: {tz}, x: {tx}}}}}
outputs: {{store: {store}}}
"""


def _workflow(folder: Path, name: str, quick: bool) -> Path:
    """The tiled survey's workflow file, its store ``name`` in ``folder``."""
    nz, nx, tz, tx, count = (61, 121, 31, 61, 2) if quick else (301, 601, 101, 201, 6)
    step = 10.0 * (nx - 1) / count  # spread along the surface
    sources = ", ".join(f"{{z: 0.0, x: {step * (i + 0.5):g}}}" for i in range(count))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(
        WORKFLOW.format(nz=nz, nx=nx, tz=tz, tx=tx, sources=sources, store=folder / name)
    )
    return path


def one_cluster(tls: bool, megabytes: int, quick: bool, folder: Path) -> dict:
    """Time one cluster's start, copies and tiled surveys; ``tls``: with credentials."""
    from distributed import Client, LocalCluster

    from raygrid.pipeline.credentials import temporary_security
    from raygrid.pipeline.workflow import read_workflow, run_workflow

    start = time.perf_counter()
    security = {"security": temporary_security()} if tls else {}
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                     dashboard_address=None, **security) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        started = time.perf_counter() - start
        model = np.random.default_rng(1).random(megabytes * 2**20 // 8)
        begun = time.perf_counter()
        shared = client.scatter(model, broadcast=True)
        client.submit(np.sum, shared).result()
        broadcast = time.perf_counter() - begun
        del shared
        begun = time.perf_counter()
        parts = client.map(np.ones, [megabytes * 2**20 // 64] * 8, pure=False)
        client.gather(parts)
        gather = time.perf_counter() - begun
        del parts
        surveys = []
        for run in range(1 if quick else 3):
            workflow = read_workflow(_workflow(folder, f"{'tls' if tls else 'tcp'}{run}", quick))
            begun = time.perf_counter()
            run_workflow(workflow, client=client)
            surveys.append(time.perf_counter() - begun)
    warm = surveys[1:] if len(surveys) > 1 else surveys  # the first compiles
    return {
        "start_s": started, "broadcast_s": broadcast, "gather_s": gather,
        "survey_s": statistics.median(warm), "address": "tls" if tls else "tcp",
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round, small sizes")
    parser.add_argument("--rounds", type=int, default=3, help="TCP/TLS pairs (default 3)")
    parser.add_argument("--mb", type=int, default=400, help="MB broadcast (default 400)")
    parser.add_argument("--results", default=None, help="results stem (default: full runs)")
    args = parser.parse_args(argv)
    rounds, megabytes = (1, 16) if args.quick else (args.rounds, args.mb)
    if args.quick:  # its small tiles are warned about, rightly
        import warnings

        from raygrid.pipeline.errors import InputWarning

        warnings.simplefilter("ignore", InputWarning)
    runs: dict[str, list[dict]] = {"tcp": [], "tls": []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(rounds):
            for tls in (False, True):
                name = "tls" if tls else "tcp"
                timed = one_cluster(tls, megabytes, args.quick, Path(scratch) / str(round_))
                runs[name].append(timed)
                said = ", ".join(f"{k} {v:.2f}" for k, v in timed.items() if k.endswith("_s"))
                print(f"round {round_} {name}: {said}", flush=True)
    measures = ("start_s", "broadcast_s", "gather_s", "survey_s")
    medians = {
        name: {m: statistics.median(r[m] for r in runs[name]) for m in measures} for name in runs
    }
    machine = machine_of(["distributed", "cryptography", "numba", "zarr"])
    labels = {
        "start_s": "cluster start (2 worker processes)",
        "broadcast_s": f"broadcast {megabytes} MB to both workers",
        "gather_s": f"gather 8 x {megabytes / 8:g} MB",
        "survey_s": "tiled survey (warm; strips every round, store written)",
    }
    lines = [
        "# TLS against TCP on raygrid's own local cluster",
        "",
        *machine_lines(machine),
        f"- {rounds} round(s), each a TCP cluster then a TLS one; medians",
        "",
        "| measure | TCP (s) | TLS (s) | TLS / TCP |",
        "|---|---|---|---|",
    ]
    for m in measures:
        tcp, tls = medians["tcp"][m], medians["tls"][m]
        lines.append(f"| {labels[m]} | {tcp:.2f} | {tls:.2f} | {tls / tcp:.2f} |")
    report = {"machine": machine, "rounds": rounds, "megabytes": megabytes, "runs": runs,
              "medians": medians}  # fmt: skip
    stem = Path(args.results) if args.results else (None if args.quick else RESULTS)
    write_results(stem, report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
