"""raygrid.pipeline: the public Python API (models, traveltimes, raypaths, I/O, CLI).

Everything here has a name, a unit, a coordinate or a file; the numeric work is done by
:mod:`raygrid.kernels`.
"""

from .errors import InputError, InputWarning, RunFailed
from .grid import Grid, grid_from_velocity
from .inspect import open_survey
from .io import load_velocity
from .lookup import traveltime_at
from .models import (
    checkerboard,
    constant_model,
    gradient_model,
    gradient_traveltime,
    layered_model,
)
from .rays import raypath
from .solve import traveltime, traveltimes
from .version import __version__

__all__ = [
    "Grid",
    "InputError",
    "InputWarning",
    "RunFailed",
    "__version__",
    "checkerboard",
    "constant_model",
    "gradient_model",
    "gradient_traveltime",
    "grid_from_velocity",
    "layered_model",
    "load_velocity",
    "open_survey",
    "raypath",
    "traveltime",
    "traveltime_at",
    "traveltimes",
]
