"""Stored prompts without Ray or HTTP: the Prompts API's bodies, substitution, the errors that name
the field, what goes upstream (a scripted model records it), and the runtime's lookups."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes import ScriptedModel, text_turn
from troupe.agentloop.driver import LoopSettings, prepare, run_loop
from troupe.agentloop.writer import WireWriter
from troupe.protocol import InvalidRequest, NotFound, ProtocolError, parse_create_request
from troupe.protocol.prompts import (
    parse_prompt_create,
    parse_prompt_update,
    parse_set_default_version,
    prompt_object,
    resolve_prompt,
)
from troupe.runtime import Runtime, RuntimeSettings

PHOTO = {"type": "input_image", "image_url": "https://example.com/cat.png"}


def stored(text: str | None, *, messages: list[dict[str, Any]] | None = None, version: int = 3,
           variables: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A prompt object as the store answers it, made from a create body."""
    body: dict[str, Any] = {"prompt": text, "messages": messages}
    if variables is not None:
        body["variables"] = variables
    return prompt_object("pmpt_abc", version, 0, parse_prompt_create(body), is_default=True)


def resolved(prompt: dict[str, Any], variables: dict[str, Any] | None = None, **body: Any) -> Any:
    reference = {"id": prompt["id"], **({"variables": variables} if variables is not None else {})}
    return resolve_prompt(parse_create_request({"model": "sim", "prompt": reference, **body}), prompt)


def refused(call: Any, *args: Any, **kwargs: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        call(*args, **kwargs)
    return raised.value


# -- the Prompts API's bodies ------------------------------------------------------------------


def test_variables_left_out_are_the_placeholders_in_order_of_use() -> None:
    content = parse_prompt_create({
        "prompt": "You work for {{ company }}. Answer in {{language}}; {{company}} again; {{not a var}} {{}}",
        "messages": [{"role": "user", "content": [{"type": "input_text", "text": "About {{topic}}"}, PHOTO]}],
    })  # fmt: skip
    assert content["variables"] == ["company", "language", "topic"]
    assert content["messages"] == [{"type": "message", "role": "user",
                                    "content": [{"type": "input_text", "text": "About {{topic}}"}, PHOTO]}]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "prompt", "missing_required_parameter"),
        ({"prompt": "", "messages": []}, "prompt", "missing_required_parameter"),
        ({"prompt": 42}, "prompt", "invalid_type"),
        ({"prompt": "hi", "name": "x"}, "name", "unknown_parameter"),
        ({"prompt": "Hi {{name}}", "variables": ["nme"]}, "variables", "invalid_value"),
        ({"prompt": "hi", "variables": ["ok", "9lives"]}, "variables[1]", "invalid_value"),
        ({"prompt": "hi", "variables": ["a", "a"]}, "variables[1]", "invalid_value"),
        ({"prompt": "hi", "variables": "a"}, "variables", "invalid_type"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]},
         "messages[0].type", "invalid_value"),
    ],
)  # fmt: skip
def test_a_bad_prompt_body_is_a_400_naming_the_field(body: dict[str, Any], param: str, code: str) -> None:
    error = refused(parse_prompt_create, body)
    assert (error.status, error.param, error.code) == (400, param, code)


def test_an_update_names_the_version_it_follows_and_may_leave_the_default_alone() -> None:
    content, version, default = parse_prompt_update({"prompt": "v2 {{x}}", "version": 1})
    assert (content["variables"], version, default) == (["x"], 1, True)
    assert parse_prompt_update({"prompt": "v2", "version": 4, "set_as_default": False})[1:] == (4, False)
    for body, param, code in (
        ({"prompt": "v2"}, "version", "missing_required_parameter"),
        ({"prompt": "v2", "version": True}, "version", "invalid_type"),
        ({"prompt": "v2", "version": 0}, "version", "invalid_value"),
        ({"prompt": "v2", "version": 1, "set_as_default": "yes"}, "set_as_default", "invalid_type"),
    ):
        error = refused(parse_prompt_update, body)
        assert (error.param, error.code) == (param, code), body
    assert parse_set_default_version({"version": 2}) == 2
    assert refused(parse_set_default_version, {"version": "2"}).param == "version"


# -- a response's prompt reference -------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "param"),
    [({"id": "prompt_1"}, "prompt.id"), ({"id": "pmpt_1", "version": "latest"}, "prompt.version"),
     ({"id": "pmpt_1", "version": "0"}, "prompt.version"), ({"id": "pmpt_1", "version": 2**31}, "prompt.version"),
     ({"id": "pmpt_1", "variables": {"x": 1}}, "prompt.variables.x"), ({"version": "1"}, "prompt.id")],
)  # fmt: skip
def test_a_malformed_prompt_reference_is_a_400_before_anything_runs(reference: dict[str, Any], param: str) -> None:
    error = refused(parse_create_request, {"model": "sim", "prompt": reference})
    assert (error.status, error.param) == (400, param)


