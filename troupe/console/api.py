"""The console's routes: the page at ``/console`` and the JSON it reads, under ``/v1/troupe/console``.

Routes (none in the OpenAPI description: an operator's tool beside the OpenAI API)::

    GET /console                                  the page (static; it holds no data)
    GET /console/static/{file}                    its script and style sheet
    GET /v1/troupe/console/me                     who the key is: {tenant, admin, keys}
    GET /v1/troupe/console/responses              summaries, newest first: model, status, tenant,
                                                  since, until (created_at, Unix seconds), after, limit
    GET /v1/troupe/console/responses/{id}         the response, its input items, its step timeline
    GET /v1/troupe/console/threads/{thread_id}    a conversation's (or chain's) turns, in order
    GET /v1/troupe/console/sessions               a tenant's agent sessions, newest first: tenant, after, limit
    GET /v1/troupe/console/sessions/{id}          the session, its subagents, and its traces' spans as
                                                  rows of one timeline (:mod:`.session_view`)
    GET /v1/troupe/console/stats                  the last window_s seconds: requests/s, TTFT p50/p99, errors
    GET /v1/troupe/console/evals                  evaluation runs
    GET /v1/troupe/console/evals/compare?a=&b=    two runs side by side, per tag and per case
    GET /v1/troupe/console/evals/{run_id}         one run's summary (pass rate per tag, pass@k, …)

The JSON routes authenticate as the API does (:class:`Viewer`): a tenant's key sees that
tenant's responses only, and asking for another tenant is refused (403); an admin key
(``[auth] admin_keys``) sees every tenant, all of them unless ``tenant`` narrows it; with no
keys configured, anyone is tenant ``""``, as in the API. Sessions are read per tenant: an admin
key reads tenant ``""``'s unless ``tenant`` names another. Evaluation runs belong to no tenant:
they are shown to admin keys, and to anyone while the API has no keys.

The page's Webhooks view (``#/webhooks``) reads no route here: it reads the API itself with
the same key (``GET /v1/webhook_endpoints`` and ``GET /v1/webhook_endpoints/{id}/deliveries``,
:mod:`troupe.serve.routes.webhooks`), so it shows the key's own tenant's endpoints only (an
admin key's is tenant ``""`` while tenants have no keys, and none once they have).

The live figures (``/stats``) are computed from the stored responses that ended in the
window, so they cover the whole cluster and lag a response's storage by a moment.

Example::

    app = create_app(get_runtime, settings)        # troupe.serve.routes.operator includes console_router()
    httpx.get("http://127.0.0.1:8000/v1/troupe/console/responses", params={"status": "failed"})
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from troupe.protocol import EXTENSION_STATUSES, RESPONSE_STATUSES, NotFound, PermissionDenied
from troupe.protocol.query_params import NUMBER, QueryInt, QueryNumber
from troupe.storage import ResponseFilter, ResponseSummary

from .session_view import span_rows
from .timeline import timeline, traces_from_json

if TYPE_CHECKING:
    from troupe.runtime.facade import Runtime

__all__ = ["API_PREFIX", "Viewer", "console_router"]

API_PREFIX = "/v1/troupe/console"

_STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
"""The files ``/console/static/`` serves, and their media types (nothing else is reachable)."""

_INPUT_ITEMS_SHOWN = 100
_TURNS_SHOWN = 100
"""A session view's traces: its first 100 turns (one page of the traces' list)."""

# Module-level: string annotations (PEP 563) are resolved against the module's globals.
TenantParam = Annotated[str | None, Query(description="One tenant (an admin key's choice; others: their own).")]
if TYPE_CHECKING:
    StatusParam = str  # mypy cannot follow a Literal built at run time; FastAPI checks the real one
else:
    StatusParam = Literal[("",) + RESPONSE_STATUSES + EXTENSION_STATUSES]
"""A response status, or ``""``: any (the page's "any status")."""
TimeParam = Annotated[float | None, NUMBER, Query(description="Unix seconds.")]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Viewer:
    """Who looks at the console."""

    tenant: str
    """The key's tenant (``""`` with no keys configured, and for an admin key)."""
    admin: bool
    """An admin key: every tenant, and the evaluation runs."""
    keys: bool
    """Whether the API has tenants' keys (the page then asks for one)."""

    def scope(self, tenant: str | None) -> str | None:
        """The tenant whose responses a request may read (None: every tenant, for an admin).

        Raises:
            PermissionDenied: a tenant's key asked for another tenant.
        """
        if self.admin:
            return tenant
        if tenant is not None and tenant != self.tenant:
            raise PermissionDenied("Only an admin key may read another tenant's responses.")
        return self.tenant

    def check_evals(self) -> None:
        """Raise PermissionDenied unless this viewer may see evaluation runs (module docstring)."""
        if self.keys and not self.admin:
            raise PermissionDenied("Evaluation runs belong to no tenant: they need an admin key.")


def console_router(
    *, viewer: Callable[[Request], Awaitable[Viewer]], runtime_of: Callable[[Request], Runtime]
) -> APIRouter:
    """The console's routes, for the API's app to include (its error handlers answer the
    console's errors too). The serving layer gives the two things the console needs of it
    (:mod:`troupe.serve.dependencies`): the console imports nothing of ``troupe.serve``.

    Args:
        viewer: a dependency that authenticates a request (raising 401 as the API does).
        runtime_of: the :class:`Runtime` that serves a request.
    """
    router = APIRouter()
    who = Depends(viewer)

    @router.get("/console", include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(_static_text("console.html"), headers={"cache-control": "no-cache"})

    @router.get("/console/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in _STATIC:
            raise NotFound(f"No console file named '{name}'.")
        return Response(_static_text(name), media_type=_STATIC[name], headers={"cache-control": "no-cache"})

    @router.get(f"{API_PREFIX}/me", include_in_schema=False)
    async def me(v: Viewer = who) -> dict[str, Any]:
        return dataclasses.asdict(v)

    @router.get(f"{API_PREFIX}/responses", include_in_schema=False)
    async def responses(
        request: Request,
        model: str | None = None,
        status: StatusParam | None = None,
        tenant: TenantParam = None,
        since: TimeParam = None,
        until: TimeParam = None,
        after: str | None = None,
        limit: Annotated[QueryInt, Query(ge=1, le=200)] = 50,
        v: Viewer = who,
    ) -> dict[str, Any]:
        where = ResponseFilter(
            tenant=v.scope(tenant), model=model or None, status=status or None, since=since, until=until
        )
        found = await runtime_of(request).find_responses(where, after=after or None, limit=limit)
        data = [_summary(s) for s in found.data]
        return {"data": data, "has_more": found.has_more, "last_id": data[-1]["id"] if data else None}

    @router.get(f"{API_PREFIX}/responses/{{response_id}}", include_in_schema=False)
    async def one_response(
        request: Request, response_id: str, tenant: TenantParam = None, v: Viewer = who
    ) -> dict[str, Any]:
        runtime = runtime_of(request)
        owner = await _owner(runtime, v, tenant, ResponseFilter(id=response_id), "Response", response_id)
        response = await runtime.get_response(owner, response_id)  # also a live one, not stored yet
        found = await runtime.find_responses(ResponseFilter(tenant=owner, id=response_id), limit=1)
        inputs = await runtime.list_input_items(owner, response_id, limit=_INPUT_ITEMS_SHOWN, order="asc")
        traces = traces_from_json(await runtime.step_traces(owner, response_id))
        return {
            "tenant": owner,
            "summary": _summary(found.data[0]) if found.data else None,
            "response": response,
            "input_items": inputs.data,
            "more_input_items": inputs.has_more,
            "timeline": [bar.to_json() for bar in timeline(traces)],
        }

    @router.get(f"{API_PREFIX}/threads/{{thread_id}}", include_in_schema=False)
    async def thread(
        request: Request,
        thread_id: str,
        tenant: TenantParam = None,
        limit: Annotated[QueryInt, Query(ge=1, le=500)] = 100,
        v: Viewer = who,
    ) -> dict[str, Any]:
        runtime = runtime_of(request)
        owner = await _owner(runtime, v, tenant, ResponseFilter(thread_id=thread_id), "Thread", thread_id)
        turns = await runtime.thread_turns(owner, thread_id, limit=limit)
        return {
            "tenant": owner,
            "thread_id": thread_id,
            "turns": [
                {"summary": _summary(t.summary), "input_items": t.input_items, "output_items": t.output_items}
                for t in turns
            ],
        }

    @router.get(f"{API_PREFIX}/sessions", include_in_schema=False)
    async def sessions(
        request: Request,
        tenant: TenantParam = None,
        after: str | None = None,
        limit: Annotated[QueryInt, Query(ge=1, le=100)] = 50,
        v: Viewer = who,
    ) -> dict[str, Any]:
        owner = _session_tenant(v, tenant)
        page = await runtime_of(request).sessions.list_sessions(owner, after=after or None, limit=limit)
        data = [{k: s[k] for k in ("id", "created_at", "last_active_at", "status", "metadata")}
                | {"model": s["agent"]["model"], "multi_agent": s["agent"]["multi_agent"]["enabled"]}
                for s in page.data]  # fmt: skip
        return {"tenant": owner, "data": data, "has_more": page.has_more, "last_id": data[-1]["id"] if data else None}

    @router.get(f"{API_PREFIX}/sessions/{{session_id}}", include_in_schema=False)
    async def one_session(request: Request, session_id: str, tenant: TenantParam = None, v: Viewer = who) -> dict[str, Any]:
        from troupe.runtime.session_traces import SessionTraces

        owner = _session_tenant(v, tenant)
        sessions = runtime_of(request).sessions
        session = await sessions.get_session(owner, session_id)
        subagents = await sessions.list_subagents(owner, session_id, limit=100, order="asc")
        traces = await SessionTraces(sessions).list_traces(owner, session_id, limit=_TURNS_SHOWN, order="asc")
        return {
            "tenant": owner,
            "session": session,
            "subagents": subagents.data,
            "turns": [{"id": t["id"], "created_at": t["created_at"]} for t in traces.data],
            "more_turns": traces.has_more,
            "rows": span_rows([t["otlp"] for t in traces.data]),
        }

    @router.get(f"{API_PREFIX}/stats", include_in_schema=False)
    async def stats(
        request: Request,
        window_s: Annotated[QueryNumber, Query(ge=1, le=86_400)] = 60.0,
        tenant: TenantParam = None,
        v: Viewer = who,
    ) -> dict[str, Any]:
        until = time.time()
        figures = await runtime_of(request).response_stats(v.scope(tenant), until - window_s, until)
        failed = figures.by_status.get("failed", 0)
        return {
            **dataclasses.asdict(figures),
            "window_s": window_s,
            "requests_per_s": figures.responses / window_s,
            "errors": failed,
            "error_rate": failed / figures.responses if figures.responses else None,
            "source": "stored responses",
        }

    @router.get(f"{API_PREFIX}/evals", include_in_schema=False)
    async def evals(request: Request, v: Viewer = who) -> dict[str, Any]:
        v.check_evals()
        return {"data": [dataclasses.asdict(run) for run in await runtime_of(request).eval_runs()]}

    @router.get(f"{API_PREFIX}/evals/compare", include_in_schema=False)
    async def compare(request: Request, a: str, b: str, v: Viewer = who) -> dict[str, Any]:
        from troupe.eval.metrics import summarize
        from troupe.eval.report import compare_runs

        v.check_evals()
        runtime = runtime_of(request)
        (run_a, results_a), (run_b, results_b) = await runtime.eval_run(a), await runtime.eval_run(b)
        summary_a, summary_b = summarize(results_a), summarize(results_b)
        rates_a = {t.tag: t for t in summary_a.by_tag}
        rates_b = {t.tag: t for t in summary_b.by_tag}
        return {
            "a": {"run": dataclasses.asdict(run_a), "summary": summary_a.to_dict()},
            "b": {"run": dataclasses.asdict(run_b), "summary": summary_b.to_dict()},
            "tags": [
                {
                    "tag": tag,
                    "a": _tag_json(rates_a.get(tag)),
                    "b": _tag_json(rates_b.get(tag)),
                }
                for tag in sorted(set(rates_a) | set(rates_b))
            ],
            "cases": [
                {
                    "case_id": d.case_id, "change": d.change,
                    "a": None if d.a is None else {"passed": d.a[0], "samples": d.a[1]},
                    "b": None if d.b is None else {"passed": d.b[0], "samples": d.b[1]},
                    "a_e2e_s": d.a_e2e_s, "b_e2e_s": d.b_e2e_s,
                }  # fmt: skip
                for d in compare_runs(results_a, results_b)
            ],
        }

    @router.get(f"{API_PREFIX}/evals/{{run_id}}", include_in_schema=False)
    async def eval_run(request: Request, run_id: str, v: Viewer = who) -> dict[str, Any]:
        from troupe.eval.metrics import summarize

        v.check_evals()
        run, results = await runtime_of(request).eval_run(run_id)
        return {"run": dataclasses.asdict(run), "summary": summarize(results).to_dict()}

    return router


async def _owner(
    runtime: Runtime, v: Viewer, tenant: str | None, where: ResponseFilter, kind: str, object_id: str
) -> str:
    """The tenant whose object a request reads: the viewer's, the one asked for, or, for an
    admin who named none, the tenant that has a response ``where`` selects."""
    scope = v.scope(tenant)
    if scope is not None:
        return scope
    found = await runtime.find_responses(where, limit=1)
    if not found.data:
        raise NotFound(f"{kind} with id '{object_id}' not found.")
    return found.data[0].tenant


def _session_tenant(v: Viewer, tenant: str | None) -> str:
    """The tenant whose sessions a request reads (an admin naming none: tenant ``""``)."""
    scope = v.scope(tenant)
    return "" if scope is None else scope


def _summary(summary: ResponseSummary) -> dict[str, Any]:
    return dataclasses.asdict(summary)


def _tag_json(stat: Any) -> dict[str, Any] | None:
    return None if stat is None else {"results": stat.results, "passed": stat.passed, "rate": stat.rate}


def _static_text(name: str) -> str:
    return (resources.files(__package__) / "static" / name).read_text(encoding="utf-8")
