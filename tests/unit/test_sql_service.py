"""The read-only SQL service (``Store.run_sql``, :mod:`troupe.storage.sql`), its exports, and
``troupe sql`` on a file held by another process. Real DuckDB files, no Ray."""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from troupe.cli import main
from troupe.runtime.ray.live_sql import Owner, owner_path, read_owner, write_owner
from troupe.runtime.store_client import AsyncStore
from troupe.storage import DuckDBStore, QueryError, QueryResult, QueryTimeout, StoreLocked
from troupe.storage.sql import write_result

from .test_store_contract import make_record

# Hashes ten billion numbers: most of a minute on 2 cores (hashing is not optimised away, as a
# bare count(*) over a range nearly is: 1.2 s), so only the timeout ends it.
SLOW = "SELECT sum(hash(range)) FROM range(10_000_000_000)"


@pytest.fixture
def store(tmp_path: Path):
    store = DuckDBStore(tmp_path / "troupe.duckdb")
    store.write_responses([make_record("resp_1"), make_record("resp_2")])
    yield store
    store.close()


# -- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("DELETE FROM responses", "not DELETE"),
        ("/* looks harmless */ UPDATE responses SET status = 'x'", "not UPDATE"),
        ("-- looks harmless\n  /* a /* nested */ one */ UPDATE responses SET status = 'x'", "not UPDATE"),
        ("EXPLAIN /* a */ ANALYZE -- b\n DELETE FROM responses", "not DELETE"),
        ("WITH r AS (SELECT 1) DELETE FROM responses", "not DELETE"),
        ("EXPLAIN ANALYZE DELETE FROM responses", "not DELETE"),
        ("CREATE TABLE x AS SELECT 1", "not CREATE"),
        ("SELECT 1; DELETE FROM responses", "exactly one statement is allowed, got 2"),
        ("SELECT 1; SELECT 2", "exactly one statement is allowed, got 2"),
        ("-- nothing but a comment", "exactly one statement is allowed, got none"),
        ("SELEC 1", "invalid SQL"),
    ],
)
def test_anything_but_one_read_is_refused_and_changes_nothing(store, sql: str, says: str) -> None:
    with pytest.raises(QueryError, match=says) as refused:
        store.run_sql(sql)
    assert not isinstance(refused.value, QueryTimeout)
    assert store.run_sql("SELECT count(*) FROM responses WHERE status = 'completed'").rows == [(2,)]


@pytest.mark.parametrize(
    "sql", ["/* a note */ SELECT count(*) FROM responses", "-- a\n/* b /* c */ */ EXPLAIN /* d */ SELECT 1"]
)
def test_comments_before_a_read_are_allowed(store, sql: str) -> None:
    assert store.run_sql(sql).rows


def test_sql_the_database_rejects_is_the_querys_fault(store) -> None:
    with pytest.raises(QueryError, match="no_such_column"):
        store.run_sql("SELECT no_such_column FROM responses")
    store.write_responses([make_record("resp_3")])  # the store is usable after it
    assert store.run_sql("SELECT count(*) FROM responses").rows == [(3,)]


@pytest.mark.parametrize(("options", "message"), [({"max_rows": 0}, "max_rows"), ({"timeout_s": 0}, "timeout_s")])
def test_bad_limits_are_a_programming_error(store, options, message) -> None:
    with pytest.raises(ValueError, match=message):
        store.run_sql("SELECT 1", **options)


# -- row limit and timeout ----------------------------------------------------------------


def test_the_row_limit_cuts_and_says_so(store) -> None:
    cut = store.run_sql("SELECT range AS n FROM range(25) ORDER BY n", max_rows=10)
    assert (cut.columns, cut.types, cut.truncated) == (["n"], ["BIGINT"], True)
    assert cut.rows == [(n,) for n in range(10)]
    whole = store.run_sql("SELECT range AS n FROM range(25)", max_rows=25)
    assert not whole.truncated and len(whole.rows) == 25


