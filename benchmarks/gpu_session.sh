#!/usr/bin/env bash
# One GPU session's worth of checks, as one command on the GPU machine (repo root):
# the CUDA tests on the real device, then the GPU benchmarks. Logs and JSON go to $OUT
# (or ./gpu-session-output). Carry .whl (../shared/gpu/fetch-wheels.sh) for dask and zarr,
# plus a numpy 2.4 wheel: the image's numpy 2.5 breaks numba-cuda 0.30.4 (np.row_stack).
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 -d .whl numpy==2.4.6
set -uo pipefail
out=${OUT:-gpu-session-output}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
# raygrid from this checkout without installing it: map the two folders as the package.
mkdir -p /tmp/raygrid-src/raygrid
ln -sfn "$PWD/kernels" /tmp/raygrid-src/raygrid/kernels
ln -sfn "$PWD/pipeline" /tmp/raygrid-src/raygrid/pipeline
export PYTHONPATH=/tmp/raygrid-src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 -m numba -s > "$out/numba-sysinfo.txt" 2>&1
python3 -c "import numpy, sys; sys.exit(tuple(map(int, numpy.__version__.split('.')[:2])) >= (2, 5))" \
    || echo "numpy >= 2.5: numba-cuda 0.30.4 cannot compile kernels; carry numpy 2.4" >&2
python3 -m pytest -m gpu -p no:cacheprovider -q tests 2>&1 | tee "$out/gpu-tests.log"
python3 benchmarks/gpu_sweep.py > "$out/gpu_sweep.jsonl" 2> "$out/gpu-sweep.log"
python3 benchmarks/gpu_study.py ${GPU_STUDY_ARGS:-} --out "$out/gpu_study.json" 2>&1 \
    | tee "$out/gpu-study.log"
