"""The console's JSON API over the in-process runtime (no Ray, no socket): filters, tenant
isolation, what an admin key sees, the step timeline, the live figures and the evaluation runs."""

from __future__ import annotations

import dataclasses
import fnmatch
import time
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import troupe.console
from tests.unit.test_store_contract import T0, conversation, make_record
from troupe.runtime import Runtime, RuntimeSettings
from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings
from troupe.storage import EvalResultRecord, EvalRunRecord, StepTrace

KEYS = {"sk-acme-123": "acme", "sk-beta-456": "beta"}
ADMIN = "sk-admin-789"
API = "/v1/troupe/console"


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


ACME, BETA, ADMIN_KEY = bearer("sk-acme-123"), bearer("sk-beta-456"), bearer(ADMIN)


@pytest.fixture
async def runtime(tmp_path) -> AsyncIterator[Runtime]:
    rt = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))
    now = time.time()
    traces = [
        StepTrace(response_id="resp_a1", seq=0, kind="model", name="gpt-test", started_at=now - 2, duration_s=0.1),
        *(
            StepTrace(response_id="resp_a1", seq=i, kind="tool", name="sleep", call_id=f"call_{i}",
                      started_at=now - 1.8, duration_s=0.2 + i / 10)
            for i in (1, 2, 3, 4)
        ),
        StepTrace(response_id="resp_a1", seq=5, kind="model", name="gpt-test", started_at=now - 1.15, duration_s=0.1),
    ]  # fmt: skip
    await rt.store.create_conversation("acme", conversation("conv_a"), [])
    for record in (
        make_record("resp_a1", tenant="acme", created_at=T0, model="m1", traces=traces, conversation="conv_a"),
        make_record("resp_a2", tenant="acme", created_at=T0 + 10, model="m2", status="failed", conversation="conv_a"),
        make_record("resp_b1", tenant="beta", created_at=T0 + 5, model="m1"),
    ):
        # Ended a second ago: inside the live window.
        await rt.store.write_response(dataclasses.replace(record, started_at=now - 2, ended_at=now - 1))
    yield rt
    await rt.close()


def client_of(runtime: Runtime, **settings) -> httpx.AsyncClient:
    app = create_app(lambda: runtime, ServerSettings(**settings))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test")


