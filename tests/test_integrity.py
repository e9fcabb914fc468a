"""Completion records whose data is gone: every chunk of a source counts, and its ray part
while the rays are not assembled; zarr v3 and v2 chunk keys (a survey end to end is in
test_survey.py). And a task run twice (Dask recomputes one whose worker died) never takes
a ray part away."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from raygrid.pipeline.integrity import forget_sources, listed_sources, lost_arrays, lost_sources
from raygrid.pipeline.storenames import RAY_PARTS, ray_part
from raygrid.pipeline.storewrite import SourceResult, SourceWriter

DONE = np.array([True, True, True, False])


def survey_like(path: Path, zarr_format: int = 3, rays: bool = True) -> zarr.Group:
    """A store laid out as a survey's, 4 sources, the first 3 done: a field cut into 2 x 2
    chunks per source (as a tiled survey's are), receiver times, and ray parts."""
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    field = group.create_array("traveltime", shape=(4, 4, 6), chunks=(1, 2, 3), dtype="f8")
    field[:3] = 1.0
    receivers = group.create_array("receiver_traveltime", shape=(4, 2), chunks=(1, 2), dtype="f8")
    receivers[:3] = 1.0
    done = group.create_array("source_done", shape=(4,), chunks=(1,), dtype="u1")
    done[:] = DONE
    if rays:
        for source in range(3):
            group.create_array(f"{RAY_PARTS}/{ray_part(source)}", data=np.ones((5, 3)))
    return group


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_any_missing_chunk_of_a_done_source_makes_it_lost(tmp_path, zarr_format):
    group = survey_like(tmp_path / "s.zarr", zarr_format, rays=False)
    assert not lost_sources(tmp_path / "s.zarr", DONE).any()
    field = group["traveltime"]
    # The last of source 1's four chunks: a check of its first chunk only would miss it.
    (tmp_path / "s.zarr" / "traveltime" / field.metadata.encode_chunk_key((1, 1, 1))).unlink()
    np.testing.assert_array_equal(lost_sources(tmp_path / "s.zarr", DONE), [0, 1, 0, 0])
    # A source not done is never lost, whatever is missing.
    (tmp_path / "s.zarr" / "receiver_traveltime" / field.metadata.encode_chunk_key((2, 0))).unlink()
    np.testing.assert_array_equal(lost_sources(tmp_path / "s.zarr", DONE), [0, 1, 1, 0])
    np.testing.assert_array_equal(
        lost_sources(tmp_path / "s.zarr", np.array([True, False, False, False])), [0, 0, 0, 0]
    )


def test_a_missing_ray_part_counts_until_the_rays_are_assembled(tmp_path):
    group = survey_like(tmp_path / "s.zarr")
    store = tmp_path / "s.zarr"
    part = store / RAY_PARTS / ray_part(2)
    (part / "c" / "0" / "0").unlink()  # its data, its metadata left
    np.testing.assert_array_equal(lost_sources(store, DONE), [0, 0, 1, 0])
    # Another part's metadata cut short (a JSONDecodeError from zarr, before): lost too.
    metadata = store / RAY_PARTS / ray_part(0) / "zarr.json"
    kept = metadata.read_bytes()
    metadata.write_bytes(kept[:12])
    np.testing.assert_array_equal(lost_sources(store, DONE), [1, 0, 1, 0])
    metadata.write_bytes(kept)
    for name in part.iterdir():  # the whole part
        if name.is_file():
            name.unlink()
    np.testing.assert_array_equal(lost_sources(store, DONE), [0, 0, 1, 0])
    group.attrs["rays_assembled"] = True  # the parts are read no more
    assert not lost_sources(store, DONE).any()


def test_forgetting_sources_clears_their_records_and_the_complete_mark(tmp_path):
    group = survey_like(tmp_path / "s.zarr")
    group.attrs["complete"] = True
    forget_sources(tmp_path / "s.zarr", np.array([0, 2]))
    group = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert group.attrs["complete"] == 0
    np.testing.assert_array_equal(group["source_done"][:], [0, 1, 0, 0])


def test_listed_sources_shows_ten():
    assert listed_sources((1, 3)) == "1, 3"
    assert listed_sources(np.arange(12)) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 ..."


def test_a_task_run_twice_leaves_a_whole_ray_part_alone(tmp_path):
    # A second run of a finished task deleted the part and wrote it again: the run's last
    # step, assembling the rays meanwhile, stopped with KeyError '0000000' (seen in CI
    # after a worker was killed mid-run).
    store = tmp_path / "s.zarr"
    survey_like(store, rays=False)
    part = store / RAY_PARTS / ray_part(3)
    rays = np.arange(6.0).reshape(2, 3)
    result = SourceResult(3, None, None, ray_points=rays, ray_counts=[1, 1])
    SourceWriter(store).write(result)
    first = {p: p.stat().st_ino for p in part.rglob("*") if p.is_file()}
    assert len(first) == 2  # its metadata and its one chunk
    SourceWriter(store).write(result)
    assert {p: p.stat().st_ino for p in part.rglob("*") if p.is_file()} == first  # untouched
    (part / "c" / "0" / "0").unlink()  # a part cut short is written again
    SourceWriter(store).write(result)
    np.testing.assert_array_equal(zarr.open_array(part, mode="r")[:], rays)
    (part / "zarr.json").write_bytes(b"")  # its metadata cut short: written again too
    SourceWriter(store).write(result)
    np.testing.assert_array_equal(zarr.open_array(part, mode="r")[:], rays)
    # Once the rays are assembled, a late run adds no part to the finished store.
    zarr.open_group(store, mode="r+").attrs["rays_assembled"] = True
    SourceWriter(store).write(SourceResult(2, None, None, ray_points=rays, ray_counts=[1, 1]))
    assert not (store / RAY_PARTS / ray_part(2)).exists()


def test_arrays_written_once_count_every_chunk_but_fill_valued_records_and_rays_in_making(
    tmp_path,
):
    store = tmp_path / "s.zarr"
    group = survey_like(store, rays=False)
    # NaN fill, as xarray writes floats: a float array with fill 0 may hold all-0 chunks.
    nan = {"dtype": "f8", "fill_value": np.nan}
    velocity = group.create_array("velocity", shape=(4, 6), chunks=(2, 3), **nan)
    velocity[:] = 1500.0
    group.create_array("x", shape=(6,), chunks=(6,), dtype="f8")  # 0 fill: 0 is a value
    ray_x = group.create_array("ray_x", shape=(10,), chunks=(5,), **nan)
    assert lost_arrays(store) == ()  # source_done's 0 chunks, ray_x before the assembly
    group.attrs["rays_assembled"] = True
    assert lost_arrays(store) == ("ray_x",)
    ray_x[:] = 1.0
    (store / "velocity" / velocity.metadata.encode_chunk_key((1, 1))).unlink()
    assert lost_arrays(store) == ("velocity",)
