"""The ``troupe`` command line (click): one module per command.

Commands::

    troupe serve   the Responses/Conversations API on Ray Serve (.serve)
    troupe sql     a read-only SQL query over the stored history, the server running or not (.sql)
    troupe sim     the simulated model as a standalone OpenAI-compatible server (.sim)
    troupe bench   a load generator for any Responses API server (.bench)
    troupe eval    batch evaluation on Ray: run, report, compare, export, list (.eval, .eval_run)
    troupe trace   a response's step timeline, as a table or a PNG Gantt chart (.trace)
    troupe vacuum  rewrite the DuckDB file whole, so that deleted rows are gone from its bytes (.vacuum)

A command returns its exit status: 0, 1 when it failed, 2 for usage and configuration
errors (as click itself for a bad option), 130 when interrupted. The modules import only
click at the top; Ray, uvicorn, DuckDB, httpx and matplotlib are imported when a command
runs, so ``troupe --help`` stays fast. A new command is one more module whose command is
added to :data:`cli` below.

Example::

    troupe serve --port 8000 --config troupe.toml
    troupe sql "SELECT status, count(*) FROM responses GROUP BY status"
    troupe eval run examples/eval/sample.jsonl --run-id sample --report

or, in Python, ``main(["sql", "SHOW TABLES"])`` (the exit status, an ``int``).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from ._common import Commands, usage_unless_command
from .bench import bench
from .eval import eval_group
from .serve import serve
from .sim import sim
from .sql import sql
from .trace import trace
from .vacuum import vacuum

__all__ = ["cli", "main"]


@click.group(
    "troupe",
    cls=Commands,
    invoke_without_command=True,
    subcommand_metavar="COMMAND [ARGS]...",
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True, "max_content_width": 100},
    epilog="""\b
Examples:
  troupe serve --port 8000 --config troupe.toml
  troupe sql "SELECT status, count(*) FROM responses GROUP BY status"
  troupe sim --port 8001 --ttft-ms 200 --itl-ms 20
  troupe eval run examples/eval/sample.jsonl --run-id sample --report
  troupe trace resp_0123 --png trace.png
  troupe vacuum --db troupe.duckdb

`troupe COMMAND --help` for each command.
""",
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Troupe: an actor-model runtime serving the OpenAI Responses API with a server-side agent loop."""
    usage_unless_command(ctx)


for _command in (serve, sql, sim, bench, eval_group, trace, vacuum):
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``troupe`` console script.

    Args:
        argv: the arguments (without the program name); ``sys.argv[1:]`` when None.

    Returns:
        The process exit status.
    """
    try:
        # Not standalone: click returns the status the command exited with instead of calling sys.exit.
        return int(cli.main(args=None if argv is None else list(argv), prog_name="troupe", standalone_mode=False))
    except click.ClickException as exc:  # a usage error: the message, status 2
        exc.show()
        return exc.exit_code
    except click.Abort:  # Ctrl-C outside a command's own handling
        click.echo("Aborted!", err=True)
        return 130
