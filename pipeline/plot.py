"""Pictures of a survey store: traveltime contours over the model with rays, and gathers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only: raygrid never opens a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

__all__ = ["plot_field", "plot_gathers", "plot_store"]


def _section(dataset: xr.Dataset, name: str, source: int) -> xr.DataArray:
    """A 2D ``(z, x)`` section of a variable; 3D models are cut at the source's ``y``."""
    values = dataset[name]
    if "source" in values.dims:
        values = values.isel(source=source)
    if "y" in values.dims:
        values = values.sel(y=float(dataset["source_y"][source]), method="nearest")
    return values.transpose("z", "x")


def _rays_of(dataset: xr.Dataset, source: int) -> list[tuple[np.ndarray, np.ndarray]]:
    if "ray_start" not in dataset:
        return []
    starts = dataset["ray_start"].isel(source=source).values
    counts = dataset["ray_count"].isel(source=source).values
    ray_x, ray_z = dataset["ray_x"].values, dataset["ray_z"].values
    return [(ray_x[s : s + c], ray_z[s : s + c]) for s, c in zip(starts, counts)]


def plot_field(dataset: xr.Dataset, path: str | Path, source: int = 0) -> Path:
    """One source: traveltime contours over the velocity model, its rays and receivers.

    3D models are drawn on the ``y`` section through the source (rays projected onto it).
    """
    n_sources = dataset.sizes["source"]
    if not 0 <= source < n_sources:
        raise IndexError(f"source {source} out of range: the store has {n_sources} sources")
    velocity = _section(dataset, "velocity", source)
    fig, ax = plt.subplots(figsize=(9, 5), constrained_layout=True)
    image = ax.pcolormesh(velocity["x"], velocity["z"], velocity, cmap="viridis", shading="auto")
    fig.colorbar(image, ax=ax, shrink=0.8, label=f"velocity ({velocity.attrs.get('units', '')})")
    if "traveltime" in dataset:
        field = _section(dataset, "traveltime", source).load()
        top = float(np.nanmax(field.values)) if np.isfinite(field.values).any() else 0.0
        if top > 0:
            levels = np.linspace(0, top, 16)[1:]
            contours = ax.contour(
                field["x"], field["z"], field, levels=levels, colors="white", linewidths=0.8
            )
            ax.clabel(contours, fmt="%.2f s", fontsize=7)
    for ray_x, ray_z in _rays_of(dataset, source):
        ax.plot(ray_x, ray_z, color="red", lw=1.2)
    # Markers unclipped: a source on the surface or a receiver at the edge is drawn whole.
    if "receiver_x" in dataset:
        ax.plot(
            dataset["receiver_x"], dataset["receiver_z"], "v", color="black", ms=6, clip_on=False
        )
    ax.plot(
        dataset["source_x"][source], dataset["source_z"][source], "*",
        color="gold", ms=14, markeredgecolor="black", clip_on=False,
    )  # fmt: skip
    unit = velocity["x"].attrs.get("units", "")
    title = f"raygrid: first-arrival traveltimes, source {source} of {n_sources}"
    if "y" in dataset["velocity"].dims:
        title += (
            f"\nsection y = {float(velocity['y']):g} {unit} through the source; rays and "
            "receivers projected onto it"
        )
    ax.set(xlabel=f"x ({unit})", ylabel=f"z ({unit})", title=title)
    ax.invert_yaxis()  # z is positive down
    ax.set_aspect("equal")
    return _save(fig, path)


def plot_gathers(dataset: xr.Dataset, path: str | Path, receivers: Sequence[int] = ()) -> Path:
    """Receiver gathers: traveltime against source position at a few receivers, and the
    whole ``receiver_traveltime`` table as an image."""
    table = dataset["receiver_traveltime"].load()
    n_receivers = table.sizes["receiver"]
    if not receivers:
        receivers = sorted(set(np.linspace(0, n_receivers - 1, min(5, n_receivers)).astype(int)))
    source_x = dataset["source_x"].values
    order = np.argsort(source_x, kind="stable")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), constrained_layout=True)
    for r in receivers:
        label = f"receiver {r} (x={float(dataset['receiver_x'][r]):g})"
        left.plot(source_x[order], table.isel(receiver=r).values[order], ".-", ms=3, label=label)
    unit = dataset["source_x"].attrs.get("units") or dataset["x"].attrs.get("units", "")
    left.set(xlabel=f"source x ({unit})", ylabel="traveltime (s)", title="receiver gathers")
    left.invert_yaxis()  # seismic convention: time grows downwards
    shown = "" if len(receivers) == n_receivers else f"{len(receivers)} of {n_receivers}"
    left.legend(fontsize=7, title=f"receivers: {shown}" if shown else None, title_fontsize=7)
    image = right.imshow(table.values, aspect="auto", cmap="magma_r", interpolation="nearest")
    fig.colorbar(image, ax=right, label="traveltime (s)")
    right.set(xlabel="receiver", ylabel="source", title="receiver_traveltime(source, receiver)")
    for axis in (right.xaxis, right.yaxis):  # sources and receivers are numbered
        axis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    return _save(fig, path)


def plot_store(dataset: xr.Dataset, path: str | Path, source: int = 0) -> list[Path]:
    """The workflow's plots: ``path`` (one source's field and rays) and, for a survey with a
    receiver table and several sources, ``<path stem>-gathers.png``."""
    path = Path(path)
    written = [plot_field(dataset, path, source)]
    if "receiver_traveltime" in dataset and dataset.sizes["source"] > 1:
        written.append(plot_gathers(dataset, path.with_name(f"{path.stem}-gathers.png")))
    return written


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
