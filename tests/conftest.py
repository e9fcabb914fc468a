"""Shared test settings: keep dask's config out of the home directory, files headless."""

from __future__ import annotations

import os
import tempfile

# Before anything imports dask (and dask-jobqueue, which writes a config file on import).
os.environ.setdefault("DASK_CONFIG", tempfile.mkdtemp(prefix="raygrid-dask-config-"))
os.environ.setdefault("MPLBACKEND", "Agg")
# CUDA kernels run in Numba's simulator unless a real GPU run is asked for with
# NUMBA_ENABLE_CUDASIM=0 (then tests marked `gpu` run and simulator-only tests skip).
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
