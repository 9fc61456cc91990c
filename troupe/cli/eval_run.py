"""``troupe eval run``: run (or resume) a dataset on Ray; results to DuckDB through the storage actor.

It starts a fresh local Ray instance (``ray.init(address="local")``) unless ``--address``
joins a cluster; the cases run on :mod:`troupe.runtime.ray.eval`'s workers. Also here: the
two helpers every ``troupe eval`` command uses, :func:`eval_runtime` and :func:`init_ray`.

Example::

    troupe eval run examples/eval/sample.jsonl --run-id sample --report
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from ._common import fail
from .serve import load_settings

if TYPE_CHECKING:
    from troupe.eval import Dataset
    from troupe.runtime.settings import RuntimeSettings

__all__ = ["run", "eval_runtime", "init_ray"]

WEBHOOK_WAIT_S = 15.0
"""How long ``troupe eval run`` on its own Ray waits, at the end, for pending webhook deliveries."""


def eval_runtime(config: str | None, db: str | None, command: str) -> RuntimeSettings:
    """The runtime settings of ``config``, with storage_path = ``db`` (absolute) when given."""
    runtime = load_settings(config, f"eval {command}")[1]
    path = db or runtime.storage_path
    if path != ":memory:":
        path = os.path.abspath(path)  # the storage actor's working directory may differ
    return runtime.model_copy(update={"storage_path": path})


def init_ray(address: str | None, namespace: str) -> None:
    """Join the cluster at ``address``, or start a fresh local Ray instance; quietly either way."""
    import logging

    import ray

    quiet: dict[str, Any] = {"namespace": namespace, "log_to_driver": False, "logging_level": logging.WARNING}
    if address:
        ray.init(address=address, **quiet)
    else:
        # "local": a fresh instance, never a cluster that happens to run on this machine.
        ray.init(address="local", include_dashboard=False, **quiet)


@click.command(
    short_help="Run (or resume) an evaluation.",
    epilog="""\b
Examples:
  troupe eval run examples/eval/sample.jsonl --run-id sample --report
  troupe eval run cases.parquet --model llama --samples 5 --config troupe.toml
  troupe eval run cases.jsonl --address auto --concurrency 256   # on a running cluster