def test_a_version_may_be_a_string_as_the_sdk_types_it_or_a_number_as_the_prompts_api_does() -> None:
    assert parse_create_request({"model": "sim", "prompt": {"id": "pmpt_1", "version": "2"}}).prompt["version"] == "2"
    assert parse_create_request({"model": "sim", "prompt": {"id": "pmpt_1", "version": 2}}).prompt["version"] == 2


# -- substitution ------------------------------------------------------------------------------


def test_strings_and_input_text_fill_the_text_and_the_request_instructions_follow_it() -> None:
    prompt = stored("You work for {{company}}. Answer in {{language}}.")
    request = resolved(prompt, {"company": "Acme", "language": {"type": "input_text", "text": "French"}},
                       instructions="Be brief.")  # fmt: skip
    assert request.prelude == [{"type": "message", "role": "developer", "content": [
        {"type": "input_text", "text": "You work for Acme. Answer in French.\n\nBe brief."}]}]  # fmt: skip
    # The reference is echoed with the version used, a string as the SDK types it.
    assert request.prompt == {"id": "pmpt_abc", "variables": {"company": "Acme",
                              "language": {"type": "input_text", "text": "French"}}, "version": "3"}  # fmt: skip
    assert request.instructions == "Be brief.", "the request as the client sent it (a resumed run resolves it again)"


def test_substitution_is_one_pass_and_a_value_placeholder_stays_as_written() -> None:
    prompt = stored("Echo {{a}} and {{b}}.")
    text = resolved(prompt, {"a": "{{b}}", "b": "two"}).prelude[0]["content"][0]["text"]
    assert text == "Echo {{b}} and two."


def test_a_prompt_of_messages_only_puts_the_instructions_first() -> None:
    prompt = stored(None, messages=[{"role": "user", "content": "Translate: {{text}}"},
                                    {"role": "assistant", "content": "Sure."}])  # fmt: skip
    request = resolved(prompt, {"text": "hola"}, instructions="Only the translation.")
    assert [(m["role"], m["content"]) for m in request.prelude] == [
        ("developer", [{"type": "input_text", "text": "Only the translation."}]),
        ("user", "Translate: hola"),
        ("assistant", "Sure."),
    ]
    assert [m["role"] for m in resolved(prompt, {"text": "hola"}).prelude] == ["user", "assistant"]


def test_an_image_variable_splits_a_user_message_into_parts() -> None:
    prompt = stored("Describe images.", messages=[
        {"role": "user", "content": "Look at {{photo}} closely"},
        {"role": "user", "content": [{"type": "input_text", "text": "{{photo}}"}, {"type": "input_text", "text": "!"}]},
    ])  # fmt: skip
    request = resolved(prompt, {"photo": PHOTO})
    image = {**PHOTO, "detail": "auto"}
    assert request.prelude[1]["content"] == [
        {"type": "input_text", "text": "Look at "}, image, {"type": "input_text", "text": " closely"}]  # fmt: skip
    assert request.prelude[2]["content"] == [image, {"type": "input_text", "text": "!"}]


@pytest.mark.parametrize(
    ("prompt", "variables", "param", "code"),
    [
        (stored("Hi {{name}} from {{city}}"), {"name": "Ada"}, "prompt.variables", "missing_required_parameter"),
        (stored("Hi {{name}}"), {"name": "Ada", "nmae": "Ada"}, "prompt.variables.nmae", "invalid_value"),
        (stored("Hi {{name}}"), None, "prompt.variables", "missing_required_parameter"),
        (stored("See {{photo}}"), {"photo": PHOTO}, "prompt.variables.photo", "invalid_value"),
        (stored("x", messages=[{"role": "system", "content": "See {{photo}}"}]), {"photo": PHOTO},
         "prompt.variables.photo", "invalid_value"),
    ],
)  # fmt: skip
def test_a_variable_missing_unknown_or_out_of_place_is_a_400_naming_it(
    prompt: dict[str, Any], variables: dict[str, Any] | None, param: str, code: str
) -> None:
    error = refused(resolved, prompt, variables)
    assert (error.status, error.param, error.code) == (400, param, code)
    assert "pmpt_abc" in error.message and "version 3" in error.message


def test_the_response_echoes_the_prelude_as_its_instructions() -> None:
    request = resolved(stored("Answer in {{language}}."), {"language": "French"}, instructions="Be brief.")
    response = WireWriter(request, response_id="resp_1", created_at=0).response
    assert response["instructions"] == request.prelude
    assert response["prompt"]["version"] == "3"
    plain = WireWriter(parse_create_request({"model": "sim", "instructions": "Be brief."}), response_id="resp_2",
                       created_at=0).response  # fmt: skip
    assert plain["instructions"] == "Be brief.", "without a prompt, as before"


