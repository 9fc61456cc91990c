"""The DuckDB store (:class:`~troupe.storage.contract.Store`): one file (or ``:memory:``), one connection.

DuckDB allows one writing process per file, so the runtime owns the store from a
single thread (see :class:`~troupe.storage.group_commit.GroupCommitWriter`); the
lock here only makes misuse from several threads safe, not fast.

Writes of a batch of responses are one transaction with one append per table,
through DuckDB appenders kept for the life of the connection: an appender
flush costs about what a one-row ``INSERT`` does, whatever the number of rows,
where a multi-row ``INSERT … VALUES`` grows with its bound parameters (and
``executemany`` runs one statement per row). The write order counter
(``responses.seq``) and the next append position of recently used
conversations live in memory, read from the database when the store opens or
first needs them: the store must be the only writer of its file (DuckDB allows
one writing process; in the runtime the storage actor owns the file). They move
only once a transaction has committed, and a failed transaction leaves no row in
an appender, so a batch that fails (and is retried in parts by the group commit
writer) leaves no trace.

Opening a file stores what its response journal (``<path>.journal/``, see
:mod:`troupe.storage.journal`) holds beyond the position the file records: the responses
that were durable when a crash stopped the writer, before they reached DuckDB. So every
reader of the file (``troupe sql``, ``troupe eval``) sees every acknowledged response.

Memory, measured with DuckDB 2.0:

* DuckDB keeps the blocks it writes and reads in its buffer pool up to ``memory_limit``
  (by default 80% of the machine's memory): at a constant load the process grew with the
  file (about half of what the file grew) and never levelled off. The store takes a
  ``memory_limit`` (the runtime's ``storage_memory_limit``, 128MB by default), and the
  cache stays within it.
* A checkpoint rewrites a table's newest row group and holds its values in memory while it
  does. With DuckDB's default of 122,880 rows per group and long values inline, that grew
  without bound: after 120 responses with 15 MB of input, storing one more made the process
  peak at 3.7 GB; under a ``memory_limit`` the checkpoint failed instead, with a FATAL error
  that invalidates the database until it is reopened (96MB: at the 9th 12 MB value). So a
  JSON value longer than :data:`~troupe.storage.schema.LONG_VALUE_CHARS` is stored in
  ``value_parts`` rows (schema version 5); reads join the parts back
  (:meth:`Connection._fetch_values <.connection.Connection._fetch_values>`); in SQL, ``troupe_json(item, item_parts)`` does. With
  values in parts, 40 values of 12 MB under a 96MB limit, and 10 of 60 MB under 128MB, store
  with row groups of 2,048, 16,384 or 122,880 rows alike.
* A read holds a bounded number of bytes in DuckDB, whatever the size of the values and of
  the page. A ``string_agg`` of a page's parts needed the whole page: ten responses of 20 MB
  made a page of 100 fail under 128MB ("Out of Memory Error"). Parts are read at most
  :data:`~.connection._PARTS_PER_READ` at a time and joined here (``Connection._join_parts``); a page
  is chosen and ordered on its key columns alone, then only its rows' values are read
  (``Connection._paged``); and DuckDB never sorts rows that carry values (it sorts in
  memory: 150 MB of 8 KB values failed under 128MB), the store does. What a read returns is
  still whole in this process's memory: a page of 100 responses of 20 MB is 2 GB of Python
  objects on its way to the client.
* DuckDB keeps memory it does not count in ``duckdb_memory()``, growing with the rows
  written, the more so the more row groups there are (``benchmarks/storage_drift.py``: from
  50,000 to 300,000 responses, +13 MiB per 100,000 with 2,048-row groups, +7 with 16,384,
  +5 with 32,768, +6 with 122,880). The file is attached with row groups of
  :data:`~.connection.ROW_GROUP_ROWS` rows.
* DuckDB allocates through its own allocator (jemalloc), which by default keeps freed
  pages until later DuckDB work happens to purge them (8 requests with 10 MB of input left
  the process 540 MB larger for good). The store turns on the allocator's background
  threads, which give freed pages back to the OS within about a second.

Read-only SQL (:meth:`DuckDBStore.run_sql`, :meth:`DuckDBStore.query`) runs on the store's
one connection through :func:`troupe.storage.sql.run_read_only`: exactly one read-only
statement, inside a transaction that is always rolled back, interrupted past its timeout.
Opening a file another process holds raises :class:`~troupe.storage.base.StoreLocked`,
naming that process (``troupe sql`` then asks the server that holds it). A second
``read_only`` connection is not an option: DuckDB refuses to open a file twice in one
process with a different configuration, and ``:memory:`` databases cannot be shared that
way at all.


Split by area over shared plumbing: :mod:`.connection` holds the connection, its lock, the
transaction (:func:`~.connection.transaction`, which :mod:`troupe.storage.rag` uses too), long
values and pages; each area of the contract (:mod:`troupe.storage.contract`) is a class of its
own module over it (:mod:`.responses`, :mod:`.conversations`, :mod:`.prompts`, :mod:`.agents`, :mod:`.environments`, :mod:`.automations`, :mod:`.evaluation`,
:mod:`.console`), and :class:`DuckDBStore` is all of them over one connection and one lock.
"""

from __future__ import annotations

from .agents import AgentTables
from .automations import AutomationTables
from .connection import _PARTS_PER_READ, ROW_GROUP_ROWS, Connection, transaction
from .console import ConsoleReads
from .conversations import ConversationTables
from .environments import EnvironmentTables
from .evaluation import EvalTables
from .prompts import PromptTables
from .responses import ResponseTables
from .sessions import SessionTables
from .vaults import VaultTables
from .webhooks import WebhookTables

__all__ = ["DuckDBStore", "ROW_GROUP_ROWS", "Connection", "transaction", "_PARTS_PER_READ"]


class DuckDBStore(ResponseTables, SessionTables, ConversationTables, PromptTables, AgentTables, EnvironmentTables,
                  AutomationTables, VaultTables, EvalTables, WebhookTables, ConsoleReads):  # sessions build on conversations: first
    """Responses, conversations, prompts, agents, agent sessions, environments, automations, evaluation runs and traces in DuckDB: every area of
    :class:`~troupe.storage.contract.Store` over one :class:`~.connection.Connection`.

    Args:
        path: the database file (created if missing); None or ``":memory:"`` for
            a private in-memory database.
        memory_limit: DuckDB's ``memory_limit`` (``"128MB"``); None keeps DuckDB's default
            (module docstring, Memory).

    Raises:
        StoreLocked: another process has the file open (a running server's storage actor).
        StorageError: the file cannot be opened, is not a DuckDB database, was
            written by a newer Troupe (a newer schema version), or a migration failed.
    """
