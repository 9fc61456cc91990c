"""``troupe sim``: the simulated model as a standalone OpenAI-compatible server (uvicorn).

Example::

    troupe sim --port 8001 --ttft-ms 200 --itl-ms 20
"""

from __future__ import annotations

import click

__all__ = ["sim"]


@click.command(
    short_help="Run the simulated model as an OpenAI-compatible server.",
    epilog="""\b
Examples:
  troupe sim
  troupe sim --port 8001 --ttft-ms 200 --itl-ms 20
then:
  curl -s localhost:8001/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model": "sim", "messages": [{"role": "user", "content": "[[say hi]]"}]}'
""",
)
@click.option("--host", default="127.0.0.1", help="Interface to bind.")
@click.option("--port", type=int, default=8001, help="TCP port to listen on.")
@click.option("--ttft-ms", type=float, default=0.0,
              help="Default time to first token, in milliseconds.")  # fmt: skip
@click.option("--itl-ms", type=float, default=0.0,
              help="Default pause between streamed tokens, in milliseconds.")  # fmt: skip
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug", "trace"]),
    default="info",
    help="Uvicorn log level.",
)
def sim(host: str, port: int, ttft_ms: float, itl_ms: float, log_level: str) -> int:
    """Serve the deterministic `sim` model over the OpenAI Chat Completions API
    (POST /v1/chat/completions, GET /v1/models, GET /health), and a stateless single-turn
    POST /v1/responses.

    It answers, calls tools and fails on cue from [[directives]] in the last user message,
    e.g. [[say TEXT]], [[call NAME {JSON}]], [[tokens N]], [[think TEXT]],
    [[fail STATUS once]], [[latency ttft=MS itl=MS]].
    """
    # Imported here so `troupe --help` stays fast and needs no server stack.
    import uvicorn

    from troupe.sim.model import SimSettings
    from troupe.sim.server import create_sim_app

    app = create_sim_app(SimSettings(ttft_ms=ttft_ms, itl_ms=itl_ms))
    uvicorn.run(app, host=host, port=port, log_level=log_level)
    return 0
