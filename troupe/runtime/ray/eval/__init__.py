"""Batch evaluation on Ray: cases run as agent loops inside the cluster, not through HTTP.

Two modules: :mod:`.worker` (the actor that runs and grades a sample) and :mod:`.dispatcher`
(the driver, :func:`run_eval`).

The driver (``troupe eval run``) starts :class:`EvalWorker` actors, one per node
(pinned there; a worker whose node goes away is replaced by one elsewhere). Each worker
*is* a conversation host (it extends the pooled host actor): it runs a case's turn
in-process through :class:`~troupe.runtime.host.ConversationHost` (tool calls fan
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

from troupe.runtime.ray.eval.dispatcher import RunOptions, run_eval
from troupe.runtime.ray.eval.worker import CaseTask, EvalWorker

__all__ = ["CaseTask", "EvalWorker", "RunOptions", "run_eval"]
