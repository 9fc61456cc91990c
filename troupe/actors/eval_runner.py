"""Batch evaluation on Ray: cases run as agent loops inside the cluster, not through HTTP.

The driver (``troupe eval run``) starts :class:`EvalWorker` actors, one per node
(pinned there; a worker whose node goes away is replaced by one elsewhere). Each worker
*is* a conversation host (it extends the pooled host actor): it runs a case's turn
in-process through :class:`~troupe.actors.host.ConversationHost` (tool calls fan
out to its node's tool runner or as Ray tasks, the response and its step traces go to the storage actor),
grades the final response (:mod:`troupe.eval.graders`; the LLM judge calls a
configured model from the worker) and returns an
:class:`~troupe.storage.EvalResultRecord` stamped with its node id.

The driver keeps ``concurrency`` samples in flight, each sent to the least busy
worker, and writes the results in batches through the storage actor (the single
DuckDB owner). Failures never stop the run; each is a result with an error kind:

* ``timeout``: the sample took longer than its time limit (the turn is cancelled and
  nothing of it is stored);
* ``model_error``: the response failed (the model call failed);
* ``invalid_request``: the host refused the request;
* ``grader_error``: a grader raised, or a judge's model call failed;
* ``crash``: anything else, including a worker that died (it restarts; the samples it
  was running are recorded as crashed, and new ones wait until it answers again).

A run is resumable: the samples that have a result row are skipped when the same
``run_id`` runs again (with ``retry_errors``, errored ones run again and their row is
replaced).

Example (Ray initialized, e.g. ``ray.init(address="local")``)::

    dataset = load_dataset("examples/eval/sample.jsonl")
    run = asyncio.run(run_eval(dataset, RuntimeSettings(), RunOptions(run_id="smoke")))
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from troupe.agentloop.model import ChatRequest, TurnEnd
from troupe.eval.dataset import Dataset, EvalCase
from troupe.eval.graders import grade, outcome_from_response, verdict
from troupe.protocol import ProtocolError, new_id, parse_create_request
from troupe.storage import EvalResultRecord, EvalRunRecord

from .host import DELTA_TYPES, TurnJob
from .placement import HostActor
from .settings import RuntimeSettings
from .storage_actor import RayStoreClient

__all__ = ["CaseTask", "EvalWorker", "RunOptions", "run_eval"]

# The driver's own limit on a sample: the worker's timeout plus this, for a worker that
# cannot even notice its timeout (an event loop blocked by a synchronous grader).
_BACKSTOP_S = 30.0
# How long the driver waits for a crashed worker to come back, and how often it asks.
_RECOVERY_S = 120.0
_RECOVERY_POLL_S = 0.2


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """How to run an evaluation (what ``troupe eval run`` takes as flags)."""

    run_id: str
    samples: int = 1
    """Samples per case (for pass@k and pass^k)."""
    concurrency: int = 16
    """Samples in flight at once, over all workers."""
    timeout_s: float = 60.0
    """Time limit per sample (a case's ``timeout_s`` overrides it)."""
    model: str | None = None
    """Run every case with this model (default: each case's ``model``, else ``sim``)."""
    judge_model: str | None = None
    """The model of ``judge`` graders that name none (default: the model under evaluation)."""
    workers: int | None = None
    """Eval worker actors (default: one per alive node)."""
    retry_errors: bool = False
    """On resume, run again the samples whose result is an error."""
    tenant: str = ""
    """The tenant the responses are stored under."""


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


def _first_line(exc: BaseException, limit: int = 300) -> str:
    """Ray's errors run to many lines (tracebacks, actor details): keep the first."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the driver -------------------------------------------------------------------


async def run_eval(
    dataset: Dataset,
    settings: RuntimeSettings,
    options: RunOptions,
    *,
    on_start: Callable[[int, int, list[str]], None] | None = None,
    on_result: Callable[[EvalResultRecord], None] | None = None,
) -> EvalRunRecord:
    """Run (or resume) an evaluation on the Ray cluster this process is connected to.

    Args:
        dataset: the cases.
        settings: the runtime settings (models, tools, storage path, namespace).
        options: the run's options.
        on_start: called with (samples to run, samples already done, node id of each worker).
        on_result: called with each result once it is stored (in the driver, in order of arrival).

    Returns:
        The run as stored at the end (``finished``, or ``interrupted`` if cancelled).

    Raises:
        StorageError: results could not be stored (the run stops).
    """
    store = await RayStoreClient.connect(settings)
    previous = await store.get_eval_run(options.run_id)
    done = {
        (r.case_id, r.sample)
        for r in await store.eval_results(options.run_id)
        if not (options.retry_errors and r.error_kind)
    }
    run = EvalRunRecord(
        run_id=options.run_id,
        created_at=previous.created_at if previous is not None else time.time(),
        dataset=dataset.path,
        dataset_sha256=dataset.sha256,
        cases=len(dataset.cases),
        samples=options.samples,
        model=options.model,
        status="running",
        options={
            "concurrency": options.concurrency,
            "timeout_s": options.timeout_s,
            "judge_model": options.judge_model,
            "workers": options.workers,
            "retry_errors": options.retry_errors,
            "tenant": options.tenant,
        },
    )
    await store.put_eval_run(run)
    todo = [(c, s) for c in dataset.cases for s in range(options.samples) if (c.id, s) not in done]
    workers: list[Any] = []
    status = "interrupted"
    try:
        if todo:
            workers = _start_workers(settings, options, len(todo))
            nodes = await asyncio.gather(*(w.node_id.remote() for w in workers))
        else:
            nodes = []
        if on_start is not None:
            on_start(len(todo), len(done), list(nodes))
        await _dispatch(todo, workers, list(nodes), store, settings, options, on_result)
        status = "finished"
    finally:
        for worker in workers:
            ray.kill(worker)
        run = dataclasses.replace(run, status=status, finished_at=time.time() if status == "finished" else None)
        with contextlib.suppress(Exception):  # an interrupted driver may have lost the actor already
            await store.put_eval_run(run)
    return run


def _start_workers(settings: RuntimeSettings, options: RunOptions, samples: int) -> list[Any]:
    """One worker per node (or ``options.workers``, dealt round-robin over the nodes).

    Nodes without CPUs (a head node started with ``--num-cpus=0``) get none, unless no
    node has CPUs. A worker is pinned to its node (Ray's soft affinity and ``SPREAD`` both
    put zero-CPU actors on one node now and then); :func:`_dispatch` replaces a worker
    whose node went away.
    """
    alive = [n for n in ray.nodes() if n.get("Alive")]
    nodes = [n["NodeID"] for n in alive if n.get("Resources", {}).get("CPU", 0) > 0] or [n["NodeID"] for n in alive]
    count = max(1, min(options.workers or len(nodes), samples))
    return [_new_worker(settings, nodes[i % len(nodes)]) for i in range(count)]


def _new_worker(settings: RuntimeSettings, node_id: str | None) -> Any:
    """An eval worker on ``node_id`` (anywhere if None)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = "DEFAULT" if node_id is None else NodeAffinitySchedulingStrategy(node_id, soft=False)
    return (
        ray.remote(EvalWorker)
        .options(
            num_cpus=0,
            max_concurrency=10_000,
            max_restarts=-1,  # a worker killed by a sample comes back for the next ones
            max_task_retries=0,
            scheduling_strategy=strategy,
        )
        .remote(settings)
    )


async def _dispatch(
    todo: list[tuple[EvalCase, int]],
    workers: list[Any],
    nodes: list[str],
    store: RayStoreClient,
    settings: RuntimeSettings,
    options: RunOptions,
    on_result: Callable[[EvalResultRecord], None] | None,
) -> None:
    """Keep ``concurrency`` samples in flight; store results in batches as they arrive."""
    busy = [0] * len(workers)
    turn = itertools.count()
    queue = iter(todo)
    # Set while a worker is usable; cleared from a failure until it answers again (restarted).
    ready = [asyncio.Event() for _ in workers]
    for event in ready:
        event.set()
    recovering: dict[int, asyncio.Task[None]] = {}

    def pick() -> int:
        # The least busy ready worker; ties rotate, so a sequential run still visits every worker.
        start = next(turn) % len(workers)
        order = [(start + i) % len(workers) for i in range(len(workers))]
        return min(order, key=lambda i: (not ready[i].is_set(), busy[i]))

    async def recover(i: int) -> None:
        # A sample sent to a restarting actor fails at once (ActorUnavailableError): hold new
        # samples back until the worker answers again, so one crash takes down only the
        # samples that were running on it. A worker that cannot come back (its node is gone)
        # is replaced by a new one, placed anywhere.
        deadline = time.monotonic() + _RECOVERY_S
        while time.monotonic() < deadline:
            try:
                nodes[i] = await workers[i].node_id.remote()
                break
            except ray.exceptions.ActorDiedError:
                deadline = 0.0
            except ray.exceptions.RayActorError:
                await asyncio.sleep(_RECOVERY_POLL_S)
        else:
            workers[i] = _new_worker(settings, None)
            with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
                nodes[i] = await asyncio.wait_for(workers[i].node_id.remote(), _RECOVERY_S)
        ready[i].set()
        recovering.pop(i, None)

    def failed(i: int) -> None:
        if i not in recovering:
            ready[i].clear()
            recovering[i] = asyncio.ensure_future(recover(i))

    async def run_one(case: EvalCase, sample: int) -> EvalResultRecord:
        task = CaseTask(
            run_id=options.run_id,
            case=case,
            sample=sample,
            model=options.model or case.model or "sim",
            judge_model=options.judge_model or options.model or case.model or "sim",
            timeout_s=case.timeout_s or options.timeout_s,
            tenant=options.tenant,
        )
        i = pick()
        busy[i] += 1
        try:
            await ready[i].wait()
            ref = workers[i].run_case.remote(task)
            try:
                record: EvalResultRecord = await asyncio.wait_for(ref, task.timeout_s + _BACKSTOP_S)
            except TimeoutError:
                ray.cancel(ref)
                message = f"the worker did not answer within {task.timeout_s + _BACKSTOP_S:g} s"
                return _driver_error(task, "timeout", message, nodes[i])
            nodes[i] = record.node_id or nodes[i]
            return record
        except ray.exceptions.RayActorError as exc:
            failed(i)
            message = f"the eval worker died while running the sample: {_first_line(exc)}"
            return _driver_error(task, "crash", message, nodes[i])
        except ray.exceptions.RayError as exc:
            return _driver_error(task, "crash", f"{type(exc).__name__}: {_first_line(exc)}", nodes[i])
        finally:
            busy[i] -= 1

    results: asyncio.Queue[EvalResultRecord | None] = asyncio.Queue()  # None: every feeder is done

    async def feeder() -> None:
        for case, sample in queue:
            results.put_nowait(await run_one(case, sample))

    async def feed() -> None:
        try:
            await asyncio.gather(*feeders)
        finally:
            results.put_nowait(None)

    async def write() -> None:
        finished = False
        while not finished:
            batch: list[EvalResultRecord] = []
            item = await results.get()
            while True:  # everything that has arrived goes in one transaction
                if item is None:
                    finished = True
                else:
                    batch.append(item)
                if results.empty():
                    break
                item = results.get_nowait()
            if batch:
                await store.write_eval_results(batch)
                if on_result is not None:
                    for record in batch:
                        on_result(record)

    feeders = [asyncio.ensure_future(feeder()) for _ in range(max(1, options.concurrency))]
    feeding = asyncio.ensure_future(feed())
    try:
        await write()
        await feeding  # a feeder's unexpected failure surfaces here
    finally:
        for task in (*feeders, feeding, *recovering.values()):
            task.cancel()
        await asyncio.gather(*feeders, feeding, *recovering.values(), return_exceptions=True)
        leftover = [r for r in (results.get_nowait() for _ in range(results.qsize())) if r is not None]
        if leftover:  # interrupted: keep what finished
            with contextlib.suppress(Exception):
                await store.write_eval_results(leftover)


def _driver_error(task: CaseTask, kind: str, message: str, node_id: str | None) -> EvalResultRecord:
    """A result for a sample whose worker gave none (it died, or never answered)."""
    return EvalResultRecord(
        run_id=task.run_id, case_id=task.case.id, sample=task.sample, passed=False, model=task.model,
        tags=list(task.case.tags), node_id=node_id, error_kind=kind, error_message=message, ended_at=time.time(),
    )  # fmt: skip
