"""What the pull kernels compile to on sm_90, without a GPU: registers, spills, shared memory.

A session without a device cannot time a kernel change, but it can see what ptxas makes of
it: registers per thread decide how many 256-thread blocks an SM holds (two at 128 or
fewer, one above: ``results/gpu_targets_h100.md``), and spills put local memory on the
critical path. This script compiles each kernel with the real NVVM and links it for sm_90
with nvJitLink (both from the ``numba-cuda[cu13]`` wheels; no GPU or driver needed), and
prints what ptxas reported, with ``--baseline DIR`` (an earlier revision's ``kernels/``, as
for ``gpu_ab.py``) beside it::

    git archive REV kernels | tar -x -C .baseline
    python benchmarks/gpu_static.py --baseline .baseline

``--sass DIR`` also writes each kernel's cubin there, for ``nvdisasm -c`` (pip package
``nvidia-cuda-nvdisasm``). Two to three minutes on a 2-core machine; one JSON row per kernel
and revision follows the table with ``--json``. :func:`link_report` is also how the test
suite's sm_90 check keeps the issue-3 target's kernel within 128 registers
(``tests/test_cuda_pull.py``). Results: ``results/gpu_static_sm90.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # the real compiler, even under the test settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numba  # noqa: E402
import numpy as np  # noqa: E402

#: (name, block, radius, precision, batch, precomputed weights, kernel): the default tile
#: shapes at the study's radii, the survey's float32 batch, precomputed weights, 3D, and the
#: phases schedule (whose register cap, ``PHASES_REGISTERS``, this shows the need of).
KERNELS = [
    *[(f"2D r{r}", (16, 1, 16), (r, 0, r), np.float64, 1, False, "per_pass") for r in range(1, 7)],
    ("2D r4 f32 batch 8", (16, 1, 16), (4, 0, 4), np.float32, 8, False, "per_pass"),
    ("2D r3 precomputed", (16, 1, 16), (3, 0, 3), np.float64, 1, True, "per_pass"),
    ("3D r2", (4, 8, 8), (2, 2, 2), np.float64, 1, False, "per_pass"),
    ("3D r3", (4, 8, 8), (3, 3, 3), np.float64, 1, False, "per_pass"),
    ("2D r3 phases", (16, 1, 16), (3, 0, 3), np.float64, 1, False, "phases"),
    ("3D r2 phases", (4, 8, 8), (2, 2, 2), np.float64, 1, False, "phases"),
]


#: 0.5 as PTX writes a double: its product with a small integer is exact, so fusing it into
#: a sum rounds nothing (a cell face's parameter, ``raygrid.kernels.segment``).
HALF = "0d3FE0000000000000"


def fused_sums(ptx: str) -> list[str]:
    """The float64 fused multiply-adds in ``ptx`` that can round otherwise than the CPU,
    which never fuses: all but those by 0.5 (exact) and those whose result is only
    compared (the pull kernel's pruning bound, conservative by its margin,
    ``raygrid.kernels.bounds``). The kernels write every product a sum takes as an
    explicitly rounded one (``raygrid.kernels.segment``'s notes), so none should be left:
    ``tests/test_cuda_pull.py`` and ``test_cuda_nearfar.py`` check each kernel."""
    lines = [line.strip() for line in ptx.splitlines()]
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("fma.rn.f64") or HALF in line:
            continue
        result = re.escape(line.split()[1].rstrip(","))
        uses = [later for later in lines[i + 1 :] if re.search(rf"{result}(?!\d)", later)]
        if not (uses and all(use.startswith("setp.") for use in uses)):
            found.append(line)
    return found


def argument_types(precision, kernel: str) -> tuple:
    """The kernel's argument types, as the solver's arrays give them."""
    f8, i8, i4 = numba.float64, numba.int64, numba.int32
    t = numba.from_dtype(np.dtype(precision))
    model = (
        f8[:, :, ::1], f8[::1], f8[::1], t[:, ::1],
        t[:, :, :, ::1], numba.int16[:, :, :, ::1], i4[:, :, ::1], i4[:, :, ::1],
    )  # fmt: skip
    if kernel == "phases":
        queue = (f8[::1], i4[::1], i8[::1], i4[:, ::1], i4[::1], i4[::1], f8[::1])
        return (*model, *queue, i8[::1], f8, i8)
    return (*model, f8[:, ::1], i4[:, ::1], i4[:, ::1], i4[::1], f8[::1], i8[::1], f8, i8)


def link_report(ptx: str, cap: int | None = None) -> tuple[dict, bytes]:
    """ptxas's report on ``ptx`` linked for sm_90 by nvJitLink (with at most ``cap``
    registers per thread), and the cubin."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    options = LinkerOptions(arch="sm_90", verbose=True, max_register_count=cap)
    linker = Linker(ObjectCode.from_ptx(ptx.encode()), options=options)
    cubin = linker.link("cubin").code
    log = linker.get_info_log()
    found = re.search(
        r"used (\d+) registers.*?(\d+) stack, (\d+) bytes smem.*?(\d+) bytes lmem", log
    )
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if found is None or spills is None:
        raise RuntimeError(f"no ptxas report in nvJitLink's log: {log[-500:]}")
    registers, stack, smem, lmem = map(int, found.groups())
    return {
        "registers": registers,
        "spill_stores": int(spills.group(1)),
        "spill_loads": int(spills.group(2)),
        "stack_bytes": stack,
        "shared_bytes": smem,
    }, cubin


