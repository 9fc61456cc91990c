"""The ``troupe`` command line.

Each subcommand is one ``_add_<name>(subcommands)`` function that declares its arguments
and binds its handler with ``set_defaults(handler=...)``; adding ``serve``, ``sql`` or
``bench`` later means adding such a function to ``_COMMANDS``.

Example::

    troupe sim --port 8001 --ttft-ms 200 --itl-ms 20
"""

from __future__ import annotations

import argparse
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

    from troupe.agentloop.sim import SimSettings
    from troupe.serve.sim_app import create_sim_app

    app = create_sim_app(SimSettings(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


_COMMANDS: tuple[Callable[[Any], None], ...] = (_add_sim,)


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
