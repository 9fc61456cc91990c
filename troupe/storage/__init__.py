"""Storage: the :class:`Store` contract, its in-memory and DuckDB implementations, group commit, and
the response journal (:mod:`troupe.storage.journal`) that makes a response durable before DuckDB has it.

Example::

    from troupe.storage import DuckDBStore, GroupCommitWriter

    store = DuckDBStore("troupe.duckdb")
    writer = GroupCommitWriter(store.write_responses)
"""

from .base import (
    EvalResultRecord,
    EvalRunRecord,
    Order,
    Page,
    PromptConflict,
    QueryError,
    QueryResult,
    QueryTimeout,
    ResponseFilter,
    ResponseList,
    ResponseRecord,
    ResponseStats,
    ResponseSummary,
    RunRecord,
    RunStep,
    StepTrace,
    StorageError,
    Store,
    StoreLocked,
    Turn,
)
from .duckdb_store import DuckDBStore
from .group_commit import GroupCommitWriter
from .memory import InMemoryStore
from .schema import SCHEMA_VERSION

__all__ = [
    "DuckDBStore",
    "EvalResultRecord",
    "EvalRunRecord",
    "GroupCommitWriter",
    "InMemoryStore",
    "Order",
    "Page",
    "PromptConflict",
    "QueryError",
    "QueryResult",
    "QueryTimeout",
    "ResponseFilter",
    "ResponseList",
    "ResponseRecord",
    "ResponseStats",
    "ResponseSummary",
    "RunRecord",
    "RunStep",
    "SCHEMA_VERSION",
    "StepTrace",
    "StorageError",
    "Store",
    "StoreLocked",
    "Turn",
]
