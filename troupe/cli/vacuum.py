"""``troupe vacuum``: rewrite the DuckDB file whole, so that deleted rows are gone from its bytes.

A row DuckDB deletes stays in the file's WAL and free blocks. The command copies every table
into a new file and puts it in the old one's place (:mod:`troupe.storage.rewrite`), with the
journal of responses not yet stored applied first. The server must be stopped: DuckDB lets one
process open the file.

Example::

    troupe vacuum --db troupe.duckdb
"""

from __future__ import annotations

import os

import click

from ._common import fail

__all__ = ["vacuum"]


@click.command(
    short_help="Rewrite the DuckDB file whole, so that deleted rows are gone from its bytes (server stopped).",
    epilog="""\b
Examples:
  troupe vacuum                        # the configuration's storage_path (./troupe.duckdb)
  troupe vacuum --db /var/lib/troupe/troupe.duckdb
""",
)
@click.option("--db", metavar="PATH", help="The DuckDB file (default: the configuration's storage_path).")
@click.option("--config", metavar="PATH", help="TOML configuration naming the storage_path.")
def vacuum(db: str | None, config: str | None) -> int:
    """Rewrite the DuckDB history file whole: a new file with the same tables and rows, moved
    over the old one, and no WAL. A row DuckDB deletes keeps its bytes in the file's WAL and free
    blocks until they are written over; after this command they are gone from the file (the file
    system frees the old file's blocks without overwriting them: see docs/security.md).

    Troupe does this by itself, once, when it opens a file written before credentials were kept
    off disk (schema version 7 to 9). Stop the server first: DuckDB lets one process open the
    file.
    """
    from troupe.storage import DuckDBStore, StorageError, StoreLocked
    from troupe.storage.duckdb_store import ROW_GROUP_ROWS
    from troupe.storage.rewrite import rewrite

    from .serve import load_settings

    _, runtime = load_settings(config, "vacuum")
    path = db or runtime.storage_path
    if path == ":memory:" or not os.path.exists(path):
        fail("vacuum", f"no database at {path!r}")
    try:
        DuckDBStore(path).close()  # migrates it, and stores what its journal holds
        before = os.path.getsize(path)
        rewrite(path, row_group_size=ROW_GROUP_ROWS)
    except StoreLocked:
        fail("vacuum", f"{path!r} is open in another process (a running server?): stop it first")
    except (StorageError, OSError) as exc:
        fail("vacuum", str(exc))
    except Exception as exc:  # duckdb.Error, without importing DuckDB for --help
        fail("vacuum", f"cannot rewrite {path!r}: {exc}")
    click.echo(f"rewrote {path}: {before:,} bytes before, {os.path.getsize(path):,} after")
    return 0
