"""Survey pictures: honest gathers, legends with units, titles that fit, stores without fields."""

from __future__ import annotations

import os
import socket
from itertools import product
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.transforms import Bbox

from raygrid.pipeline import InputError, plot

SPEED = 2000.0  # m/s: the tests' traveltimes are straight-line distances at this speed


def store(
    sources: list[dict[str, float]],
    receivers: list[dict[str, float]],
    shape: dict[str, int],
    fields: bool = True,
) -> xr.Dataset:
    """A Dataset laid out as ``open_survey`` gives a store (100 m nodes, no rays), built in
    memory: the pictures depend on the layout, not on how the times were solved."""
    coords = {
        d: xr.DataArray(np.arange(n) * 100.0, dims=d, attrs={"units": "m"})
        for d, n in shape.items()
    }
    dataset = xr.Dataset(coords=coords)
    velocity = xr.broadcast(1500.0 + coords["z"], *coords.values())[0]  # 1 m/s more per m
    dataset["velocity"] = velocity.transpose(*shape).assign_attrs(units="m/s")
    for kind, points in (("source", sources), ("receiver", receivers)):
        for d in shape:
            dataset.coords[f"{kind}_{d}"] = (kind, [float(p[d]) for p in points])
    if fields:
        field = _time(dataset, coords).transpose("source", *shape)
        dataset["traveltime"] = field.assign_attrs(units="s")
    at_receivers = _time(dataset, {d: dataset[f"receiver_{d}"] for d in shape})
    dataset["receiver_traveltime"] = at_receivers.transpose("source", "receiver")
    return dataset


