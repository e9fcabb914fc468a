"""What every benchmark script records beside its numbers: the machine, and the files.

Shared by the scripts here (run as scripts, so imported as a plain module from this
folder): one description of the machine and one way results are written to `results/`.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path


def machine(packages: Iterable[str]) -> dict:
    """The date, CPU, cores, RAM, platform, Python, and the versions of ``packages``
    (``"not installed"`` for a peer that is not)."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    mem = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu": model.group(1).strip() if model else platform.processor(),
        "cores": os.cpu_count(),
        "ram_gib": round(int(mem.group(1)) / 2**20, 1) if mem else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {d: version(d) for d in packages},
    }


def machine_lines(m: dict) -> list[str]:
    """The two Markdown bullets naming the machine and the versions of :func:`machine`."""
    return [
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['platform']}",
        f"- Python {m['python']}; " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
    ]


def write_results(stem: Path | None, report: dict, text: str) -> None:
    """Print the Markdown ``text`` and, unless ``stem`` is ``None`` (a quick run), write it
    and the ``report`` as JSON to ``stem``.md and ``stem``.json."""
    print("\n" + text)
    if stem is None:
        return
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    stem.with_suffix(".md").write_text(text + "\n")
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.md')}")


def main(argv: list[str] | None = None) -> int:
    """Print this machine as the benchmarks record it."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", default=["raygrid", "numpy", "numba"],
                        help="packages whose versions to show")  # fmt: skip
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print(json.dumps(machine(args.packages), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
