"""Pictures of results: traveltime contours over the velocity model, with rays."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: raygrid never opens a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

__all__ = ["plot_store"]


def plot_store(dataset: xr.Dataset, path: str | Path, source: int = 0) -> Path:
    """Write a PNG of one source's traveltime contours over the velocity, with its rays.

    3D models are drawn on the ``y`` section through the source.
    """
    field = dataset["traveltime"].isel(source=source)
    velocity = dataset["velocity"]
    if "y" in field.dims:
        y = float(dataset["source_y"][source])
        field = field.sel(y=y, method="nearest")
        velocity = velocity.sel(y=y, method="nearest")
    fig, ax = plt.subplots(figsize=(9, 5), constrained_layout=True)
    image = ax.pcolormesh(
        velocity["x"], velocity["z"], velocity.transpose("z", "x"), cmap="viridis", shading="auto"
    )
    fig.colorbar(image, ax=ax, shrink=0.8, label=f"velocity ({velocity.attrs.get('units', '')})")
    levels = np.linspace(0, float(np.nanmax(field.values)), 16)[1:]
    contours = ax.contour(
        field["x"],
        field["z"],
        field.transpose("z", "x"),
        levels=levels,
        colors="white",
        linewidths=0.8,
    )
    ax.clabel(contours, fmt="%.2f s", fontsize=7)
    if "ray_start" in dataset:
        mine = np.flatnonzero(dataset["ray_source"].values == source)
        for ray in mine:
            start = int(dataset["ray_start"][ray])
            stop = start + int(dataset["ray_count"][ray])
            ax.plot(dataset["ray_x"][start:stop], dataset["ray_z"][start:stop], color="red", lw=1.2)
        ax.plot(dataset["receiver_x"], dataset["receiver_z"], "v", color="black", ms=7)
    ax.plot(
        dataset["source_x"][source],
        dataset["source_z"][source],
        "*",
        color="gold",
        ms=14,
        markeredgecolor="black",
    )
    unit = field["x"].attrs.get("units", "")
    ax.set(xlabel=f"x ({unit})", ylabel=f"z ({unit})", title="raygrid: first-arrival traveltimes")
    ax.invert_yaxis()  # z is positive down
    ax.set_aspect("equal")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