""",
)
@click.argument("dataset_path", metavar="DATASET")
@click.option("--model", help="Run every case with this model (default: each case's model, else sim).")
@click.option("--samples", type=click.IntRange(min=1), metavar="K",
              help="Samples per case, for pass@k / pass^k (default: 1, or the resumed run's).")  # fmt: skip
@click.option("--concurrency", type=click.IntRange(min=1), default=16, metavar="N", help="Samples in flight at once.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Time limit per sample (default: 60, or the resumed run's).")  # fmt: skip
@click.option("--address", metavar="RAY_ADDRESS",
              help="Join this Ray cluster ('auto', 'HOST:6379', 'ray://…') instead of starting a local one.")  # fmt: skip
@click.option("--run-id", help="The run's id (default: eval-DATE-TIME-XXXX); an existing id resumes it.")
@click.option("--config", metavar="PATH", help="TOML configuration (as for troupe serve): models, tools.")
@click.option("--db", metavar="PATH", help="The DuckDB file (default: the configuration's storage_path).")
@click.option("--judge-model", metavar="MODEL", help="Model of judge graders that name none.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N", help="Eval worker actors (default: one per node).")
@click.option("--retry-errors", is_flag=True, help="On resume, run errored samples again.")
@click.option("--progress-file", metavar="PATH", help="Append a JSON line per stored result.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--report", is_flag=True, help="Print the report when the run ends.")
@click.option("--fail-under", type=float, metavar="RATE",
              help="Exit with status 1 if the success rate is below RATE (0-1).")  # fmt: skip
@click.option("--tenant", default="", metavar="TENANT",
              help="The tenant the responses are stored under, whose webhook endpoints hear of the run's end "
                   "(default: '', the tenant of a server without API keys).")  # fmt: skip
def run(dataset_path: str, config: str | None, db: str | None, address: str | None, run_id: str | None,
        model: str | None, judge_model: str | None, **options: Any) -> int:  # fmt: skip
    """Run every case of DATASET (JSONL, or Parquet *.parquet; one case per row: id, input, and
    optionally instructions, tools, tool_choice, model, tags, expected, timeout_s, params)
    --samples times, as agent loops on eval workers spread over the Ray cluster, and grade each
    sample.

    Results go to the DuckDB file through the storage actor. Running again with the same --run-id
    resumes: finished samples are skipped. Samples that crash, time out or whose model fails are
    recorded as errors; the run goes on.
    """
    import asyncio
    import signal

    from troupe.eval import DatasetError, load_dataset
    from troupe.storage import StorageError

    runtime = eval_runtime(config, db, "run")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # Python graders next to the dataset, as `module:function`
    try:
        dataset = load_dataset(dataset_path)
    except DatasetError as exc:
        fail("eval run", str(exc), 2)
    # Check the models before starting Ray, unless a resumed run's stored --model may decide.
    if model or not run_id:
        _check_models(dataset, runtime, model=model, judge_model=judge_model)
    run_id = run_id or _new_run_id()

    import ray

    init_ray(address, runtime.namespace)
    # SIGTERM stops the run like Ctrl-C: what finished is stored, and the run can resume.
    # (Set after ray.init, which installs a SIGTERM handler of its own.)
    previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        main = _run_main(dataset, runtime, run_id, model=model, judge_model=judge_model, address=address, **options)
        return asyncio.run(main)
    except KeyboardInterrupt:
        click.echo(err=True)  # past the ^C on the terminal
        fail("eval run", f"interrupted; resume with --run-id {run_id}", 130)
    except StorageError as exc:
        fail("eval run", f"storage failed: {exc}; resume with --run-id {run_id}")
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, previous)


async def _run_main(
    dataset: Dataset, runtime: RuntimeSettings, run_id: str, *, model: str | None, judge_model: str | None,
    address: str | None, samples: int | None, concurrency: int, timeout: float | None, workers: int | None,
    retry_errors: bool, progress_file: str | None, no_progress: bool, report: bool, fail_under: float | None,
    tenant: str,
) -> int:  # fmt: skip
    import json

    from troupe.eval import Progress, render_report, summarize
    from troupe.runtime.ray.eval import RunOptions, run_eval
    from troupe.runtime.ray.storage_actor import RayStoreClient

    store = await RayStoreClient.connect(runtime)
    before = await store.get_eval_run(run_id)
    stored = before.options if before is not None else {}
    options = RunOptions(
        run_id=run_id,
        samples=samples or (before.samples if before is not None else 1),
        concurrency=concurrency,
        timeout_s=timeout or stored.get("timeout_s") or 60.0,
        model=model or (before.model if before is not None else None),
        judge_model=judge_model or stored.get("judge_model"),
        workers=workers,
        retry_errors=retry_errors,
        tenant=tenant,
    )
    _check_models(dataset, runtime, model=options.model, judge_model=options.judge_model)
    if before is not None and before.dataset_sha256 != dataset.sha256:
        click.echo(
            f"troupe eval run: warning: {dataset.path} changed since run {run_id} started; "
            "its finished samples are kept",
            err=True,
        )
    progress: list[Progress] = []
    log = open(progress_file, "a", encoding="utf-8") if progress_file else None  # noqa: SIM115

    where = runtime.storage_path
    if address:  # a storage actor already running on the cluster keeps its own file
        where = f"the cluster's storage actor ({where} unless it was already running)"

    def on_start(todo: int, done: int, nodes: list[str]) -> None:
        verb = "resuming" if done else "starting"
        click.echo(
            f"troupe eval: {verb} run {run_id}: {len(dataset.cases)} cases x {options.samples} samples; "
            f"{done} done, {todo} to run on {len(nodes)} workers ({len(set(nodes))} nodes); results in {where}",
            err=True,
        )
        if not no_progress:
            progress.append(Progress(todo + done, done=done, label=run_id))

    def on_result(record: Any) -> None:
        if progress:
            progress[0].update(passed=record.passed, error=record.error_kind is not None)
        if log is not None:
            fields = ("run_id", "case_id", "sample", "passed", "error_kind", "node_id", "response_id")
            log.write(json.dumps({f: getattr(record, f) for f in fields}) + "\n")
            log.flush()

    try:
        finished = await run_eval(dataset, runtime, options, on_start=on_start, on_result=on_result)
    finally:
        if progress:
            progress[0].close()
        if log is not None:
            log.close()
    if not address:  # this Ray (and its storage actor, which delivers webhooks) ends with the command
        await _send_webhooks(store, WEBHOOK_WAIT_S if runtime.credentials_keys else 0.0)
    results = await store.eval_results(run_id)
    summary = summarize(results)
    if report:
        click.echo(render_report(finished, summary, results))
        click.echo()
    rate = "-" if summary.success_rate is None else f"{100 * summary.success_rate:.1f}%"
    if address:
        db = f" --address {address}"
    else:
        db = "" if runtime.storage_path == ":memory:" else f" --db {runtime.storage_path}"
    click.echo(
        f"run {run_id} {finished.status}: {summary.results} results, {summary.passed} passed, "
        f"{summary.failed} failed, {summary.errors} errors; success rate {rate}\n"
        f"report: troupe eval report {run_id}{db}"
    )
    if fail_under is not None and (summary.success_rate or 0.0) < fail_under:
        fail("eval run", f"success rate {rate} is below {fail_under:g}")
    return 0


async def _send_webhooks(store: Any, wait_s: float = WEBHOOK_WAIT_S) -> None:
    """Wait (at most ``wait_s``) for the storage actor to send the webhook deliveries pending, the
    run's end among them; say how many are left for the next server on this database to send.
    (Without ``credentials_keys`` the storage actor sends none: ``wait_s`` is 0 then.)"""
    import asyncio
    import time

    deadline = time.monotonic() + wait_s
    pending = await store.count_pending_webhook_deliveries()
    while pending and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        pending = await store.count_pending_webhook_deliveries()
    if pending:
        click.echo(f"troupe eval run: {pending} webhook deliveries are pending; the next troupe serve on this "
                   "database sends them", err=True)  # fmt: skip


def _check_models(dataset: Dataset, runtime: RuntimeSettings, *, model: str | None, judge_model: str | None) -> None:
    """End the command (status 2) naming the first model the run needs that is not configured."""
    configured = {m.name for m in runtime.models}
    for needed, user in dataset.models(model=model, judge_model=judge_model).items():
        if needed not in configured:
            fail("eval run", f"model '{needed}' ({user}) is not configured; configured: {', '.join(sorted(configured))}",
                 2)  # fmt: skip


def _new_run_id() -> str:
    import secrets
    import time

    return time.strftime("eval-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