def _time(dataset: xr.Dataset, at: dict[str, xr.DataArray]) -> xr.DataArray:
    """Straight-ray traveltime from every source to the points ``at``."""
    return np.sqrt(sum((at[d] - dataset[f"source_{d}"]) ** 2 for d in at)) / SPEED


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions draw, kept open (and drawn) instead of saved."""
    kept = []

    def keep(fig, path, dpi=plot.DPI):
        FigureCanvasAgg(fig).draw()  # (raygrid's figures have no pyplot canvas)
        kept.append(fig)
        return Path(path)

    monkeypatch.setattr(plot, "_save", keep)
    return kept


def title(fig) -> str:
    """A figure's title as one line: its lines are broken to fit the figure's width."""
    return " ".join(fig.get_suptitle().split())


LINE_2D = [{"z": 0.0, "x": x} for x in (800.0, 0.0, 400.0, 1200.0)]  # listed out of order
GRID_3D = [{"z": 0.0, "y": y, "x": x} for y, x in product((200.0, 600.0, 1000.0), repeat=2)]
SHAPE_3D = {"z": 21, "y": 13, "x": 17}


def test_3d_source_grid_gathers_are_unjoined_points_against_offset(tmp_path, figures):
    receivers = [{"z": 1500.0, "y": 700.0, "x": 100.0}, {"z": 1500.0, "y": 700.0, "x": 1500.0}]
    dataset = store(GRID_3D, receivers, SHAPE_3D)
    plot.plot_gathers(dataset, tmp_path / "gathers.png")
    gathers = figures[0].axes[0]
    assert gathers.get_xlabel() == "horizontal source-receiver offset (m)"
    lines = gathers.get_lines()
    assert len(lines) == 2
    for r, line in enumerate(lines):
        # No line joins two sources, so none joins sources that differ in y.
        assert line.get_linestyle() == "None" and line.get_marker() not in ("None", "", None)
        offsets = np.hypot(
            dataset["source_x"].values - receivers[r]["x"],
            dataset["source_y"].values - receivers[r]["y"],
        )
        np.testing.assert_allclose(line.get_xdata(), offsets)
        np.testing.assert_allclose(line.get_ydata(), dataset["receiver_traveltime"][:, r])


@pytest.mark.parametrize(
    ("sources", "shape", "along"),
    [
        ([{"z": 0.0, "y": y, "x": 500.0} for y in (900.0, 100.0, 500.0)], SHAPE_3D, "y"),
        ([{"z": z, "x": 300.0} for z in (600.0, 0.0, 300.0)], {"z": 11, "x": 11}, "z"),
    ],
    ids=["3d-line-along-y", "2d-borehole"],
)
def test_sources_on_another_line_are_joined_along_it(tmp_path, figures, sources, shape, along):
    receivers = [{d: 100.0 * (n - 1) for d, n in shape.items()}]
    plot.plot_gathers(store(sources, receivers, shape), tmp_path / "gathers.png")
    gathers = figures[0].axes[0]
    assert gathers.get_xlabel() == f"source {along} (m)"
    (line,) = gathers.get_lines()
    assert line.get_linestyle() == "-"
    np.testing.assert_array_equal(line.get_xdata(), sorted(s[along] for s in sources))


def test_2d_line_gathers_stay_joined_along_x_with_receivers_named_in_metres(tmp_path, figures):
    receivers = [{"z": 1000.0, "x": 200.0}, {"z": 1000.0, "x": 1000.0}]
    plot.plot_gathers(store(LINE_2D, receivers, {"z": 11, "x": 13}), tmp_path / "gathers.png")
    gathers = figures[0].axes[0]
    assert gathers.get_xlabel() == "source x (m)"
    assert all(line.get_linestyle() == "-" for line in gathers.get_lines())
    np.testing.assert_array_equal(gathers.get_lines()[0].get_xdata(), [0, 400, 800, 1200])
    labels = [t.get_text() for t in gathers.get_legend().get_texts()]
    # Only x differs between the receivers: their common depth is no help in telling them apart,
    # and is said once, in the legend's title.
    assert labels == ["receiver 0 (x=200 m)", "receiver 1 (x=1000 m)"]
    assert gathers.get_legend().get_title().get_text() == "receivers: all at z=1000 m"


def test_3d_legend_names_every_coordinate_that_varies_with_its_unit(tmp_path, figures):
    receivers = [{"z": 1500.0, "y": 700.0, "x": 0.0}, {"z": 1800.0, "y": 1200.0, "x": 500.0}]
    plot.plot_gathers(store(GRID_3D, receivers, SHAPE_3D), tmp_path / "gathers.png")
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert labels == [
        "receiver 0 (x=0 m, y=700 m, z=1500 m)",
        "receiver 1 (x=500 m, y=1200 m, z=1800 m)",
    ]
    assert not figures[0].axes[0].get_legend().get_title().get_text()  # nothing shared
    # A 3D surface spread: x and y tell receivers apart, their common depth is in the title.
    spread = [{"z": 0.0, "y": 700.0, "x": 0.0}, {"z": 0.0, "y": 1200.0, "x": 500.0}]
    plot.plot_gathers(store(GRID_3D, spread, SHAPE_3D), tmp_path / "spread.png")
    legend = figures[1].axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()][0] == "receiver 0 (x=0 m, y=700 m)"
    assert legend.get_title().get_text() == "receivers: all at z=0 m"


@pytest.mark.parametrize("fields", [True, False])
def test_3d_title_fits_inside_the_figure_over_a_centred_picture(tmp_path, figures, fields):
    # A model deeper than it is wide gives a narrow axes: the section note used to run off
    # the figure's right edge, and the axes was pushed against the colorbar at the right.
    receivers = [{"z": 1500.0, "y": 700.0, "x": 0.0}, {"z": 1800.0, "y": 1200.0, "x": 1600.0}]
    dataset = store(GRID_3D, receivers, SHAPE_3D, fields=fields)
    plot.plot_field(dataset, tmp_path / "field.png", source=4)
    fig = figures[0]
    texts = [t for t in fig.findobj(plt.Text) if t.get_visible() and t.get_text()]
    assert any("section y = 600 m" in t.get_text() for t in texts)
    box = fig.bbox
    for text in texts:
        extent = text.get_window_extent()
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1, text.get_text()
        assert box.y0 <= extent.y0 and extent.y1 <= box.y1, text.get_text()
    drawn = Bbox.union([ax.get_tightbbox() for ax in fig.axes])  # the model and its colorbar
    assert drawn.x0 - box.x0 == pytest.approx(box.x1 - drawn.x1, abs=0.05 * box.width)


@pytest.mark.parametrize(("sources", "shape"), [(LINE_2D, {"z": 11, "x": 13}), (GRID_3D, SHAPE_3D)])
def test_store_without_fields_says_so(tmp_path, figures, sources, shape):
    dataset = store(sources, [{"z": 1000.0, "y": 600.0, "x": 600.0}], shape, fields=False)
    plot.plot_field(dataset, tmp_path / "field.png")
    said = " ".join(t.get_text() for t in figures[0].findobj(plt.Text))
    assert "first-arrival traveltimes" not in said
    assert "velocity model and receivers" in said
    assert "no traveltime fields (outputs.fields: false)" in said


def test_3d_receivers_off_the_section_are_hollow(tmp_path, figures):
    # Projected onto the section through the source, a receiver far from it would look
    # as if it lay there: only those within half a node of the section are drawn solid.
    receivers = [{"z": 1500.0, "y": 640.0, "x": 100.0}, {"z": 1800.0, "y": 1200.0, "x": 500.0}]
    plot.plot_field(store(GRID_3D, receivers, SHAPE_3D), tmp_path / "field.png", source=4)
    fig = figures[0]
    marked = {
        line.get_markerfacecolor(): list(line.get_xdata())
        for line in fig.axes[0].get_lines()
        if line.get_marker() == "v"
    }
    assert marked == {"black": [100.0], "none": [500.0]}
    said = " ".join(t.get_text() for t in fig.findobj(plt.Text))
    assert "hollow: receivers off the section" in said
    plot.plot_field(store(GRID_3D, receivers[:1], SHAPE_3D), tmp_path / "near.png", source=4)
    said = " ".join(t.get_text() for t in figures[1].findobj(plt.Text))
    assert "off the section" not in said
    # The map at the lone receiver's depth (through the surface source it showed only the
    # top layer, the receiver hollow 1500 m below it); asked through the source, hollow.
    assert "map z = 1500 m (the receivers' depth; the source at z = 0 m)" in said
    assert "hollow: receivers off the map" not in said
    plot.plot_field(store(GRID_3D, receivers[:1], SHAPE_3D), tmp_path / "top.png", 4, map_z=0.0)
    assert "hollow: receivers off the map" in title(figures[2])


def test_3d_section_title_names_the_source_between_node_planes(tmp_path, figures):
    # The section is the node plane nearest the source: it was said to pass "through the
    # source", at the plane's y, for a source 30 m off it.
    sources = [{"z": 0.0, "y": 630.0, "x": 600.0}, {"z": 0.0, "y": 600.0, "x": 600.0}]
    receivers = [{"z": 1000.0, "y": 600.0, "x": 600.0}]
    dataset = store(sources, receivers, SHAPE_3D)
    plot.plot_field(dataset, tmp_path / "off.png", source=0)
    plot.plot_field(dataset, tmp_path / "on.png", source=1)
    said = [" ".join(t.get_text() for t in fig.findobj(plt.Text)) for fig in figures]
    assert "section y = 600 m nearest the source (at y = 630 m)" in said[0]
    assert "section y = 600 m through the source" in said[1]
    # Far from 0 (a UTM northing), 30 m is still 30 m off the plane: no relative tolerance.
    north = 4_500_000.0
    far = dataset.assign_coords(y=dataset["y"] + north, source_y=dataset["source_y"] + north)
    far["y"].attrs["units"] = "m"
    plot.plot_field(far, tmp_path / "far.png", source=0)
    assert "y = 4500600 m nearest the source (at y = 4500630 m)" in " ".join(
        t.get_text() for t in figures[2].findobj(plt.Text)
    )


def test_a_sources_rays_are_its_stretch_of_the_ray_table():
    dataset = xr.Dataset(
        {
            "ray_start": (("source", "receiver"), [[0, 3], [5, 6]]),
            "ray_count": (("source", "receiver"), [[3, 2], [1, 4]]),
            "ray_x": ("ray_point", np.arange(10.0)),
            "ray_z": ("ray_point", -np.arange(10.0)),
            "ray_y": ("ray_point", 10.0 + np.arange(10.0)),
        }
    )
    rays = plot._rays_of(dataset, 1)
    assert [list(x) for x, _ in rays] == [[5.0], [6.0, 7.0, 8.0, 9.0]]
    assert [list(z) for _, z in rays] == [[-5.0], [-6.0, -7.0, -8.0, -9.0]]
    assert [list(x) for x, _ in plot._rays_of(dataset, 0)] == [[0.0, 1.0, 2.0], [3.0, 4.0]]
    # The map's: x and y.
    assert [list(y) for _, y in plot._rays_of(dataset, 1, ("x", "y"))] == [
        [15.0],
        [16.0, 17.0, 18.0, 19.0],
    ]


def _markers(ax, marker: str) -> list:
    return [line for line in ax.get_lines() if line.get_marker() == marker]


def _named(dataset: xr.Dataset, sources: str = "S", receivers: str = "STA") -> xr.Dataset:
    """``dataset`` with its sources and receivers named, as a workflow's CSV files name them."""
    return dataset.assign_coords(
        source=[f"{sources}{i + 1}" for i in range(dataset.sizes["source"])],
        receiver=[f"{receivers}{i + 1}" for i in range(dataset.sizes["receiver"])],
    )


