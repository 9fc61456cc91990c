"""Live SQL: ``troupe sql`` while a server runs, and the admin-only ``POST /v1/troupe/sql``.

``troupe sql`` runs as users run it, a process of its own, against the pooled app of the
shared e2e deployment, whose storage actor holds the DuckDB file: the command finds the
actor from the owner file beside the database (or is given the cluster's address). Its
environment has no ``RAY_AUTH_MODE``, as a fresh shell has none, unless it is given the
cluster's address, for which Ray asks it. The endpoint is served over
the in-process runtime on a loopback port, once without an admin key and once with one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.servers import served_local
from troupe.serve.config import ServerSettings

ADMIN, TENANT = "sk-admin-live-sql", "sk-tenant-live-sql"


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
    # Nothing new (a dedicated host of an earlier test may exit idle meanwhile: not ours to count).
    assert _named_actors() - actors == set(), "the command joined the cluster and left nothing behind"


# -- POST /v1/troupe/sql ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin_url() -> Iterator[str]:
    """The app over the in-process runtime with a tenant key and an admin key, a short SQL timeout and row cap."""
    settings = ServerSettings(api_keys={TENANT: "acme"}, admin_keys=(ADMIN,), sql_timeout_s=0.5, sql_max_rows=50)
    yield from served_local(settings)


def _sql(url: str, body: Any, key: str | None = ADMIN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/troupe/sql", json=body, headers=headers, timeout=30)


def test_the_sql_endpoint_is_off_without_an_admin_key(local_url: str) -> None:
    answer = _sql(local_url, {"query": "SELECT 1"})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["message"].startswith("The operator endpoints are off") and "admin_keys" in error["message"]


def test_the_sql_endpoint_answers_an_admin_key_only(admin_url: str) -> None:
    client = OpenAI(base_url=f"{admin_url}/v1", api_key=TENANT, max_retries=0)
    created = client.responses.create(model="sim", input="[[say for the operator]]")

    answer = _sql(admin_url, {"query": f"SELECT tenant, id, status, e2e_s > 0 AS took FROM responses WHERE id = '{created.id}'"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "columns": ["tenant", "id", "status", "took"],
        "types": ["VARCHAR", "VARCHAR", "VARCHAR", "BOOLEAN"],
        "rows": [["acme", created.id, "completed", True]],
        "truncated": False,
    }

    refused = _sql(admin_url, {"query": "SELECT 1"}, key=TENANT)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert _sql(admin_url, {"query": "SELECT 1"}, key=None).status_code == 401
    assert _sql(admin_url, {"query": "SELECT 1"}, key="sk-nobody-at-all").status_code == 401
    # The admin key is not a tenant's: the Responses API does not take it.
    assert httpx.get(f"{admin_url}/v1/responses", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 401


@pytest.mark.parametrize(
    ("body", "param", "code", "says"),
    [
        ({"query": "DELETE FROM responses"}, "query", "invalid_query", "not DELETE"),
        ({"query": "SELECT 1; SELECT 2"}, "query", "invalid_query", "exactly one statement"),
        ({"query": "SELECT nope FROM responses"}, "query", "invalid_query", "nope"),
        ({"query": "SELECT sum(hash(range)) FROM range(10_000_000_000)"}, "query", "query_timeout", "The query ran longer than 0.5 s"),
        ({"query": 7}, "query", "invalid_type", "expected a string"),
        ({}, "query", "missing_required_parameter", "'query'"),
        ({"query": "SELECT 1", "max_rows": 51}, "max_rows", "invalid_value", "from 1 to 50"),
        ({"query": "SELECT 1", "max_rows": True}, "max_rows", "invalid_type", "integer"),
        ({"query": "SELECT 1", "tenant": "acme"}, "tenant", "unknown_parameter", "Unknown parameter"),
    ],
)
def test_a_query_refused_is_a_400_naming_it(admin_url: str, body: dict, param: str, code: str, says: str) -> None:
    answer = _sql(admin_url, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert says in error["message"]
    assert answer.headers["x-should-retry"] == "false"


def test_the_row_cap_cuts_the_answer(admin_url: str) -> None:
    answer = _sql(admin_url, {"query": "FROM range(100)", "max_rows": 3})
    assert answer.json()["rows"] == [[0], [1], [2]] and answer.json()["truncated"] is True
    whole = _sql(admin_url, {"query": "FROM range(100)"}).json()  # the server's cap, 50
    assert len(whole["rows"]) == 50 and whole["truncated"] is True
