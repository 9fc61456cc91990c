"""``troupe sql``: one read-only SQL statement over the stored history, printed as a table.

Example::

    troupe sql "SELECT status, count(*) AS n FROM responses GROUP BY status"
"""

from __future__ import annotations

import os

import click

from ._common import fail

__all__ = ["sql"]


@click.command(
    short_help="Run a read-only SQL query over the stored history.",
    epilog="""\b
Examples:
  troupe sql "SHOW TABLES"
  troupe sql "SELECT status, count(*) AS n FROM responses GROUP BY status" --db troupe.duckdb
""",
)
@click.argument("query", metavar="SQL")
@click.option("--db", metavar="PATH", help="The DuckDB file.")
@click.option("--config", metavar="PATH", help="TOML configuration file naming the storage_path.")
def sql(query: str, db: str | None, config: str | None) -> int:
    """Run SQL, one read-only statement (SELECT/WITH/DESCRIBE/SHOW/SUMMARIZE/EXPLAIN), against
    the DuckDB history and print the result as an aligned table.

    The database is --db, else the storage_path of --config / $TROUPE_STORAGE_PATH, else
    ./troupe.duckdb. DuckDB lets only one process open a file, so stop `troupe serve` first
    (or query a copy).
    """
    path = db
    if path is None:
        from .serve import load_settings

        path = load_settings(config, "sql")[1].storage_path
    if path != ":memory:" and not os.path.exists(path):
        # Opening would silently create an empty database; a typo deserves an error.
        fail("sql", f"no database at {path!r}")

    from troupe.storage.base import StorageError
    from troupe.storage.duckdb_store import DuckDBStore
    from troupe.tables import format_table

    try:
        store = DuckDBStore(path)
        try:
            columns, rows = store.query(query)
        finally:
            store.close()
    except StorageError as exc:
        fail("sql", str(exc))
    click.echo(format_table(columns, rows, count_rows=True))
    return 0
