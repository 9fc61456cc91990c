"""The responses and runs area of the store contract: finished responses, their items, traces
and event logs, and the durable runs (background and checkpointed) not yet stored.

Implemented by :class:`troupe.storage.duckdb_store.responses.ResponseTables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..base import Order, Page, ResponseRecord, RunRecord, RunStep, StepTrace

__all__ = ["Responses"]


class Responses(Protocol):
    """Responses (per tenant) and background runs."""

    def write_responses(self, records: Sequence[ResponseRecord]) -> None:
        """Store finished responses, atomically (all or none).

        Each record writes the response, its input items, its output items, its
        step traces and, for a conversation response, appends input then output
        items to the conversation (in that order, after its existing items).

        All or none is what lets the group commit writer isolate a record the
        store refuses: it writes the rest of a failed batch again, in parts. Callers
        of the async store write through ``write_response`` (the journal and group commit).

        Raises:
            StorageError: nothing was written.
        """
        ...

    def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """The stored Response JSON, or None if unknown (or another tenant's)."""
        ...

    def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        """The thread a stored response belongs to, or None if unknown."""
        ...

    def delete_response(self, tenant: str, response_id: str) -> bool:
        """Delete a response and its items/traces; False if unknown.

        Conversation items it appended stay in the conversation.
        """
        ...

    def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """Stored responses (full Response JSON), by creation time, optionally of one model.
        An unknown ``after`` gives an empty page."""
        ...

    def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """A response's input items; None if the response is unknown."""
        ...

    def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """History for ``previous_response_id=response_id``.

        The input and output items of every response of the chain ending at
        ``response_id`` (following ``previous_response_id`` links back to the
        first, or to a deleted link), oldest first: for each response its input
        items then its output items. None if ``response_id`` is unknown.
        """
        ...

    def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """A stored response's event log (:attr:`ResponseRecord.events`), as its wire events in
        order; None if it kept none."""
        ...

    def prune_event_logs(self, ended_before: float) -> int:
        """Drop the event logs of responses that ended before ``ended_before`` (Unix seconds); how many."""
        ...

    def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        """A response's step traces in ``seq`` order ([] if unknown)."""
        ...

    # -- background runs ---------------------------------------------------------

    def start_run(self, run: RunRecord) -> None:
        """Record a durable run as accepted; :meth:`write_responses` of its response ends it."""
        self.write_run_progress([run])

    def checkpoint_run(self, step: RunStep) -> None:
        """Append a step of a run (one with a ``runs`` row); each ``seq`` is written once."""
        self.write_run_progress([step])

    def write_run_progress(self, items: Sequence[RunRecord | RunStep]) -> None:
        """Start runs (a :class:`RunRecord` each) and append their steps (:class:`RunStep`), in one
        transaction: all or none (many runs' checkpoints are committed together).

        Raises:
            StorageError: nothing of ``items`` was written.
        """
        ...

    def end_run(self, tenant: str, response_id: str) -> None:
        """Forget a run whose response will never be stored (its request was refused)."""
        ...

    def get_run(self, tenant: str, response_id: str) -> RunRecord | None:
        """The run of ``response_id`` if it has not been stored yet."""
        ...

    def unfinished_runs(self) -> list[RunRecord]:
        """Every run whose response is not stored yet, oldest first."""
        ...

    def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None:
        """Take a lost run over to resume it: its record with ``attempt + 1``, if its attempt
        is still ``attempt``; None if another caller took it first (or it has ended)."""
        ...

    def run_steps(self, tenant: str, response_id: str) -> list[RunStep]:
        """A run's steps in ``seq`` order ([] if it has none)."""
        ...