@pytest.mark.parametrize(("sources", "shape"), [(LINE_2D, {"z": 11, "x": 13}), (GRID_3D, SHAPE_3D)])
def test_stations_are_drawn_whole_and_stand_out_on_any_colour(tmp_path, figures, sources, shape):
    # Surface stations sit on the top edge: clipped, half of each was cut off. Hollow
    # triangles (off a 3D section) had only a thin dark edge, lost on viridis' dark purple.
    receivers = [{"z": 0.0, "y": 600.0, "x": 200.0}, {"z": 0.0, "y": 1000.0, "x": 800.0}]
    # Source 3 of GRID_3D is at y = 600 m: one receiver on its section, one off.
    plot.plot_field(store(sources, receivers, shape), tmp_path / "field.png", source=3)
    (section, *plan) = figures[0].axes[:-1]  # the colorbar last
    for ax in (section, *plan):
        markers = _markers(ax, "v") + _markers(ax, "*")[-1:]  # the drawn source (gold), last
        assert {line.get_marker() for line in markers} == {"v", "*"}
        for line in markers:
            assert not line.get_clip_on()
            (halo,) = line.get_path_effects()  # a white outline around the dark edge
            assert halo._gc["foreground"] == "white" and halo._gc["linewidth"] >= 2
    if "y" in shape:
        faces = {line.get_markerfacecolor() for line in _markers(section, "v")}
        assert faces == {"black", "none"}  # the hollow one haloed too


