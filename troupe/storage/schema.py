"""The DuckDB schema (ordered migrations), how records map to rows, and what SQL counts as read-only.

``MIGRATIONS[i]`` is the list of SQL statements that takes a database from
version ``i`` to version ``i + 1`` (version 1 is the first release). A migration
is never edited once released: change the schema by appending a new one.
:class:`~troupe.storage.duckdb_store.DuckDBStore` applies the missing ones on open,
in one transaction, and records each in ``schema_version``.

Conventions shared by every table:

* ``tenant`` first, ``""`` when auth is off; every lookup filters on it.
* Times are unix seconds as ``DOUBLE`` (the wire ``created_at`` is an int, but
  timings such as ``started_at`` are fractional); ``to_timestamp(x)`` turns
  them into ``TIMESTAMP WITH TIME ZONE`` for analytics.
* JSON columns use DuckDB's ``JSON`` type, so ``response->>'status'`` works.
* Order never relies on timestamps alone: ``responses.seq`` (a global write
  order) breaks ``created_at`` ties, ``conversation_items.seq`` is the append
  order.

The migrations are the schema's history: every version's DDL stays, with why it was made,
next to the record-to-row mappings of the newest.
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb

from .base import EvalResultRecord, EvalRunRecord, QueryError, ResponseRecord, StepTrace, StorageError

__all__ = [
    "CONVERSATION_ITEM_COLUMNS",
    "CREATE_VERSION_TABLE",
    "EVAL_RESULT_COLUMNS",
    "EVAL_RUN_COLUMNS",
    "ITEM_COLUMNS",
    "LONG_VALUE_CHARS",
    "MIGRATIONS",
    "PART_CHARS",
    "PART_COLUMNS",
    "RESPONSE_COLUMNS",
    "SCHEMA_VERSION",
    "TRACE_COLUMNS",
    "VERSION_TABLE",
    "check_read_only",
    "dump_json",
    "eval_result_from_row",
    "eval_result_row",
    "eval_run_from_row",
    "eval_run_row",
    "nested",
    "response_row",
    "trace_row",
]

VERSION_TABLE = "schema_version"

# The version table itself is not a migration: it must exist before we can tell
# which migrations are missing.
CREATE_VERSION_TABLE = f"""
CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    version    INTEGER PRIMARY KEY,
    applied_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT current_timestamp
)
"""

_V1 = [
    """
    CREATE TABLE responses (
        tenant               VARCHAR NOT NULL,
        id                   VARCHAR NOT NULL,
        seq                  BIGINT  NOT NULL,  -- write order, breaks created_at ties
        created_at           DOUBLE  NOT NULL,
        completed_at         DOUBLE,
        model                VARCHAR,
        status               VARCHAR,
        conversation_id      VARCHAR,
        previous_response_id VARCHAR,
        thread_id            VARCHAR NOT NULL,
        input_tokens         BIGINT,
        output_tokens        BIGINT,
        cached_tokens        BIGINT,
        reasoning_tokens     BIGINT,
        total_tokens         BIGINT,
        started_at           DOUBLE  NOT NULL,
        ended_at             DOUBLE  NOT NULL,
        ttft_s               DOUBLE,
        e2e_s                DOUBLE  NOT NULL,
        error_code           VARCHAR,
        response             JSON    NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE response_items (
        tenant      VARCHAR NOT NULL,
        response_id VARCHAR NOT NULL,
        role        VARCHAR NOT NULL CHECK (role IN ('input', 'output')),
        position    INTEGER NOT NULL,
        item_id     VARCHAR,
        item        JSON    NOT NULL
    )
    """,
    # Not unique: ART unique indexes in DuckDB slow bulk inserts and the
    # uniqueness already follows from responses' primary key.
    "CREATE INDEX response_items_by_response ON response_items (tenant, response_id)",
    """
    CREATE TABLE conversations (
        tenant       VARCHAR NOT NULL,
        id           VARCHAR NOT NULL,
        created_at   DOUBLE  NOT NULL,
        metadata     JSON    NOT NULL,
        conversation JSON    NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE conversation_items (
        tenant          VARCHAR NOT NULL,
        conversation_id VARCHAR NOT NULL,
        seq             BIGINT  NOT NULL,  -- append order within the conversation
        item_id         VARCHAR,
        item            JSON    NOT NULL
    )
    """,
    "CREATE INDEX conversation_items_by_conversation ON conversation_items (tenant, conversation_id)",
    """
    CREATE TABLE step_traces (
        tenant        VARCHAR NOT NULL,
        response_id   VARCHAR NOT NULL,
        seq           INTEGER NOT NULL,
        kind          VARCHAR NOT NULL,
        name          VARCHAR NOT NULL,
        call_id       VARCHAR,
        started_at    DOUBLE  NOT NULL,
        duration_s    DOUBLE  NOT NULL,
        ttft_s        DOUBLE,
        input_tokens  BIGINT  NOT NULL,
        output_tokens BIGINT  NOT NULL,
        error         VARCHAR
    )
    """,
    "CREATE INDEX step_traces_by_response ON step_traces (tenant, response_id)",
]

# Version 2: batch evaluation (``troupe eval``). One row per run, one per (case, sample);
# ``eval_results.response_id`` joins ``responses.id`` and ``step_traces.response_id``.
_V2 = [
    """
    CREATE TABLE eval_runs (
        run_id         VARCHAR NOT NULL PRIMARY KEY,
        created_at     DOUBLE  NOT NULL,
        finished_at    DOUBLE,
        status         VARCHAR NOT NULL,
        dataset        VARCHAR NOT NULL,
        dataset_sha256 VARCHAR NOT NULL,
        cases          INTEGER NOT NULL,
        samples        INTEGER NOT NULL,
        model          VARCHAR,
        options        JSON    NOT NULL
    )
    """,
    """
    CREATE TABLE eval_results (
        run_id        VARCHAR   NOT NULL,
        case_id       VARCHAR   NOT NULL,
        sample        INTEGER   NOT NULL,
        passed        BOOLEAN   NOT NULL,
        model         VARCHAR,
        tags          VARCHAR[] NOT NULL,
        grades        JSON      NOT NULL,  -- [{"grader", "passed", "detail"}], one per grader
        response_id   VARCHAR,
        status        VARCHAR,
        output_text   VARCHAR,
        ttft_s        DOUBLE,
        e2e_s         DOUBLE,
        input_tokens  BIGINT,
        output_tokens BIGINT,
        total_tokens  BIGINT,
        tool_calls    INTEGER   NOT NULL,
        tools_called  VARCHAR[] NOT NULL,
        node_id       VARCHAR,
        error_kind    VARCHAR,
        error_message VARCHAR,
        started_at    DOUBLE,
        ended_at      DOUBLE,
        PRIMARY KEY (run_id, case_id, sample)
    )
    """,
]

# Version 3: the response journal (``troupe.storage.journal``). One row: the highest log
# sequence number of the journal whose record is stored, written with each batch of them.
_V3 = [
    """
    CREATE TABLE journal_position (
        id          INTEGER NOT NULL PRIMARY KEY CHECK (id = 0),
        applied_lsn BIGINT  NOT NULL
    )
    """,
    "INSERT INTO journal_position VALUES (0, 0)",
]

# Version 4: one position per journal. Besides the storage actor's own journal (named ''), a
# process that finishes responses on the storage actor's node keeps a journal of its own
# (``troupe.storage.journal``, "writer journals"), each with its own log sequence numbers.
_V4 = [
    """
    CREATE TABLE journal_positions (
        journal     VARCHAR NOT NULL PRIMARY KEY,
        applied_lsn BIGINT  NOT NULL
    )
    """,
    "INSERT INTO journal_positions SELECT '', applied_lsn FROM journal_position",
    "DROP TABLE journal_position",
]

# Version 5: long JSON values in parts. A value longer than LONG_VALUE_CHARS is stored as rows
# of value_parts (PART_CHARS characters each, in order of ``part``); the row that owns it holds
# JSON null and the parts' id. A checkpoint holds every value of a table's newest row group in
# memory at once, so long values inline made checkpoints need gigabytes (see
# troupe.storage.duckdb_store, Memory). ``troupe_json(value, parts)`` gives the whole value in SQL.
_V5 = [
    """
    CREATE TABLE value_parts (
        id   BIGINT  NOT NULL,  -- one long value; ids grow in write order
        part INTEGER NOT NULL,
        text VARCHAR NOT NULL
    )
    """,
    "ALTER TABLE responses ADD COLUMN response_parts BIGINT",
    "ALTER TABLE response_items ADD COLUMN item_parts BIGINT",
    "ALTER TABLE conversation_items ADD COLUMN item_parts BIGINT",
    """
    CREATE MACRO troupe_json(value, parts) AS CASE WHEN parts IS NULL THEN value
        ELSE (SELECT string_agg(text, '' ORDER BY part) FROM value_parts WHERE id = parts)::JSON END
    """,
]

# Version 6: the event logs of background responses, which GET ?stream=true replays; one row per
# response, the events as one JSON array (in value_parts when long). No key: few responses keep one.
_V6 = [
    """
    CREATE TABLE response_events (
        tenant       VARCHAR NOT NULL,
        response_id  VARCHAR NOT NULL,
        events       JSON,
        events_parts BIGINT
    )
    """,
]

# Version 7: background runs accepted and not yet stored (storing the response deletes its row;
# a row left behind by a host that died is a lost run), and when each event log's response
# ended, for the logs' retention.
_V7 = [
    """
    CREATE TABLE runs (
        tenant        VARCHAR NOT NULL,
        response_id   VARCHAR NOT NULL,
        thread_id     VARCHAR NOT NULL,
        created_at    BIGINT  NOT NULL,
        request       JSON,
        request_parts BIGINT
    )
    """,
    "ALTER TABLE response_events ADD COLUMN ended_at DOUBLE",
]

# Version 8: durable runs. A run's checkpoints, one row per step boundary (the step's outcome,
# wire events and traces as one JSON value, in value_parts when long), deleted with the run; and
# how many times a run was taken over after its host died, so two resumers never both resume it.
_V8 = [
    """
    CREATE TABLE run_steps (
        tenant      VARCHAR NOT NULL,
        response_id VARCHAR NOT NULL,
        seq         INTEGER NOT NULL,
        step        JSON,
        step_parts  BIGINT
    )
    """,
    "ALTER TABLE runs ADD COLUMN attempt INTEGER DEFAULT 0",
]

# Version 9: files and vector stores (troupe.storage.rag). A file's bytes live on disk beside the
# database (<path>.files/), its row here. A vector store's chunks, their keyword index (one row per
# chunk and term: the term's 64-bit hash, its count, the chunk's length in terms, for BM25 in SQL)
# and their embeddings: in vector_store_vectors_<n>, one table per embedding dimension n
# (FLOAT[n] is a fixed-size array), created when the first store of that dimension is filled.
# Chunks and terms name their store by its integer key: integer filters scan several times
# faster than strings.
_V9 = [
    """
    CREATE TABLE files (
        tenant     VARCHAR NOT NULL,
        id         VARCHAR NOT NULL,
        created_at DOUBLE  NOT NULL,
        filename   VARCHAR NOT NULL,
        purpose    VARCHAR NOT NULL,
        bytes      BIGINT  NOT NULL,
        sha256     VARCHAR NOT NULL,
        expires_at BIGINT,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE vector_stores (
        tenant          VARCHAR NOT NULL,
        id              VARCHAR NOT NULL,
        key             INTEGER NOT NULL,  -- what chunks, terms and vectors name it by
        created_at      DOUBLE  NOT NULL,
        name            VARCHAR NOT NULL,
        description     VARCHAR,
        metadata        JSON    NOT NULL,
        expires_after   JSON,
        last_active_at  DOUBLE  NOT NULL,
        embedding_model VARCHAR NOT NULL,
        dimensions      INTEGER,           -- set by its first embedded chunk
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE vector_store_files (
        tenant          VARCHAR NOT NULL,
        vector_store_id VARCHAR NOT NULL,
        file_id         VARCHAR NOT NULL,
        created_at      DOUBLE  NOT NULL,
        batch_id        VARCHAR,
        status          VARCHAR NOT NULL,  -- in_progress, completed, failed, cancelled
        last_error      JSON,
        attributes      JSON,
        chunking        JSON    NOT NULL,  -- {max_chunk_size_tokens, chunk_overlap_tokens}
        usage_bytes     BIGINT  NOT NULL,
        chunks          INTEGER NOT NULL,
        token           VARCHAR NOT NULL,  -- the ingestion that may finish it (a re-add starts another)
        started_at      DOUBLE,            -- its ingestion task's start and end, and where it ran
        ended_at        DOUBLE,
        worker          VARCHAR,
        PRIMARY KEY (tenant, vector_store_id, file_id)
    )
    """,
    """
    CREATE TABLE vector_store_file_batches (
        tenant          VARCHAR NOT NULL,
        id              VARCHAR NOT NULL,
        vector_store_id VARCHAR NOT NULL,
        created_at      DOUBLE  NOT NULL,
        cancelled       BOOLEAN NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE vector_store_chunks (
        chunk_id        BIGINT  NOT NULL,  -- ids grow in write order
        store_key       INTEGER NOT NULL,
        tenant          VARCHAR NOT NULL,
        vector_store_id VARCHAR NOT NULL,
        file_id         VARCHAR NOT NULL,
        chunk_index     INTEGER NOT NULL,
        text            VARCHAR NOT NULL,
        length          INTEGER NOT NULL   -- in terms (BM25's document length)
    )
    """,
    """
    CREATE TABLE vector_store_terms (
        store_key INTEGER NOT NULL,
        term      BIGINT  NOT NULL,  -- troupe.rag.text.term_hash
        chunk_id  BIGINT  NOT NULL,
        tf        INTEGER NOT NULL,
        length    INTEGER NOT NULL   -- the chunk's, repeated: BM25 needs no join
    )
    """,
]

# Version 10: a run's request is stored without its credentials (MCP headers and authorization);
# this column says what became of them (troupe.storage.credentials): nothing kept, or sealed.
# Files written before it may hold credentials in the WAL and free blocks: DuckDBStore rewrites
# such a file whole before migrating it (rewrite.py).
_V10 = ["ALTER TABLE runs ADD COLUMN credentials VARCHAR"]

# Version 11: stored prompts (the Prompts API, troupe.protocol.prompts). One row per prompt, with
# its default and latest version numbers; one per version, its content ({prompt, messages,
# variables}) as one JSON value (in value_parts when long). Versions are never changed, only added.
_V11 = [
    """
    CREATE TABLE prompts (
        tenant          VARCHAR NOT NULL,
        id              VARCHAR NOT NULL,
        created_at      DOUBLE  NOT NULL,
        default_version INTEGER NOT NULL,
        latest_version  INTEGER NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE prompt_versions (
        tenant        VARCHAR NOT NULL,
        prompt_id     VARCHAR NOT NULL,
        version       INTEGER NOT NULL,
        created_at    DOUBLE  NOT NULL,
        content       JSON,
        content_parts BIGINT,
        PRIMARY KEY (tenant, prompt_id, version)
    )
    """,
]

# Version 12: containers (the Containers API, troupe.protocol.containers). A container's files are
# on disk in its directory (<path>.containers/<container id>/, /mnt/data inside its sandbox), one
# row each here: its path relative to the directory, its size and modification time when last
# registered (how a walk of the directory tells a changed file), who made it. An expired container
# keeps its row (status 'expired'; OpenAI shows its metadata) and loses its files and directory.
_V12 = [
    """
    CREATE TABLE containers (
        tenant          VARCHAR NOT NULL,
        id              VARCHAR NOT NULL,
        created_at      DOUBLE  NOT NULL,
        name            VARCHAR NOT NULL,
        status          VARCHAR NOT NULL,  -- running, expired
        expires_minutes INTEGER NOT NULL,  -- idle minutes after last_active_at before it expires
        last_active_at  DOUBLE  NOT NULL,
        memory_limit    VARCHAR NOT NULL,  -- 1g, 4g, 16g, 64g
        network_policy  JSON    NOT NULL,
        expired_at      DOUBLE,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE container_files (
        tenant       VARCHAR NOT NULL,
        id           VARCHAR NOT NULL,
        container_id VARCHAR NOT NULL,
        created_at   DOUBLE  NOT NULL,
        path         VARCHAR NOT NULL,  -- relative to the container's directory
        bytes        BIGINT  NOT NULL,
        source       VARCHAR NOT NULL,  -- user (uploaded, copied from the Files API), assistant (code)
        mtime_ns     BIGINT  NOT NULL,  -- of the file on disk when last registered
        PRIMARY KEY (tenant, id)
    )
    """,
    "CREATE INDEX container_files_by_container ON container_files (tenant, container_id)",
]

# Version 13: agents (the Agents API, troupe.protocol.agents). One row per agent, its wire object as one
# JSON value (in value_parts when long: instructions and tools may take MBs), with its times, model and
# name beside it for SQL. Agents are not versioned (OpenAI's have no version): an update replaces the row.
_V13 = [
    """
    CREATE TABLE agents (
        tenant      VARCHAR NOT NULL,
        id          VARCHAR NOT NULL,
        created_at  DOUBLE  NOT NULL,
        updated_at  DOUBLE  NOT NULL,
        model       VARCHAR NOT NULL,
        name        VARCHAR,
        agent       JSON,
        agent_parts BIGINT,
        PRIMARY KEY (tenant, id)
    )
    """,
]

# Version 14: agent sessions (the Agents API, troupe.protocol.sessions). A session's object is one JSON
# value (in value_parts when long: it holds its agent), with its times and saved agent beside it for
# lists; its turns are rows of their own, each naming the background responses that ran it, in order.
_V14 = [
    """
    CREATE TABLE agent_sessions (
        tenant         VARCHAR NOT NULL,
        id             VARCHAR NOT NULL,
        created_at     DOUBLE  NOT NULL,
        last_active_at DOUBLE  NOT NULL,
        agent_id       VARCHAR,
        parent_id      VARCHAR,           -- a subagent's: the session that made it
        metadata       JSON    NOT NULL,  -- beside the object, which may be in parts, for lists' filters
        session        JSON,
        session_parts  BIGINT,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE session_turns (
        tenant     VARCHAR NOT NULL,
        id         VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        seq        INTEGER NOT NULL,
        created_at DOUBLE  NOT NULL,
        responses  JSON    NOT NULL,  -- the ids of the responses that ran it, in order
        results    JSON    NOT NULL,  -- function results sent for its last response's calls, not yet taken
        cancelled  BOOLEAN NOT NULL,
        PRIMARY KEY (tenant, id),
        UNIQUE (tenant, session_id, seq)
    )
    """,
]

# Version 15: the Agents API's environments (troupe.protocol.environments). A template's row keeps its wire
# object (which holds no secret) and, apart, its env and inline files' contents sealed with credentials_keys
# (a Fernet token, or NULL: never plain text). An environment's row keeps its object and the container it
# runs in; its env is not stored at all (it lives in the sandbox's memory).
_V15 = [
    """
    CREATE TABLE environment_templates (
        tenant      VARCHAR NOT NULL,
        id          VARCHAR NOT NULL,
        created_at  DOUBLE  NOT NULL,
        updated_at  DOUBLE  NOT NULL,
        name        VARCHAR,
        template    JSON    NOT NULL,
        secrets     VARCHAR,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE environments (
        tenant       VARCHAR NOT NULL,
        id           VARCHAR NOT NULL,
        created_at   DOUBLE  NOT NULL,
        container_id VARCHAR NOT NULL,
        environment  JSON    NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
]


# Version 16: automations (the Agents API's scheduled agents, troupe.protocol.automations). One row per
# automation, its wire object as one JSON value (in value_parts when long: an inline agent's tools), with
# beside it what the scheduler reads: its status and next due time (NULL: none, paused or completed), an
# existing-session target's session id (list's filter), and what is kept of its environment's confidential
# values (troupe.storage.credentials: a sealed token or 'in-memory', never the values). One row per
# invocation (a firing, or a manual run), UNIQUE (automation_id, scheduled_at): the claim of a due time,
# which a second claimer, of any replica, fails (manual runs' NULL times do not collide).
_V16 = [
    """
    CREATE TABLE automations (
        tenant           VARCHAR NOT NULL,
        id               VARCHAR NOT NULL,
        created_at       DOUBLE  NOT NULL,
        type             VARCHAR NOT NULL,
        status           VARCHAR NOT NULL,
        next_due_at      BIGINT,
        session_id       VARCHAR,
        automation       JSON,
        automation_parts BIGINT,
        secrets          VARCHAR,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE automation_invocations (
        tenant           VARCHAR NOT NULL,
        id               VARCHAR NOT NULL,
        automation_id    VARCHAR NOT NULL,
        created_at       DOUBLE  NOT NULL,
        scheduled_at     BIGINT,
        status           VARCHAR NOT NULL,
        session_id       VARCHAR,
        invocation       JSON,
        invocation_parts BIGINT,
        PRIMARY KEY (tenant, id),
        UNIQUE (automation_id, scheduled_at)
    )
    """,
]

_V17 = [
    # The results a turn's next response took: a follower of the session that saw the turn move
    # on shows the subagent calls' outputs from here (the response's input is stored at its end).
    "ALTER TABLE session_turns ADD COLUMN taken JSON DEFAULT '{}'",
]

# Version 18: session artifacts (the Agents API, troupe.protocol.artifacts; troupe.storage.contract.artifacts).
# An artifact's row names its session, turn, environment and absolute path; its bytes are a file of the
# Files API's byte store named by its id. UNIQUE (tenant, turn_id, path): a completed turn publishes a path
# once, whoever publishes it. artifact_paths: the files a turn's runs wrote, noted until it ends.
_V18 = [
    """
    CREATE TABLE session_artifacts (
        tenant         VARCHAR NOT NULL,
        id             VARCHAR NOT NULL,
        session_id     VARCHAR NOT NULL,
        turn_id        VARCHAR NOT NULL,
        environment_id VARCHAR NOT NULL,
        path           VARCHAR NOT NULL,  -- absolute, in the environment (/mnt/data/...)
        size_bytes     BIGINT  NOT NULL,
        created_at     DOUBLE  NOT NULL,
        PRIMARY KEY (tenant, id),
        UNIQUE (tenant, turn_id, path)
    )
    """,
    "CREATE INDEX session_artifacts_by_session ON session_artifacts (tenant, session_id)",
    """
    CREATE TABLE artifact_paths (
        tenant     VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        turn_id    VARCHAR NOT NULL,
        path       VARCHAR NOT NULL,  -- relative to the container's directory
        PRIMARY KEY (tenant, turn_id, path)
    )
    """,
]

_V19 = [
    # Vaults and their credentials (troupe.storage.contract.vaults): a credential's secrets are
    # sealed (fernet:…) by the runtime before they reach here, never plain.
    """
    CREATE TABLE vaults (
        tenant     VARCHAR NOT NULL,
        id         VARCHAR NOT NULL,
        created_at DOUBLE  NOT NULL,
        status     VARCHAR NOT NULL,
        metadata   JSON    NOT NULL,
        vault      JSON    NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
    """
    CREATE TABLE vault_credentials (
        tenant     VARCHAR NOT NULL,
        id         VARCHAR NOT NULL,
        vault_id   VARCHAR NOT NULL,
        created_at DOUBLE  NOT NULL,
        status     VARCHAR NOT NULL,
        metadata   JSON    NOT NULL,
        credential JSON    NOT NULL,
        secrets    VARCHAR NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
]

_V20 = [
    # What a guardrail step found (troupe.agentloop.guardrails): its stage, verdict and
    # categories, JSON; null for model and tool steps.
    "ALTER TABLE step_traces ADD COLUMN detail JSON",
]

_V21 = [
    # Webhook endpoints (troupe.storage.contract.webhooks): their signing secrets sealed
    # (fernet:…) by the runtime before they reach here, never plain; event_types apart from the
    # record, for the outbox's lookups.
    """
    CREATE TABLE webhook_endpoints (
        tenant      VARCHAR   NOT NULL,
        id          VARCHAR   NOT NULL,
        created_at  DOUBLE    NOT NULL,
        event_types VARCHAR[] NOT NULL,
        endpoint    JSON      NOT NULL,
        secrets     VARCHAR   NOT NULL,
        PRIMARY KEY (tenant, id)
    )
    """,
    # The outbox: one row per event and subscribed endpoint, written in the transaction that
    # stores the event's cause; its attempts update it (the delivery log).
    """
    CREATE TABLE webhook_deliveries (
        tenant           VARCHAR NOT NULL,
        id               VARCHAR NOT NULL,  -- wh_…: the webhook-id header, the same on every attempt
        endpoint_id      VARCHAR NOT NULL,
        event_id         VARCHAR NOT NULL,
        event_type       VARCHAR NOT NULL,
        event            VARCHAR NOT NULL,  -- the body, byte for byte as every attempt sends it
        created_at       DOUBLE  NOT NULL,
        status           VARCHAR NOT NULL,  -- pending | delivered | failed
        attempts         INTEGER NOT NULL,
        next_attempt_at  DOUBLE,
        last_attempt_at  DOUBLE,
        last_status_code INTEGER,
        last_error       VARCHAR,
        delivered_at     DOUBLE,
        PRIMARY KEY (tenant, id)
    )
    """,
]

MIGRATIONS: list[list[str]] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13, _V14, _V15,
                               _V16, _V17, _V18, _V19, _V20, _V21]

WEBHOOKS_FROM = 21
"""The schema version that brought the webhook endpoints and their outbox."""

CREDENTIALS_STORED_FROM, CREDENTIALS_WITHHELD_FROM = 7, 10
"""Files of versions 7 to 9 were written by a Troupe that stored runs' credentials (schema
version 7 brought ``runs``; 10 keeps them out): opening one rewrites it whole."""
"""``MIGRATIONS[v - 1]`` creates version ``v``."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The newest version this code knows; a database file with a newer one is refused."""


# -- mapping records to rows (the current schema) ---------------------------------

RESPONSE_COLUMNS = (
    "tenant, id, seq, created_at, completed_at, model, status, conversation_id, previous_response_id, thread_id, "
    "input_tokens, output_tokens, cached_tokens, reasoning_tokens, total_tokens, started_at, ended_at, ttft_s, "
    "e2e_s, error_code, response, response_parts"
)
ITEM_COLUMNS = "tenant, response_id, role, position, item_id, item, item_parts"
CONVERSATION_ITEM_COLUMNS = "tenant, conversation_id, seq, item_id, item, item_parts"
PART_COLUMNS = "id, part, text"
EVENT_LOG_COLUMNS = "tenant, response_id, events, events_parts, ended_at"
RUN_COLUMNS = "tenant, response_id, thread_id, created_at, request, request_parts, attempt, credentials"
RUN_STEP_COLUMNS = "tenant, response_id, seq, step, step_parts"

LONG_VALUE_CHARS = 8192
"""A JSON value longer than this (in characters) is stored in parts (version 5 above)."""
PART_CHARS = 8192
"""The characters per row of ``value_parts``."""
TRACE_COLUMNS = (
    "tenant, response_id, seq, kind, name, call_id, started_at, duration_s, ttft_s, input_tokens, output_tokens, error, "
    "detail"
)


EVAL_RUN_COLUMNS = "run_id, created_at, finished_at, status, dataset, dataset_sha256, cases, samples, model, options"
EVAL_RESULT_COLUMNS = (
    "run_id, case_id, sample, passed, model, tags, grades, response_id, status, output_text, ttft_s, e2e_s, "
    "input_tokens, output_tokens, total_tokens, tool_calls, tools_called, node_id, error_kind, error_message, "
    "started_at, ended_at"
)


def dump_json(value: Any) -> str:
    """Compact JSON text; StorageError for what JSON cannot hold (NaN, arbitrary objects)."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"not storable as JSON: {exc}") from exc


def nested(mapping: Any, *keys: str) -> Any:
    """``mapping[k1][k2]…``, or None where a level is missing or not a dict."""
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def response_row(record: ResponseRecord, seq: int) -> tuple[Any, ...]:
    """The ``responses`` row of ``record`` (columns :data:`RESPONSE_COLUMNS`), ``seq`` being its write order."""
    response = record.response
    usage = response.get("usage")
    return (
        record.tenant,
        response.get("id"),
        seq,
        response.get("created_at"),
        response.get("completed_at"),
        response.get("model"),
        response.get("status"),
        nested(response, "conversation", "id"),
        response.get("previous_response_id"),
        record.thread_id,
        nested(usage, "input_tokens"),
        nested(usage, "output_tokens"),
        nested(usage, "input_tokens_details", "cached_tokens"),
        nested(usage, "output_tokens_details", "reasoning_tokens"),
        nested(usage, "total_tokens"),
        record.started_at,
        record.ended_at,
        record.ttft_s,
        record.ended_at - record.started_at,
        nested(response, "error", "code"),
        dump_json(response),
        None,  # response_parts: set by the store when the JSON is long
    )


def trace_row(tenant: str, t: StepTrace) -> tuple[Any, ...]:
    """The ``step_traces`` row of ``t`` (columns :data:`TRACE_COLUMNS`)."""
    return (
        tenant, t.response_id, t.seq, t.kind, t.name, t.call_id, t.started_at, t.duration_s, t.ttft_s,
        t.input_tokens, t.output_tokens, t.error, None if t.detail is None else dump_json(t.detail),
    )  # fmt: skip


def eval_run_row(run: EvalRunRecord) -> tuple[Any, ...]:
    """The ``eval_runs`` row of ``run`` (columns :data:`EVAL_RUN_COLUMNS`)."""
    return (
        run.run_id, run.created_at, run.finished_at, run.status, run.dataset, run.dataset_sha256, run.cases,
        run.samples, run.model, dump_json(run.options),
    )  # fmt: skip


def eval_run_from_row(row: tuple[Any, ...]) -> EvalRunRecord:
    """Inverse of :func:`eval_run_row` (the JSON column as text)."""
    names = [c.strip() for c in EVAL_RUN_COLUMNS.split(",")]
    values = dict(zip(names, row, strict=True))
    values["options"] = json.loads(values["options"])
    return EvalRunRecord(**values)


def eval_result_row(r: EvalResultRecord) -> tuple[Any, ...]:
    """The ``eval_results`` row of ``r`` (columns :data:`EVAL_RESULT_COLUMNS`)."""
    return (
        r.run_id, r.case_id, r.sample, bool(r.passed), r.model, [str(t) for t in r.tags], dump_json(r.grades),
        r.response_id, r.status, r.output_text, r.ttft_s, r.e2e_s, r.input_tokens, r.output_tokens,
        r.total_tokens, r.tool_calls, [str(t) for t in r.tools_called], r.node_id, r.error_kind, r.error_message,
        r.started_at, r.ended_at,
    )  # fmt: skip


def eval_result_from_row(row: tuple[Any, ...]) -> EvalResultRecord:
    """Inverse of :func:`eval_result_row` (the JSON column as text)."""
    names = [c.strip() for c in EVAL_RESULT_COLUMNS.split(",")]
    values = dict(zip(names, row, strict=True))
    values["grades"] = json.loads(values["grades"])
    values["tags"] = list(values["tags"])
    values["tools_called"] = list(values["tools_called"])
    return EvalResultRecord(**values)


# -- read-only SQL ---------------------------------------------------------------

_READ_KEYWORDS = frozenset({"select", "with", "from", "values", "describe", "show", "summarize", "explain"})
_ONLY_READS = "only read-only queries are allowed (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN)"
_FIRST_WORD = re.compile(r"[A-Za-z_]+")


def _skip_comments(sql: str) -> str:
    """``sql`` from its first token on: leading white space, ``-- …`` line comments and
    ``/* … */`` block comments (nested, as DuckDB's parser reads them) are skipped.

    DuckDB's ``extract_statements`` keeps a statement's leading comments in its ``query``
    (since 2.0), so the first keyword is found here, not by the parser."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        else:
            break
    return sql[i:]


def _first_word(sql: str) -> str:
    """The keyword ``sql`` starts with, lower-cased ("" when it starts with none)."""
    word = _FIRST_WORD.match(sql)
    return word.group().lower() if word else ""


def check_read_only(sql: str) -> None:
    """Raise QueryError unless ``sql`` is exactly one read-only statement.

    DuckDB's own parser must find exactly one statement, of type SELECT (which
    DESCRIBE, SHOW and SUMMARIZE also are; ``WITH … DELETE`` is not); as a cheap
    second line, its first keyword, comments skipped, must be a reading one (SELECT,
    WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, or EXPLAIN [ANALYZE] of such a
    statement). A refusal names that keyword.
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"invalid SQL: {exc}") from exc
    if len(statements) != 1:
        raise QueryError(f"exactly one statement is allowed, got {len(statements) or 'none'}")
    text = _skip_comments(statements[0].query)
    first = _first_word(text)
    if first not in _READ_KEYWORDS:
        shown = first.upper() or (text.split(None, 1)[0] if text.strip() else "an empty statement")
        raise QueryError(f"{_ONLY_READS}, not {shown}")
    if first == "explain":
        # EXPLAIN ANALYZE executes its statement: the explained one must be read-only too.
        explained = _skip_comments(text[len(first) :])
        if _first_word(explained) == "analyze":
            explained = _skip_comments(explained[len("analyze") :])
        check_read_only(explained)
    elif statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"{_ONLY_READS}, not {statements[0].type.name}")