def blocks_per_sm(registers: int, threads: int) -> int:
    """Resident blocks an sm_90 SM's 64 k registers allow (8-register granularity)."""
    return 65536 // (-(-registers // 8) * 8 * threads)


def report(code, label: str, sass: Path | None) -> list[dict]:
    """One row per kernel of :data:`KERNELS` compiled from ``code`` (a ``kernels``
    package)."""
    import importlib

    from numba import cuda

    pull = importlib.import_module(code.__name__ + ".cuda.pull")
    rows = []
    for name, block, radius, precision, batch, precomputed, kernel in KERNELS:
        started = time.perf_counter()
        star = code.forward_star(radius)
        kernels = pull.pull_kernels(block, star, batch, precision, precomputed)
        function = kernels[2 if kernel == "phases" else 0].py_func
        ptx, _ = cuda.compile_ptx(function, argument_types(precision, kernel), cc=(9, 0))
        row, cubin = link_report(ptx)
        linked = [(name, row, cubin)]
        if kernel == "phases" and row["registers"] > pull.PHASES_REGISTERS:
            # What the solver launches instead (register_capped).
            linked.append((f"{name} capped", *link_report(ptx, pull.PHASES_REGISTERS)))
        threads = int(np.prod(block))
        for kernel_name, row, cubin in linked:
            row.update(
                revision=label, kernel=kernel_name, threads=threads,
                blocks_per_sm=blocks_per_sm(row["registers"], threads),
                compile_s=round(time.perf_counter() - started, 1),
            )  # fmt: skip
            if sass is not None:
                slug = re.sub(r"\W+", "_", f"{label} {kernel_name}").strip("_")
                (sass / f"{slug}.cubin").write_bytes(cubin)
            rows.append(row)
            print(f"  {label:9} {kernel_name:26} {row['registers']:4} registers", file=sys.stderr)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="an earlier revision's kernels/ copied here")
    parser.add_argument("--sass", type=Path, help="write each kernel's cubin to this folder")
    parser.add_argument("--json", action="store_true", help="also print one JSON row each")
    args = parser.parse_args(argv)

    import raygrid.kernels

    revisions = [("this", raygrid.kernels)]
    if args.baseline:
        from gpu_ab import load_baseline

        revisions.insert(0, ("baseline", load_baseline(args.baseline)))
    if args.sass is not None:
        args.sass.mkdir(parents=True, exist_ok=True)
    rows = [row for label, code in revisions for row in report(code, label, args.sass)]

    print("| kernel | revision | registers | blocks/SM | spills (st/ld B) | shared B |")
    print("|---|---|---:|---:|---|---:|")
    for name in dict.fromkeys(row["kernel"] for row in rows):
        for row in (r for r in rows if r["kernel"] == name):
            print(
                f"| {name} | {row['revision']} | {row['registers']} | {row['blocks_per_sm']} "
                f"| {row['spill_stores']}/{row['spill_loads']} | {row['shared_bytes']} |"
            )
    if args.json:
        for row in rows:
            print(json.dumps(row))


if __name__ == "__main__":
    main()
