"""The sessions area of the store contract (the Agents API's sessions and their turns).

A session is stored as a plain object, the part of the wire ``agent.session`` that is the
session's own (:mod:`troupe.protocol.sessions`): ``{"id", "created_at", "last_active_at",
"conversation_id", "agent", "environment", "metadata"}`` and what the runtime keeps of it (its
container, a subagent's ``parent_id``, ``task``, ``closed_at``…). What changes as it runs
(its status, required actions, usage) is not stored here: it follows from its turns.

A turn is ``{"id", "session_id", "seq", "created_at", "responses", "results", "cancelled", "taken"}``:
``responses`` are the ids of the background responses that ran it, in order (more than one when
the agent called the client's functions or subagents and the turn went on with their results),
``results`` the function results sent (by the client, or by the server for subagent calls) for
the last response's calls and that no response has taken yet, ``cancelled`` whether the client
cancelled it while it waited for them, ``taken`` the results its last response took (what a
follower shows of them: that response's input is stored only when it ends).

Implemented by :class:`troupe.storage.duckdb_store.sessions.SessionTables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from ..base import Order, Page

__all__ = ["NewTurn", "Sessions"]


class NewTurn(NamedTuple):
    """A turn to add (:meth:`Sessions.add_turns`): its session, its id, the response that runs
    it, when it was made (Unix seconds)."""

    session_id: str
    turn_id: str
    response_id: str
    created_at: float


class Sessions(Protocol):
    """Agent sessions and their turns, per tenant."""

    def create_sessions(
        self, tenant: str, sessions: Sequence[dict[str, Any]], conversations: Sequence[dict[str, Any]] = ()
    ) -> list[dict[str, Any]]:
        """Store new sessions (each its whole object, with ``id`` and times), and new Conversation
        objects (no items: the sessions' own), in one transaction (a parent's new subagents are
        made together); the sessions' objects, in order.

        Raises:
            StorageError: an id (a session's or a conversation's) is taken (for this tenant), or
                an object is not JSON; nothing was stored.
        """
        ...

    def get_session(self, tenant: str, session_id: str) -> dict[str, Any] | None:
        """The session's object; None if the tenant has no such session."""
        ...

    def list_sessions(
        self,
        tenant: str,
        *,
        after: str | None = None,
        limit: int = 20,
        order: Order = "desc",
        agent_id: str | None = None,
        metadata: dict[str, str] | None = None,
        children_of: str | None = None,
    ) -> Page:
        """The tenant's sessions by creation time, those of the saved agent ``agent_id`` only
        when given, and those whose metadata holds every pair of ``metadata``: its top-level
        sessions, or with ``children_of`` the subagents of that session (a session object's
        ``parent_id``)."""
        ...

    def update_session(self, tenant: str, session_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """Replace the fields of the session that ``changes`` names (``agent``: the resolved agent
        as a whole; ``metadata``), in one transaction; the updated object, None if no such session."""
        ...

    def delete_session(self, tenant: str, session_id: str) -> bool:
        """Delete a session and its turns; False if the tenant has no such session."""
        ...

    def add_turns(self, tenant: str, turns: Sequence[NewTurn]) -> list[dict[str, Any]]:
        """New turns, in one transaction (a parent's new subagents start theirs together): each
        its session's last (``seq`` one more than its last turn's), run by its ``response_id``;
        each moves its session row's ``last_active_at`` column (for SQL; the object's stays as
        created: the runtime reads a session's activity from its last turn). The turns, in order.

        Raises:
            StorageError: no such session (for one of them); no turn was added.
        """
        ...

    def get_turn(self, tenant: str, session_id: str, turn_id: str) -> dict[str, Any] | None:
        """The turn; None if the session has no such turn."""
        ...

    def list_turns(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The session's turns by ``seq`` (``after``: a turn id; an unknown one gives an empty page)."""
        ...

    def record_tool_results(
        self, tenant: str, session_id: str, turn_id: str, results: dict[str, dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Keep ``results`` (call id → result) for function calls of the turn's last response,
        in one transaction (a call sent again replaces its result); the turn. None if no such turn."""
        ...

    def continue_turn(
        self, tenant: str, session_id: str, turn_id: str, *, after: str, response_id: str, call_ids: list[str],
        results: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any] | None:  # fmt: skip
        """Claim the turn's next response: if its last response is still ``after`` and a result
        is kept for each of ``call_ids``, append ``response_id`` and hand over the results (taken
        from the row, and kept as the turn's ``taken`` until the next claim) in one transaction;
        those results. None otherwise: another caller claimed it first, or a result is missing.
        Two callers never both claim one response's results. ``results``: results to keep first
        (as :meth:`record_tool_results` does), in the same transaction, claimed or not.
        """
        ...

    def cancel_turn(self, tenant: str, session_id: str, turn_id: str) -> bool:
        """Mark the turn cancelled (a turn waiting for function results: no response runs it);
        False if no such turn."""
        ...
