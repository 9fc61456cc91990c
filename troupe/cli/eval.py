"""``troupe eval``: batch evaluation from the command line.

Commands::

    troupe eval run DATASET      run (or resume) a dataset on Ray; results to DuckDB (in .eval_run)
    troupe eval report RUN_ID    success rates, pass@k / pass^k, latency, tokens, errors; PNG charts
    troupe eval compare A B      per-case differences between two runs
    troupe eval export RUN_ID P  a run's results as a Parquet file
    troupe eval list             the stored runs

The reading commands open the DuckDB file (or, with ``--address``, read through the
running cluster's storage actor), through :class:`_Reader`. Heavy imports happen when a
command runs.

Example::

    troupe eval report sample --charts eval-reports/sample
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._common import Commands, fail, usage_unless_command
from .eval_run import eval_runtime, init_ray, run

__all__ = ["eval_group"]

F = TypeVar("F", bound=Callable[..., Any])


@click.group(
    "eval",
    cls=Commands,
    invoke_without_command=True,
    subcommand_metavar="COMMAND [ARGS]...",
    short_help="Batch evaluation on Ray: run a dataset, report, compare, export.",
    epilog="""\b
Examples:
  troupe eval run examples/eval/sample.jsonl --run-id sample --report
  troupe eval report sample
  troupe eval compare sample sample-2
  troupe eval export sample sample.parquet
""",
)
@click.pass_context
def eval_group(ctx: click.Context) -> None:
    """Run a dataset of agent tasks as agent loops spread over a Ray cluster, grade every sample,
    and keep the results in DuckDB (tables eval_runs and eval_results; eval_results.response_id
    joins responses and step_traces).

    `troupe eval COMMAND --help` for each command.
    """
    usage_unless_command(ctx)


eval_group.add_command(run)


def _store_options(fn: F) -> F:
    """The options of the reading commands: where the stored runs are."""
    fn = click.option("--address", metavar="RAY_ADDRESS",
                      help="Read through the storage actor of this running Ray cluster instead of opening the file.",
                      )(fn)  # fmt: skip
    fn = click.option("--config", metavar="PATH", help="TOML configuration naming the storage_path.")(fn)
    fn = click.option("--db", metavar="PATH", help="The DuckDB file (default: the configuration's storage_path).")(fn)
    return fn


class _Reader:
    """The stored runs, from the DuckDB file or (with --address) through the storage actor."""

    def __init__(self, command: str, *, config: str | None, db: str | None, address: str | None) -> None:
        self.command = f"eval {command}"
        self._runtime = eval_runtime(config, db, command)
        self._address = address
        self._store: Any = None

    def __enter__(self) -> _Reader:
        if self._address:
            import asyncio

            from troupe.runtime.ray.storage_actor import RayStoreClient

            init_ray(self._address, self._runtime.namespace)
            self._store = asyncio.run(RayStoreClient.connect(self._runtime))
            return self
        path = self._runtime.storage_path
        if path != ":memory:" and not os.path.exists(path):
            fail(self.command, f"no database at {path!r}")
        from troupe.storage import DuckDBStore, StorageError

        try:
            self._store = DuckDBStore(path)
        except StorageError as exc:
            fail(self.command, f"{exc} (a running `troupe serve` or `troupe eval run` holds it? use --address, or a copy)")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._address:
            import ray

            ray.shutdown()
        elif self._store is not None:
            self._store.close()

    def call(self, name: str, *args: Any) -> Any:
        result = getattr(self._store, name)(*args)
        if self._address:  # the storage actor's client is async
            import asyncio

            async def wait() -> Any:
                return await result

            return asyncio.run(wait())
        return result

    def run(self, run_id: str) -> tuple[Any, list[Any]]:
        """The run and its results; ends the command with an error if neither exists."""
        found, results = self.call("get_eval_run", run_id), self.call("eval_results", run_id)
        if found is None and not results:
            fail(self.command, f"no run {run_id!r}")
        return found, results


@eval_group.command(
    short_help="Summarize a run: success rates, pass@k, pass^k, latency, tokens, errors; PNG charts.",
    epilog="""\b
