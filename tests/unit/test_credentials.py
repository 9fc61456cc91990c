"""Credentials off disk (troupe.storage.credentials), and rewriting a file written before that
(troupe.storage.rewrite, `troupe vacuum`): tried by searching the bytes, not by reading code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from troupe.cli import main
from troupe.serve.config import ConfigError, load_config
from troupe.storage import DuckDBStore, RunRecord, schema
from troupe.storage.credentials import IN_MEMORY, CredentialKeys, CredentialsUnavailable, new_key, restore, withhold
from troupe.storage.schema import CREDENTIALS_WITHHELD_FROM, SCHEMA_VERSION

SECRET = "sk-unit-probe-91e4"

REQUEST = {
    "model": "sim",
    "input": "hi",
    "tools": [
        {"type": "function", "name": "f", "parameters": {}},
        {"type": "mcp", "server_label": "a", "server_url": "https://a.example/mcp", "authorization": SECRET},
        {"type": "mcp", "server_label": "b", "server_url": "https://b.example/mcp", "headers": {"X-Key": SECRET}},
        {"type": "mcp", "server_label": "c", "server_url": "https://c.example/mcp"},
    ],
}


def test_withhold_takes_out_every_credential_and_restore_puts_them_back() -> None:
    stored, secrets = withhold(REQUEST)
    assert SECRET not in json.dumps(stored)
    assert stored["tools"][0] == REQUEST["tools"][0] and stored["tools"][3] == REQUEST["tools"][3]
    assert set(secrets) == {"1", "2"}
    assert restore(stored, secrets) == REQUEST
    assert SECRET in json.dumps(REQUEST), "the caller's request is not changed"


def test_a_request_without_credentials_is_kept_as_it_is() -> None:
    plain = {"model": "sim", "input": "hi", "tools": [{"type": "mcp", "server_label": "c", "server_url": "u"}]}
    assert withhold(plain) == (plain, {})
    assert CredentialKeys([new_key()]).keep({}) is None and CredentialKeys([]).keep({}) is None


def test_without_a_key_the_row_keeps_nothing_and_opening_it_says_why() -> None:
    keys = CredentialKeys([])
    kept = keys.keep(withhold(REQUEST)[1])
    assert kept == IN_MEMORY
    with pytest.raises(CredentialsUnavailable, match="in memory only"):
        keys.open(kept)


def test_sealed_credentials_open_with_any_key_of_a_rotation_and_with_no_other() -> None:
    old, new = new_key(), new_key()
    kept = CredentialKeys([old]).keep(withhold(REQUEST)[1])
    assert kept.startswith("fernet:") and SECRET not in kept
    assert restore(withhold(REQUEST)[0], CredentialKeys([new, old]).open(kept)) == REQUEST
    with pytest.raises(CredentialsUnavailable, match="not in credentials_keys"):
        CredentialKeys([new]).open(kept)
    with pytest.raises(CredentialsUnavailable, match="no credentials_keys"):
        CredentialKeys([]).open(kept)
    assert old not in repr(CredentialKeys([old]))


def test_a_key_that_is_not_a_fernet_key_is_a_configuration_error_that_does_not_echo_it() -> None:
    with pytest.raises(ConfigError, match=r"TROUPE_CREDENTIALS_KEYS: credentials_keys\[1\] is not a Fernet key") as bad:
        load_config(None, env={"TROUPE_CREDENTIALS_KEYS": f"{new_key()},hunter2-not-a-key"})
    assert "hunter2" not in str(bad.value)
    key = new_key()
    _, settings = load_config(None, env={"TROUPE_CREDENTIALS_KEYS": key})
    assert [k.get_secret_value() for k in settings.credentials_keys] == [key]
    assert key not in repr(settings) and key not in str(settings.model_dump())


def _holding(directory: Path, needle: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file() and needle.encode() in p.read_bytes())


def _old_file_with_a_deleted_secret(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file as Troupe before schema 10 left it: a run's request with its credentials, deleted,
    its bytes in the WAL of a process that was killed."""
    with monkeypatch.context() as old:
        old.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[: CREDENTIALS_WITHHELD_FROM - 1])
        old.setattr(schema, "SCHEMA_VERSION", CREDENTIALS_WITHHELD_FROM - 1)
        DuckDBStore(path).close()
    killed = f"""
import duckdb, json, os
conn = duckdb.connect({str(path)!r})
conn.execute("INSERT INTO runs VALUES ('', 'resp_1', 't', 1, ?, NULL, 0)", [json.dumps({json.dumps(REQUEST)})])
conn.execute("DELETE FROM runs")
os._exit(9)
"""
    subprocess.run([sys.executable, "-c", killed], check=False)


def test_opening_a_file_written_before_credentials_were_withheld_rewrites_it(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "old.duckdb"
    _old_file_with_a_deleted_secret(path, monkeypatch)
    assert _holding(tmp_path, SECRET) == ["old.duckdb.wal"], "the deleted row's bytes are there to find"
    store = DuckDBStore(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        assert store.unfinished_runs() == []
    finally:
        store.close()
    assert _holding(tmp_path, SECRET) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.duckdb"], "no copy or WAL left beside it"


def test_troupe_vacuum_rewrites_a_file_keeping_every_row(tmp_path: Path, capsys) -> None:
    from .test_store_contract import make_record

    path = tmp_path / "t.duckdb"
    store = DuckDBStore(path)
    store.write_responses([make_record("resp_1"), make_record("resp_2")])
    run = RunRecord(tenant="", response_id="resp_9", thread_id="t", created_at=1, request={"model": "sim", "input": SECRET})
    store.write_run_progress([run])
    store.end_run("", "resp_9")
    store.close()
    assert main(["vacuum", "--db", str(path)]) == 0
    assert f"rewrote {path}" in capsys.readouterr().out
    assert _holding(tmp_path, SECRET) == []
    store = DuckDBStore(path)
    try:
        assert store.get_response("acme", "resp_1") is not None and store.get_response("acme", "resp_2") is not None
        assert store.run_sql("SELECT count(*) FROM responses").rows == [(2,)]
    finally:
        store.close()


def test_troupe_vacuum_refuses_a_file_another_process_holds(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import duckdb, sys; c = duckdb.connect({str(path)!r}); print('ok', flush=True); "
                               "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ok"
        assert main(["vacuum", "--db", str(path)]) == 1
        assert "is open in another process" in capsys.readouterr().err
    finally:
        holder.communicate("")
    assert os.path.exists(path)
