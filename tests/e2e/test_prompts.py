"""Stored prompts through the ``openai`` SDK over HTTP: the Prompts API (``/v1/prompts``, which the
SDK has no resource for, so ``client.post``/``get``/``delete``), and ``prompt`` on a response.

What the client sees runs on ``client`` (every deployment, tests/e2e/conftest.py) or on the
in-process app; what goes *upstream* is checked on an app whose model is a recording wrapper of
the sim server (the chat messages the model server was sent), with two API keys for tenants.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.servers import RecordingUpstream, serve_app, served_local
from troupe.runtime.settings import ModelSpec
from troupe.serve.config import ServerSettings
from troupe.sim.model import SimSettings
from troupe.sim.server import create_sim_app

KEYS = {"sk-alice": "alice", "sk-bob": "bob"}


def post(client: OpenAI, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.post(path, body=body, cast_to=httpx.Response).json()


def get(client: OpenAI, path: str, **query: Any) -> dict[str, Any]:
    return client.get(path, options={"params": query}, cast_to=httpx.Response).json()


def error_of(raised: pytest.ExceptionInfo[openai.APIStatusError]) -> tuple[int, str | None, str | None]:
    error = raised.value.body
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
    return raised.value.status_code, error["param"], error["code"]


@pytest.fixture
def local(local_url: str) -> OpenAI:
    return OpenAI(base_url=f"{local_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[str, RecordingUpstream]]:
    """A keyed app (two tenants) whose model ``upstream`` is the sim server behind a recorder."""
    upstream = RecordingUpstream(create_sim_app(SimSettings()))
    with serve_app(upstream) as upstream_url:
        models = (ModelSpec(name="upstream", kind="openai", base_url=f"{upstream_url}/v1"),)
        for url in served_local(ServerSettings(api_keys=KEYS), models=models):
            yield url, upstream


def keyed(url: str, key: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


# -- the Prompts API --------------------------------------------------------------------------


def test_prompts_are_created_versioned_and_deleted(local: OpenAI) -> None:
    created = post(local, "/prompts", {"prompt": "You answer questions about {{product}} in {{language}}."})
    pid = created["id"]
    assert pid.startswith("pmpt_") and len(pid) == 53
    assert {k: created[k] for k in ("object", "version", "variables", "is_default", "messages")} == {
        "object": "prompt", "version": 1, "variables": ["product", "language"], "is_default": True, "messages": []}  # fmt: skip
    assert get(local, f"/prompts/{pid}") == created

    second = post(local, f"/prompts/{pid}", {"prompt": "Answer about {{product}}, briefly.", "version": 1})
    assert (second["version"], second["variables"], second["is_default"]) == (2, ["product"], True)
    # Another client still looking at version 1 cannot overwrite version 2.
    with pytest.raises(openai.ConflictError) as raised:
        post(local, f"/prompts/{pid}", {"prompt": "Mine!", "version": 1})
    assert error_of(raised) == (409, "version", "version_conflict")
    assert "version 2 is" in raised.value.message
    assert raised.value.response.headers["x-should-retry"] == "false"

    draft = post(local, f"/prompts/{pid}", {"prompt": "Draft {{product}}", "version": 2, "set_as_default": False})
    assert get(local, f"/prompts/{pid}")["version"] == 2, "a draft is not the default"
    assert get(local, f"/prompts/{pid}", version=3) == draft
    versions = get(local, f"/prompts/{pid}/versions")
    assert [(v["version"], v["is_default"]) for v in versions["data"]] == [(1, False), (2, True), (3, False)]
    assert post(local, f"/prompts/{pid}/set-default-version", {"version": 1})["is_default"] is True
    assert get(local, f"/prompts/{pid}")["prompt"] == created["prompt"]
    assert pid in [p["id"] for p in get(local, "/prompts", limit=100)["data"]]

    for path, query, param in ((f"/prompts/{pid}", {"version": 9}, "version"), ("/prompts/pmpt_nope", {}, "prompt_id")):
        with pytest.raises(openai.NotFoundError) as raised:
            get(local, path, **query)
        assert error_of(raised)[1] == param
    with pytest.raises(openai.NotFoundError):
        post(local, f"/prompts/{pid}/set-default-version", {"version": 9})
    assert local.delete(f"/prompts/{pid}", cast_to=httpx.Response).json() == {
        "id": pid, "object": "prompt.deleted", "deleted": True}  # fmt: skip
    with pytest.raises(openai.NotFoundError):
        get(local, f"/prompts/{pid}/versions")


def test_a_bad_prompt_body_is_a_400_naming_the_field(local: OpenAI) -> None:
    for body, param in (
        ({"prompt": "Hi {{name}}", "variables": ["nmae"]}, "variables"),
        ({"messages": [{"role": "user", "content": [{"type": "input_text"}]}]}, "messages[0].content[0].text"),
        ({"prompt": "hi", "title": "x"}, "title"),
    ):
        with pytest.raises(openai.BadRequestError) as raised:
            post(local, "/prompts", body)
        assert error_of(raised)[:2] == (400, param), body
    with pytest.raises(openai.BadRequestError) as raised:
        get(local, "/prompts/prompt_1")
    assert error_of(raised)[1] == "prompt_id"


# -- prompt on a response -------------------------------------------------------------------


def test_a_response_runs_with_its_stored_prompt(client: OpenAI, url: str) -> None:
    prompt = post(client, "/prompts", {
        "prompt": "You are the support agent of {{company}}.",
        "messages": [{"role": "user", "content": "My order number is {{order}}."}],
    })  # fmt: skip
    reference = {"id": prompt["id"], "variables": {"company": "Acme", "order": "42"}}
    # The sim's [[history]] answers with every user message it was sent: the prompt's came first.
    response = client.responses.create(model="sim", prompt=reference, input="[[history]]", instructions="Be brief.")
    assert response.output_text == "My order number is 42. | [[history]]"
    assert response.prompt.to_dict() == {**reference, "version": "1"}
    developer, user = response.instructions
    assert (developer.role, developer.content[0].text) == ("developer", "You are the support agent of Acme.\n\nBe brief.")
    assert (user.role, user.content) == ("user", "My order number is 42.")
    assert client.responses.retrieve(response.id).to_dict() == response.to_dict()
    # The prompt is the response's own, like instructions: not input, not carried over.
    assert [i.content[0].text for i in client.responses.input_items.list(response.id).data] == ["[[history]]"]
    follow = client.responses.create(model="sim", previous_response_id=response.id, input="[[history]]")
    assert follow.output_text == "[[history]] | [[history]]" and follow.instructions is None

    # A stream announces the version used from its first event.
    with client.responses.stream(model="sim", prompt={**reference, "version": "1"}, input="[[say ok]]") as stream:
        first = next(iter(stream))
        final = stream.get_final_response()
    assert first.type == "response.created" and first.response.prompt.version == "1"
    assert final.output_text == "ok" and len(final.instructions) == 2


def test_a_prompt_that_does_not_resolve_is_refused_naming_it(local: OpenAI) -> None:
    pid = post(local, "/prompts", {"prompt": "Greet {{name}} from {{city}}."})["id"]
    cases = [
        ({"id": "pmpt_0123"}, openai.NotFoundError, (404, "prompt", "not_found")),
        ({"id": pid, "version": "7"}, openai.NotFoundError, (404, "prompt.version", "not_found")),
        ({"id": pid, "variables": {"name": "Ada"}}, openai.BadRequestError,
         (400, "prompt.variables", "missing_required_parameter")),
        ({"id": pid, "variables": {"name": "Ada", "city": "Paris", "cty": "Paris"}}, openai.BadRequestError,
         (400, "prompt.variables.cty", "invalid_value")),
        ({"id": "prompt-1"}, openai.BadRequestError, (400, "prompt.id", "invalid_value")),
    ]  # fmt: skip
    stored = len(get(local, "/responses", limit=100)["data"])
    for reference, kind, expected in cases:
        with pytest.raises(kind) as raised:
            local.responses.create(model="sim", prompt=reference, input="hi")
        assert error_of(raised) == expected, reference
    assert len(get(local, "/responses", limit=100)["data"]) == stored, "nothing ran, nothing was stored"


def test_what_goes_upstream_is_the_prompt_then_the_thread(recorded: tuple[str, RecordingUpstream]) -> None:
    url, upstream = recorded
    alice, bob = keyed(url, "sk-alice"), keyed(url, "sk-bob")
    prompt = post(alice, "/prompts", {
        "prompt": "Describe images for {{audience}}.",
        "messages": [{"role": "user", "content": "Example: {{photo}}"}, {"role": "assistant", "content": "A cat."}],
    })  # fmt: skip
    photo = {"type": "input_image", "image_url": "https://example.com/cat.png"}
    reference = {"id": prompt["id"], "variables": {"audience": "children", "photo": photo}}
    upstream.bodies.clear()
    response = alice.responses.create(model="upstream", prompt=reference, instructions="One sentence.",
                                      input="[[say A dog.]]")  # fmt: skip
    assert response.output_text == "A dog."
    assert upstream.bodies[0]["messages"] == [
        {"role": "system", "content": "Describe images for children.\n\nOne sentence."},
        {"role": "user", "content": [{"type": "text", "text": "Example: "},
                                     {"type": "image_url", "image_url": {"url": photo["image_url"], "detail": "auto"}}]},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "[[say A dog.]]"},
    ]  # fmt: skip
    # Prompts are the tenant's: bob neither sees nor uses alice's.
    with pytest.raises(openai.NotFoundError) as raised:
        bob.responses.create(model="upstream", prompt=reference, input="hi")
    assert error_of(raised)[1] == "prompt"
    with pytest.raises(openai.NotFoundError):
        get(bob, f"/prompts/{prompt['id']}")
    assert get(bob, "/prompts")["data"] == []
    assert len(upstream.bodies) == 1, "a refused prompt never reaches the model"
