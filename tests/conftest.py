"""Shared test settings: keep dask's config out of the home directory, files headless."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Before anything imports dask (and dask-jobqueue, which writes a config file on import).
# The folder is made only when none is given, and removed at exit: nothing is left behind.
if "DASK_CONFIG" not in os.environ:
    os.environ["DASK_CONFIG"] = tempfile.mkdtemp(prefix="raygrid-dask-config-")
    atexit.register(shutil.rmtree, os.environ["DASK_CONFIG"], ignore_errors=True)
os.environ.setdefault("MPLBACKEND", "Agg")
# CUDA kernels run in Numba's simulator unless a real GPU run is asked for with
# NUMBA_ENABLE_CUDASIM=0 (then tests marked `gpu` run and simulator-only tests skip).
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
