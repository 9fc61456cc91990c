"""constraints.txt, the lock `make` installs from: it pins every dependency pyproject.toml
names, within pyproject.toml's range, and the environment running these tests is the locked one.

A dependency added to pyproject.toml without `make lock` fails here, and so does a test run in
an environment that drifted from the lock (an install by hand, an unpinned upgrade)."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _pins() -> dict[str, list[Requirement]]:
    """Each locked package's pins (one a platform, where universal resolution split it)."""
    pins: dict[str, list[Requirement]] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            pin = Requirement(line)
            pins.setdefault(canonicalize_name(pin.name), []).append(pin)
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        names.extend(extra)
    return [Requirement(name) for name in names]


def _pinned_version(pin: Requirement) -> str:
    (spec,) = pin.specifier
    assert spec.operator == "==", f"{pin} is not an exact pin"
    return spec.version


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pins, declared = _pins(), _declared()
    assert len(declared) > 20 and len(pins) > len(declared)  # both files were read
    for req in declared:
        locked = pins.get(canonicalize_name(req.name))
        assert locked, f"{req.name} is in pyproject.toml but not in constraints.txt: run `make lock`"
        for pin in locked:
            version = _pinned_version(pin)
            assert req.specifier.contains(version, prereleases=True), (
                f"constraints.txt pins {req.name}=={version}, outside pyproject.toml's {req.specifier}: run `make lock`"
            )


def test_the_installed_dependencies_are_the_locked_versions() -> None:
    pins = _pins()
    checked = 0
    for req in _declared():
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            continue  # an extra this environment did not install (bench)
        locked = [p for p in pins[canonicalize_name(req.name)] if p.marker is None or p.marker.evaluate()]
        assert installed in {_pinned_version(p) for p in locked}, (
            f"{req.name} {installed} is installed, constraints.txt pins {[str(p) for p in locked]}: `make install`"
        )
        checked += 1
    assert checked > 20