def test_named_receivers_are_labelled_with_their_names_unless_there_are_many(tmp_path, figures):
    receivers = [{"z": 0.0, "x": x} for x in (0.0, 300.0, 600.0, 900.0)]
    shape = {"z": 11, "x": 13}
    plot.plot_field(_named(store(LINE_2D, receivers, shape)), tmp_path / "named.png")
    said = [t.get_text() for t in figures[0].axes[0].texts]
    assert [n for n in said if n.startswith("STA")] == ["STA1", "STA2", "STA3", "STA4"]
    # Unnamed receivers are not numbered on the model; more than MOST_NAMED not named.
    plot.plot_field(store(LINE_2D, receivers, shape), tmp_path / "unnamed.png")
    many = [{"z": 0.0, "x": x} for x in np.linspace(0.0, 1200.0, plot.MOST_NAMED + 1)]
    plot.plot_field(_named(store(LINE_2D, many, shape)), tmp_path / "many.png")
    for fig in figures[1:]:
        assert not [t for t in fig.axes[0].texts if t.get_text().startswith("STA")]


def test_3d_survey_has_a_map_beside_its_section(tmp_path, figures):
    # One section with every ray and receiver projected onto it is a tangle for a 3D survey:
    # a map shows where they are, with the traveltimes on the source's plane.
    receivers = [
        {"z": 0.0, "y": 600.0, "x": 100.0},  # on the section through source 4 (y = 600 m)
        {"z": 0.0, "y": 1100.0, "x": 200.0},
        {"z": 0.0, "y": 100.0, "x": 1500.0},
    ]
    dataset = _named(store(GRID_3D, receivers, SHAPE_3D), "EV", "R")
    dataset["ray_start"] = (("source", "receiver"), np.zeros((9, 3), dtype=int))
    dataset["ray_count"] = (("source", "receiver"), np.zeros((9, 3), dtype=int))
    dataset["ray_start"][4, :] = [0, 2, 4]
    dataset["ray_count"][4, :] = 2
    for d in "zyx":  # straight two-point rays from the source to each receiver
        ends = [[float(dataset[f"source_{d}"][4]), r[d]] for r in receivers]
        dataset[f"ray_{d}"] = ("ray_point", np.ravel(ends))
    plot.plot_field(dataset, tmp_path / "field.png", source=4)
    fig = figures[0]
    section, plan, _colorbar = fig.axes
    assert (section.get_ylabel(), plan.get_ylabel()) == ("z (m)", "y (m)")
    (solid,) = [line for line in _markers(plan, "v") if line.get_markerfacecolor() == "black"]
    np.testing.assert_array_equal(solid.get_xdata(), [100.0, 200.0, 1500.0])
    np.testing.assert_array_equal(solid.get_ydata(), [600.0, 1100.0, 100.0])
    rays = [line for line in plan.get_lines() if line.get_color() == "red"]
    assert [list(line.get_ydata()) for line in rays] == [[600.0, r["y"]] for r in receivers]
    # Over the receivers (a ray along the surface ran under their triangles), under the
    # source, and unclipped (one along the top edge was half cut off), here and on the
    # section.
    for ax in (plan, section):
        drawn = [line for line in ax.get_lines() if line.get_color() == "red"]
        assert drawn and all(not line.get_clip_on() for line in drawn)
        assert (
            max(line.get_zorder() for line in _markers(ax, "v"))
            < min(line.get_zorder() for line in drawn)
            < _markers(ax, "*")[-1].get_zorder()  # the drawn source's star (gold)
        )
    sources = _markers(plan, "*")  # the others, then this one
    assert len(sources[0].get_xdata()) == 8 and list(sources[1].get_ydata()) == [600.0]
    assert [line.get_ydata() for line in plan.get_lines() if line.get_linestyle() == "--"] == [
        [600.0, 600.0]
    ]  # where the section is
    assert plan.collections and any(t.get_text().endswith(" s") for t in plan.texts)  # contours
    # The map names every receiver; the section only those on it (projected ones collide).
    assert sorted(t.get_text() for t in plan.texts if t.get_text()[0] == "R") == [
        "R1",
        "R2",
        "R3",
    ]
    assert [t.get_text() for t in section.texts if t.get_text()[0] == "R"] == ["R1"]
    assert "map z = 0 m through the source" in title(fig)
    # A 2D model has no map.
    plot.plot_field(store(LINE_2D, receivers[:1], {"z": 11, "x": 13}), tmp_path / "2d.png")
    assert len(figures[1].axes) == 2  # the section and its colorbar


