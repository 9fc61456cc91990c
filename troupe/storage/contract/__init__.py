"""The store contract, one small protocol per area, each in its own module.

==================  =====================================  ==========================================
area                protocol                               DuckDB implementation
==================  =====================================  ==========================================
responses and runs  :class:`.responses.Responses`          ``duckdb_store.responses.ResponseTables``
conversations       :class:`.conversations.Conversations`  ``duckdb_store.conversations.ConversationTables``
prompts             :class:`.prompts.Prompts`              ``duckdb_store.prompts.PromptTables``
agents              :class:`.agents.Agents`                ``duckdb_store.agents.AgentTables``
agent sessions      :class:`.sessions.Sessions`            ``duckdb_store.sessions.SessionTables``
environments        :class:`.environments.Environments`    ``duckdb_store.environments.EnvironmentTables``
automations         :class:`.automations.Automations`      ``duckdb_store.automations.AutomationTables``
vaults              :class:`.vaults.Vaults`                ``duckdb_store.vaults.VaultTables``
webhooks            :class:`.webhooks.Webhooks`            ``duckdb_store.webhooks.WebhookTables``
evaluation          :class:`.evaluation.Evaluation`        ``duckdb_store.evaluation.EvalTables``
console reads, SQL  :class:`.console.Console`              ``duckdb_store.console.ConsoleReads``
files and vectors   :class:`.files.Files`                  :class:`troupe.storage.rag.RagStore`
containers          :class:`.containers.Containers`        ``duckdb_store.containers.ContainerTables``
session artifacts   :class:`.artifacts.Artifacts`          ``duckdb_store.artifacts.ArtifactTables``
==================  =====================================  ==========================================

The methods are synchronous; :class:`~troupe.storage.duckdb_store.DuckDBStore` implements the
first eleven over one connection, :class:`~troupe.storage.rag.RagStore` the files and vector
stores over a connection of its own, ``ContainerTables`` the containers over another, beside it
on the files' thread (a container's files are copied from the Files API's), and ``ArtifactTables``
the session artifacts over a third, there too (they are copies of containers' files, kept with the Files API's bytes). Every caller reaches them through the async store client
(:mod:`troupe.runtime.store_client`), which forwards any method named here, with its own
arguments, to the thread that runs its area (and across Ray through the storage actor's one
``call``): a new store method is written in its protocol and in DuckDB, nowhere else.

Every method takes the ``tenant`` (the API key's tenant, ``""`` when auth is off) unless it is
an operator's (evaluation, SQL, ``tenant=None`` reads): a tenant never sees another tenant's
objects, which look exactly like unknown ids. Lists page the way the OpenAI API does: ``after``
is the id of the last item of the previous page (exclusive), ``limit`` 1–100, ``order`` ``asc``
or ``desc`` (default ``desc``), and a :class:`~troupe.storage.base.Page` says ``has_more``.
Errors are those of :mod:`troupe.storage.base` (``StorageError`` and its kinds).

The conformance suite, ``tests/unit/test_store_contract.py``, runs on DuckDB in memory and on a file.
"""

from __future__ import annotations

from typing import Protocol

from .agents import Agents
from .artifacts import Artifacts
from .automations import Automations
from .console import Console
from .containers import Containers
from .conversations import Conversations
from .environments import Environments
from .evaluation import Evaluation
from .files import Files
from .prompts import Prompts
from .responses import Responses
from .sessions import NewTurn, Sessions
from .vaults import Vaults
from .webhooks import Webhooks

__all__ = [
    "Agents",
    "APART_FROM_RESPONSES",
    "ARTIFACTS_METHODS",
    "Artifacts",
    "Automations",
    "CONTAINERS_METHODS",
    "Console",
    "Containers",
    "Environments",
    "Conversations",
    "Evaluation",
    "FILES_METHODS",
    "NewTurn",
    "Files",
    "Prompts",
    "Responses",
    "STORE_METHODS",
    "Sessions",
    "Store",
    "Vaults",
    "Webhooks",
    "WRITTEN_THROUGH_WRITERS",
    "methods_of",
]


class Store(Responses, Conversations, Prompts, Agents, Sessions, Environments, Automations, Vaults, Webhooks, Evaluation,
            Console, Protocol):  # fmt: skip
    """The contract of the one-connection store (:class:`~troupe.storage.duckdb_store.DuckDBStore`)."""

    def close(self) -> None:
        """Release resources (files, connections); later calls raise StorageError."""
        ...


def methods_of(*protocols: type) -> frozenset[str]:
    """The public method names the ``protocols`` declare."""
    return frozenset(
        name for protocol in protocols for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    )  # fmt: skip


WRITTEN_THROUGH_WRITERS = frozenset({"write_responses", "write_run_progress", "start_run", "checkpoint_run"})
"""Store methods the async store does not forward as they are: their writes are group-committed
(``write_response``, ``start_run``, ``checkpoint_steps`` of the store client, journal first)."""

STORE_METHODS = (
    methods_of(Responses, Conversations, Prompts, Agents, Sessions, Environments, Automations, Vaults, Webhooks,
               Evaluation, Console)  # fmt: skip
    - WRITTEN_THROUGH_WRITERS
)
"""What the async store forwards to the store's thread, by name."""

FILES_METHODS = methods_of(Files)
"""What the async store forwards to the files and vector stores' thread, by name."""

CONTAINERS_METHODS = methods_of(Containers)
"""What the async store forwards to the containers, on the files and vector stores' thread, by name."""

ARTIFACTS_METHODS = methods_of(Artifacts)
"""What the async store forwards to the session artifacts, on the files and vector stores' thread, by name."""

WEBHOOK_ENDPOINT_METHODS = frozenset(name for name in methods_of(Webhooks) if name.endswith("_webhook_endpoint")
                                     or name == "list_webhook_endpoints")  # fmt: skip
"""The webhook endpoints' methods (not their deliveries', which ``write_responses`` writes)."""
APART_FROM_RESPONSES = (
    methods_of(Prompts, Agents, Sessions, Environments, Automations, Vaults)
    | WEBHOOK_ENDPOINT_METHODS
    | FILES_METHODS | CONTAINERS_METHODS | ARTIFACTS_METHODS
)
"""Methods of the areas that neither read nor change what ``write_responses`` writes (responses,
their items, events and traces, conversations' items, runs): a call of one need not wait until
the responses written before it are in DuckDB (a response journal's records, on their way).
``create_session`` may store the session's conversation: a new one, which no response written
before can touch."""

_AREAS = (STORE_METHODS, FILES_METHODS, CONTAINERS_METHODS, ARTIFACTS_METHODS)
assert sum(map(len, _AREAS)) == len(frozenset().union(*_AREAS)), "two areas declare one method name"
