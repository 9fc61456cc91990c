"""Every module's ``__all__`` names exist (httpx's test_exported_members)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import troupe.protocol

MODULES = ["troupe.protocol"] + [
    f"troupe.protocol.{m.name}" for m in pkgutil.iter_modules(troupe.protocol.__path__) if not m.name.startswith("_")
]


def test_protocol_modules_found() -> None:
    assert {"errors", "ids", "items", "request", "response", "sse"} <= {m.rsplit(".", 1)[-1] for m in MODULES}


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing


def test_package_reexports_every_public_function_and_class() -> None:
    # What a submodule exports as a class or function is reachable from the package.
    for name in MODULES[1:]:
        module = importlib.import_module(name)
        for n in module.__all__:
            obj = getattr(module, n)
            if callable(obj) and getattr(obj, "__module__", None) == name:
                assert n in troupe.protocol.__all__, f"{name}.{n} not re-exported"


def test_the_content_part_types_are_those_the_sdk_adapters_take() -> None:
    from troupe.protocol import CONTENT_PART_TYPES, sdk

    assert CONTENT_PART_TYPES == tuple(sdk.PART_ADAPTERS)
