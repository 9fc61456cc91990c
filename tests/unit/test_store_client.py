"""The async store's one forwarder (troupe.runtime.store_client): every contract method by name,
nothing else; and each protocol method implemented in DuckDB, not left to the protocol's body."""

from __future__ import annotations

import time

import pytest

from troupe.runtime.store_client import ROUTES, AsyncStore, NotAStoreMethod
from troupe.storage import DuckDBStore, StorageError
from troupe.storage.contract import (
    ARTIFACTS_METHODS,
    CONTAINERS_METHODS,
    FILES_METHODS,
    STORE_METHODS,
    WRITTEN_THROUGH_WRITERS,
    Agents,
    Artifacts,
    Automations,
    Console,
    Containers,
    Conversations,
    Environments,
    Evaluation,
    Files,
    Prompts,
    Responses,
    Sessions,
    Vaults,
    Webhooks,
    methods_of,
)
from troupe.storage.duckdb_store.artifacts import ArtifactTables
from troupe.storage.duckdb_store.containers import ContainerTables
from troupe.storage.rag import RagStore

from .test_store_contract import conversation, make_record, message


@pytest.fixture
async def store():
    s = AsyncStore.open(":memory:")
    yield s
    await s.close()


async def test_a_name_that_is_not_a_store_method_is_refused(store: AsyncStore) -> None:
    # DuckDB's own methods that the contract does not declare, the writes that go through
    # the group-commit writers, and nonsense: none reaches the store.
    refused = ("no_such_method", "query", "memory", "journal_lsn", "_fetchall", "write_responses", "write_run_progress")
    for name in refused:
        with pytest.raises(NotAStoreMethod, match=repr(name)):
            getattr(store, name)
        with pytest.raises(NotAStoreMethod, match=repr(name)):
            await store.call(name, ())
    assert not hasattr(store, "cursor")  # an AttributeError: hasattr, getattr(…, default) work
    assert await store.get_response("acme", "resp_1") is None  # the store is still usable


async def test_forwarded_calls_run_in_order_and_keep_their_errors(store: AsyncStore) -> None:
    await store.write_response(make_record("resp_1", conversation="conv_1", append=False))
    await store.create_conversation("acme", conversation("conv_1"), [message("msg_1", "user", "hi")])
    assert (await store.get_response("acme", "resp_1"))["id"] == "resp_1"  # after the write it follows
    assert await store.call("get_thread_id", ("acme", "resp_1")) == "conv_1"
    page = await store.list_conversation_items("acme", "conv_1", order="asc")
    assert [item["id"] for item in page.data] == ["msg_1"]
    with pytest.raises(StorageError):  # the id is taken: the store's error, as itself
        await store.create_conversation("acme", conversation("conv_1"), [])
    assert await store.delete_conversation("acme", "conv_1") is True
    assert await store.get_conversation("acme", "conv_1") is None
    # The files area, on its own thread and connection.
    file = {"id": "file-1", "created_at": 1.0, "filename": "a.txt", "purpose": "assistants", "expires_at": None}
    await store.create_file("acme", file, b"abc")
    assert await store.file_content("acme", "file-1") == ("a.txt", b"abc")
    assert await store.get_file("other", "file-1") is None
    # The containers, beside the files (whose bytes a container copies).
    container = {"id": "cntr_1", "name": "c", "created_at": time.time(), "expires_minutes": 20, "memory_limit": "1g",
                 "network_policy": {"type": "disabled"}}  # fmt: skip
    await store.create_container("acme", container, ["file-1"])
    [copied] = (await store.list_container_files("acme", "cntr_1")).data
    assert await store.container_file_content("acme", "cntr_1", copied["id"]) == ("/mnt/data/a.txt", b"abc")


def test_the_routes_are_the_protocols_methods() -> None:
    areas = methods_of(Responses, Conversations, Prompts, Agents, Sessions, Environments, Automations, Vaults, Webhooks,
                       Evaluation, Console)  # fmt: skip
    assert STORE_METHODS == areas - WRITTEN_THROUGH_WRITERS and len(STORE_METHODS) >= 30
    assert FILES_METHODS == methods_of(Files) and "search" in FILES_METHODS
    assert CONTAINERS_METHODS == methods_of(Containers) and "register_container_files" in CONTAINERS_METHODS
    assert ARTIFACTS_METHODS == methods_of(Artifacts) and "publish_artifacts" in ARTIFACTS_METHODS
    assert set(ROUTES) == STORE_METHODS | FILES_METHODS | CONTAINERS_METHODS | ARTIFACTS_METHODS
    assert {name for name, files in ROUTES.items() if files} == FILES_METHODS | CONTAINERS_METHODS | ARTIFACTS_METHODS


@pytest.mark.parametrize(
    ("implementation", "protocols"),
    [(DuckDBStore, (Responses, Conversations, Prompts, Agents, Environments, Automations, Vaults, Webhooks, Evaluation,
                    Console)),
     (RagStore, (Files,)), (ContainerTables, (Containers,)), (ArtifactTables, (Artifacts,))],
)
def test_every_protocol_method_is_implemented(implementation: type, protocols: tuple[type, ...]) -> None:
    """A protocol method a class forgot would run the protocol's ``...`` body and return None."""
    for protocol in protocols:
        for name in methods_of(protocol):
            if name in ("start_run", "checkpoint_run"):  # the protocol's own, over write_run_progress
                continue
            assert getattr(implementation, name) is not getattr(protocol, name), f"{implementation.__name__}.{name}"
