"""The agents area of the store contract (the Agents API's saved agents).

An agent is stored as its wire object (``troupe.protocol.agents.agent_object``): ``{"id",
"object": "agent", "created_at", "updated_at", "model", "instructions", "name", "metadata",
"tools", "text", "reasoning", "service_tier", "multi_agent", "compaction", "experimental"}``.
Agents are not versioned: an update replaces the object.

Implemented by :class:`troupe.storage.duckdb_store.agents.AgentTables`.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Agents"]


class Agents(Protocol):
    """Agents, per tenant."""

    def create_agent(self, tenant: str, agent: dict[str, Any]) -> dict[str, Any]:
        """Store a new agent, ``agent`` its whole object (with its ``id`` and times); that object.

        Raises:
            StorageError: the id is taken (for this tenant), or the object is not JSON.
        """
        ...

    def get_agent(self, tenant: str, agent_id: str) -> dict[str, Any] | None:
        """The agent's object; None if the tenant has no such agent."""
        ...

    def list_agents(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        """The tenant's agents by creation time (``after``: an agent id; an unknown one gives an empty page)."""
        ...

    def update_agent(
        self, tenant: str, agent_id: str, changes: dict[str, Any], updated_at: float
    ) -> dict[str, Any] | None:
        """Make ``changes`` (``troupe.protocol.agents.parse_agent_update``) to the agent, read and
        written in one transaction (``apply_agent_update``), so two updates at once both land;
        the updated object. None if the tenant has no such agent.
        """
        ...

    def delete_agent(self, tenant: str, agent_id: str) -> bool:
        """Delete an agent; False if the tenant has no such agent."""
        ...
