"""Model clients by name: the configured models, built once per host and shared."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from troupe.agentloop.model import ModelClient
from troupe.agentloop.openai_client import OpenAIChatClient
from troupe.agentloop.tool_protocols import TextToolModel
from troupe.runtime.settings import ModelSpec
from troupe.sim.model import SimModel, SimSettings

__all__ = ["ModelRegistry"]


class ModelRegistry:
    """One client per configured model, created on first use.

    OpenAI-compatible clients keep one connection pool each for the life of the
    host; the sim keeps its ``[[fail … once]]`` memory the same way.
    """

    def __init__(self, specs: Sequence[ModelSpec]) -> None:
        self._specs = {s.name: s for s in specs}
        self._clients: dict[str, ModelClient] = {}

    def client(self, spec: ModelSpec) -> ModelClient:
        client = self._clients.get(spec.name)
        if client is None:
            client = self._clients[spec.name] = _build(spec)
        return client

    async def warm(self) -> None:
        """Build every client now and open its connection, so that the first turn waits for
        neither (see :meth:`OpenAIChatClient.warm`)."""
        clients = []
        for spec in self._specs.values():
            try:
                clients.append(self.client(spec))
            except ValueError:
                continue  # a model configured wrongly fails its own requests, not start-up
        await asyncio.gather(*(c.warm() for c in map(_inner, clients) if isinstance(c, OpenAIChatClient)))

    async def close(self) -> None:
        for client in map(_inner, self._clients.values()):
            if isinstance(client, OpenAIChatClient):
                await client.aclose()
        self._clients.clear()


def _build(spec: ModelSpec) -> ModelClient:
    client = _client(spec)
    # A model without tool calling: Troupe speaks a text protocol with it (docs/tool-protocols.md).
    return client if spec.tool_protocol == "native" else TextToolModel(client, spec.tool_protocol)


def _client(spec: ModelSpec) -> ModelClient:
    if spec.kind == "sim":
        return SimModel(SimSettings(ttft_ms=spec.ttft_ms, itl_ms=spec.itl_ms))
    if not spec.base_url:
        raise ValueError(f"model '{spec.name}' needs a base_url")
    api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    return OpenAIChatClient(spec.base_url, api_key=api_key)


def _inner(client: ModelClient) -> ModelClient:
    """The client a text protocol wraps, or the client."""
    return client.inner if isinstance(client, TextToolModel) else client