Examples:
  troupe eval report sample
  troupe eval report sample --json --no-charts --db troupe.duckdb
""",
)
@click.argument("run_id", metavar="RUN_ID")
@click.option("--charts", metavar="DIR", help="Where to write the charts (default: eval-reports/RUN_ID).")
@click.option("--no-charts", is_flag=True, help="Write no charts.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead.")
@click.option("--failures", type=int, default=10, metavar="N", help="Failing samples to list.")
@_store_options
def report(run_id: str, charts: str | None, no_charts: bool, as_json: bool, failures: int, **where: Any) -> int:
    """Print the summary of RUN_ID: success rate overall and per tag, pass@k and pass^k (unbiased
    estimators), latency p50/p95 (time to first token, end to end), tokens, tool calls, grader
    pass rates, errors by kind, results per node, failing samples; and write PNG charts
    (latency.png, success_by_tag.png, pass_k.png).
    """
    import dataclasses
    import json

    from troupe.eval import render_report, summarize

    with _Reader("report", **where) as reader:
        found, results = reader.run(run_id)
    summary = summarize(results)
    if as_json:
        doc = {"run": dataclasses.asdict(found) if found is not None else None, "summary": summary.to_dict()}
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render_report(found, summary, results, failures=failures))
    if not no_charts:
        from troupe._charts import INSTALL_HINT, ChartsUnavailable
        from troupe.eval.charts import write_charts

        try:
            paths = write_charts(results, summary, charts or os.path.join("eval-reports", run_id), title=run_id)
        except ChartsUnavailable:
            click.echo(f"\ncharts: none, matplotlib is not installed ({INSTALL_HINT}; --no-charts says nothing)", err=True)
        else:
            click.echo(f"\ncharts: {', '.join(str(p) for p in paths)}", err=as_json)
    return 0


@eval_group.command(
    short_help="Per-case differences between two runs.",
    epilog="""\b
Examples:
  troupe eval compare sample sample-2
  troupe eval compare sample sample-2 --all
""",
)
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--all", "show_all", is_flag=True, help="List every case, not only those that changed.")
@_store_options
def compare(run_a: str, run_b: str, show_all: bool, **where: Any) -> int:
    """Compare RUN_A with RUN_B: the headline metrics side by side (success rate, pass@1, errors,
    latency, tokens), then each case whose pass rate changed.
    """
    from troupe.eval import render_comparison

    with _Reader("compare", **where) as reader:
        _, a = reader.run(run_a)
        _, b = reader.run(run_b)
    click.echo(render_comparison(run_a, run_b, a, b, show_all=show_all))
    return 0


@eval_group.command(
    short_help="Write a run's results to a Parquet file.",
    epilog="""\b
Examples:
  troupe eval export sample sample.parquet
""",
)
@click.argument("run_id", metavar="RUN_ID")
@click.argument("path", metavar="PATH")
@_store_options
def export(run_id: str, path: str, **where: Any) -> int:
    """Write the results of RUN_ID to the Parquet file PATH, one row per sample, with the columns
    of the eval_results table.
    """
    from troupe.eval.report import export_parquet

    with _Reader("export", **where) as reader:
        _, results = reader.run(run_id)
    count = export_parquet(results, path)
    click.echo(f"wrote {count} results of run {run_id} to {path}")
    return 0


@eval_group.command(
    "list",
    short_help="The stored runs, newest first.",
    epilog="""\b
Examples:
  troupe eval list
  troupe eval list --address auto
""",
)
@_store_options
def list_runs(**where: Any) -> int:
    """List the stored runs, newest first: id, status, when it started, dataset, cases, samples,
    model.
    """
    import datetime

    from troupe.tables import format_table

    with _Reader("list", **where) as reader:
        runs = reader.call("list_eval_runs")
    rows = [
        (
            r.run_id, r.status,
            datetime.datetime.fromtimestamp(r.created_at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            r.dataset, r.cases, r.samples, r.model,
        )
        for r in runs
    ]  # fmt: skip
    columns = ["run_id", "status", "created (UTC)", "dataset", "cases", "samples", "model"]
    click.echo(format_table(columns, rows, null="-"))
    return 0