def test_gathers_table_is_ticked_with_station_and_event_names(tmp_path, figures):
    receivers = [{"z": 1000.0, "x": x} for x in (0.0, 600.0, 1200.0)]
    dataset = _named(store(LINE_2D, receivers, {"z": 11, "x": 13}), "EV", "STA")
    plot.plot_gathers(dataset, tmp_path / "named.png")
    table = figures[0].axes[1]
    assert [t.get_text() for t in table.get_xticklabels()] == ["STA1", "STA2", "STA3"]
    assert [t.get_text() for t in table.get_yticklabels()] == ["EV1", "EV2", "EV3", "EV4"]
    # Numbers where the store has no names, or too many to read.
    many = [{"z": 1000.0, "x": x} for x in np.linspace(0.0, 1200.0, plot.MOST_NAMED + 1)]
    plot.plot_gathers(_named(store(LINE_2D, many, {"z": 11, "x": 13})), tmp_path / "many.png")
    plot.plot_gathers(store(LINE_2D, receivers, {"z": 11, "x": 13}), tmp_path / "unnamed.png")
    for fig in figures[1:]:
        ticks = [t.get_text() for t in fig.axes[1].get_xticklabels() if t.get_text()]
        assert ticks and all(t.lstrip("−-").isdigit() for t in ticks), ticks
    # Four sources are named though 31 receivers are not.
    assert [t.get_text() for t in figures[1].axes[1].get_yticklabels()] == ["S1", "S2", "S3", "S4"]


def test_2d_sources_sharing_an_x_are_not_joined(tmp_path, figures):
    # Sources at (0, 1200) and (400, 1200) were joined by a segment standing up at x = 1200.
    sources = [{"z": 0.0, "x": 0.0}, {"z": 400.0, "x": 1200.0}, {"z": 0.0, "x": 1200.0}]
    receivers = [{"z": 1000.0, "x": 600.0}]
    plot.plot_gathers(store(sources, receivers, {"z": 11, "x": 13}), tmp_path / "gathers.png")
    (line,) = figures[0].axes[0].get_lines()
    assert line.get_linestyle() == "None" and line.get_marker() == "."


def test_contours_are_at_round_times_labelled_exactly(tmp_path, figures):
    sources = [{"z": 0.0, "x": 0.0}]
    plot.plot_field(store(sources, [], {"z": 11, "x": 13}), tmp_path / "field.png")
    ax = figures[0].axes[0]
    labels = [t.get_text() for t in ax.texts]
    # Top time: hypot(1000, 1200) / 2000 = 0.78 s; levels every 0.05 s, every other labelled.
    assert labels and len(set(labels)) == len(labels)
    assert set(labels) <= {f"{0.1 * k:.1f} s" for k in range(1, 8)}, labels


@pytest.mark.parametrize(
    ("shape", "said"),
    [({"z": 3, "x": 201}, "vertical exaggeration x20"), ({"z": 201, "x": 4}, "horizontal")],
)
def test_a_model_too_elongated_to_draw_to_scale_is_stretched_and_says_so(
    tmp_path, figures, shape, said
):
    sources = [{"z": 0.0, "x": 0.0}]
    plot.plot_field(store(sources, [], shape), tmp_path / "field.png")
    fig = figures[0]
    ax = fig.axes[0]
    box = ax.get_position()
    width, height = box.width * fig.get_figwidth(), box.height * fig.get_figheight()
    assert max(width / height, height / width) <= plot.MOST_ELONGATED * 1.01
    assert said in title(fig)


def test_an_unfinished_store_says_why_no_rays_are_drawn(tmp_path, figures):
    dataset = store([{"z": 0.0, "x": 0.0}], [{"z": 1000.0, "x": 600.0}], {"z": 11, "x": 13})
    dataset["source_done"] = ("source", [0])
    plot.plot_field(dataset, tmp_path / "field.png")
    assert "store not complete (0 of 1 sources done): rays are drawn once the run has" in (
        title(figures[0])
    )


def test_a_picture_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    # A full disk or an interrupt while drawing left a picture cut short (0 bytes) under
    # its name: it is drawn beside it and renamed, and a failed draw keeps the old one.
    path = tmp_path / "survey.png"
    fig = plt.figure()
    assert plot._save(fig, path) == path and path.read_bytes()[:4] == b"\x89PNG"
    old = path.read_bytes()

    def full_disk(self, fname, **kwargs):
        Path(fname).write_bytes(b"")  # what a write cut short leaves
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plt.Figure, "savefig", full_disk)
    with pytest.raises(OSError, match="No space left"):
        plot._save(plt.figure(), path)
    assert path.read_bytes() == old and sorted(tmp_path.iterdir()) == [path]
    monkeypatch.undo()
    # What a killed drawing left (its process gone) goes with the next; a live one stays.
    host = socket.gethostname().replace("-", "_")
    killed = tmp_path / f".survey.png.drawing-{host}-{2**22 + 1}-0a1b2c3d"
    alive = tmp_path / f".survey.png.drawing-{host}-{os.getppid()}-0a1b2c3d"
    killed.write_bytes(b"")
    alive.write_bytes(b"")
    plot._save(plt.figure(), path)
    assert not killed.exists() and alive.exists()
    alive.unlink()
    # A name without a suffix gets the picture itself, not another file with ".png" added.
    assert plot._save(plt.figure(), tmp_path / "picture") == tmp_path / "picture"
    assert (tmp_path / "picture").read_bytes()[:4] == b"\x89PNG"


