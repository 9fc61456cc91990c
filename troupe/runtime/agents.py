"""Agents (the Agents API's saved agent definitions): :class:`AgentService`, what
``Runtime.agents`` is.

Ray-free. The bodies are checked by :mod:`troupe.protocol.agents` before they get here; what is
checked here depends on the deployment, as it is for ``POST /v1/responses``:

* the ``model`` must be one this server serves (else 404 ``model_not_found`` naming ``model``);
* an ``mcp`` tool's ``transport.server_url`` must be one the MCP policy lets a request reach
  (:func:`troupe.runtime.mcp_policy.check_server`: a configured server, the allowlist, or a
  public address; never a cloud metadata address), else 400 naming
  ``tools[i].transport.server_url``. The check resolves the host name, on a thread;
* a ``web_search`` tool (not ``disabled``) needs a search provider for the tenant
  (``[web_search]``, or its own in ``[web_search.tenants]``), else 400 naming ``tools[i].type``,
  and its ``allowed_domains`` must be domain names (naming ``tools[i].allowed_domains[n]``).

Agents live in the store, per tenant (:class:`~troupe.storage.contract.Agents`): another
tenant's agent is a 404, as an unknown one is.

Example::

    agents = AgentService(settings, store)
    made = await agents.create_agent("acme", parse_agent_create({"model": "sim"}))
    await agents.update_agent("acme", made["id"], parse_agent_update({"name": "helper"}))
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from troupe.agentloop.mcp import McpServer
from troupe.agentloop.web_search import domain_name
from troupe.protocol import InvalidRequest, model_not_found
from troupe.protocol.agents import agent_deleted, agent_not_found, agent_object, new_agent_id
from troupe.runtime.mcp_policy import check_server
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page

__all__ = ["AgentService"]


class AgentService:
    """The Agents API's agents: create, retrieve, update, list, delete (wire objects of
    :func:`troupe.protocol.agents.agent_object`)."""

    def __init__(self, settings: RuntimeSettings, store: StoreClient) -> None:
        self.settings = settings
        self.store = store

    async def create_agent(self, tenant: str, definition: dict[str, Any]) -> dict[str, Any]:
        """A new agent with ``definition`` (:func:`~troupe.protocol.agents.parse_agent_create`).

        Raises:
            NotFound: the model is not served (naming ``model``).
            InvalidRequest: an MCP server the policy refuses (naming ``tools[i].transport.server_url``).
        """
        await self.check(tenant, definition)
        now = time.time()
        return await self.store.create_agent(tenant, agent_object(new_agent_id(), definition, created_at=now,
                                                                  updated_at=now))  # fmt: skip

    async def get_agent(self, tenant: str, agent_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such agent (naming ``agent_id``)."""
        found = await self.store.get_agent(tenant, agent_id)
        if found is None:
            raise agent_not_found(agent_id)
        return found

    async def list_agents(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The tenant's agents, newest first unless ``order`` is ``asc``."""
        return await self.store.list_agents(tenant, after=after, limit=limit, order=order)

    async def update_agent(self, tenant: str, agent_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """The agent with ``changes`` (:func:`~troupe.protocol.agents.parse_agent_update`) made.

        Raises:
            NotFound: no such agent (naming ``agent_id``), or the new model is not served (``model``).
            InvalidRequest: as :meth:`create_agent`, for the new tools.
        """
        await self.check(tenant, changes)
        found = await self.store.update_agent(tenant, agent_id, changes, time.time())
        if found is None:
            raise agent_not_found(agent_id)
        return found

    async def delete_agent(self, tenant: str, agent_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such agent (naming ``agent_id``)."""
        if not await self.store.delete_agent(tenant, agent_id):
            raise agent_not_found(agent_id)
        return agent_deleted(agent_id)

    async def check(self, tenant: str, fields: dict[str, Any]) -> None:
        """What depends on the deployment: the model is served, the MCP servers may be reached,
        ``tenant`` has a search provider for a ``web_search`` tool (one not ``disabled``), whose
        domains are domain names."""
        model = fields.get("model")
        if model is not None and self.settings.model(model) is None:
            raise model_not_found(model)
        for i, tool in enumerate(fields.get("tools") or ()):
            if tool["type"] == "web_search" and tool["mode"] != "disabled":
                self._check_web_search(tenant, tool, i)
        servers = [(i, tool) for i, tool in enumerate(fields.get("tools") or ()) if tool["type"] == "mcp"]
        if servers:
            await asyncio.to_thread(self._check_servers, servers)

    def _check_web_search(self, tenant: str, tool: dict[str, Any], i: int) -> None:
        for n, domain in enumerate(tool["allowed_domains"] or ()):
            if domain_name(domain) is None:
                raise InvalidRequest(f"Invalid 'tools[{i}].allowed_domains[{n}]': {domain!r} is not a domain name "
                                     "(such as example.com).", param=f"tools[{i}].allowed_domains[{n}]",
                                     code="invalid_value")  # fmt: skip
        if self.settings.web_search.provider_for(tenant).provider == "none":
            raise InvalidRequest(f"Unsupported value: 'tools[{i}].type' 'web_search': web search needs a search "
                                 "provider, and this server has none for this tenant ([web_search] provider; "
                                 "docs/web-search.md). Or give the tool mode 'disabled'.", param=f"tools[{i}].type",
                                 code="unsupported_value")  # fmt: skip

    def _check_servers(self, servers: list[tuple[int, dict[str, Any]]]) -> None:
        for i, tool in servers:
            transport = tool["transport"]
            server = McpServer(label=tool["server_label"], url=transport["server_url"], headers=transport["headers"],
                               from_request=True, param=f"tools[{i}]")  # fmt: skip
            try:
                check_server(server, self.settings, i)
            except InvalidRequest as exc:  # the policy names a responses' tools[i].server_url
                raise InvalidRequest(exc.message, param=f"tools[{i}].transport.server_url", code=exc.code) from exc