def test_a_slow_query_is_interrupted_at_its_timeout_and_the_store_goes_on(store) -> None:
    started = time.monotonic()
    with pytest.raises(QueryTimeout, match="longer than 0.3 s"):
        store.run_sql(SLOW, timeout_s=0.3)
    assert time.monotonic() - started < 10, "interrupted, not run to its end"
    # Neither the transaction nor the interrupt outlives the query: a write and a read go through.
    store.write_responses([make_record("resp_3")])
    assert store.run_sql("SELECT count(*) FROM responses", timeout_s=0.3).rows == [(3,)]


def test_a_query_done_in_time_disarms_its_timer(store) -> None:
    assert store.run_sql("SELECT 1 AS one", timeout_s=0.02).rows == [(1,)]
    # The next statement on the connection runs past that timeout (hashing is not optimised
    # away; ~0.2 s on 2 cores): a timer left armed would interrupt it.
    started = time.monotonic()
    assert len(store.query("SELECT sum(hash(range)) FROM range(50_000_000)")[1]) == 1
    assert time.monotonic() - started > 0.02, "long enough to meet a timer left armed"


async def test_through_the_async_store_a_query_sees_what_was_written_before_it(tmp_path: Path) -> None:
    store = AsyncStore.open(str(tmp_path / "troupe.duckdb"))
    try:
        await store.write_response(make_record("resp_live"))  # durable in the journal; DuckDB behind
        result = await store.run_sql("SELECT id FROM responses", max_rows=5, timeout_s=5)
        assert result.rows == [("resp_live",)]
        with pytest.raises(QueryTimeout):
            await store.run_sql(SLOW, timeout_s=0.2)
    finally:
        await store.close()


# -- results as JSON, and exports ------------------------------------------------------------

VARIED = (
    "SELECT 1 AS a, 2 AS a, NULL AS nothing, 1.25::DECIMAL(10, 2) AS price, TIMESTAMP '2025-01-02 03:04:05' AS at,"
    " {'k': [1, 2]} AS nested, 'x''y' AS text, 'nan'::DOUBLE AS nan, INTERVAL 90 SECOND AS took, 'ab'::BLOB AS raw"
)


def test_a_result_as_json_has_every_value_in_a_json_type(store) -> None:
    result = store.run_sql(VARIED)
    body = json.loads(json.dumps(result.to_json_object(), allow_nan=False))
    assert body["columns"] == ["a", "a", "nothing", "price", "at", "nested", "text", "nan", "took", "raw"]
    assert body["types"][3:5] == ["DECIMAL(10,2)", "TIMESTAMP"]
    assert body["rows"] == [[1, 2, None, "1.25", "2025-01-02T03:04:05", {"k": [1, 2]}, "x'y", "nan", 90.0, "YWI="]]
    assert body["truncated"] is False


def test_a_timestamp_with_its_time_zone_reads(store) -> None:
    # schema_version's applied_at is one (DuckDB's client needs pytz to return it).
    result = store.run_sql("SELECT TIMESTAMPTZ '2025-01-02 03:04:05+00' AS at, count(*) AS n FROM schema_version")
    body = json.loads(json.dumps(result.to_json_object()))
    assert body["rows"][0][0].startswith("2025-01-02") and body["rows"][0][1] >= 1


def test_parquet_keeps_the_rows_and_their_types(store, tmp_path: Path) -> None:
    result = store.run_sql(VARIED)
    write_result(result, tmp_path / "out.parquet", "parquet")
    back = duckdb.connect().execute(f"SELECT * FROM '{tmp_path / 'out.parquet'}'")
    names = [d[0] for d in back.description]
    assert names == ["a", "a_1", "nothing", "price", "at", "nested", "text", "nan", "took", "raw"]
    row = back.fetchall()[0]
    assert row[:7] == (1, 2, None, decimal.Decimal("1.25"), datetime.datetime(2025, 1, 2, 3, 4, 5), {"k": [1, 2]}, "x'y")
    assert row[8:] == (datetime.timedelta(seconds=90), b"ab")


