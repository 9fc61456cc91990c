"""The eval worker: a conversation host that runs one sample of a case and grades it.

An :class:`EvalWorker` *is* a conversation host (it extends the pooled host actor): it runs a
case's turn in-process through :class:`~troupe.runtime.host.ConversationHost` (tool calls fan
out to its node's tool runner or as Ray tasks, the response and its step traces go to the
storage actor), grades the final response (:mod:`troupe.eval.graders`; the LLM judge calls a
configured model from the worker) and returns an :class:`~troupe.storage.EvalResultRecord`
stamped with its node id. The dispatcher (:mod:`.dispatcher`) decides what runs where.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import ray

from troupe.agentloop.model import ChatRequest, TurnEnd
from troupe.eval.dataset import EvalCase
from troupe.eval.graders import grade, outcome_from_response, verdict
from troupe.protocol import ProtocolError, new_id, parse_create_request
from troupe.protocol.job import TurnJob
from troupe.runtime.host import DELTA_TYPES
from troupe.runtime.ray.placement import HostActor
from troupe.runtime.settings import RuntimeSettings
from troupe.storage import EvalResultRecord

__all__ = ["CaseTask", "EvalWorker"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseTask:
    """One sample of one case, as sent to a worker."""

    run_id: str
    case: EvalCase
    sample: int
    model: str
    judge_model: str | None
    timeout_s: float
    tenant: str = ""


class EvalWorker(HostActor):
    """A conversation host that runs and grades evaluation samples (wrapped by ``ray.remote``)."""

    def __init__(self, settings: RuntimeSettings) -> None:
        super().__init__(settings)

    async def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    async def run_case(self, task: CaseTask) -> EvalResultRecord:
        """Run one sample to the end, grade it; never raises (failures are error results)."""
        case = task.case
        started, t0 = time.time(), time.perf_counter()
        base: dict[str, Any] = {
            "run_id": task.run_id,
            "case_id": case.id,
            "sample": task.sample,
            "model": task.model,
            "tags": list(case.tags),
            "node_id": ray.get_runtime_context().get_node_id(),
            "started_at": started,
        }
        response: dict[str, Any] | None = None
        ttft_s = e2e_s = None
        thread_id = new_id("thread")
        timer = asyncio.timeout(task.timeout_s)
        try:
            async with timer:
                metadata = {
                    "troupe_eval_run": task.run_id[:512],
                    "troupe_eval_case": case.id[:512],
                    "troupe_eval_sample": str(task.sample),
                }
                request = parse_create_request(case.request_body(task.model, metadata))
                job = TurnJob(
                    tenant=task.tenant,
                    request=request,
                    response_id=new_id("resp"),
                    created_at=int(started),
                    thread_id=thread_id,
                )
                async with contextlib.aclosing(self.respond(job)) as batches:
                    async for batch in batches:
                        for event in batch:
                            if ttft_s is None and event["type"] in DELTA_TYPES:
                                ttft_s = time.perf_counter() - t0
                            response = event.get("response", response)
                e2e_s = time.perf_counter() - t0
                if response is None:  # pragma: no cover - every turn ends with a terminal event
                    raise RuntimeError("the turn ended without a response")
                usage = response.get("usage") or {}
                measured = {
                    "response_id": response["id"],
                    "status": response.get("status"),
                    "ttft_s": ttft_s,
                    "e2e_s": e2e_s,
                    "input_tokens": usage.get("input_tokens"),
                    "output_tokens": usage.get("output_tokens"),
                    "total_tokens": usage.get("total_tokens"),
                }
                outcome = outcome_from_response(response, input_text=case.input_text, case_id=case.id, tags=case.tags)
                measured |= {
                    "output_text": outcome.output_text,
                    "tool_calls": len(outcome.tool_calls),
                    "tools_called": [c.name for c in outcome.tool_calls],
                }
                if response.get("status") == "failed":
                    error = response.get("error") or {}
                    message = f"{error.get('code', 'server_error')}: {error.get('message', '')}"
                    return self._result(base, measured, error=("model_error", message))
                grades = await grade(case.expected, outcome, judge=self._judge, judge_model=task.judge_model)
                error_grades = [g for g in grades if g.error]
                failure = None
                if error_grades:
                    failure = ("grader_error", "; ".join(f"{g.grader}: {g.detail}" for g in error_grades))
                return self._result(
                    base, measured, grades=[g.to_dict() for g in grades],
                    passed=verdict(grades, response.get("status")), error=failure,
                )  # fmt: skip
        except TimeoutError as exc:
            if not timer.expired():
                return self._result(base, _partial(response, e2e_s), error=("crash", _describe(exc)))
            message = f"the sample took longer than {task.timeout_s:g} s"
            return self._result(base, _partial(response, e2e_s), error=("timeout", message))
        except ProtocolError as exc:
            return self._result(base, {}, error=("invalid_request", f"{exc.param or ''}: {exc.message}".lstrip(": ")))
        except Exception as exc:
            return self._result(base, _partial(response, e2e_s), error=("crash", _describe(exc)))
        finally:
            # An eval thread is never continued: drop its message cache at once.
            self.forget_thread(task.tenant, thread_id)

    @staticmethod
    def _result(
        base: dict[str, Any],
        measured: dict[str, Any],
        *,
        grades: list[dict[str, Any]] | None = None,
        passed: bool = False,
        error: tuple[str, str] | None = None,
    ) -> EvalResultRecord:
        kind, message = error if error is not None else (None, None)
        return EvalResultRecord(
            **base, **measured, grades=grades or [], passed=passed and error is None,
            error_kind=kind, error_message=message, ended_at=time.time(),
        )  # fmt: skip

    async def _judge(self, model: str, messages: list[dict[str, Any]]) -> str:
        """One call of a configured model, no tools: the judge's answer text."""
        spec = self.settings.model(model)
        if spec is None:
            raise ValueError(f"the judge model '{model}' is not configured")
        text = ""
        async for chunk in self.models.client(spec).stream(
            ChatRequest(model=spec.upstream_model or spec.name, messages=messages)
        ):
            if isinstance(chunk, TurnEnd):
                text = chunk.text
        return text


def _partial(response: dict[str, Any] | None, e2e_s: float | None) -> dict[str, Any]:
    """What is known of a sample that did not finish normally (a stored response, if any)."""
    if response is None or response.get("status") in (None, "queued", "in_progress"):
        return {}
    return {"response_id": response["id"], "status": response.get("status"), "e2e_s": e2e_s}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
