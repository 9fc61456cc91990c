"""The storage actor: the single owner of the DuckDB file, and :class:`RayStoreClient` to reach it.

DuckDB allows one writing process, so exactly one named actor opens the file,
pinned to the head node; the runtime, the hosts and evaluation reach it through
:class:`RayStoreClient`, which has the same typed methods as the actor (the
:class:`~troupe.actors.store_client.StoreClient` interface). A finished response is
durable once it is in the response journal beside the file (``troupe.storage.journal``);
DuckDB gets it behind, many per transaction. Reads run on the store's thread once what was
written before them is in DuckDB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

from troupe.storage import EvalResultRecord, EvalRunRecord, Order, Page, ResponseRecord, StepTrace

from .raycall import ray_result
from .settings import RuntimeSettings
from .store_client import AsyncStore, journal_of, open_store

__all__ = ["StorageService", "RayStoreClient", "storage_actor", "STORAGE_ACTOR_NAME"]

STORAGE_ACTOR_NAME = "troupe-storage"


class StorageService(AsyncStore):
    """The storage actor's body: an :class:`AsyncStore` over the DuckDB file at ``path``."""

    def __init__(self, path: str) -> None:
        super().__init__(open_store(path), journal=journal_of(path))

    async def ping(self) -> bool:
        return True


def storage_actor(settings: RuntimeSettings) -> ray.actor.ActorHandle:
    """The storage actor of this Ray namespace, created on the head node if it is not running."""
    return (
        ray.remote(StorageService)
        .options(
            name=STORAGE_ACTOR_NAME,
            namespace=settings.namespace,
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=10_000,
            max_restarts=-1,
            # The DuckDB file lives on the head node's disk.
            resources={"node:__internal_head__": 0.001},
        )
        .remote(settings.storage_path)
    )


class RayStoreClient:
    """The :class:`~troupe.actors.store_client.StoreClient` interface, through the storage actor.

    Each method calls the actor's method of the same name; the store's own errors
    (StorageError) arrive as themselves.
    """

    def __init__(self, handle: ray.actor.ActorHandle) -> None:
        self.handle = handle

    @classmethod
    async def connect(cls, settings: RuntimeSettings) -> RayStoreClient:
        """The storage actor of ``settings.namespace`` (started if need be), once it answers."""
        handle = storage_actor(settings)
        await ray_result(handle.ping.remote())
        return cls(handle)

    @classmethod
    def by_name(cls, settings: RuntimeSettings) -> RayStoreClient:
        """From inside another actor: the running storage actor (created by the runtime)."""
        return cls(ray.get_actor(STORAGE_ACTOR_NAME, namespace=settings.namespace))

    async def write_response(self, record: ResponseRecord) -> None:
        await ray_result(self.handle.write_response.remote(record))

    async def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        return await ray_result(self.handle.get_response.remote(tenant, response_id))

    async def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        return await ray_result(self.handle.get_thread_id.remote(tenant, response_id))

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        return await ray_result(self.handle.delete_response.remote(tenant, response_id))

    async def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        return await ray_result(
            self.handle.list_responses.remote(tenant, model=model, after=after, limit=limit, order=order)
        )

    async def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        return await ray_result(
            self.handle.list_input_items.remote(tenant, response_id, after=after, limit=limit, order=order)
        )

    async def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        return await ray_result(self.handle.chain_items.remote(tenant, response_id))

    async def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        return await ray_result(self.handle.step_traces.remote(tenant, response_id))

    async def create_conversation(
        self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]
    ) -> None:
        await ray_result(self.handle.create_conversation.remote(tenant, conversation, items))

    async def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        return await ray_result(self.handle.get_conversation.remote(tenant, conversation_id))

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        return await ray_result(self.handle.update_conversation.remote(tenant, conversation_id, metadata))

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        return await ray_result(self.handle.delete_conversation.remote(tenant, conversation_id))

    async def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        return await ray_result(self.handle.add_conversation_items.remote(tenant, conversation_id, items))

    async def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        return await ray_result(
            self.handle.list_conversation_items.remote(tenant, conversation_id, after=after, limit=limit, order=order)
        )

    async def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        return await ray_result(self.handle.get_conversation_item.remote(tenant, conversation_id, item_id))

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        return await ray_result(self.handle.delete_conversation_item.remote(tenant, conversation_id, item_id))

    async def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        return await ray_result(self.handle.conversation_items.remote(tenant, conversation_id))

    async def put_eval_run(self, run: EvalRunRecord) -> None:
        await ray_result(self.handle.put_eval_run.remote(run))

    async def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        return await ray_result(self.handle.get_eval_run.remote(run_id))

    async def list_eval_runs(self) -> list[EvalRunRecord]:
        return await ray_result(self.handle.list_eval_runs.remote())

    async def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        await ray_result(self.handle.write_eval_results.remote(results))

    async def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        return await ray_result(self.handle.eval_results.remote(run_id))

    async def close(self) -> None:
        """The actor outlives any one client; nothing to release here."""
