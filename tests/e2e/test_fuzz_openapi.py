"""Property-based fuzzing of the HTTP API, generated from Troupe's own OpenAPI description.

The description is ``app.openapi()`` (what ``GET /openapi.json`` serves, see
troupe/serve/openapi.py). Schemathesis generates requests from it, positive (valid by the
schema) and negative (not), and sends them to one real server: the app over ``Runtime.local``
with a DuckDB file, on a loopback port (uvicorn, as in the other e2e tests).

* ``test_fuzz_operation`` (one test per operation) and ``test_fuzz_stateful`` (sequences along
  the description's links, so that requests also address objects that exist) check: no 5xx;
  every error answers OpenAI's body ``{"error": {message, type, param, code}}``; status codes,
  content types and bodies conform to the description; a stream is neither cut off nor ends in
  a ``server_error``. A failure shows the shrunk request as a curl command, and the server's
  traceback.
* ``test_no_collateral_damage``: valid requests (plain creates; conversations of three turns)
  run concurrently with fuzzed ones and with known-hostile bodies (non-JSON numbers, lone
  surrogates, deep nesting…), on the same server; every valid request succeeds and, afterwards,
  every valid response and conversation history is still there, in order.

Deterministic (derandomized, no example database) and bounded: ``TROUPE_FUZZ_EXAMPLES``
(default 15) examples per operation. Locally, raise it, and add Schemathesis' coverage phase
(boundary values of every field; thousands of requests) with ``TROUPE_FUZZ_COVERAGE=1``::

    TROUPE_FUZZ_EXAMPLES=500 TROUPE_FUZZ_COVERAGE=1 .venv/bin/pytest tests/e2e/test_fuzz_openapi.py
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import json
import logging
import os
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.failures import Failure
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.servers import serve_app, wait_for
from tests.unit.test_duckdb_big_reads import big_record
from troupe.runtime.facade import Runtime
from troupe.runtime.settings import McpSettings, RuntimeSettings
from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings
from troupe.storage import DuckDBStore

BUDGET = int(os.environ.get("TROUPE_FUZZ_EXAMPLES", "15"))
"""Examples per operation (and stateful scenarios); it bounds the run."""
COVERAGE = os.environ.get("TROUPE_FUZZ_COVERAGE", "") == "1"
"""Also run Schemathesis' coverage phase (minutes, not seconds)."""

pytestmark = pytest.mark.timeout(max(120, 5 * BUDGET) + (3000 if COVERAGE else 0))


# -- the schema --------------------------------------------------------------------------


def _description() -> dict[str, Any]:
    """The app's own OpenAPI description (building it needs no runtime), steered a little:
    generated create requests name the ``sim`` model, so that most run the agent loop (and most
    agents are made) rather than stop at ``model_not_found`` (negative examples still name other
    models)."""
    raw = copy.deepcopy(create_app(lambda: None, ServerSettings()).openapi())  # type: ignore[arg-type,return-value]
    schemas = raw["components"]["schemas"]
    for name in ("CreateResponseRequest", "AgentCreateRequest", "AgentUpdateRequest"):
        schemas[name]["properties"]["model"] = {"type": "string", "enum": ["sim"]}
    return raw


CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {
            "mode": "all",  # positive and negative
            "max-examples": BUDGET,
            "deterministic": True,
            "database": "none",
        },
        "phases": {
            "examples": {"enabled": True},
            "fuzzing": {"enabled": True},
            # Boundary values of every field: thorough but unbounded by the budget (~7,000 create
            # requests alone), so opt-in.
            "coverage": {"enabled": COVERAGE},
        },
        "suppress-health-check": ["all"],  # the create body is large; generation speed is not under test
        # Print reproductions whole (`max_output_tokens` is no secret, a long body is no noise).
        "output": {"sanitization": {"enabled": False}, "truncation": {"enabled": False}},
    }
)
schema = schemathesis.openapi.from_dict(_description(), config=CONFIG)


# -- the server --------------------------------------------------------------------------


