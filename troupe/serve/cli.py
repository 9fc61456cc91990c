"""The ``troupe`` command line.

Commands::

    troupe serve   the Responses/Conversations API on Ray Serve (embedded defaults without a config)
    troupe sql     a read-only SQL query over the stored history, printed as a table
    troupe sim     the simulated model as a standalone OpenAI-compatible server
                   (Chat Completions, and stateless single-turn /v1/responses)
    troupe bench   a load generator for any Responses API server
    troupe eval    batch evaluation on Ray: run a dataset, report, compare, export

Each subcommand is one ``_add_<name>(subcommands)`` function that declares its arguments
and binds its handler with ``set_defaults(handler=...)``; a new command is one more such
function in ``_COMMANDS``. Heavy imports (Ray, uvicorn, DuckDB) happen in the handlers,
so ``troupe --help`` stays fast.

Example::

    troupe serve --port 8000 --config troupe.toml
    troupe sql "SELECT status, count(*) FROM responses GROUP BY status"
    troupe sim --port 8001 --ttft-ms 200 --itl-ms 20
    troupe eval run examples/eval/sample.jsonl --run-id sample --report
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main", "build_parser"]


def _add_sim(subcommands: Any) -> None:
    parser = subcommands.add_parser(
        "sim",
        help="run the simulated model as an OpenAI-compatible server",
        description=(
            "Serve the deterministic `sim` model over the OpenAI Chat Completions API "
            "(POST /v1/chat/completions, GET /v1/models, GET /health). It answers, calls "
            "tools and fails on cue from [[directives]] in the last user message, e.g. "
            "[[say TEXT]], [[call NAME {JSON}]], [[tokens N]], [[think TEXT]], "
            "[[fail STATUS once]], [[latency ttft=MS itl=MS]]."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument("--port", type=int, default=8001, help="TCP port to listen on")
    parser.add_argument(
        "--ttft-ms", type=float, default=0.0, help="default time to first token, in milliseconds"
    )
    parser.add_argument(
        "--itl-ms", type=float, default=0.0, help="default pause between streamed tokens, in milliseconds"
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="uvicorn log level",
    )
    parser.set_defaults(handler=_run_sim)


def _run_sim(args: argparse.Namespace) -> int:
    # Imported here so `troupe --help` stays fast and needs no server stack.
    import uvicorn

    from troupe.sim.model import SimSettings
    from troupe.sim.server import create_sim_app

    app = create_sim_app(SimSettings(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _add_serve(subcommands: Any) -> None:
    parser = subcommands.add_parser(
        "serve",
        help="serve the OpenAI Responses and Conversations APIs on Ray Serve",
        description=textwrap.fill(
            "Start Ray (a fresh local instance, or join --address), Ray Serve, and the Troupe API: "
            "POST /v1/responses with a server-side agent loop, the Conversations API, /v1/models, "
            "/health. Without --config the embedded defaults apply: the `sim` model, the example "
            "tools, history in ./troupe.duckdb, no API keys. Settings come from, lowest first: the "
            "defaults, the TOML file (see docs/troupe.example.toml), TROUPE_* environment "
            "variables, these flags. Stops on Ctrl-C or SIGTERM."
        ),
        epilog=(
            "examples:\n"
            "  troupe serve\n"
            "  troupe serve --port 9000 --config troupe.toml\n"
            "  TROUPE_API_KEYS=sk-alice=alice troupe serve --address 10.0.0.5:6379\n"
            "then:\n"
            "  OpenAI(base_url='http://127.0.0.1:8000/v1', api_key='unused')"
            ".responses.create(model='sim', input='[[say hi]]')"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="TCP port (default 8000)")
    parser.add_argument("--config", metavar="PATH", help="TOML configuration file (default: $TROUPE_CONFIG or none)")
    parser.add_argument(
        "--address", metavar="RAY_ADDRESS", help="join this Ray cluster instead of starting a local one"
    )
    parser.add_argument(
        "--ingress",
        choices=["direct", "proxy"],
        help="direct (default): the ingress replica serves --port itself; "
        "proxy: Serve's HTTP proxy serves --port and forwards over Ray",
    )
    parser.set_defaults(handler=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from troupe.serve.config import ConfigError, ServerSettings, load_config

    try:
        server, runtime = load_config(args.config)
    except ConfigError as exc:
        print(f"troupe serve: {exc}", file=sys.stderr)
        return 2
    flags = {"host": args.host, "port": args.port, "ray_address": args.address, "ingress": args.ingress}
    try:
        server = ServerSettings(**{**dict(server), **{k: v for k, v in flags.items() if v is not None}})
    except ValidationError as exc:
        print(f"troupe serve: {exc}", file=sys.stderr)
        return 2

    import logging

    from troupe.serve.deployment import PortInUse, run_server

    # Troupe's own start-up lines ("serving on ...") go to stderr beside Ray's.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("troupe: %(message)s"))
    logging.getLogger("troupe").addHandler(handler)
    logging.getLogger("troupe").setLevel(logging.INFO)
    try:
        run_server(server, runtime)
    except PortInUse as exc:
        print(f"troupe serve: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_sql(subcommands: Any) -> None:
    parser = subcommands.add_parser(
        "sql",
        help="run a read-only SQL query over the stored history",
        description=textwrap.fill(
            "Run one read-only statement (SELECT/WITH/DESCRIBE/SHOW/SUMMARIZE/EXPLAIN) against the "
            "DuckDB history and print the result as an aligned table. The database is --db, else "
            "the storage_path of --config / $TROUPE_STORAGE_PATH, else ./troupe.duckdb. DuckDB lets "
            "only one process open a file, so stop `troupe serve` first (or query a copy)."
        ),
        epilog=(
            "examples:\n"
            "  troupe sql \"SHOW TABLES\"\n"
            "  troupe sql \"SELECT status, count(*) AS n FROM responses GROUP BY status\" --db troupe.duckdb"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("query", metavar="SQL", help="the statement, quoted")
    parser.add_argument("--db", metavar="PATH", help="the DuckDB file")
    parser.add_argument("--config", metavar="PATH", help="TOML configuration file naming the storage_path")
    parser.set_defaults(handler=_run_sql)


def _run_sql(args: argparse.Namespace) -> int:
    from troupe.serve.config import ConfigError, load_config

    path = args.db
    if path is None:
        try:
            path = load_config(args.config)[1].storage_path
        except ConfigError as exc:
            print(f"troupe sql: {exc}", file=sys.stderr)
            return 2
    if path != ":memory:" and not os.path.exists(path):
        # Opening would silently create an empty database; a typo deserves an error.
        print(f"troupe sql: no database at {path!r}", file=sys.stderr)
        return 1

    from troupe.storage.base import StorageError
    from troupe.storage.duckdb_store import DuckDBStore

    try:
        store = DuckDBStore(path)
        try:
            columns, rows = store.query(args.query)
        finally:
            store.close()
    except StorageError as exc:
        print(f"troupe sql: {exc}", file=sys.stderr)
        return 1
    from troupe.tables import format_table

    print(format_table(columns, rows, count_rows=True))
    return 0


def _add_bench(subcommands: Any) -> None:
    from troupe.bench.cli import DESCRIPTION, EPILOG, add_arguments

    parser = subcommands.add_parser(
        "bench",
        help="load-test a Responses API server: latency percentiles, throughput, errors",
        description=textwrap.fill(DESCRIPTION),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(handler=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    from troupe.bench.cli import run

    return run(args)


def _add_eval(subcommands: Any) -> None:
    # The commands live in troupe.serve.eval_cli (run, report, compare, export, list).
    from troupe.serve.eval_cli import add_eval

    add_eval(subcommands)


_COMMANDS: tuple[Callable[[Any], None], ...] = (_add_serve, _add_sql, _add_sim, _add_bench, _add_eval)


def build_parser() -> argparse.ArgumentParser:
    """The ``troupe`` argument parser, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="troupe",
        description=(
            "Troupe: an actor-model runtime serving the OpenAI Responses API with a "
            "server-side agent loop."
        ),
    )
    subcommands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``troupe`` console script.

    Args:
        argv: the arguments (without the program name); ``sys.argv[1:]`` when None.

    Returns:
        The process exit status.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    return int(args.handler(args))
