"""raygrid.pipeline: the public Python API (models, traveltimes, raypaths, I/O, CLI).

Everything here has a name, a unit, a coordinate or a file; the numeric work is done by
:mod:`raygrid.kernels`.

The names below are imported on first use (PEP 562): the ``raygrid`` command imports this
package, and loading Dask, xarray, Zarr and Numba for ``raygrid --help`` took 2.6 s of its
2.7 s. ``import raygrid.pipeline as rg; rg.traveltime(...)`` works as with eager imports, and
so does ``rg.<submodule>``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module that defines it.
_SOURCES = {
    "InputError": "errors",
    "InputWarning": "errors",
    "RunFailed": "errors",
    "Grid": "grid",
    "grid_from_velocity": "grid",
    "open_survey": "inspect",
    "load_velocity": "io",
    "TraveltimeTable": "lookup",
    "traveltime_at": "lookup",
    "checkerboard": "models",
    "constant_model": "models",
    "gradient_model": "models",
    "gradient_traveltime": "models",
    "layered_model": "models",
    "plot_field": "plot",
    "plot_gathers": "plot",
    "raypath": "rays",
    "raypaths": "rays",
    "ray_cells": "raycells",
    "traveltime": "solve",
    "traveltimes": "solve",
    "__version__": "version",
}

__all__ = [
    "Grid",
    "InputError",
    "InputWarning",
    "RunFailed",
    "TraveltimeTable",
    "__version__",
    "checkerboard",
    "constant_model",
    "gradient_model",
    "gradient_traveltime",
    "grid_from_velocity",
    "layered_model",
    "load_velocity",
    "open_survey",
    "plot_field",
    "plot_gathers",
    "ray_cells",
    "raypath",
    "raypaths",
    "traveltime",
    "traveltime_at",
    "traveltimes",
]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        try:  # a submodule (rg.workflow, rg.solve), as after `import raygrid.pipeline.x`
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise  # the submodule exists and failed to import: say why
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{source}", __name__), name)
    globals()[name] = value  # found once, then an ordinary attribute
    return value


def __dir__() -> list[str]:
    # The public names and the submodules (rg.workflow, rg.plot): not this module's own
    # imports (Any, importlib), which tab completion offered.
    import pkgutil

    modules = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return sorted(set(__all__) | modules)


if TYPE_CHECKING:  # what type checkers and editors read
    from .errors import InputError, InputWarning, RunFailed
    from .grid import Grid, grid_from_velocity
    from .inspect import open_survey
    from .io import load_velocity
    from .lookup import TraveltimeTable, traveltime_at
    from .models import (
        checkerboard,
        constant_model,
        gradient_model,
        gradient_traveltime,
        layered_model,
    )
    from .plot import plot_field, plot_gathers
    from .raycells import ray_cells
    from .rays import raypath, raypaths
    from .solve import traveltime, traveltimes
    from .version import __version__
