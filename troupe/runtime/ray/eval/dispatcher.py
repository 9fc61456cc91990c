"""The eval driver: runs (or resumes) an evaluation over :class:`~.worker.EvalWorker` actors.

:func:`run_eval` starts the workers, one per node (pinned there; a worker whose node goes
away is replaced by one elsewhere), and a :class:`_Dispatcher` keeps ``concurrency`` samples
in flight, each sent to the least busy worker, and writes the results in batches through the
storage actor (the single DuckDB owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ray

from troupe.eval.dataset import Dataset, EvalCase
from troupe.runtime.ray.actors import start_actor
from troupe.runtime.ray.eval.worker import CaseTask, EvalWorker
from troupe.runtime.ray.storage_actor import RayStoreClient
from troupe.runtime.settings import RuntimeSettings
from troupe.storage import EvalResultRecord, EvalRunRecord

__all__ = ["RunOptions", "run_eval"]

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
        The run as stored at the end (``finished``, or ``interrupted`` if cancelled; stored
        ``failed`` when an error stops it). Its end goes to the tenant's webhook endpoints
        subscribed to ``eval.run.succeeded`` / ``.canceled`` / ``.failed`` (the store's outbox).

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
        await _Dispatcher(workers, list(nodes), store, settings, options, on_result).run(todo)
        status = "finished"
    except Exception:  # not a cancel nor an interrupt: the run failed (its webhook says so)
        status = "failed"
        raise
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
    put zero-CPU actors on one node now and then); :class:`_Dispatcher` replaces a worker
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
    # Restarted when it dies (the default): a worker killed by a sample comes back for the next ones.
    return start_actor(EvalWorker, settings, scheduling_strategy=strategy)


class _Dispatcher:
    """Keeps ``concurrency`` samples in flight over the workers; stores results in batches as
    they arrive. A worker that fails is held back until it answers again (or replaced)."""

    def __init__(
        self,
        workers: list[Any],
        nodes: list[str],
        store: RayStoreClient,
        settings: RuntimeSettings,
        options: RunOptions,
        on_result: Callable[[EvalResultRecord], None] | None,
    ) -> None:
        self.workers, self.nodes = workers, nodes
        self.store, self.settings, self.options, self.on_result = store, settings, options, on_result
        self.busy = [0] * len(workers)
        self.turn = itertools.count()
        # Set while a worker is usable; cleared from a failure until it answers again (restarted).
        self.ready = [asyncio.Event() for _ in workers]
        for event in self.ready:
            event.set()
        self.recovering: dict[int, asyncio.Task[None]] = {}
        self.results: asyncio.Queue[EvalResultRecord | None] = asyncio.Queue()  # None: every feeder is done

    async def run(self, todo: list[tuple[EvalCase, int]]) -> None:
        queue = iter(todo)  # shared: each feeder takes the next sample when it is free
        feeders = [asyncio.ensure_future(self._feeder(queue)) for _ in range(max(1, self.options.concurrency))]
        feeding = asyncio.ensure_future(self._feed(feeders))
        try:
            await self._write()
            await feeding  # a feeder's unexpected failure surfaces here
        finally:
            for task in (*feeders, feeding, *self.recovering.values()):
                task.cancel()
            await asyncio.gather(*feeders, feeding, *self.recovering.values(), return_exceptions=True)
            leftover = [r for r in (self.results.get_nowait() for _ in range(self.results.qsize())) if r is not None]
            if leftover:  # interrupted: keep what finished
                with contextlib.suppress(Exception):
                    await self.store.write_eval_results(leftover)

    def _pick(self) -> int:
        # The least busy ready worker; ties rotate, so a sequential run still visits every worker.
        count = len(self.workers)
        start = next(self.turn) % count
        order = [(start + i) % count for i in range(count)]
        return min(order, key=lambda i: (not self.ready[i].is_set(), self.busy[i]))

    async def _recover(self, i: int) -> None:
        # A sample sent to a restarting actor fails at once (ActorUnavailableError): hold new
        # samples back until the worker answers again, so one crash takes down only the
        # samples that were running on it. A worker that cannot come back (its node is gone)
        # is replaced by a new one, placed anywhere.
        deadline = time.monotonic() + _RECOVERY_S
        while time.monotonic() < deadline:
            try:
                self.nodes[i] = await self.workers[i].node_id.remote()
                break
            except ray.exceptions.ActorDiedError:
                deadline = 0.0
            except ray.exceptions.RayActorError:
                await asyncio.sleep(_RECOVERY_POLL_S)
        else:
            self.workers[i] = _new_worker(self.settings, None)
            with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
                self.nodes[i] = await asyncio.wait_for(self.workers[i].node_id.remote(), _RECOVERY_S)
        self.ready[i].set()
        self.recovering.pop(i, None)

    def _failed(self, i: int) -> None:
        if i not in self.recovering:
            self.ready[i].clear()
            self.recovering[i] = asyncio.ensure_future(self._recover(i))

    async def _run_one(self, case: EvalCase, sample: int) -> EvalResultRecord:
        options = self.options
        task = CaseTask(
            run_id=options.run_id,
            case=case,
            sample=sample,
            model=options.model or case.model or "sim",
            judge_model=options.judge_model or options.model or case.model or "sim",
            timeout_s=case.timeout_s or options.timeout_s,
            tenant=options.tenant,
        )
        i = self._pick()
        self.busy[i] += 1
        try:
            await self.ready[i].wait()
            ref = self.workers[i].run_case.remote(task)
            try:
                record: EvalResultRecord = await asyncio.wait_for(ref, task.timeout_s + _BACKSTOP_S)
            except TimeoutError:
                ray.cancel(ref)
                message = f"the worker did not answer within {task.timeout_s + _BACKSTOP_S:g} s"
                return _driver_error(task, "timeout", message, self.nodes[i])
            self.nodes[i] = record.node_id or self.nodes[i]
            return record
        except ray.exceptions.RayActorError as exc:
            self._failed(i)
            message = f"the eval worker died while running the sample: {_first_line(exc)}"
            return _driver_error(task, "crash", message, self.nodes[i])
        except ray.exceptions.RayError as exc:
            return _driver_error(task, "crash", f"{type(exc).__name__}: {_first_line(exc)}", self.nodes[i])
        finally:
            self.busy[i] -= 1

    async def _feeder(self, queue: Iterator[tuple[EvalCase, int]]) -> None:
        for case, sample in queue:
            self.results.put_nowait(await self._run_one(case, sample))

    async def _feed(self, feeders: Sequence[asyncio.Future[None]]) -> None:
        try:
            await asyncio.gather(*feeders)
        finally:
            self.results.put_nowait(None)

    async def _write(self) -> None:
        finished = False
        while not finished:
            batch: list[EvalResultRecord] = []
            item = await self.results.get()
            while True:  # everything that has arrived goes in one transaction
                if item is None:
                    finished = True
                else:
                    batch.append(item)
                if self.results.empty():
                    break
                item = self.results.get_nowait()
            if batch:
                await self.store.write_eval_results(batch)
                if self.on_result is not None:
                    for record in batch:
                        self.on_result(record)


def _driver_error(task: CaseTask, kind: str, message: str, node_id: str | None) -> EvalResultRecord:
    """A result for a sample whose worker gave none (it died, or never answered)."""
    return EvalResultRecord(
        run_id=task.run_id, case_id=task.case.id, sample=task.sample, passed=False, model=task.model,
        tags=list(task.case.tags), node_id=node_id, error_kind=kind, error_message=message, ended_at=time.time(),
    )  # fmt: skip


def _first_line(exc: BaseException, limit: int = 300) -> str:
    """Ray's errors run to many lines (tracebacks, actor details): keep the first."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"
