"""The packages whose names are imported on first use (troupe._lazy): importing the package
imports none of its modules; each name, once read, is the object its module defines.

Each check runs in a fresh interpreter: what another test imported must not decide it."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest

import troupe.agentloop
import troupe.observe

LAZY_PACKAGES = ["troupe.runtime", "troupe.agentloop", "troupe.bench", "troupe.console", "troupe.observe", "troupe.rag"]

CHECK = """
import importlib, sys
package = importlib.import_module(PACKAGE)
assert not [m for m in package._HOMES if PACKAGE + m in sys.modules], "a module was imported with the package"
assert len(package.__all__) == len(set(package.__all__)) == sum(map(len, package._HOMES.values()))
for home, names in package._HOMES.items():
    for name in names:
        assert name in dir(package), name
        value = getattr(package, name)
        assert value is getattr(importlib.import_module(home, PACKAGE), name), name
try:
    package.no_such_name
except AttributeError as exc:
    assert "has no attribute 'no_such_name'" in str(exc)
else:
    raise AssertionError("an unknown name was found")
print("ok")
"""


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_package_imports_its_modules_on_first_use_and_exports_their_objects(package: str) -> None:
    code = f"PACKAGE = {package!r}\n{CHECK}"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "ok"


@pytest.mark.parametrize("package", [troupe.agentloop, troupe.observe], ids=lambda p: p.__name__)
def test_all_and_imports_for_type_checkers_are_the_exports(package: types.ModuleType) -> None:
    # Its __init__ repeats the exports as imports under TYPE_CHECKING, for editors: the same names, from the same modules.
    tree = ast.parse(Path(package.__file__).read_text())  # type: ignore[arg-type]
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {("." + node.module, alias.name) for node in guarded.body for alias in node.names}  # type: ignore[attr-defined]
    exported = {(home, name) for home, names in package._HOMES.items() for name in names}
    assert imported == exported
    assert sorted(package.__all__) == sorted(name for _, name in exported)


TURNS_ONLY = """
import pickle, sys
job = pickle.loads(bytes.fromhex(sys.argv[1]))
import troupe.runtime.ray.placement, troupe.runtime.ray.mcp, troupe.runtime.ray.storage_actor, troupe.runtime.host
assert job.request.input_items()[0]["content"][0]["text"] == "hi", job
loaded = sorted(m for m in sys.modules if m == "openai" or m.startswith("openai."))
assert not loaded, f"imported {loaded[:3]}..."
print("ok")
"""


def test_a_process_that_only_runs_turns_never_imports_the_openai_sdk() -> None:
    """Ray's conversation hosts, MCP connection actors and storage actors take a validated
    request (a pickled TurnJob) and run it: importing ``openai`` (most of a second, each new
    worker process) is for the ingress, which validates (troupe/protocol/sdk.py)."""
    import pickle

    from troupe.protocol import TurnJob, parse_create_request

    request = parse_create_request({"model": "sim", "input": "hi", "include": ["reasoning.encrypted_content"],
                                    "service_tier": "default", "tools": [{"type": "function", "name": "f"}]})  # fmt: skip
    job = TurnJob(request=request, tenant="", response_id="resp_1", created_at=1, thread_id="resp_1")
    code = ["-c", TURNS_ONLY, pickle.dumps(job).hex()]
    done = subprocess.run([sys.executable, *code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


HOSTS_ONLY = """
import sys
import troupe.runtime.ray.placement, troupe.runtime.ray.mcp, troupe.runtime.host
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("duckdb", "numpy", "regex", "httpx"))
from troupe.storage import DuckDBStore  # the package's lazy name still works, importing DuckDB now
assert DuckDBStore.__name__ == "DuckDBStore" and "duckdb" in sys.modules
print("loaded:" + ",".join(loaded))
"""


def test_a_conversation_host_imports_neither_duckdb_nor_numpy_nor_what_guardrails_use() -> None:
    """A host actor (and an MCP connection actor) reaches storage through the storage actor,
    embeds no query unless a turn searches files, and compiles patterns or calls a moderation
    server only for guardrails that do: DuckDB, numpy, regex and httpx (with the storage
    modules over them) were half of its start (1.35-1.6 s of CPU, now 0.7-0.75; 2026-12-05)."""
    done = subprocess.run([sys.executable, "-c", HOSTS_ONLY], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "loaded:", f"a host imported {done.stdout.strip()[:300]}"