class ServerLog(logging.Handler):
    """The server's logged tracebacks (uvicorn logs every exception that escapes the app)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.tracebacks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.tracebacks.append("".join(traceback.format_exception(*record.exc_info)))


class LazyRuntime:
    """Builds the runtime on first use, inside the server's event loop, and closes it there."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.runtime: Runtime | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()

    def __call__(self) -> Runtime:
        with self.lock:
            if self.runtime is None:
                self.loop = asyncio.get_running_loop()
                # No MCP server URL is allowed (.invalid never resolves): fuzzed tools stay off the network.
                settings = RuntimeSettings(storage_path=self.path, mcp=McpSettings(allowed_urls=("http://fuzz.invalid/*",)))
                self.runtime = Runtime.local(settings)
            return self.runtime

    def close(self) -> None:
        if self.runtime is not None and self.loop is not None:
            asyncio.run_coroutine_threadsafe(self.runtime.close(), self.loop).result(timeout=10)


SEEDED = [big_record(i, mb=4, tenant="") for i in range(3)]
"""Responses of several MB already stored when the server starts (4 MB answers, a chain, with
their event logs and 4 MB inputs): every fuzzed list reads them, and
:func:`test_big_stored_responses_are_read` reads each every way. Reads of such values once ran
DuckDB out of its memory limit (issue 26, item 5)."""


@pytest.fixture(scope="module")
def base_url(tmp_path_factory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("fuzz") / "troupe.duckdb"
    store = DuckDBStore(path, memory_limit=RuntimeSettings().storage_memory_limit)
    try:
        store.write_responses(SEEDED)
    finally:
        store.close()
    runtime = LazyRuntime(str(path))
    with serve_app(create_app(runtime, ServerSettings())) as url:
        try:
            yield url
        finally:
            runtime.close()


@pytest.fixture(scope="module")
def server_log(base_url) -> Iterator[ServerLog]:
    # After the server starts: uvicorn's logging set-up drops the handlers already there.
    handler = ServerLog()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


# -- checks ------------------------------------------------------------------------------


def error_shape_problem(status: int, body: bytes) -> str | None:
    """Why an error answer is not OpenAI's error body, or None when it is."""
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return f"a {status} whose body is not {{'error': {{...}}}}"
    if not isinstance(error, dict):
        return f"a {status} whose 'error' is not an object"
    for field, types in (("message", str), ("type", str), ("param", (str, type(None))), ("code", (str, type(None)))):
        if field not in error or not isinstance(error[field], types):
            return f"a {status} whose error.{field} is missing or mistyped: {error.get(field)!r}"
    return None


def stream_problem(body: bytes) -> str | None:
    """Why an SSE stream hides a server error, or None: it was cut off (no terminal event, or no
    ``data: [DONE]``), or it ended in ``response.failed`` with ``server_error``."""
    events, done = [], False
    for line in body.decode("utf-8", "replace").splitlines():
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            try:
                events.append(json.loads(line.removeprefix("data: ")))
            except ValueError:
                return f"an event is not JSON: {line[:200]!r}"
    terminal = [e for e in events if e.get("type") in ("response.completed", "response.incomplete", "response.failed")]
    if not terminal or not done:
        last = events[-1].get("type") if events else None
        return f"the stream was cut off after {len(events)} events (last: {last!r}): no terminal event or [DONE]"
    error = (terminal[-1].get("response") or {}).get("error") or {}
    if terminal[-1]["type"] == "response.failed" and error.get("code") == "server_error":
        return f"the stream ended in response.failed with server_error: {error.get('message')!r}"
    return None


@schemathesis.check
def openai_error_body(ctx: CheckContext, response: schemathesis.Response, case: schemathesis.Case) -> bool | None:
    """Every error (any status ≥ 400, documented or not) answers OpenAI's error body."""
    if response.status_code < 400:
        return None
    problem = error_shape_problem(response.status_code, response.content)
    if problem is not None:
        raise Failure(operation=case.operation.label, title="Not OpenAI's error body", message=problem)
    return True


@schemathesis.check
def no_server_error_in_stream(
    ctx: CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    """A 200 stream must not carry what would have been a 500 without ``"stream": true``."""
    if not response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        return None
    problem = stream_problem(response.content)
    if problem is not None:
        raise Failure(operation=case.operation.label, title="Server error inside a stream", message=problem)
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    openai_error_body,
    no_server_error_in_stream,
]


# -- the fuzz test -----------------------------------------------------------------------


@schema.parametrize()
def test_fuzz_operation(case: schemathesis.Case, base_url: str, server_log: ServerLog) -> None:
    seen = len(server_log.tracebacks)
    response = case.call(base_url=base_url, timeout=30)
    if response.status_code >= 500:  # uvicorn logs the traceback (if any) just after answering
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: len(server_log.tracebacks) > seen, timeout_s=2, what="the server's traceback")
    try:
        case.validate_response(response, checks=CHECKS, transport_kwargs={"base_url": base_url})
    except BaseException as exc:  # schemathesis' FailureGroup is a BaseExceptionGroup
        for trace in server_log.tracebacks[seen:]:
            exc.add_note(f"Server traceback:\n{trace}")
        raise