def test_a_3d_map_is_drawn_at_the_depth_asked_for(tmp_path, figures):
    # Sources at the surface put the map on the top layer; a deeper anomaly needs the map
    # at its depth (the model here is 1500 m/s + 1 m/s per m of depth).
    dataset = store(GRID_3D, [{"z": 0.0, "y": 600.0, "x": 100.0}], SHAPE_3D)
    plot.plot_field(dataset, tmp_path / "field.png", source=4, map_z=1000.0)
    plot.plot_field(dataset, tmp_path / "between.png", source=4, map_z=1030.0)
    plot.plot_field(dataset, tmp_path / "top.png", source=4)
    maps = [fig.axes[1] for fig in figures]
    for plan, speed in zip(maps, (2500.0, 2500.0, 1500.0)):
        np.testing.assert_array_equal(np.unique(plan.collections[0].get_array()), [speed])
    assert "map z = 1000 m (as asked; the source at z = 0 m)" in title(figures[0])
    assert "map z = 1000 m (the node plane nearest 1030 m; the source at z = 0 m)" in (
        title(figures[1])
    )
    # Its long line (other sources, projections, hollow receivers) is broken to fit: it ran
    # off both sides of the figure.
    for fig in figures:
        extent = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
        assert fig.bbox.x0 <= extent.x0 and extent.x1 <= fig.bbox.x1, (extent, fig.bbox)
    assert "map z = 0 m through the source" in title(figures[2])
    # The surface receiver is off the map at 1000 m: hollow there, as off a section.
    assert "hollow: receivers off the map" in title(figures[0])
    assert "hollow: receivers off the map" not in title(figures[2])
    (deep,) = _markers(maps[0], "v")
    (top,) = _markers(maps[2], "v")
    assert (deep.get_markerfacecolor(), top.get_markerfacecolor()) == ("none", "black")
    section = figures[0].axes[0].collections[0].get_array()
    np.testing.assert_array_equal(section, figures[2].axes[0].collections[0].get_array())


@pytest.mark.parametrize(
    "map_z, said",
    [(2100.0, "outside the model's z, 0 to 2000 m"), (-100.0, "outside the model's z"),
     (float("nan"), "must be a depth in m, got nan"), (True, "must be a depth in m, got True"),
     ("40", "must be a depth in m, got '40'")],
)  # fmt: skip
def test_a_map_depth_outside_the_model_is_refused(tmp_path, figures, map_z, said):
    dataset = store(GRID_3D, [{"z": 0.0, "y": 600.0, "x": 100.0}], SHAPE_3D)
    with pytest.raises(InputError, match=said):
        plot.plot_field(dataset, tmp_path / "field.png", map_z=map_z)
    assert not figures  # refused before drawing
    plot.plot_field(dataset, tmp_path / "field.png", map_z=2040.0)  # within half a node
    line_2d = store(LINE_2D, [{"z": 0.0, "x": 100.0}], {"z": 11, "x": 13})
    with pytest.raises(InputError, match="draws a 3D model's map: this model is 2D"):
        plot.plot_field(line_2d, tmp_path / "2d.png", map_z=0.0)


def test_sources_and_receivers_are_chosen_as_everywhere_else(tmp_path, figures):
    # True drew source 1, a name was a TypeError, receiver 99 of 4 an IndexError and -1 the
    # last one: one rule (raygrid plot --source's) now, by number or name, checked.
    receivers = [{"z": 0.0, "x": x} for x in (0.0, 300.0, 600.0, 900.0)]
    dataset = _named(store(LINE_2D, receivers, {"z": 11, "x": 13}))
    plot.plot_field(dataset, tmp_path / "named.png", source="S3")
    assert "source 2 of 4 (S3)" in figures[-1]._suptitle.get_text()
    plot.plot_gathers(dataset, tmp_path / "gathers.png", receivers=["STA2", 3])
    for source in (True, 1.0, "S9", 4):
        with pytest.raises(InputError, match="source"):
            plot.plot_field(dataset, tmp_path / "bad.png", source=source)
    for receiver in (99, -1, "R1"):
        with pytest.raises(InputError, match="receiver"):
            plot.plot_gathers(dataset, tmp_path / "bad.png", receivers=[receiver])


