"""The import contracts of pyproject.toml ([tool.importlinter], checked by ``lint-imports`` in
``make test``) cover the modules they are about: a module added to the runtime's Ray-free
part is in the list that forbids it Ray, and the layers name every package of troupe."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _contract(name: str) -> dict:
    return next(c for c in CONTRACTS if c["name"] == name)


def test_every_ray_free_runtime_module_is_forbidden_ray() -> None:
    runtime = ROOT / "troupe" / "runtime"
    core = {f"troupe.runtime.{p.stem}" for p in runtime.glob("*.py")} - {"troupe.runtime.__init__", "troupe.runtime.facade"}
    listed = set(_contract("the runtime's core imports no Ray")["source_modules"])
    assert core, "no modules found"
    assert listed == core, f"missing: {sorted(core - listed)}, gone: {sorted(listed - core)}"


def test_the_layers_name_every_package_and_top_level_module() -> None:
    layers = {name.strip() for layer in _contract("troupe's layers")["layers"] for name in layer.split("|")}
    package = ROOT / "troupe"
    present = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.stem for p in package.glob("*.py")} - {"__init__", "__main__"}
    assert present, "no packages found"
    assert present <= layers, f"in no layer: {sorted(present - layers)}"