def test_fuzz_stateful(base_url: str, server_log: ServerLog) -> None:
    """Sequences along the description's links (create a conversation, add items, get one,
    delete it…), so that fuzzed requests also reach objects that exist."""

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": base_url, "timeout": 30}

        def validate_response(self, response: Any, case: schemathesis.Case, **kwargs: Any) -> None:
            kwargs.pop("additional_checks", None)
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)

    Workflow.run(
        settings=settings(
            max_examples=BUDGET,
            stateful_step_count=6,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
    )


def test_big_stored_responses_are_read(base_url: str, server_log: ServerLog) -> None:
    """The seeded responses of several MB: listed in a page of 100 either way, retrieved, their
    input items listed and their event logs replayed, all 200 and whole."""
    seen = len(server_log.tracebacks)
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for order in ("asc", "desc"):  # their model: the fuzzed requests store others (sim's)
            page = client.get("/v1/responses", params={"limit": 100, "order": order, "model": "gpt-test"})
            assert page.status_code == 200, page.text[:300]
            assert page.json()["data"] == [s.response for s in (SEEDED if order == "asc" else SEEDED[::-1])]
        for record in SEEDED:
            got = client.get(f"/v1/responses/{record.id}")
            assert got.status_code == 200 and got.json() == record.response, got.text[:300]
            items = client.get(f"/v1/responses/{record.id}/input_items", params={"order": "asc"})
            assert items.status_code == 200 and items.json()["data"] == record.input_items, items.text[:300]
            replay = client.get(f"/v1/responses/{record.id}", params={"stream": "true"})
            assert replay.status_code == 200, replay.text[:300]
            assert stream_problem(replay.content) is None
            assert replay.text.count("event: response.output_text.delta") == 4 * 1024
    assert server_log.tracebacks[seen:] == []


# -- no collateral damage ----------------------------------------------------------------

FUZZED = 4 * BUDGET + 20
"""Generated requests sent while the valid ones run (the hostile bodies come on top)."""
VALID_USERS = 6
"""Valid scenarios (7 requests each) spread among the fuzzed requests."""
WORKERS = 6
"""Requests in flight at once."""


def _body(value: Any) -> bytes:
    return json.dumps(value).encode()  # allow_nan: NaN/Infinity go out as the non-JSON literals


_RECURSIVE_SCHEMA = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
_NAN_TOOL = {"type": "function", "name": "f", "parameters": {"type": "object", "default": float("nan")}}
_MCP_CALL = {"type": "mcp_call", "id": "m", "server_label": "s", "name": "n", "arguments": ""}

HOSTILE: list[tuple[str, bytes]] = [
    # Bodies that broke the server once, most of which a schema-driven generator cannot produce:
    # non-JSON numbers, lone surrogates, deep nesting. Sent raw, among the fuzzed requests.
    ("/v1/responses", b'{"model": "sim", "input": "hi", "temperature": NaN}'),
    ("/v1/responses", _body({"model": "sim", "input": "hi", "tools": [_NAN_TOOL]})),
    ("/v1/responses", _body({"model": "sim", "input": "hi", "stream": True, "tools": [_NAN_TOOL]})),
    ("/v1/responses", _body({"model": "sim", "input": "hi", "text": {"format": {
        "type": "json_schema", "name": "x", "schema": {"type": "number", "minimum": float("-inf")}}}})),
    ("/v1/responses", b'{"model": "sim", "input": "\\ud800"}'),
    ("/v1/responses", b'{"model": "sim", "input": "hi", "metadata": {"k": "\\udfff"}}'),
    ("/v1/responses", b'{"model": "sim", "input": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"),
    ("/v1/responses", _body({"model": "sim", "input": "hi", "text": {"format": {
        "type": "json_schema", "name": "loop", "schema": _RECURSIVE_SCHEMA}}})),
    ("/v1/responses", _body({"model": "sim", "input": [
        {**_MCP_CALL, "error": {"type": "mcp_tool_execution_error", "content": [None]}}]})),
    ("/v1/conversations", b'{"items": [{"role": "user", "content": "\\ud800"}]}'),
]


def fuzzed_cases(count: int) -> list[schemathesis.Case]:
    """``count`` generated cases over every operation, positive and negative (deterministic)."""
    operations = [result.ok() for result in schema.get_all_operations()]
    strategy = st.one_of(
        [op.as_strategy(generation_mode=mode) for op in operations for mode in schemathesis.GenerationMode]
    )
    cases: list[schemathesis.Case] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategy)
    def collect(case: schemathesis.Case) -> None:
        cases.append(case)

    collect()
    return cases


def spread(base: list[Any], *extras: list[Any]) -> list[Any]:
    """``base`` with each list of ``extras`` inserted at evenly spaced positions."""
    out = list(base)
    for extra in extras:
        for index, item in enumerate(extra):
            out.insert((index + 1) * len(out) // (len(extra) + 1), item)
    return out


class ValidUser(int):
    """In the work queue: run :func:`valid_scenario` for this user number."""


class Run:
    """What the concurrent requests saw, and what the valid ones stored."""

    def __init__(self) -> None:
        self.fuzzed = 0
        self.valid = 0
        self.damage: list[str] = []  # valid requests that failed, or stored history that changed
        self.errors: list[str] = []  # fuzzed requests answered with a 5xx, or not at all
        self.responses: dict[str, str] = {}  # response id -> its output text
        self.conversations: dict[str, list[tuple[str, str]]] = {}  # conversation id -> (role, text) items


async def valid_scenario(base_url: str, user: int, run: Run) -> None:
    """A well-behaved client: a plain create, then a conversation of three turns, each checked.

    It has connections of its own: after an unexpected error the server closes the connection
    it answered on, which would fail the next request of a client sharing it.
    """
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        await _valid_scenario(client, user, run)


async def _valid_scenario(client: httpx.AsyncClient, user: int, run: Run) -> None:
    async def ok(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise AssertionError(f"{method} {path} {kwargs.get('json')} got no answer: {exc!r}") from exc
        run.valid += 1
        if response.status_code != 200:
            raise AssertionError(f"{method} {path} {kwargs.get('json')} answered {response.status_code}: "
                                 f"{response.text[:300]}")
        return response.json()

    try:
        text = f"user {user} plain"
        created = await ok("POST", "/v1/responses", json={"model": "sim", "input": f"[[say {text}]]"})
        assert created["status"] == "completed", created
        run.responses[created["id"]] = text
        conversation = (await ok("POST", "/v1/conversations", json={"metadata": {"user": str(user)}}))["id"]
        run.conversations[conversation] = []
        for turn in range(3):
            said = f"user {user} turn {turn}"
            body = {"model": "sim", "input": f"[[say {said}]]", "conversation": conversation}
            response = await ok("POST", "/v1/responses", json=body)
            assert response["status"] == "completed", response
            run.responses[response["id"]] = said
            run.conversations[conversation] += [("user", f"[[say {said}]]"), ("assistant", said)]
        await check_history(client, conversation, run)
    except AssertionError as exc:
        run.damage.append(f"valid user {user}: {exc}")


async def check_history(client: httpx.AsyncClient, conversation: str, run: Run) -> None:
    """The conversation's items are exactly the valid turns, in order."""
    page = await client.get(f"/v1/conversations/{conversation}/items", params={"order": "asc", "limit": 100})
    run.valid += 1
    assert page.status_code == 200, f"listing {conversation} answered {page.status_code}: {page.text[:300]}"
    got = [(item.get("role"), item["content"][0]["text"]) for item in page.json()["data"]]
    assert got == run.conversations[conversation], f"{conversation}'s history is not intact: {got}"


async def send_fuzzed(client: httpx.AsyncClient, item: schemathesis.Case | tuple[str, bytes], run: Run) -> None:
    base_url = str(client.base_url)
    if isinstance(item, tuple):
        path, body = item
        what = f"curl -X POST -H 'Content-Type: application/json' -d '{body[:200].decode()}' {base_url}{path}"
        send = client.post(path, content=body, headers={"content-type": "application/json"})
    else:  # schemathesis sends with requests: in a thread
        what = item.as_curl_command(base_url=base_url)
        send = asyncio.to_thread(item.call, base_url=base_url, timeout=60)
    try:
        response = await send
    except (httpx.TransportError, requests.RequestException) as exc:  # e.g. the server dropped the connection
        run.fuzzed += 1
        run.errors.append(f"no answer ({type(exc).__name__}: {exc}):\n  {what}")
        return
    run.fuzzed += 1
    if response.status_code >= 500:
        run.errors.append(f"{response.status_code}:\n  {what}\n  -> {response.content[:300]!r}")


def test_no_collateral_damage(base_url: str, server_log: ServerLog) -> None:
    # One queue: fuzzed cases, with hostile bodies and valid scenarios spread evenly among them.
    # WORKERS drain it concurrently, so every valid request runs alongside fuzzed ones.
    queue = collections.deque(spread(fuzzed_cases(FUZZED), HOSTILE, [ValidUser(user) for user in range(VALID_USERS)]))
    run = Run()

    async def main() -> None:
        # A fresh connection per fuzzed request: one dropped after a 500 must not fail the next.
        fresh = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=fresh) as client:

            async def worker() -> None:
                while queue:
                    item = queue.popleft()
                    if isinstance(item, ValidUser):
                        await valid_scenario(base_url, item, run)
                    else:
                        await send_fuzzed(client, item, run)

            await asyncio.gather(*(worker() for _ in range(WORKERS)))
            # Afterwards, too: every valid response and conversation is still there, intact.
            for response_id, text in run.responses.items():
                stored = await client.get(f"/v1/responses/{response_id}")
                if stored.status_code != 200 or stored.json()["output"][0]["content"][0]["text"] != text:
                    run.damage.append(f"{response_id} is gone or changed: {stored.status_code} {stored.text[:300]}")
            for conversation in run.conversations:
                try:
                    await check_history(client, conversation, run)
                except AssertionError as exc:
                    run.damage.append(f"afterwards: {exc}")

    asyncio.run(main())
    assert run.fuzzed > 0 and run.valid > 0, "nothing was sent: the test would pass vacuously"
    report = [f"Among {run.fuzzed} fuzzed and {run.valid} valid requests:"]
    report += [f"Collateral damage: {damage}" for damage in run.damage]
    report += [f"5xx on a fuzzed request: {error}" for error in run.errors]
    report += [f"Server traceback:\n{trace}" for trace in server_log.tracebacks[-3:]]
    assert not run.damage and not run.errors, "\n".join(report)
