"""The names of a survey store's per-source parts, shared by what writes them
(:mod:`.store`) and what checks that they are all there (:mod:`.integrity`)."""

from __future__ import annotations

__all__ = ["PER_SOURCE", "RAY_PARTS", "ray_arrays", "ray_part"]

#: Arrays chunked 1 along ``source``: a source's completion record vouches for its chunks.
PER_SOURCE = ("traveltime", "receiver_traveltime")
#: The group holding each source's raypaths as an array of its own until the store is
#: complete (their lengths are known only once solved; assembled at the end).
RAY_PARTS = "ray_parts"


def ray_arrays(dims: tuple[str, ...]) -> tuple[str, ...]:
    """The arrays the ray parts are assembled into, for a model of ``dims``."""
    return ("ray_start", "ray_count", "ray_time", *(f"ray_{d}" for d in dims))


def ray_part(source: int) -> str:
    """The name of ``source``'s array in :data:`RAY_PARTS` (zero-padded: listed in order)."""
    return f"{source:07d}"
