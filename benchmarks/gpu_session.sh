#!/usr/bin/env bash
# A GPU session's checks on the GPU machine (repo root), by part, in this order by default:
#   tests  the CUDA tests on the real device (pytest -m gpu)
#   ab     gpu_ab.py $GPU_AB_ARGS: the pull variants head to head, interleaved (about a
#          minute); with a .baseline/kernels here (an earlier revision's, made on the
#          workstation with `mkdir -p .baseline && git archive REV kernels | tar -x -C
#          .baseline`, carried like .whl), that code's solve too, in the same rounds
#   sweep  gpu_sweep.py: settings side by side (a few minutes)
#   blocks gpu_sweep.py --blocks: 2D tile shapes and in-block bounds at 1601^2, radius 3
#          to 6, resident and whole calls (about 2 minutes)
#   study  gpu_study.py with $GPU_STUDY_ARGS (the full study takes about 10 minutes: more
#          than one device call allows with the rest, so run it alone or trimmed, e.g.
#          GPU_STUDY_ARGS="--sizes 1024 1601 --repeat 2")
#   targets  gpu_study.py on the issue-3 targets alone: 1601^2 at radius 3 to 6 (CPU
#          Dijkstra beside the pull solver, whole call and resident, the same with the
#          rows walk, precomputed weights, and the pipeline's traveltime()), 256^3 at
#          radius 2, and 16 sources at 1601^2 radius 5 in float64 at batch 1, 4 and 8
#          (sources per second, and the speed-up per source over the CPU Dijkstra)
#   profile  gpu_profile.py: the host's share of a solve, piece by piece and by cProfile
#          (about 25 s)
#   tiled  tiled_decomposition.py --cuda: one solve by domain decomposition on a dask-cuda
#          cluster against the single domain, with where the tiled solve's time goes
#          (rounds against tile tasks, the CUDA solvers' model setup, starting times,
#          relaxation and copy back)
#   ncu    Nsight Compute on three mid-solve passes of the pull kernel (gpu_profile.py
#          --solves 1, 1601^2 radius 3, --set full), then one pass's stall reasons (the
#          raw page of WarpStateStats), where ncu is installed (about 20 s each)
# Each part stops after its share of the call (targets, blocks and tiled 150 s, ab 200 s (its variants
# compile three pairs of kernels), profile 110 s, each of ncu's two profiles 110 s,
# tests 230 s, sweep
# and study 540 s; $GPU_PART_LIMIT seconds for every part if set; what it printed by then is
# in $OUT, and each has 10 s more to stop), so one device call of `targets tests ab` fits
# a session's 15 minutes of device time with the machine's start (at most 10 minutes with
# the wheels' install at these limits; GPU_PART_LIMIT=170 keeps it under 9). Measured on an H200 (2026-11-27): targets 71-95 s, ab 79 s, the 18 tests
# about 200 s from a cold compile (120 s stopped them after 5), a machine's start ~50 s.
# e.g. `bash benchmarks/gpu_session.sh targets tests ab` (the plan when device time is
# short), or `tests ab sweep` then `study` in two calls where there is time for them.
# $GPU_TESTS: the test paths of the tests part (default: all of tests/).
# Logs and JSON go to $OUT (or ./gpu-session-output). Carry .whl
# (../shared/gpu/fetch-wheels.sh) for dask and zarr, plus a numpy 2.4 wheel (the image's
# numpy 2.5 breaks numba-cuda 0.30.4: np.row_stack) and filelock (the store's lock, which
# fetch-wheels.sh does not list):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 -d .whl numpy==2.4.6 \
#       filelock==4.2.12
set -uo pipefail
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(tests ab sweep study)
for part in "${parts[@]}"; do
    case $part in tests|ab|sweep|blocks|study|targets|profile|tiled|ncu) ;;
        *) echo "unknown part: $part (tests, ab, sweep, blocks, study, targets, profile, tiled, ncu)" >&2
           exit 2 ;;
    esac
