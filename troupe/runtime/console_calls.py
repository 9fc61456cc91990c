"""The console's reads of :class:`~troupe.runtime.facade.Runtime` (a part of it, kept apart).

Everything the operator's console (:mod:`troupe.console`) shows beyond the OpenAI API comes
from storage through these calls: summaries of responses across the history, the figures of
a recent time window, a thread's turns, and the evaluation runs.
"""

from __future__ import annotations

from troupe.runtime.conversations import not_found
from troupe.runtime.store_client import StoreClient
from troupe.storage import EvalResultRecord, EvalRunRecord, ResponseFilter, ResponseList, ResponseStats, Turn

__all__ = ["ConsoleCalls"]


class ConsoleCalls:
    """The console calls of the runtime facade (it provides ``store``)."""

    store: StoreClient

    async def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        """See :meth:`troupe.storage.contract.Console.find_responses` (``where.tenant`` None: every tenant)."""
        return await self.store.find_responses(where, after=after, limit=limit)

    async def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        return await self.store.response_stats(tenant, since, until)

    async def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        """A thread's turns, oldest first.

        Raises:
            NotFound: the tenant has no response in this thread.
        """
        turns = await self.store.thread_turns(tenant, thread_id, limit=limit)
        if not turns:
            raise not_found("Thread", thread_id, "thread_id")
        return turns

    async def eval_runs(self) -> list[EvalRunRecord]:
        return await self.store.list_eval_runs()

    async def eval_run(self, run_id: str) -> tuple[EvalRunRecord, list[EvalResultRecord]]:
        """A run and its results.

        Raises:
            NotFound: no run has this id.
        """
        run = await self.store.get_eval_run(run_id)
        if run is None:
            raise not_found("Evaluation run", run_id, "run_id")
        return run, await self.store.eval_results(run_id)
