"""What the console's Webhooks view (``#/webhooks``, troupe/console/static/console.js) relies on
of the API, over the in-process runtime (no Ray, no socket): it reads ``GET /v1/webhook_endpoints``
and ``…/{id}/deliveries`` with the console's own key, so it sees the key's tenant's endpoints only;
an admin key is tenant ``""`` there while tenants have no keys and is refused (401) once they have,
which is why the view then asks for a tenant's key rather than calling the API. The page itself,
in a browser: tests/e2e/test_console_browser.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import WebhookSettings
from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings
from troupe.storage.credentials import new_key

ADMIN = "sk-admin-789"
ACME = {"authorization": "Bearer sk-acme-123"}
ADMIN_KEY = {"authorization": f"Bearer {ADMIN}"}
HOOK = {"name": "ci", "url": "http://127.0.0.1:9/hook", "event_types": ["response.completed"]}


@pytest.fixture
async def runtime(tmp_path) -> AsyncIterator[Runtime]:
    settings = RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), credentials_keys=(new_key(),),
                               webhooks=WebhookSettings(allowed_urls=("http://127.0.0.1:*",)))  # fmt: skip
    rt = Runtime.local(settings)
    yield rt
    await rt.close()


def client_of(runtime: Runtime, **settings) -> httpx.AsyncClient:
    app = create_app(lambda: runtime, ServerSettings(**settings))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test")


async def test_the_page_has_the_webhooks_view(runtime: Runtime) -> None:
    async with client_of(runtime) as client:
        page = (await client.get("/console")).text
        script = (await client.get("/console/static/console.js")).text
    assert '<a href="#/webhooks" data-nav="webhooks">Webhooks</a>' in page
    assert '"/webhook_endpoints"' in script and "/deliveries`" in script and "#/webhooks/ID" in script


async def test_a_tenants_key_reads_its_own_endpoints_and_an_admin_key_none(runtime: Runtime) -> None:
    async with client_of(runtime, api_keys={"sk-acme-123": "acme"}, admin_keys=(ADMIN,)) as client:
        made = (await client.post("/v1/webhook_endpoints", json=HOOK, headers=ACME)).json()
        listed = (await client.get("/v1/webhook_endpoints", headers=ACME)).json()
        assert [e["id"] for e in listed["data"]] == [made["id"]]
        log = (await client.get(f"/v1/webhook_endpoints/{made['id']}/deliveries", headers=ACME)).json()
        assert (log["object"], log["data"]) == ("list", [])
        # The console knows the admin key (its /me) while the webhook API refuses it: the view
        # must not call the API then (a 401 would send the page to its key prompt).
        me = (await client.get("/v1/troupe/console/me", headers=ADMIN_KEY)).json()
        assert me == {"tenant": "", "admin": True, "keys": True}
        assert (await client.get("/v1/webhook_endpoints", headers=ADMIN_KEY)).status_code == 401


async def test_with_admin_keys_only_an_admin_key_reads_tenant_empty(runtime: Runtime) -> None:
    async with client_of(runtime, admin_keys=(ADMIN,)) as client:
        made = (await client.post("/v1/webhook_endpoints", json=HOOK)).json()
        me = (await client.get("/v1/troupe/console/me", headers=ADMIN_KEY)).json()
        assert me == {"tenant": "", "admin": True, "keys": False}
        listed = (await client.get("/v1/webhook_endpoints", headers=ADMIN_KEY)).json()
        assert [e["id"] for e in listed["data"]] == [made["id"]]
