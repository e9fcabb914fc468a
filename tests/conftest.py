"""Shared test settings: keep dask's config out of the home directory, files headless."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Before anything imports dask (and dask-jobqueue, which writes a config file on import).
# The folders are made only when none is given, and removed at exit: nothing is left behind
# (workers' scratch space, its lock files included, would otherwise stay in the system's
# temporary directory).
for _variable, _prefix in [
    ("DASK_CONFIG", "raygrid-dask-config-"),
    ("DASK_TEMPORARY_DIRECTORY", "raygrid-dask-scratch-"),
]:
    if _variable not in os.environ:
        os.environ[_variable] = tempfile.mkdtemp(prefix=_prefix)
        atexit.register(shutil.rmtree, os.environ[_variable], ignore_errors=True)
os.environ.setdefault("MPLBACKEND", "Agg")
# CUDA kernels run in Numba's simulator unless a real GPU run is asked for with
# NUMBA_ENABLE_CUDASIM=0 (then tests marked `gpu` run and simulator-only tests skip).
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