def test_what_is_not_a_survey_store_is_refused_saying_what_to_draw_it_with(tmp_path):
    # A traveltime() result was told "source number 0 is out of range: the store has 0
    # sources (none: it has no source dim)".
    import raygrid.pipeline as rg

    velocity = rg.gradient_model({"z": 11, "x": 13}, 100.0, 1500.0, 2500.0)
    result = rg.traveltime(velocity, {"z": 0.0, "x": 600.0}, radius=2, predecessors=True)
    for given, kind in ((result, "a Dataset of traveltime"), (result["traveltime"], "a DataArray")):
        for draw in (plot.plot_field, plot.plot_gathers):
            with pytest.raises(InputError, match=f"draws a survey store.*got {kind}.*xarray"):
                draw(given, tmp_path / "bad.png")
    assert not list(tmp_path.iterdir())
    without_table = store(LINE_2D, [], {"z": 11, "x": 13}).drop_vars("receiver_traveltime")
    with pytest.raises(InputError, match="this store has none"):
        plot.plot_gathers(without_table, tmp_path / "bad.png")


def test_long_names_are_drawn_cut_short_and_the_layout_holds(tmp_path, figures):
    # A 300-character name ran off the figure: matplotlib warned "constrained_layout not
    # applied" twice a picture.
    import warnings

    receivers = [{"z": 0.0, "x": x} for x in (0.0, 300.0, 600.0)]
    dataset = _named(store(LINE_2D, receivers, {"z": 11, "x": 13}), sources="S" * 300)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*constrained_layout not applied")
        plot.plot_field(dataset, tmp_path / "long.png", source=1)
        plot.plot_gathers(dataset, tmp_path / "gathers.png")
    shown = "S" * (plot.SHOWN_NAME - 1) + "\u2026"
    assert f"({shown})" in title(figures[0])
    assert "S" * plot.SHOWN_NAME not in title(figures[0])


def test_many_rays_are_drawn_thin_and_see_through():
    # 400-1000 rays drawn opaque at full width hid the model, its layers and receivers.
    import matplotlib.pyplot as plt

    from raygrid.pipeline.plot import CLEAR_RAYS, _draw_rays

    ray = (np.array([0.0, 1.0]), np.array([0.0, 1.0]))
    for count, alpha in ((CLEAR_RAYS, 1.0), (10 * CLEAR_RAYS, 0.1), (100 * CLEAR_RAYS, 0.1)):
        fig, ax = plt.subplots()
        try:
            _draw_rays(ax, [ray] * count)
            (line, *_) = ax.get_lines()
            assert (line.get_alpha(), line.get_linewidth() <= 1.2) == (alpha, True)
            assert (line.get_linewidth() == 1.2) == (count == CLEAR_RAYS)
        finally:
            plt.close(fig)


def test_plotting_leaves_the_callers_backend_and_figures_alone(tmp_path):
    # Importing the plot module switched matplotlib to Agg: a notebook's later plt.show()
    # showed nothing. Figures are made as objects now, never through pyplot.
    import subprocess
    import sys

    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import matplotlib
matplotlib.use("pdf")  # standing in for a notebook's inline backend
import matplotlib.pyplot as plt
mine = plt.figure()
from test_plot import store
from raygrid.pipeline import plot
dataset = store([{{"z": 0.0, "x": 0.0}}, {{"z": 0.0, "x": 500.0}}], [{{"z": 900.0, "x": 300.0}}],
                {{"z": 11, "x": 13}})
