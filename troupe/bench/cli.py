"""The ``troupe bench`` command: arguments and handler.

``troupe.serve.cli`` declares the subcommand and calls :func:`add_arguments` and :func:`run`;
this module imports only :mod:`argparse` at the top, so ``troupe --help`` stays fast.

Examples::

    troupe bench --url http://127.0.0.1:8000/v1 --concurrency 1,16,64 --requests 200 --plot
    troupe bench --no-stream --rate 50 --duration 30 --body '{"store": false}' --out results/store-off
    troupe bench --input '[[latency ttft=50 itl=10]] [[tokens 64]]' --warmup 8
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Any

__all__ = ["add_arguments", "run", "DESCRIPTION", "EPILOG"]

DESCRIPTION = (
    "Load-test any server of the OpenAI Responses API (Troupe, OpenAI, another gateway) and report "
    "time to first token, inter-token gaps and end-to-end latency (p50/p90/p99), throughput and "
    "errors, at a fixed concurrency (closed loop) or a fixed arrival rate (open loop). Writes "
    "PREFIX.json and PREFIX.md, and with --plot PNG charts; prints the table. The client's own "
    "cost (CPU per request, event-loop lag) is reported too."
)
EPILOG = (
    "examples:\n"
    "  troupe bench --concurrency 1,16,64 --requests 200 --plot\n"
    "  troupe bench --url http://127.0.0.1:8001/v1 --no-stream --rate 50 --duration 20\n"
    "  troupe bench --input '[[latency ttft=50 itl=10]] [[tokens 64]]' --body '{\"store\": false}'\n"
    "exit status: 0 when some request succeeded, 1 when none did, 2 for bad arguments"
)


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _positive_floats(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def _body(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]!r}: {exc.strerror}") from exc
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--body must be a JSON object")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``troupe bench``'s arguments on ``parser``."""
    target = parser.add_argument_group("target")
    target.add_argument("--url", default="http://127.0.0.1:8000/v1",
                        help="API root; requests go to URL/responses (default: %(default)s)")
    target.add_argument("--model", default="sim", help="the request's model (default: %(default)s)")
    target.add_argument("--api-key", default=os.environ.get("TROUPE_BENCH_API_KEY"),
                        help="sent as 'Authorization: Bearer KEY' (default: $TROUPE_BENCH_API_KEY)")
    request = parser.add_argument_group("request")
    request.add_argument("--input", default="[[tokens 64]]", help="the input text (default: %(default)r)")
    request.add_argument("--body", type=_body, default={}, metavar="JSON",
                         help="more request fields, merged in: a JSON object or @file.json, e.g. '{\"store\": false}'")
    request.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                         help="stream the responses (default: on)")
    load = parser.add_argument_group("load")
    load.add_argument("--concurrency", type=_positive_ints, default=[1], metavar="N[,N…]",
                      help="requests in flight (closed loop); several values make one run each (default: 1)")
    load.add_argument("--rate", type=_positive_floats, metavar="R[,R…]",
                      help="requests started per second (open loop), instead of --concurrency")
    load.add_argument("--requests", type=int, metavar="N",
                      help="measured requests per run (default: 100, or unbounded with --duration)")
    load.add_argument("--duration", type=float, metavar="SECONDS", help="longest measured phase per run")
    load.add_argument("--warmup", type=int, metavar="N",
                      help="requests sent first and not measured (default: the concurrency, at most 16)")
    load.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                      help="per-request time-out (default: %(default)s)")
    load.add_argument("--max-in-flight", type=int, default=1024, metavar="N",
                      help="open loop: most requests in flight (default: %(default)s)")
    output = parser.add_argument_group("output")
    output.add_argument("--out", metavar="PREFIX",
                        help="write PREFIX.json and PREFIX.md (default: ./troupe-bench-<UTC time>)")
    output.add_argument("--plot", action="store_true",
                        help="also write PREFIX-cdf.png and, for several concurrencies, PREFIX-concurrency.png")
    output.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Run ``troupe bench`` with parsed ``args``; the exit status."""
    from .loadgen import run_async

    if args.requests is not None and args.requests < 1:
        print("troupe bench: --requests must be at least 1", file=sys.stderr)
        return 2
    if args.duration is not None and args.duration <= 0:
        print("troupe bench: --duration must be positive", file=sys.stderr)
        return 2
    if args.plot:
        from .plots import require_matplotlib

        try:
            require_matplotlib()
        except RuntimeError as exc:
            print(f"troupe bench: {exc}", file=sys.stderr)
            return 2
    try:
        report = run_async(_bench(args))
    except KeyboardInterrupt:
        print("troupe bench: interrupted", file=sys.stderr)
        return 130
    from .report import run_table, write_report

    prefix = args.out or f"troupe-bench-{datetime.datetime.now(datetime.UTC):%Y%m%d-%H%M%S}"
    paths = write_report(report, prefix)
    if args.plot:
        from .plots import write_plots

        paths += write_plots(report, prefix)
    print(run_table(report["runs"]))
    for run_summary in report["runs"]:
        for kind, n in run_summary["errors"].items():
            example = run_summary["error_examples"].get(kind, "")
            print(f"{run_summary['label']}: {n} × {kind}: {example}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    return 0 if any(r["ok"] for r in report["runs"]) else 1


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    from .loadgen import LoadSpec, run_load
    from .progress import Progress
    from .report import build_report, summarize_run

    body = {"model": args.model, "input": args.input, **args.body, "stream": args.stream}
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    requests = args.requests if args.requests is not None else (None if args.duration is not None else 100)
    levels: list[tuple[int, float | None]] = (
        [(1, r) for r in args.rate] if args.rate else [(c, None) for c in args.concurrency]
    )
    summaries = []
    for concurrency, rate in levels:
        warmup = args.warmup if args.warmup is not None else min(concurrency if rate is None else 4, 16)
        spec = LoadSpec(
            concurrency=concurrency, rate=rate, requests=requests, duration_s=args.duration, warmup=warmup,
            timeout_s=args.timeout, max_in_flight=args.max_in_flight,
        )
        with Progress(spec.label, total=requests, duration_s=args.duration, warmup=warmup,
                      enabled=not args.quiet) as bar:
            run = await run_load(args.url, lambda _i: body, spec, headers=headers, on_result=bar.update)
        summaries.append(summarize_run(run))
    return build_report(summaries, base_url=args.url, model=args.model, stream=args.stream,
                        extra={"request": {"input": args.input, "body": args.body}})