done
out=${OUT:-gpu-session-output}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
# raygrid from this checkout without installing it: map the two folders as the package.
src=${TMPDIR:-/tmp}/raygrid-src
mkdir -p "$src/raygrid"
ln -sfn "$PWD/kernels" "$src/raygrid/kernels"
ln -sfn "$PWD/pipeline" "$src/raygrid/pipeline"
export PYTHONPATH=$src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 -m numba -s > "$out/numba-sysinfo.txt" 2>&1
python3 -c "import numpy, sys; sys.exit(tuple(map(int, numpy.__version__.split('.')[:2])) >= (2, 5))" \
    || echo "numpy >= 2.5: numba-cuda 0.30.4 cannot compile kernels; carry numpy 2.4" >&2
# A part past its limit is stopped (SIGINT first, so pytest and Python print what they
# have) and the next one starts: a slow compile cannot eat the whole call.
within() { timeout -s INT -k 10 "$limit" "$@"; }
for part in "${parts[@]}"; do
    case $part in
        targets|blocks|tiled) limit=150 ;; ab) limit=200 ;; profile|ncu) limit=110 ;;
        tests) limit=230 ;;
        *) limit=540 ;;
    esac
    limit=${GPU_PART_LIMIT:-$limit}
    started=$(date +%s)
    case $part in
        tests) within python3 -m pytest -m gpu -p no:cacheprovider -q ${GPU_TESTS:-tests} 2>&1 \
            | tee "$out/gpu-tests.log" ;;
        ab) baseline=(); [ -d .baseline/kernels ] && baseline=(--baseline .baseline)
            within python3 benchmarks/gpu_ab.py "${baseline[@]}" ${GPU_AB_ARGS:-} 2>&1 \
                | tee "$out/gpu_ab.jsonl" ;;
        sweep) within python3 benchmarks/gpu_sweep.py > "$out/gpu_sweep.jsonl" \
            2> "$out/gpu-sweep.log" ;;
        blocks) within python3 benchmarks/gpu_sweep.py --blocks 2>&1 \
            | tee "$out/gpu_sweep_blocks.jsonl" ;;
        study) within python3 benchmarks/gpu_study.py ${GPU_STUDY_ARGS:-} \
            --out "$out/gpu_study.json" 2>&1 | tee "$out/gpu-study.log" ;;
        targets) within python3 benchmarks/gpu_study.py --sizes 1601 --radii 3 4 5 6 --n3 256 \
            --radii3 2 --batches 1 4 8 --survey 1601 5 16 --survey-precision float64 --repeat 2 \
            --solvers pull pull-resident pull-rows pull-resident-rows pull-precomputed pipeline \
            --out "$out/gpu_targets.json" 2>&1 | tee "$out/gpu-targets.log" ;;
        profile) within python3 benchmarks/gpu_profile.py > "$out/gpu_profile.txt" \
            2> "$out/gpu-profile.log" ;;
        tiled) within python3 benchmarks/tiled_decomposition.py --cuda \
            --out "$out/tiled_decomposition_gpu.json" 2>&1 | tee "$out/gpu-tiled.log" ;;
        ncu) ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu \
                2>/dev/null | head -1)
            if [ -z "$ncu" ]; then echo "ncu: not installed here" | tee "$out/gpu-ncu.txt"
            else within "$ncu" -k regex:per_pass --launch-skip 100 --launch-count 3 --set full \
                python3 benchmarks/gpu_profile.py --radius 3 --solves 1 > "$out/gpu-ncu.txt" 2>&1
                # Each stall reason's share (the details page gives only their sum).
                within "$ncu" -k regex:per_pass --launch-skip 100 --launch-count 1 \
                    --section WarpStateStats --page raw python3 benchmarks/gpu_profile.py \
                    --radius 3 --solves 1 > "$out/gpu-ncu-stalls.txt" 2>&1
            fi ;;
    esac
    echo "part $part: $(( $(date +%s) - started )) s" | tee -a "$out/parts.log"
done
