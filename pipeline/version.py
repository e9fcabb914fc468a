"""The package version, read once from the installed distribution's metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("raygrid")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


def _code_digest(packages: dict[str, list[Path]] | None = None) -> str:
    """12 hex digits of a digest of raygrid's own code: every module's path and bytes, as
    they are on disk when this module is first imported (a worker's: as it checks its
    code). Files that are not modules (an editor's lock file) are left out; an untracked
    module in the package's folders counts. ``packages``: folders by package name (tests),
    raygrid's by default."""
    import hashlib
    from importlib.util import find_spec

    if packages is None:  # raygrid's, found, not imported (numba)
        packages = {}
        for name in ("raygrid.kernels", "raygrid.pipeline"):
            spec = find_spec(name)
            found = spec.submodule_search_locations if spec is not None else None
            packages[name] = [Path(folder) for folder in found or []]
    digest = hashlib.sha256()
    for name, roots in packages.items():
        for root in roots:
            for path in sorted(root.rglob("*.py")):
                relative = path.relative_to(root)
                # Modules only: an editor's lock file (.#solve.py, a dangling link) is none.
                if not path.is_file() or not all(
                    part.isidentifier() for part in relative.with_suffix("").parts
                ):
                    continue
                try:
                    content = path.read_bytes()
                except OSError:  # unreadable: no module of this raygrid either
                    continue
                digest.update(f"{name}/{relative.as_posix()}\0".encode())
                digest.update(content)
    return digest.hexdigest()[:12]


_CODE = _code_digest()


def code_digest() -> str:
    """A digest of raygrid's own code as this process read it (:func:`_code_digest`):
    two environments of the same version whose code differs (another checkout, a copy
    edited since one of them started) differ here, where their version strings agreed."""
    return _CODE


def software() -> str:
    """What made a store, in one line: raygrid's version (with its git commit where it
    runs from a checkout: every development build is 0.1.0), Python and the libraries its
    numbers depend on. No date or host: a store made twice is the same bytes."""
    import platform
    import subprocess

    here = Path(__file__).resolve().parents[1]
    made = f"raygrid {__version__}"
    try:
        # Only where raygrid's own folder is the checkout's top (an editable install of a
        # clone): a wheel installed in a project's .venv would find the project's commit.
        found = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        top, _, commit = found.stdout.strip().partition("\n")
        if found.returncode == 0 and commit and Path(top).resolve() == here:
            made += f" (git {commit.strip()}"
            try:
                changed = subprocess.run(
                    ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                    capture_output=True, text=True, timeout=5,
                ).stdout.strip()  # fmt: skip
            except (OSError, subprocess.TimeoutExpired):  # the commit stands alone
                changed = ""
            made += ", changed)" if changed else ")"
    except (OSError, subprocess.TimeoutExpired):  # no git: the version alone
        pass
    parts = [made, f"Python {platform.python_version()}"]
    for name in ("numpy", "numba", "numba-cuda", "dask", "distributed", "xarray", "zarr"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    return "; ".join(parts)
