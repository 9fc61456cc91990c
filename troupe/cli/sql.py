"""``troupe sql``: one read-only SQL statement over the stored history, whether the server runs or not.

With no server running, the query opens the DuckDB file itself. While ``troupe serve`` runs,
its storage actor holds the file (DuckDB lets one process open a file), so the query goes
through that actor instead (:mod:`troupe.runtime.ray.live_sql`): found from the owner file it
leaves beside the database, or at ``--address``. Either way it is one read-only statement,
cut at ``--max-rows`` rows and interrupted after ``--timeout`` seconds.

The result prints as a table, CSV or JSON; ``--output`` writes it to a file instead, Parquet
too, through DuckDB's ``COPY`` (:func:`troupe.storage.sql.write_result`).

Example::

    troupe sql "SELECT status, count(*) AS n FROM responses GROUP BY status"
    troupe sql "FROM step_traces" --format parquet --output traces.parquet --max-rows 1000000
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

import click

from ._common import fail

if TYPE_CHECKING:
    from troupe.storage.base import QueryResult

__all__ = ["sql"]

FORMATS = ("table", "csv", "json", "parquet")


@click.command(
    short_help="Run a read-only SQL query over the stored history (the server may be running).",
    epilog="""\b
Examples:
  troupe sql "SHOW TABLES"
  troupe sql "SELECT status, count(*) AS n FROM responses GROUP BY status" --db troupe.duckdb
  troupe sql "SELECT id, status FROM responses ORDER BY seq DESC LIMIT 5"   # while troupe serve runs
  troupe sql "FROM step_traces" --format parquet --output traces.parquet --max-rows 1000000
  troupe sql "FROM responses" --format csv --address 10.0.0.5:6379 --config troupe.toml
""",
)
@click.argument("query", metavar="SQL")
@click.option("--db", metavar="PATH", help="The DuckDB file (default: the configuration's storage_path).")
@click.option("--config", metavar="PATH", help="TOML configuration naming the storage_path (and the namespace).")
@click.option("--address", metavar="RAY_ADDRESS",
              help="Query through the storage actor of the `troupe serve` on this Ray cluster (its GCS "
                   "host:port, or auto), in the configuration's namespace, without looking at the file. "
                   "A cluster with token auth (Ray's default for a local one) also needs RAY_AUTH_MODE=token.")  # fmt: skip
@click.option("--max-rows", type=click.IntRange(min=1), metavar="N",
              help="Return at most N rows; more are cut, with a note on stderr (default: limits.sql_max_rows, 10000).")  # fmt: skip
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Interrupt the query after this long (default: limits.sql_timeout_s, 10).")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", help="How to print or write the rows.")
@click.option("--output", "-o", metavar="FILE", help="Write the rows to FILE instead of printing them (parquet needs it).")
def sql(
    query: str,
    db: str | None,
    config: str | None,
    address: str | None,
    max_rows: int | None,
    timeout: float | None,
    fmt: str,
    output: str | None,
) -> int:
    """Run SQL, one read-only statement (SELECT/WITH/DESCRIBE/SHOW/SUMMARIZE/EXPLAIN), against
    the DuckDB history and print the result as an aligned table, or CSV or JSON, or write it
    to a file (Parquet too).

    The database is --db, else the storage_path of --config / $TROUPE_STORAGE_PATH, else
    ./troupe.duckdb. While `troupe serve` runs, it holds the file (DuckDB lets one process
    open it): the query then goes through the server's storage actor, which the server
    names in an owner file beside the database (<db>.owner.json), and sees every response
    stored until then. --address names the server's Ray cluster instead. Without a server,
    the file is opened directly. Either way, writes and multiple statements are refused.
    """
    from .serve import load_settings

    server, runtime = load_settings(config, "sql")
    if fmt == "parquet" and output is None:
        fail("sql", "--format parquet writes a file: give --output FILE", 2)
    max_rows = max_rows or server.sql_max_rows
    timeout = timeout or server.sql_timeout_s
    path = db or runtime.storage_path
    result = _run(query, path, address, runtime.namespace, max_rows, timeout)
    _emit(result, fmt, output)
    if result.truncated:
        click.echo(f"troupe sql: only the first {max_rows} rows; --max-rows N for more", err=True)
    return 0


def _run(query: str, path: str, address: str | None, namespace: str, max_rows: int, timeout: float) -> QueryResult:
    """The result of ``query``: through the server at ``address``, else from the file at ``path``,
    else, when a running server holds that file, through that server."""
    from troupe.runtime.ray.live_sql import NoServer, query_server, read_owner
    from troupe.storage.base import StorageError, StoreLocked

    try:
        if address is not None:
            return query_server(address, namespace, query, max_rows=max_rows, timeout_s=timeout)
        try:
            return _run_on_file(query, path, max_rows, timeout)
        except StoreLocked as exc:
            owner = read_owner(path, exc.pid)
            if owner is None:
                holder = "another process" if exc.pid is None else f"process {exc.pid}"
                fail("sql", f"{path!r} is open in {holder}, which is not a running Troupe server (no owner file "
                            f"names it): stop it, or give the server's --address")  # fmt: skip
            return query_server(
                owner.address, owner.namespace, query, max_rows=max_rows, timeout_s=timeout, auth_mode=owner.auth_mode
            )
    except (NoServer, StorageError) as exc:
        fail("sql", str(exc))


def _run_on_file(query: str, path: str, max_rows: int, timeout: float) -> QueryResult:
    if path != ":memory:" and not os.path.exists(path):
        # Opening would silently create an empty database; a typo deserves an error.
        fail("sql", f"no database at {path!r}")
    from troupe.storage.duckdb_store import DuckDBStore

    store = DuckDBStore(path)
    try:
        return store.run_sql(query, max_rows=max_rows, timeout_s=timeout)
    finally:
        store.close()


def _emit(result: QueryResult, fmt: str, output: str | None) -> None:
    """Print ``result`` as ``fmt``, or write it to ``output``."""
    from troupe.storage.base import StorageError
    from troupe.storage.sql import write_result
    from troupe.tables import format_table

    try:
        if fmt == "table":
            text = format_table(result.columns, result.rows, count_rows=True) + "\n"
            if output is None:
                click.echo(text, nl=False)
                return
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
        elif output is not None:
            write_result(result, output, fmt)  # type: ignore[arg-type]
        else:
            with tempfile.TemporaryDirectory(prefix="troupe-sql-") as scratch:
                written = os.path.join(scratch, f"result.{fmt}")
                write_result(result, written, fmt)  # type: ignore[arg-type]
                with open(written, encoding="utf-8") as f:
                    click.echo(f.read(), nl=False)
            return
    except (OSError, StorageError) as exc:
        fail("sql", f"cannot write {output!r}: {exc}" if isinstance(exc, OSError) else str(exc))
    count = len(result.rows)
    click.echo(f"{count} row{'' if count == 1 else 's'} written to {output}")