plot.plot_store(dataset, {str(tmp_path / "s.png")!r})
assert matplotlib.get_backend() == "pdf", matplotlib.get_backend()
assert plt.get_fignums() == [mine.number], plt.get_fignums()
"""
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s-gathers.png", "s.png"]


def test_vector_pictures_hold_the_model_as_one_image(tmp_path, figures):
    # A 201 x 401 store's SVG was 15 MB, a path per cell (80,679), and took 12 s to write.
    dataset = store([{"z": 0.0, "x": 0.0}], [], {"z": 61, "x": 81})
    plot.plot_field(dataset, tmp_path / "a.png")
    assert figures[0].axes[0].collections[0].get_rasterized()
    figures.clear()
    dataset = store(GRID_3D, [], SHAPE_3D)
    plot.plot_field(dataset, tmp_path / "a.png", source=4)
    section, plan = figures[0].axes[:2]
    assert section.collections[0].get_rasterized() and plan.collections[0].get_rasterized()


def test_an_svg_is_small_and_keeps_its_lines_as_vectors(tmp_path):
    path = plot.plot_field(
        store([{"z": 0.0, "x": 0.0}], [], {"z": 61, "x": 81}), tmp_path / "a.svg"
    )
    text = path.read_text()
    assert path.stat().st_size < 300_000 and text.count("<image") == 2  # and the colorbar
    assert "<path" in text  # contours, axes and text stay vectors
    pdf = plot.plot_field(store([{"z": 0.0, "x": 0.0}], [], {"z": 11, "x": 13}), tmp_path / "a.pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"


def _contour_sets(ax):
    return [c for c in ax.collections if hasattr(c, "levels")]


def test_a_3d_figure_has_one_contour_spacing_said_in_its_title(tmp_path, figures):
    # The section was contoured every 0.1 s and the map every 0.2 s, neither said.
    receivers = [{"z": 1000.0, "y": 700.0, "x": 100.0}]
    plot.plot_field(store(GRID_3D, receivers, SHAPE_3D), tmp_path / "f.png", source=4)
    fig = figures[0]
    (section,), (plan,) = (_contour_sets(ax) for ax in fig.axes[:2])
    steps = {float(np.round(np.diff(c.levels).mean(), 9)) for c in (section, plan)}
    assert len(steps) == 1
    (step,) = steps
    assert set(plan.levels) <= set(section.levels)  # the same times, where each reaches
    assert f"(contours every {plot._seconds(step, 3)})" in title(fig)
    labels = [t.get_text() for t in fig.axes[0].texts + fig.axes[1].texts]
    assert labels and not any(label.split()[0].endswith("0") for label in labels if "." in label)


def test_many_receivers_are_drawn_smaller(tmp_path, figures):
    # 150 triangles on a line merged into a black band; 400 covered the section.
    few = [{"z": 0.0, "x": float(x)} for x in range(0, 1201, 100)]
    many = [{"z": 0.0, "x": float(x)} for x in np.linspace(0.0, 1200.0, 400)]
    for receivers in (few, many):
        plot.plot_field(store(LINE_2D, receivers, {"z": 11, "x": 13}), tmp_path / "f.png")
    sizes = [_markers(fig.axes[0], "v")[0].get_markersize() for fig in figures]
    assert sizes[0] == 7 and 3 <= sizes[1] < 4


@pytest.mark.parametrize(
    ("shape", "high"), [({"z": 11, "x": 81}, (1.0, 2.5)), ({"z": 21, "x": 21}, (4.5, 6.0))]
)
def test_a_2d_figure_is_shaped_as_its_section(tmp_path, figures, shape, high):
    # Always 9 x 5 in: a long section used a third of the height, its colorbar tiny.
    plot.plot_field(store(LINE_2D, [], shape), tmp_path / "f.png")
    fig = figures[0]
    box = fig.axes[0].get_position()
    drawn = box.height * fig.get_figheight()
    assert high[0] <= drawn <= high[1]
    assert fig.get_figwidth() <= 9.0 and box.width * fig.get_figwidth() <= 7.2


def test_sources_along_x_at_several_depths_are_not_joined(tmp_path, figures):
    # Shots at the surface and in a borehole were joined as one moveout line.
    sources = [{"z": 0.0, "x": x} for x in (0.0, 400.0, 800.0)]
    sources += [{"z": 800.0, "x": 200.0}, {"z": 800.0, "x": 600.0}]
    plot.plot_gathers(store(sources, [{"z": 0.0, "x": 100.0}], {"z": 11, "x": 13}), tmp_path / "g")
    left = figures[0].axes[0]
    (line,) = left.get_lines()
    assert line.get_linestyle() == "None"
    assert left.get_xlabel() == "source x (m); sources at 2 depths, not joined"
    # A line that slopes, or follows the topography, is one line: joined.
    for depths in ((50.0, 40.0, 30.0, 20.0, 10.0), (0.0, 30.0, 10.0, 60.0, 20.0)):
        sloping = [{"z": z, "x": 200.0 * k} for k, z in enumerate(depths)]
        figures.clear()
        plot.plot_gathers(store(sloping, [{"z": 0.0, "x": 100.0}], {"z": 11, "x": 13}), "g")
        left = figures[0].axes[0]
        assert left.get_lines()[0].get_linestyle() == "-"
        assert left.get_xlabel() == "source x (m)"


def test_a_format_matplotlib_cannot_write_here_is_said_plainly(tmp_path, monkeypatch):
    # pgf is listed by matplotlib but needs xelatex: a RuntimeError traceback after drawing.
    from matplotlib.figure import Figure

    def no_tool(self, *args, **kwargs):
        raise RuntimeError("'xelatex' not found")

    monkeypatch.setattr(Figure, "savefig", no_tool)
    with pytest.raises(InputError, match=r"matplotlib could not write .*f.pgf: 'xelatex' not"):
        plot.plot_field(store(LINE_2D, [], {"z": 11, "x": 13}), tmp_path / "f.pgf")
    assert not list(tmp_path.iterdir())


def test_without_a_file_a_figure_is_returned_to_show_or_change(tmp_path):
    # A notebook wants the figure itself, to show inline or edit before saving.
    from matplotlib.figure import Figure

    dataset = store(LINE_2D, [{"z": 900.0, "x": 300.0}], {"z": 11, "x": 13})
    fig = plot.plot_field(dataset, source=1)
    assert isinstance(fig, Figure) and "source 1 of 4" in title(fig)
    fig.axes[0].set_title("mine")
    fig.savefig(tmp_path / "mine.png")
    assert (tmp_path / "mine.png").read_bytes()[:4] == b"\x89PNG"
    assert isinstance(plot.plot_gathers(dataset), Figure)
    assert not list(tmp_path.glob("*.png"))[1:]  # nothing written but what was saved
