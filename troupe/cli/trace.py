"""``troupe trace``: a response's step timeline, for a terminal, and as a PNG Gantt chart.

The steps come from a running server over HTTP (``GET /v1/responses/{id}/step_traces``, the
tenant's API key) by default, or from the DuckDB file with ``--db`` when no server holds it.
They print as a table, critical path marked; ``--png`` draws the console's Gantt chart.

Example::

    troupe trace resp_… --png trace.png
    troupe trace resp_… --db troupe.duckdb
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from ._common import fail

if TYPE_CHECKING:
    from troupe.storage import StepTrace

__all__ = ["trace"]


@click.command(
    short_help="Show a response's step timeline (model and tool calls), as a table or a PNG Gantt chart.",
    epilog="""\b
Examples:
  troupe trace resp_0123 --png trace.png
  troupe trace resp_0123 --url http://10.0.0.5:8000/v1 --api-key sk-alice-123
  troupe trace resp_0123 --db troupe.duckdb --png trace.png    # no server running
""",
)
@click.argument("response_id", metavar="RESPONSE_ID")
@click.option("--png", "png", metavar="FILE", help="Also draw the timeline as a Gantt chart into this PNG file.")
@click.option("--url", default="http://127.0.0.1:8000/v1", help="API root of the running server.")
@click.option("--api-key", envvar="TROUPE_API_KEY", show_envvar=True, metavar="KEY",
              help="The response's tenant's API key, when the server has keys.")  # fmt: skip
@click.option("--db", metavar="PATH",
              help="Read the DuckDB file instead of asking a server (which must not be running on it).")  # fmt: skip
@click.option("--tenant", metavar="TENANT", help="With --db: the response's tenant (default: whichever has it).")
def trace(response_id: str, png: str | None, url: str, api_key: str | None, db: str | None, tenant: str | None) -> int:
    """Show RESPONSE_ID's step timeline: each model call and tool call with its start and
    duration, the critical path (the steps that set the response's length) marked, parallel
    tool calls side by side; with --png, the same Gantt chart as the console's at /console.

    The steps come from the running server at --url (GET /v1/responses/{id}/step_traces with
    the tenant's API key), or, with --db, straight from the DuckDB file when no server holds it
    (DuckDB lets one process open a file).
    """
    from troupe.console.timeline import timeline

    traces = _from_file(db, response_id, tenant) if db is not None else _from_server(url, api_key, response_id)
    bars = timeline(traces)
    if not bars:
        fail("trace", f"response {response_id!r} has no step traces")
    click.echo(_table(response_id, bars))
    if png is not None:
        from troupe._charts import ChartsUnavailable
        from troupe.console.plot import timeline_figure

        try:
            timeline_figure(bars, title=response_id).savefig(png, dpi=120)
        except ChartsUnavailable as exc:
            fail("trace", str(exc))
        except OSError as exc:
            fail("trace", f"cannot write {png!r}: {exc.strerror}")
        click.echo(f"wrote {png}")
    return 0


def _from_server(url: str, api_key: str | None, response_id: str) -> list[StepTrace]:
    import httpx

    from troupe.console.timeline import traces_from_json

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    target = f"{url.rstrip('/')}/responses/{response_id}/step_traces"
    try:
        reply = httpx.get(target, headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        fail("trace", f"cannot reach {url} ({exc}); with no server running, read the file with --db")
    if reply.status_code != 200:
        try:
            message = reply.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = reply.text[:200]
        fail("trace", f"{reply.status_code} from {target}: {message}")
    return traces_from_json(reply.json())


def _from_file(path: str, response_id: str, tenant: str | None) -> list[StepTrace]:
    if not os.path.exists(path):
        fail("trace", f"no database at {path!r}")
    from troupe.storage import DuckDBStore, ResponseFilter, StorageError

    try:
        store = DuckDBStore(path)
    except StorageError as exc:
        fail("trace", f"{exc} (a server running on it holds the file: ask it with --url)")
    try:
        if tenant is None:
            found = store.find_responses(ResponseFilter(id=response_id), limit=1).data
            if not found:
                fail("trace", f"no response {response_id!r} in {path}")
            tenant = found[0].tenant
        return store.step_traces(tenant, response_id)
    finally:
        store.close()


def _table(response_id: str, bars: list) -> str:
    from troupe.tables import format_table

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.1f} ms"

    critical = [b for b in bars if b.critical]
    header = (
        f"{response_id}: {len(bars)} steps over {ms(max(b.end_s for b in bars))}; "
        f"critical path {len(critical)} steps, {ms(sum(b.end_s - b.start_s for b in critical))} of work (*)"
    )
    rows = [
        (b.seq, b.kind, b.name, "+" + ms(b.start_s), ms(b.end_s - b.start_s), "*" if b.critical else "", b.error or "")
        for b in bars
    ]
    return header + "\n" + format_table(["#", "kind", "name", "start", "duration", "critical", "error"], rows, null="")
