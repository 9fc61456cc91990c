"""Storage: the store contract (:mod:`troupe.storage.contract`, one protocol per area), its DuckDB
implementation (:mod:`troupe.storage.duckdb_store`, one module per area), the records and errors
they pass (:mod:`troupe.storage.base`), group commit, and the response journal
(:mod:`troupe.storage.journal`) that makes a response durable before DuckDB has it.

Example::

    from troupe.storage import DuckDBStore, GroupCommitWriter

    store = DuckDBStore("troupe.duckdb")
    writer = GroupCommitWriter(store.write_responses)
"""

from . import base
from .base import *  # noqa: F403 - the records and errors, as base.__all__ names them
from .contract import Store
from .duckdb_store import DuckDBStore
from .group_commit import GroupCommitWriter
from .schema import SCHEMA_VERSION

__all__ = [*base.__all__, "DuckDBStore", "GroupCommitWriter", "SCHEMA_VERSION", "Store"]