@pytest.fixture
async def keyed(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(runtime, api_keys=KEYS, admin_keys=(ADMIN,)) as client:
        yield client


@pytest.fixture
async def open_server(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(runtime) as client:
        yield client


async def ids(client: httpx.AsyncClient, headers: dict[str, str], **params) -> list[str]:
    reply = await client.get(f"{API}/responses", params=params, headers=headers)
    assert reply.status_code == 200, reply.text
    return [r["id"] for r in reply.json()["data"]]


async def test_the_page_needs_no_key_and_the_data_does(keyed: httpx.AsyncClient) -> None:
    page = await keyed.get("/console")
    assert page.status_code == 200 and "console/static/console.js" in page.text
    script = await keyed.get("/console/static/console.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert (await keyed.get("/console/static/console.css")).status_code == 200
    assert (await keyed.get("/console/static/..%2Fapi.py")).status_code == 404
    refused = await keyed.get(f"{API}/responses")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert (await keyed.get(f"{API}/responses", headers=bearer("sk-wrong-key"))).status_code == 401


async def test_who_is_looking(keyed: httpx.AsyncClient, open_server: httpx.AsyncClient) -> None:
    assert (await keyed.get(f"{API}/me", headers=ACME)).json() == {"tenant": "acme", "admin": False, "keys": True}
    assert (await keyed.get(f"{API}/me", headers=ADMIN_KEY)).json() == {"tenant": "", "admin": True, "keys": True}
    assert (await open_server.get(f"{API}/me")).json() == {"tenant": "", "admin": False, "keys": False}


async def test_a_tenant_sees_its_own_responses_only(keyed: httpx.AsyncClient) -> None:
    assert await ids(keyed, ACME) == ["resp_a2", "resp_a1"]
    assert await ids(keyed, BETA) == ["resp_b1"]
    assert await ids(keyed, ACME, tenant="acme") == ["resp_a2", "resp_a1"]
    refused = await keyed.get(f"{API}/responses", params={"tenant": "beta"}, headers=ACME)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    # Another tenant's objects look like unknown ones.
    assert (await keyed.get(f"{API}/responses/resp_b1", headers=ACME)).status_code == 404
    assert (await keyed.get(f"{API}/responses/resp_b1", params={"tenant": "beta"}, headers=ACME)).status_code == 403
    assert (await keyed.get(f"{API}/threads/conv_a", headers=BETA)).status_code == 404
    stats = (await keyed.get(f"{API}/stats", headers=BETA)).json()
    assert stats["responses"] == 1 and stats["by_status"] == {"completed": 1}


async def test_an_admin_key_sees_every_tenant(keyed: httpx.AsyncClient) -> None:
    everyone = (await keyed.get(f"{API}/responses", headers=ADMIN_KEY)).json()["data"]
    assert [(r["tenant"], r["id"]) for r in everyone] == [("acme", "resp_a2"), ("beta", "resp_b1"), ("acme", "resp_a1")]
    assert await ids(keyed, ADMIN_KEY, tenant="beta") == ["resp_b1"]
    assert await ids(keyed, ADMIN_KEY, tenant="") == []
    # Without a tenant named, an object is found in whichever tenant has it.
    one = (await keyed.get(f"{API}/responses/resp_b1", headers=ADMIN_KEY)).json()
    assert (one["tenant"], one["response"]["id"]) == ("beta", "resp_b1")
    acme_only = await keyed.get(f"{API}/responses/resp_b1", params={"tenant": "acme"}, headers=ADMIN_KEY)
    assert acme_only.status_code == 404
    assert (await keyed.get(f"{API}/threads/conv_a", headers=ADMIN_KEY)).json()["tenant"] == "acme"
    assert (await keyed.get(f"{API}/stats", headers=ADMIN_KEY)).json()["responses"] == 3


async def test_filters(keyed: httpx.AsyncClient) -> None:
    assert await ids(keyed, ADMIN_KEY, model="m1") == ["resp_b1", "resp_a1"]
    assert await ids(keyed, ADMIN_KEY, status="failed") == ["resp_a2"]
    assert await ids(keyed, ADMIN_KEY, since=T0 + 5) == ["resp_a2", "resp_b1"]
    assert await ids(keyed, ADMIN_KEY, since=T0 + 1, until=T0 + 10) == ["resp_b1"]
    assert await ids(keyed, ACME, model="m1", status="completed") == ["resp_a1"]
    assert await ids(keyed, ADMIN_KEY, model="", status="") == ["resp_a2", "resp_b1", "resp_a1"]  # empty: any
    first = (await keyed.get(f"{API}/responses", params={"limit": 2}, headers=ADMIN_KEY)).json()
    assert first["has_more"] and first["last_id"] == "resp_b1"
    assert await ids(keyed, ADMIN_KEY, limit=2, after="resp_b1") == ["resp_a1"]
    bad = await keyed.get(f"{API}/responses", params={"limit": 0}, headers=ADMIN_KEY)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"
    for param, value in (("status", "done"), ("since", "yesterday"), ("until", "nan"), ("limit", "2.0")):
        bad = await keyed.get(f"{API}/responses", params={param: value}, headers=ADMIN_KEY)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, (param, value)


async def test_one_response_with_its_items_and_timeline(keyed: httpx.AsyncClient) -> None:
    data = (await keyed.get(f"{API}/responses/resp_a1", headers=ACME)).json()
    assert data["tenant"] == "acme" and data["summary"]["model"] == "m1"
    assert [i["id"] for i in data["input_items"]] == ["msg_resp_a1_in"] and data["more_input_items"] is False
    assert [i["id"] for i in data["response"]["output"]] == ["msg_resp_a1_out"]
    bars = data["timeline"]
    assert [(b["seq"], b["kind"], b["critical"]) for b in bars] == [
        (0, "model", True), (1, "tool", False), (2, "tool", False), (3, "tool", False), (4, "tool", True),
        (5, "model", True),
    ]  # fmt: skip
    tools = [b for b in bars if b["kind"] == "tool"]
    assert max(b["start_s"] for b in tools) < min(b["end_s"] for b in tools)  # side by side
    assert (await keyed.get(f"{API}/responses/resp_missing", headers=ACME)).status_code == 404


async def test_a_conversation_in_order(keyed: httpx.AsyncClient) -> None:
    data = (await keyed.get(f"{API}/threads/conv_a", headers=ACME)).json()
    assert data["thread_id"] == "conv_a"
    assert [t["summary"]["id"] for t in data["turns"]] == ["resp_a1", "resp_a2"]
    assert [i["id"] for i in data["turns"][1]["input_items"]] == ["msg_resp_a2_in"]
    assert [i["id"] for i in data["turns"][1]["output_items"]] == ["msg_resp_a2_out"]


async def test_live_figures_of_the_window(keyed: httpx.AsyncClient) -> None:
    stats = (await keyed.get(f"{API}/stats", params={"window_s": 30}, headers=ACME)).json()
    assert (stats["window_s"], stats["responses"], stats["errors"]) == (30, 2, 1)
    assert stats["requests_per_s"] == pytest.approx(2 / 30) and stats["error_rate"] == 0.5
    assert stats["ttft_p50_s"] == 0.5 and stats["e2e_p99_s"] == pytest.approx(1.0)
    assert stats["threads"] == 1  # both in conv_a
    assert stats["source"] == "stored responses"
    assert (await keyed.get(f"{API}/stats", params={"window_s": 0}, headers=ACME)).status_code == 400


async def _two_eval_runs(runtime: Runtime) -> None:
    for run_id, passing in (("run_a", {"c1", "c2"}), ("run_b", {"c1", "c3"})):
        await runtime.store.put_eval_run(EvalRunRecord(run_id=run_id, created_at=T0, dataset="cases.jsonl", cases=3))
        await runtime.store.write_eval_results([
            EvalResultRecord(run_id=run_id, case_id=case, sample=0, passed=case in passing, tags=tags)
            for case, tags in (("c1", ["math"]), ("c2", ["math", "tools"]), ("c3", ["tools"]))
        ])  # fmt: skip


async def test_eval_runs_pass_rate_per_tag_and_comparison(runtime: Runtime, keyed: httpx.AsyncClient) -> None:
    await _two_eval_runs(runtime)
    runs = (await keyed.get(f"{API}/evals", headers=ADMIN_KEY)).json()["data"]
    assert sorted(r["run_id"] for r in runs) == ["run_a", "run_b"]
    one = (await keyed.get(f"{API}/evals/run_a", headers=ADMIN_KEY)).json()
    assert one["run"]["dataset"] == "cases.jsonl"
    by_tag = {t["tag"]: (t["passed"], t["results"]) for t in one["summary"]["by_tag"]}
    assert by_tag == {"math": (2, 2), "tools": (1, 2)}
    compared = (await keyed.get(f"{API}/evals/compare", params={"a": "run_a", "b": "run_b"}, headers=ADMIN_KEY)).json()
    rates = {t["tag"]: (t["a"]["rate"], t["b"]["rate"]) for t in compared["tags"]}
    assert rates == {"math": (1.0, 0.5), "tools": (0.5, 0.5)}
    assert {c["case_id"]: c["change"] for c in compared["cases"]} == {"c1": "same", "c2": "regressed", "c3": "improved"}
    assert (await keyed.get(f"{API}/evals/run_missing", headers=ADMIN_KEY)).status_code == 404


async def test_eval_runs_need_an_admin_key_once_tenants_have_keys(
    runtime: Runtime, keyed: httpx.AsyncClient, open_server: httpx.AsyncClient
) -> None:
    await _two_eval_runs(runtime)
    refused = await keyed.get(f"{API}/evals", headers=ACME)
    assert refused.status_code == 403
    assert (await keyed.get(f"{API}/evals/run_a", headers=ACME)).status_code == 403
    assert (await open_server.get(f"{API}/evals")).status_code == 200


async def test_with_no_keys_the_console_is_open_as_the_api_is(open_server: httpx.AsyncClient) -> None:
    # Everyone is tenant "", as in the API: the keyed tenants' history is not theirs.
    assert await ids(open_server, {}) == []
    assert (await open_server.get(f"{API}/responses", params={"tenant": "acme"})).status_code == 403


def test_every_console_file_ships_in_the_package() -> None:
    # The page has no build step: the wheel and sdist carry static/ as is (pyproject's package-data).
    root = Path(__file__).resolve().parents[2]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["troupe.console"]
    package = Path(troupe.console.__file__).parent
    files = [p.relative_to(package).as_posix() for p in (package / "static").iterdir()]
    assert sorted(files) == ["static/console.css", "static/console.html", "static/console.js"]
    assert all(any(fnmatch.fnmatch(f, pattern) for pattern in patterns) for f in files)