# -- what goes upstream --------------------------------------------------------------------------


async def test_the_prelude_goes_upstream_before_the_history_and_the_input() -> None:
    prompt = stored("You work for {{company}}.", messages=[{"role": "user", "content": "Example: {{photo}}"},
                                                           {"role": "assistant", "content": "A cat."}])  # fmt: skip
    request = resolved(prompt, {"company": "Acme", "photo": PHOTO}, instructions="Be brief.", input="And this?")
    history = [{"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    model = ScriptedModel(text_turn("A dog."))
    events = run_loop(prepare(request, history), model=model, executors=[], settings=LoopSettings())
    async for _ in events:
        pass
    assert model.calls[0].messages == [
        {"role": "system", "content": "You work for Acme.\n\nBe brief."},
        {"role": "user", "content": [{"type": "text", "text": "Example: "},
                                     {"type": "image_url", "image_url": {"url": PHOTO["image_url"], "detail": "auto"}}]},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "And this?"},
    ]  # fmt: skip


async def test_truncation_drops_old_turns_but_never_the_prelude() -> None:
    prompt = stored("Rules.", messages=[{"role": "user", "content": "Example question"},
                                        {"role": "assistant", "content": "Example answer"}])  # fmt: skip
    request = resolved(prompt, {}, input="new question", truncation="auto")
    old = [{"type": "message", "id": f"msg_{i}", "role": "user", "content": "old " * 200} for i in range(3)]
    model = ScriptedModel(text_turn("ok"))
    events = run_loop(prepare(request, old), model=model, executors=[], settings=LoopSettings(), context_window=150)
    async for _ in events:
        pass
    assert [m["content"] for m in model.calls[0].messages] == [
        "Rules.", "Example question", "Example answer", "new question"]  # fmt: skip


def test_a_prompt_nobody_resolved_is_refused_not_ignored() -> None:
    # The loop as a library (or the sim server's Responses route) has no store to resolve it from.
    error = refused(prepare, parse_create_request({"model": "sim", "prompt": {"id": "pmpt_1"}}), [])
    assert (error.status, error.param) == (400, "prompt")


# -- the runtime's lookups (in-process, DuckDB in memory) ---------------------------------------


@pytest.fixture
async def runtime() -> Any:
    rt = Runtime.local(RuntimeSettings(storage_path=":memory:"))
    yield rt
    await rt.close()


async def test_an_unknown_prompt_or_version_is_a_404_naming_it(runtime: Runtime) -> None:
    created = await runtime.create_prompt("acme", parse_prompt_create({"prompt": "Hi"}))

    async def answer(reference: dict[str, Any], tenant: str = "acme") -> ProtocolError:
        with pytest.raises(ProtocolError) as raised:
            await runtime.respond(tenant, parse_create_request({"model": "sim", "prompt": reference}))
        return raised.value

    for reference, tenant, param in (
        ({"id": "pmpt_0000"}, "acme", "prompt"),
        ({"id": created["id"], "version": "2"}, "acme", "prompt.version"),
        ({"id": created["id"]}, "other", "prompt"),  # another tenant's is unknown
    ):
        error = await answer(reference, tenant)
        assert isinstance(error, NotFound) and error.param == param, reference
    with pytest.raises(NotFound) as raised:
        await runtime.get_prompt("acme", created["id"], 2)
    assert raised.value.param == "version"
    error = await answer({"id": created["id"], "variables": {"extra": "x"}})
    assert isinstance(error, InvalidRequest) and error.param == "prompt.variables.extra"


async def test_of_two_updates_from_the_same_version_one_lands_and_the_other_is_a_409(runtime: Runtime) -> None:
    created = await runtime.create_prompt("acme", parse_prompt_create({"prompt": "v1"}))

    async def update(text: str) -> Any:
        content, version, default = parse_prompt_update({"prompt": text, "version": 1})
        return await runtime.update_prompt("acme", created["id"], content, from_version=version, set_default=default)

    results = await asyncio.gather(update("mine"), update("theirs"), return_exceptions=True)
    landed = [r for r in results if isinstance(r, dict)]
    lost = [r for r in results if isinstance(r, ProtocolError)]
    assert len(landed) == 1 and len(lost) == 1
    assert (lost[0].status, lost[0].param, lost[0].code) == (409, "version", "version_conflict")
    assert (await runtime.get_prompt("acme", created["id"]))["prompt"] == landed[0]["prompt"]
    assert len((await runtime.list_prompt_versions("acme", created["id"]))["data"]) == 2
