"""The store contract: responses, conversations and step traces, per tenant.

Two implementations pass one conformance suite (``tests/unit/test_store_contract.py``):
:class:`~troupe.storage.memory.InMemoryStore` and
:class:`~troupe.storage.duckdb_store.DuckDBStore`. Methods are synchronous; the
runtime calls them from one dedicated thread (DuckDB allows one writer), batching
writes through :class:`~troupe.storage.group_commit.GroupCommitWriter`.

Every method takes the ``tenant`` (the API key's tenant, ``""`` when auth is
off): a tenant never sees another tenant's objects, which look exactly like
unknown ids.

Lists page the way the OpenAI API does (CONTRACT.md §1): ``after`` is the id of
the last item of the previous page (exclusive), ``limit`` 1–100, ``order``
``asc`` or ``desc`` (default ``desc``), and a :class:`Page` says ``has_more``.

Errors::

    StorageError        the backend failed (I/O, corruption, a migration)
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Page", "StepTrace", "ResponseRecord", "Store", "StorageError", "Order"]

Order = Literal["asc", "desc"]


class StorageError(Exception):
    """The storage backend failed. Picklable (its args reach ``Exception``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """One page of a list."""

    data: list[dict[str, Any]]
    has_more: bool

    @property
    def first_id(self) -> str | None:
        return self.data[0]["id"] if self.data else None

    @property
    def last_id(self) -> str | None:
        return self.data[-1]["id"] if self.data else None

    def to_list_object(self) -> dict[str, Any]:
        """The wire shape: ``{"object": "list", "data", "first_id", "last_id", "has_more"}``."""
        return {
            "object": "list",
            "data": self.data,
            "first_id": self.first_id,
            "last_id": self.last_id,
            "has_more": self.has_more,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTrace:
    """One model call or tool call of a response, timed."""

    response_id: str
    seq: int
    """Position within the response (0, 1, …)."""
    kind: Literal["model", "tool"]
    name: str
    """The model name, or the tool name."""
    started_at: float
    """Unix seconds."""
    duration_s: float
    call_id: str | None = None
    ttft_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseRecord:
    """A finished response, written in one transaction with everything that goes with it."""

    tenant: str
    response: dict[str, Any]
    """The full Response JSON, as served by GET."""
    input_items: list[dict[str, Any]]
    """This request's accepted input items (normalized, each with an ``id``)."""
    thread_id: str
    """The conversation id, or the id of the first response of a previous_response_id chain."""
    started_at: float
    """Unix seconds when the request arrived."""
    ended_at: float
    ttft_s: float | None = None
    """Seconds from arrival to the first output event, when streamed."""
    traces: list[StepTrace] = field(default_factory=list)
    append_to_conversation: bool = True
    """With ``response["conversation"]``: append the input and output items to it."""

    @property
    def id(self) -> str:
        return self.response["id"]


class Store(abc.ABC):
    """Where responses, conversations and traces live."""

    # -- responses ---------------------------------------------------------------

    @abc.abstractmethod
    def write_responses(self, records: Sequence[ResponseRecord]) -> None:
        """Store finished responses, atomically (all or none).

        Each record writes the response, its input items, its output items, its
        step traces and, for a conversation response, appends input then output
        items to the conversation (in that order, after its existing items).

        Raises:
            StorageError: nothing was written.
        """

    @abc.abstractmethod
    def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """The stored Response JSON, or None if unknown (or another tenant's)."""

    @abc.abstractmethod
    def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        """The thread a stored response belongs to, or None if unknown."""

    @abc.abstractmethod
    def delete_response(self, tenant: str, response_id: str) -> bool:
        """Delete a response and its items/traces; False if unknown.

        Conversation items it appended stay in the conversation.
        """

    @abc.abstractmethod
    def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """Stored responses (full Response JSON), by creation time, optionally of one model."""

    @abc.abstractmethod
    def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """A response's input items; None if the response is unknown."""

    @abc.abstractmethod
    def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """History for ``previous_response_id=response_id``.

        The input and output items of every response of the chain ending at
        ``response_id`` (following ``previous_response_id`` links back to the
        first, or to a deleted link), oldest first: for each response its input
        items then its output items. None if ``response_id`` is unknown.
        """

    @abc.abstractmethod
    def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        """A response's step traces in ``seq`` order ([] if unknown)."""

    # -- conversations -----------------------------------------------------------

    @abc.abstractmethod
    def create_conversation(self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]) -> None:
        """Store a new ``Conversation`` object (``{"id", "object", "created_at", "metadata"}``) and its first items."""

    @abc.abstractmethod
    def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        """The Conversation object, or None."""

    @abc.abstractmethod
    def update_conversation(self, tenant: str, conversation_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """Replace its metadata; the updated Conversation, or None if unknown."""

    @abc.abstractmethod
    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """Delete a conversation and its items; False if unknown."""

    @abc.abstractmethod
    def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        """Append items (each with an ``id``) after the existing ones; False if the conversation is unknown."""

    @abc.abstractmethod
    def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """A page of the conversation's items in append order; None if unknown."""

    @abc.abstractmethod
    def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        """One item, or None if the conversation or the item is unknown."""

    @abc.abstractmethod
    def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        """Remove one item; False if the conversation or the item is unknown."""

    @abc.abstractmethod
    def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        """Every item of the conversation in append order (the loop's history); None if unknown."""

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, connections)."""
