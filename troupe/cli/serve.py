"""``troupe serve``: the Responses and Conversations APIs on Ray Serve.

The configuration is read here and only here: :func:`load_settings` (used by ``troupe sql``
and ``troupe eval`` too) and :func:`with_flags`, which lays this command's flags over the
file's server settings. Ray and the deployment are imported when the command runs.

Example::

    troupe serve --port 8000 --config troupe.toml
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ._common import fail

if TYPE_CHECKING:
    from troupe.runtime.settings import RuntimeSettings
    from troupe.serve.config import ServerSettings

__all__ = ["serve", "load_settings", "with_flags"]


def load_settings(path: str | None, command: str) -> tuple[ServerSettings, RuntimeSettings]:
    """The server and runtime settings of the TOML file ``path`` (or $TROUPE_CONFIG, or the defaults).

    A configuration error ends ``troupe COMMAND`` with its message and status 2.
    """
    from troupe.serve.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        fail(command, str(exc), 2)


def with_flags(server: ServerSettings, **flags: Any) -> ServerSettings:
    """``server`` with every flag given on the command line (not None) in place of its setting."""
    given = {name: value for name, value in flags.items() if value is not None}
    return server.model_copy(update=given)


@click.command(
    short_help="Serve the OpenAI Responses and Conversations APIs on Ray Serve.",
    epilog="""\b
Examples:
  troupe serve
  troupe serve --port 9000 --config troupe.toml
  TROUPE_API_KEYS=sk-alice=alice troupe serve --address 10.0.0.5:6379
then:
  OpenAI(base_url='http://127.0.0.1:8000/v1', api_key='unused').responses.create(model='sim', input='[[say hi]]')
""",
)
@click.option("--host", help="Interface to bind (default 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), help="TCP port (default 8000).")
@click.option("--config", metavar="PATH", help="TOML configuration file (default: $TROUPE_CONFIG or none).")
@click.option("--address", metavar="RAY_ADDRESS", help="Join this Ray cluster instead of starting a local one.")
@click.option(
    "--ingress",
    type=click.Choice(["direct", "proxy"]),
    help="direct (default): the ingress replica serves --port itself; "
    "proxy: Serve's HTTP proxy serves --port and forwards over Ray.",
)
def serve(host: str | None, port: int | None, config: str | None, address: str | None, ingress: str | None) -> int:
    """Start Ray (a fresh local instance, or join --address), Ray Serve, and the Troupe API:
    POST /v1/responses with a server-side agent loop, the Conversations API, /v1/models, /health.

    Without --config the embedded defaults apply: the `sim` model, the example tools, history in
    ./troupe.duckdb, no API keys. Settings come from, lowest first: the defaults, the TOML file
    (see docs/troupe.example.toml), TROUPE_* environment variables, these flags.

    Stops on Ctrl-C or SIGTERM within a few seconds: new requests answer 503 with Retry-After,
    those in flight get [server] shutdown_grace_s (2 s) to finish, every stored response
    reaches DuckDB, then Ray stops. Background runs go on at the next start. After a crash,
    the same command starts again on the same port at once.
    """
    server, runtime = load_settings(config, "serve")
    server = with_flags(server, host=host, port=port, ray_address=address, ingress=ingress)
    spread = server.max_replicas_per_node
    if server.ray_address is None and spread is not None and spread < server.num_replicas:
        # A local instance is one node: Serve would wait for the other replicas' nodes forever.
        fail("serve", f"[server] max_replicas_per_node = {spread} leaves {server.num_replicas - spread} of "
             f"num_replicas = {server.num_replicas} without a node: a local Ray instance is one node "
             "(set it when joining a cluster with --address)", 2)  # fmt: skip

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
        fail("serve", str(exc), 2)
    # Ray is down. The interpreter's last garbage collections would walk every object Ray and
    # Serve made in this process (seconds on a busy machine, after the stop itself); frozen,
    # they are not walked, and the process exits at once.
    import gc

    gc.freeze()
    return 0
