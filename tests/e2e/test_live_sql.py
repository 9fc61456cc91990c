"""Live SQL: ``troupe sql`` while a server runs.

``troupe sql`` runs as users run it, a process of its own, against the pooled app of the
shared e2e deployment, whose storage actor holds the DuckDB file: the command finds the
actor from the owner file beside the database (or is given the cluster's address). Its
environment has no ``RAY_AUTH_MODE``, as a fresh shell has none, unless it is given the
cluster's address, for which Ray asks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from openai import OpenAI


def _troupe_sql(*args: str, auth_mode: str | None = None) -> subprocess.CompletedProcess[str]:
    """``troupe sql ARGS`` in a process of its own, with ``RAY_AUTH_MODE`` only if given."""
    env = {name: value for name, value in os.environ.items() if name not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    if auth_mode is not None:
        env["RAY_AUTH_MODE"] = auth_mode
    command = [sys.executable, "-m", "troupe", "sql", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _named_actors() -> set[tuple[str, str]]:
    import ray

    return {(a["namespace"], a["name"]) for a in ray.util.list_named_actors(all_namespaces=True)}


def test_troupe_sql_reads_what_a_running_server_stored_and_writes_nothing(
    troupe_apps, troupe_app_settings, tmp_path: Path
) -> None:
    import ray

    settings = troupe_app_settings["pooled"]
    client = OpenAI(base_url=f"{troupe_apps['pooled']}/v1", api_key="unused", max_retries=0)
    created = client.responses.create(model="sim", input="[[say seen live]]")
    actors = _named_actors()

    query = f"SELECT id, status, model FROM responses WHERE id = '{created.id}'"
    found = _troupe_sql(query, "--db", settings.storage_path, "--format", "json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == [{"id": created.id, "status": "completed", "model": "sim"}]

    # Told the cluster's address, with the server's configuration (its namespace): the same actor.
    # Ray sends its auth token to an address given only when RAY_AUTH_MODE says the cluster wants it.
    config = tmp_path / "troupe.toml"
    config.write_text(f'[runtime]\nnamespace = "{settings.namespace}"\nstorage_path = "{settings.storage_path}"\n')
    address = ray.get_runtime_context().gcs_address
    delete = f"DELETE FROM responses WHERE id = '{created.id}'"
    refused = _troupe_sql(delete, "--address", address, "--config", str(config), auth_mode=os.environ.get("RAY_AUTH_MODE"))
    assert refused.returncode == 1
    assert refused.stderr.startswith("troupe sql: only read-only queries are allowed") and "not DELETE" in refused.stderr

    assert client.responses.retrieve(created.id).status == "completed"
    assert _named_actors() == actors, "the command joined the cluster and left nothing behind"
