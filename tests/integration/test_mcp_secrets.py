"""Secrets given to MCP servers never reach storage: search every row of the DuckDB file."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mcp_servers import McpTestServer, serve_mcp
from troupe.protocol import parse_create_request
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import McpSettings
from troupe.storage import DuckDBStore


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    with serve_mcp(token="sk-row-search-secret") as server:
        yield server


async def test_no_row_of_any_table_holds_the_secret(tmp_path, mcp_server):
    path = str(tmp_path / "secrets.duckdb")
    secret = "sk-row-search-secret"
    runtime = Runtime.local(RuntimeSettings(storage_path=path, mcp=McpSettings(allowed_urls=("http://127.0.0.1:*",))))
    tool = {
        "type": "mcp", "server_label": "calc", "server_url": mcp_server.url, "require_approval": "never",
        "authorization": secret, "headers": {"X-Extra": secret},
    }
    try:
        response = await runtime.respond("", parse_create_request(
            {"model": "sim", "input": '[[call add {"a": 2, "b": 40}]]', "tools": [tool]}
        ))
        assert response["output"][-1]["content"][0]["text"] == "add -> 42", "the token reached the server"
    finally:
        await runtime.close()
    store = DuckDBStore(path)
    try:
        tables = [row[0] for row in store.query("SELECT table_name FROM information_schema.tables")[1]]
        assert {"responses", "response_items", "step_traces"} <= set(tables)
        for table in tables:
            _, rows = store.query(f"SELECT COLUMNS(*)::VARCHAR FROM {table}")  # every column, as text
            assert secret not in repr(rows), f"the secret is stored in {table}"
    finally:
        store.close()
