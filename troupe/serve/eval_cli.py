"""``troupe eval``: batch evaluation from the command line (wired in by ``troupe.serve.cli``).

Commands::

    troupe eval run DATASET      run (or resume) a dataset on Ray; results to DuckDB
    troupe eval report RUN_ID    success rates, pass@k / pass^k, latency, tokens, errors; PNG charts
    troupe eval compare A B      per-case differences between two runs
    troupe eval export RUN_ID P  a run's results as a Parquet file
    troupe eval list             the stored runs

``run`` starts a fresh local Ray instance (``ray.init(address="local")``) unless
``--address`` joins a cluster; the cases run on :mod:`troupe.actors.eval`'s
workers. The reading commands open the DuckDB file (or, with ``--address``, read
through the running cluster's storage actor). Heavy imports happen in the handlers.

Example::

    troupe eval run examples/eval/sample.jsonl --run-id sample --report
    troupe eval report sample --charts eval-reports/sample
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any

__all__ = ["add_eval"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_eval(subcommands: Any) -> None:
    """Declare ``troupe eval`` and its commands (``run``, ``report``, ``compare``, ``export``, ``list``)."""
    parser = subcommands.add_parser(
        "eval",
        help="batch evaluation on Ray: run a dataset, report, compare, export",
        description=textwrap.fill(
            "Run a dataset of agent tasks as agent loops spread over a Ray cluster, grade every "
            "sample, and keep the results in DuckDB (tables eval_runs and eval_results; "
            "eval_results.response_id joins responses and step_traces). `troupe eval COMMAND -h` "
            "for each command."
        ),
        epilog=(
            "examples:\n"
            "  troupe eval run examples/eval/sample.jsonl --run-id sample --report\n"
            "  troupe eval report sample\n"
            "  troupe eval compare sample sample-2\n"
            "  troupe eval export sample sample.parquet"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=lambda _args: _usage(parser))
    commands = parser.add_subparsers(title="commands", dest="eval_command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run (or resume) an evaluation",
        description=textwrap.fill(
            "Run every case of DATASET (JSONL, or Parquet *.parquet; one case per row: id, input, "
            "and optionally instructions, tools, tool_choice, model, tags, expected, timeout_s, "
            "params) --samples times, as agent loops on eval workers spread over the Ray cluster, "
            "and grade each sample. Results go to the DuckDB file through the storage actor. "
            "Running again with the same --run-id resumes: finished samples are skipped. Samples "
            "that crash, time out or whose model fails are recorded as errors; the run goes on."
        ),
        epilog=(
            "examples:\n"
            "  troupe eval run examples/eval/sample.jsonl --run-id sample --report\n"
            "  troupe eval run cases.parquet --model llama --samples 5 --config troupe.toml\n"
            "  troupe eval run cases.jsonl --address auto --concurrency 256   # on a running cluster"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("dataset", metavar="DATASET", help="the cases: a JSONL file, or Parquet (*.parquet)")
    run.add_argument("--model", help="run every case with this model (default: each case's model, else sim)")
    run.add_argument(
        "--samples", type=_positive_int, metavar="K", help="samples per case, for pass@k / pass^k (default 1)"
    )
    run.add_argument(
        "--concurrency", type=_positive_int, default=16, metavar="N", help="samples in flight at once (default 16)"
    )
    run.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="time limit per sample (default 60)"
    )
    run.add_argument(
        "--address",
        metavar="RAY_ADDRESS",
        help="join this Ray cluster ('auto', 'HOST:6379', 'ray://…') instead of starting a local one",
    )
    run.add_argument("--run-id", help="the run's id (default: eval-DATE-TIME-XXXX); an existing id resumes it")
    run.add_argument("--config", metavar="PATH", help="TOML configuration (as for troupe serve): models, tools")
    run.add_argument("--db", metavar="PATH", help="the DuckDB file (default: the configuration's storage_path)")
    run.add_argument("--judge-model", metavar="MODEL", help="model of judge graders that name none")
    run.add_argument("--workers", type=_positive_int, metavar="N", help="eval worker actors (default: one per node)")
    run.add_argument("--retry-errors", action="store_true", help="on resume, run errored samples again")
    run.add_argument("--progress-file", metavar="PATH", help="append a JSON line per stored result")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--report", action="store_true", help="print the report when the run ends")
    run.add_argument(
        "--fail-under", type=float, metavar="RATE", help="exit with status 1 if the success rate is below RATE (0-1)"
    )
    run.set_defaults(handler=_run_eval_run)

    report = commands.add_parser(
        "report",
        help="summarize a run: success rates, pass@k, pass^k, latency, tokens, errors; PNG charts",
        description=textwrap.fill(
            "Print a run's summary: success rate overall and per tag, pass@k and pass^k (unbiased "
            "estimators), latency p50/p95 (time to first token, end to end), tokens, tool calls, "
            "grader pass rates, errors by kind, results per node, failing samples; and write PNG "
            "charts (latency.png, success_by_tag.png, pass_k.png)."
        ),
    )
    report.add_argument("run_id", metavar="RUN_ID")
    report.add_argument(
        "--charts", metavar="DIR", help="where to write the charts (default: eval-reports/RUN_ID)"
    )
    report.add_argument("--no-charts", action="store_true", help="write no charts")
    report.add_argument("--json", action="store_true", help="print the summary as JSON instead")
    report.add_argument(
        "--failures", type=int, default=10, metavar="N", help="failing samples to list (default 10)"
    )
    report.set_defaults(handler=_run_eval_report)

    compare = commands.add_parser("compare", help="per-case differences between two runs")
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")
    compare.add_argument("--all", action="store_true", help="list every case, not only those that changed")
    compare.set_defaults(handler=_run_eval_compare)

    export = commands.add_parser("export", help="write a run's results to a Parquet file")
    export.add_argument("run_id", metavar="RUN_ID")
    export.add_argument("path", metavar="PATH", help="the Parquet file to write")
    export.set_defaults(handler=_run_eval_export)

    listing = commands.add_parser("list", help="the stored runs, newest first")
    listing.set_defaults(handler=_run_eval_list)

    for sub in (report, compare, export, listing):
        sub.add_argument("--db", metavar="PATH", help="the DuckDB file (default: the configuration's storage_path)")
        sub.add_argument("--config", metavar="PATH", help="TOML configuration naming the storage_path")
        sub.add_argument(
            "--address",
            metavar="RAY_ADDRESS",
            help="read through the storage actor of this running Ray cluster instead of opening the file",
        )


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _eval_runtime(args: argparse.Namespace, command: str) -> Any:
    """The runtime settings with storage_path = --db (absolute), or None after printing the error."""
    from troupe.serve.config import ConfigError, load_config

    try:
        runtime = load_config(args.config)[1]
    except ConfigError as exc:
        print(f"troupe eval {command}: {exc}", file=sys.stderr)
        return None
    path = args.db or runtime.storage_path
    if path != ":memory:":
        path = os.path.abspath(path)  # the storage actor's working directory may differ
    return runtime.model_copy(update={"storage_path": path})


def _init_ray(address: str | None, namespace: str) -> None:
    import logging

    import ray

    quiet = {"namespace": namespace, "log_to_driver": False, "logging_level": logging.WARNING}
    if address:
        ray.init(address=address, **quiet)
    else:
        # "local": a fresh instance, never a cluster that happens to run on this machine.
        ray.init(address="local", include_dashboard=False, **quiet)


def _run_eval_run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from troupe.eval import DatasetError, load_dataset
    from troupe.storage import StorageError

    runtime = _eval_runtime(args, "run")
    if runtime is None:
        return 2
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # Python graders next to the dataset, as `module:function`
    try:
        dataset = load_dataset(args.dataset)
    except DatasetError as exc:
        print(f"troupe eval run: {exc}", file=sys.stderr)
        return 2
    run_id = args.run_id or _new_run_id()
    # Check the models before starting Ray, unless a resumed run's stored --model may decide.
    early = argparse.Namespace(model=args.model, judge_model=args.judge_model)
    problem = _unknown_models(dataset, runtime, early) if args.model or not args.run_id else None
    if problem:
        print(f"troupe eval run: {problem}", file=sys.stderr)
        return 2

    import ray

    _init_ray(args.address, runtime.namespace)
    # SIGTERM stops the run like Ctrl-C: what finished is stored, and the run can resume.
    # (Set after ray.init, which installs a SIGTERM handler of its own.)
    previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        return asyncio.run(_eval_run_main(args, dataset, runtime, run_id))
    except KeyboardInterrupt:
        print(f"\ntroupe eval run: interrupted; resume with --run-id {run_id}", file=sys.stderr)
        return 130
    except StorageError as exc:
        print(f"troupe eval run: storage failed: {exc}; resume with --run-id {run_id}", file=sys.stderr)
        return 1
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, previous)


async def _eval_run_main(args: argparse.Namespace, dataset: Any, runtime: Any, run_id: str) -> int:
    import json

    from troupe.actors.eval import RunOptions, run_eval
    from troupe.actors.storage_actor import RayStoreClient
    from troupe.eval import Progress, render_report, summarize

    store = await RayStoreClient.connect(runtime)
    before = await store.get_eval_run(run_id)
    stored = before.options if before is not None else {}
    options = RunOptions(
        run_id=run_id,
        samples=args.samples or (before.samples if before is not None else 1),
        concurrency=args.concurrency,
        timeout_s=args.timeout or stored.get("timeout_s") or 60.0,
        model=args.model or (before.model if before is not None else None),
        judge_model=args.judge_model or stored.get("judge_model"),
        workers=args.workers,
        retry_errors=args.retry_errors,
    )
    problem = _unknown_models(dataset, runtime, options)
    if problem:
        print(f"troupe eval run: {problem}", file=sys.stderr)
        return 2
    if before is not None and before.dataset_sha256 != dataset.sha256:
        print(
            f"troupe eval run: warning: {dataset.path} changed since run {run_id} started; "
            "its finished samples are kept",
            file=sys.stderr,
        )
    progress: list[Progress] = []
    log = open(args.progress_file, "a", encoding="utf-8") if args.progress_file else None  # noqa: SIM115

    where = runtime.storage_path
    if args.address:  # a storage actor already running on the cluster keeps its own file
        where = f"the cluster's storage actor ({where} unless it was already running)"

    def on_start(todo: int, done: int, nodes: list[str]) -> None:
        verb = "resuming" if done else "starting"
        print(
            f"troupe eval: {verb} run {run_id}: {len(dataset.cases)} cases x {options.samples} samples; "
            f"{done} done, {todo} to run on {len(nodes)} workers ({len(set(nodes))} nodes); results in {where}",
            file=sys.stderr,
        )
        if not args.no_progress:
            progress.append(Progress(todo + done, done=done))

    def on_result(record: Any) -> None:
        if progress:
            progress[0].update(passed=record.passed, error=record.error_kind is not None)
        if log is not None:
            fields = ("run_id", "case_id", "sample", "passed", "error_kind", "node_id", "response_id")
            log.write(json.dumps({f: getattr(record, f) for f in fields}) + "\n")
            log.flush()

    try:
        run = await run_eval(dataset, runtime, options, on_start=on_start, on_result=on_result)
    finally:
        if progress:
            progress[0].close()
        if log is not None:
            log.close()
    results = await store.eval_results(run_id)
    summary = summarize(results)
    if args.report:
        print(render_report(run, summary, results))
        print()
    rate = "-" if summary.success_rate is None else f"{100 * summary.success_rate:.1f}%"
    if args.address:
        db = f" --address {args.address}"
    else:
        db = "" if runtime.storage_path == ":memory:" else f" --db {runtime.storage_path}"
    print(
        f"run {run_id} {run.status}: {summary.results} results, {summary.passed} passed, {summary.failed} failed, "
        f"{summary.errors} errors; success rate {rate}\n"
        f"report: troupe eval report {run_id}{db}"
    )
    if args.fail_under is not None and (summary.success_rate or 0.0) < args.fail_under:
        print(f"troupe eval run: success rate {rate} is below {args.fail_under:g}", file=sys.stderr)
        return 1
    return 0


def _new_run_id() -> str:
    import secrets
    import time

    return time.strftime("eval-%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def _unknown_models(dataset: Any, runtime: Any, options: Any) -> str | None:
    """A message naming the first model the run needs that the configuration lacks, else None."""
    configured = {m.name for m in runtime.models}
    needed: dict[str, str] = {}
    for case in dataset.cases:
        model = options.model or case.model or "sim"
        needed.setdefault(model, f"case {case.id!r}")
        for spec in case.expected:
            if spec.kind == "judge":
                judge = spec.options.get("model") or options.judge_model or model
                needed.setdefault(judge, f"the judge of case {case.id!r}")
    for model, user in needed.items():
        if model not in configured:
            return f"model '{model}' ({user}) is not configured; configured: {', '.join(sorted(configured))}"
    return None


class _EvalReader:
    """The stored runs, from the DuckDB file or (with --address) through the storage actor."""

    def __init__(self, args: argparse.Namespace, command: str) -> None:
        self.command = command
        self.args = args
        self._store: Any = None
        self._ray = False

    def __enter__(self) -> _EvalReader:
        runtime = _eval_runtime(self.args, self.command)
        if runtime is None:
            raise _EvalExit(2)
        if self.args.address:
            import asyncio

            from troupe.actors.storage_actor import RayStoreClient

            _init_ray(self.args.address, runtime.namespace)
            self._ray = True
            self._store = asyncio.run(RayStoreClient.connect(runtime))
            return self
        path = runtime.storage_path
        if path != ":memory:" and not os.path.exists(path):
            self.fail(f"no database at {path!r}")
        from troupe.storage import DuckDBStore, StorageError

        try:
            self._store = DuckDBStore(path)
        except StorageError as exc:
            self.fail(f"{exc} (a running `troupe serve` or `troupe eval run` holds it? use --address, or a copy)")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ray:
            import ray

            ray.shutdown()
        elif self._store is not None:
            self._store.close()

    def fail(self, message: str, status: int = 1) -> None:
        print(f"troupe eval {self.command}: {message}", file=sys.stderr)
        raise _EvalExit(status)

    def call(self, name: str, *args: Any) -> Any:
        result = getattr(self._store, name)(*args)
        if self._ray:
            import asyncio

            async def wait() -> Any:
                return await result

            return asyncio.run(wait())
        return result

    def run(self, run_id: str) -> tuple[Any, list[Any]]:
        """The run and its results; exits with an error if neither exists."""
        run, results = self.call("get_eval_run", run_id), self.call("eval_results", run_id)
        if run is None and not results:
            self.fail(f"no run {run_id!r}")
        return run, results


class _EvalExit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _eval_command(fn: Callable[[argparse.Namespace, _EvalReader], int], command: str) -> Callable[..., int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            with _EvalReader(args, command) as reader:
                return fn(args, reader)
        except _EvalExit as exc:
            return exc.status

    return handler


def _eval_report(args: argparse.Namespace, reader: _EvalReader) -> int:
    import json

    from troupe.eval import render_report, summarize

    run, results = reader.run(args.run_id)
    summary = summarize(results)
    if args.json:
        doc = {"run": dataclasses.asdict(run) if run is not None else None, "summary": summary.to_dict()}
        print(json.dumps(doc, indent=2))
    else:
        print(render_report(run, summary, results, failures=args.failures))
    if not args.no_charts:
        from troupe.eval.charts import write_charts

        directory = args.charts or os.path.join("eval-reports", args.run_id)
        paths = write_charts(results, summary, directory, title=args.run_id)
        print(f"\ncharts: {', '.join(str(p) for p in paths)}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _eval_compare(args: argparse.Namespace, reader: _EvalReader) -> int:
    from troupe.eval import render_comparison

    _, a = reader.run(args.run_a)
    _, b = reader.run(args.run_b)
    print(render_comparison(args.run_a, args.run_b, a, b, show_all=args.all))
    return 0


def _eval_export(args: argparse.Namespace, reader: _EvalReader) -> int:
    from troupe.eval.report import export_parquet

    _, results = reader.run(args.run_id)
    count = export_parquet(results, args.path)
    print(f"wrote {count} results of run {args.run_id} to {args.path}")
    return 0


def _eval_list(args: argparse.Namespace, reader: _EvalReader) -> int:
    import datetime

    from troupe.tables import format_table

    runs = reader.call("list_eval_runs")
    rows = [
        (
            r.run_id, r.status,
            datetime.datetime.fromtimestamp(r.created_at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            r.dataset, r.cases, r.samples, r.model,
        )
        for r in runs
    ]  # fmt: skip
    print(format_table(["run_id", "status", "created (UTC)", "dataset", "cases", "samples", "model"], rows, null="-"))
    return 0


_run_eval_report = _eval_command(_eval_report, "report")
_run_eval_compare = _eval_command(_eval_compare, "compare")
_run_eval_export = _eval_command(_eval_export, "export")
_run_eval_list = _eval_command(_eval_list, "list")
