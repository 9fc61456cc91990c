"""Storage: the store contract (:mod:`troupe.storage.contract`, one protocol per area), its DuckDB
implementation (:mod:`troupe.storage.duckdb_store`, one module per area), the records and errors
they pass (:mod:`troupe.storage.base`), group commit, and the response journal
(:mod:`troupe.storage.journal`) that makes a response durable before DuckDB has it.

Example::

    from troupe.storage import DuckDBStore, GroupCommitWriter

    store = DuckDBStore("troupe.duckdb")
    writer = GroupCommitWriter(store.write_responses)
"""

from typing import TYPE_CHECKING

from troupe._lazy import lazy_exports

from . import base
from .base import *  # noqa: F403 - the records and errors, as base.__all__ names them
from .contract import Store
from .group_commit import GroupCommitWriter

if TYPE_CHECKING:
    from .duckdb_store import DuckDBStore
    from .schema import SCHEMA_VERSION

__all__ = [*base.__all__, "DuckDBStore", "GroupCommitWriter", "SCHEMA_VERSION", "Store"]

# DuckDB (and the schema, which imports it) on first use: a process whose store is the storage
# actor (a conversation host, an MCP connection actor) reads records and errors only.
_HOMES = {".duckdb_store": ["DuckDBStore"], ".schema": ["SCHEMA_VERSION"]}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