def test_csv_and_json_round_trip(store, tmp_path: Path) -> None:
    result = store.run_sql("SELECT id, status, 'a,b \"c\"' AS tricky FROM responses ORDER BY id", max_rows=1)
    write_result(result, tmp_path / "out.csv", "csv")
    write_result(result, tmp_path / "out.json", "json")
    expected = [("resp_1", "completed", 'a,b "c"')]
    assert duckdb.connect().execute(f"SELECT * FROM read_csv('{tmp_path / 'out.csv'}')").fetchall() == expected
    assert json.loads((tmp_path / "out.json").read_text()) == [
        {"id": "resp_1", "status": "completed", "tricky": 'a,b "c"'}
    ]
    empty = QueryResult(columns=["n"], types=["INTEGER"], rows=[])
    write_result(empty, tmp_path / "empty.csv", "csv")
    assert (tmp_path / "empty.csv").read_text().splitlines() == ["n"]


# -- a file held by another process --------------------------------------------------------------

HOLD = "import sys; from troupe.storage import DuckDBStore; s = DuckDBStore(sys.argv[1]); print('ready', flush=True); input()"


def test_a_file_another_process_holds_is_locked_by_that_process(tmp_path: Path, capsys) -> None:
    path = str(tmp_path / "troupe.duckdb")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        with pytest.raises(StoreLocked) as locked:
            DuckDBStore(path)
        assert locked.value.pid == holder.pid

        # An owner file is trusted only when it names the process that holds the lock.
        assert read_owner(path, holder.pid) is None, "no owner file yet"
        write_owner(path, Owner(address="127.0.0.1:1", namespace="ns", pid=holder.pid + 1))
        assert read_owner(path, holder.pid) is None, "a stale owner file"
        assert main(["sql", "SELECT 1", "--db", path]) == 1
        err = capsys.readouterr().err
        assert f"is open in process {holder.pid}, which is not a running Troupe server" in err

        owner = Owner(address="127.0.0.1:1", namespace="ns", pid=holder.pid, auth_mode="token")
        write_owner(path, owner)
        assert read_owner(path, holder.pid) == owner
        # The owner it names is gone: refused at once, not after minutes of Ray retrying.
        started = time.monotonic()
        assert main(["sql", "SELECT 1", "--db", path]) == 1
        assert "no Ray cluster answers at 127.0.0.1:1" in capsys.readouterr().err
        assert time.monotonic() - started < 30
    finally:
        holder.communicate("\n", timeout=30)
    assert Path(owner_path(path)).exists()
    # The holder gone, the file opens directly again (the owner file left behind is not read).
    assert main(["sql", "SELECT count(*) AS n FROM responses", "--db", path]) == 0
    assert capsys.readouterr().out == "n\n-\n0\n(1 row)\n"


def test_the_cli_writes_each_format(tmp_path: Path, capsys) -> None:
    path = str(tmp_path / "troupe.duckdb")
    DuckDBStore(path).close()
    query = "SELECT range AS n, 'v' || range AS v FROM range(4)"
    assert main(["sql", query, "--db", path, "--format", "csv", "--max-rows", "3"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "n,v\n0,v0\n1,v1\n2,v2\n"
    assert "only the first 3 rows" in captured.err
    assert main(["sql", query, "--db", path, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[3] == {"n": 3, "v": "v3"}
    assert main(["sql", query, "--db", path, "--format", "parquet"]) == 2, "parquet needs --output"
    assert main(["sql", query, "--db", path, "--format", "parquet", "--output", str(tmp_path / "o.parquet")]) == 0
    assert capsys.readouterr().out == f"4 rows written to {tmp_path / 'o.parquet'}\n"
    assert duckdb.connect().execute(f"SELECT sum(n) FROM '{tmp_path / 'o.parquet'}'").fetchone() == (6,)
    assert main(["sql", SLOW, "--db", path, "--timeout", "0.2"]) == 1
    assert "longer than 0.2 s" in capsys.readouterr().err
