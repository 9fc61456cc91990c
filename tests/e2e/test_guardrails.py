"""Guardrails through the ``openai`` SDK against the HTTP app (in process), its model the sim
over loopback HTTP with every body the upstream received recorded: what a client sees, what is
stored, and what the model was sent, for each stage, streamed and not."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from tests.servers import RecordingUpstream, recorded_sim, served_local
from troupe.runtime.settings import GuardrailSpec, ModelSpec
from troupe.serve.config import ServerSettings

SECRET = {"category": "secret", "pattern": r"sk-[A-Za-z0-9]{12,}"}
EMAIL = {"category": "email", "pattern": r"[\w.+-]+@[\w-]+(\.[\w-]+)+", "action": "redact"}
GUARDRAILS = (
    # Every request of tenant "acme" runs this one; "other" may ask for it.
    GuardrailSpec(name="no-secrets", stages=["input", "tool_call"], tenants=["acme"], rules=[SECRET]),
    GuardrailSpec(name="pii-out", stages=["output", "tool_output"], rules=[EMAIL, SECRET]),
    GuardrailSpec(name="safe-math", stages=["tool_call"], rules=[{"category": "power", "pattern": r"\*\*"}]),
    GuardrailSpec(name="mod", kind="moderation", stages=["input"]),  # the sim's moderation model, in process
    GuardrailSpec(name="judge", kind="judge", judge_model="m", stages=["input", "output"]),  # the recorded sim
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


@pytest.fixture(scope="module")
def root(upstream: tuple[str, RecordingUpstream]) -> Iterator[str]:
    models = (ModelSpec(name="m", base_url=upstream[0], upstream_model="sim"),)
    keys = {"sk-acme-key": "acme", "sk-other-key": "other"}
    yield from served_local(ServerSettings(api_keys=keys), models=models, guardrails=GUARDRAILS)


def _client(root: str, key: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key=key, max_retries=0)


def test_a_tenants_guardrail_refuses_its_input_before_the_model_streamed_and_not(root, upstream) -> None:
    _, recording = upstream
    acme = _client(root, "sk-acme-key")
    since = len(recording.bodies)
    refused = acme.responses.create(model="m", input="here is sk-abcdefghijklmnop [[say hi]]")
    [message] = refused.output
    assert message.type == "message" and message.content[0].type == "refusal"
    assert "no-secrets" in message.content[0].refusal and "sk-abc" not in message.content[0].refusal
    assert refused.status == "completed" and refused.output_text == ""

    with acme.responses.stream(model="m", input="again sk-abcdefghijklmnop [[say hi]]") as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[kinds.index("response.output_item.added"):] == [
        "response.output_item.added", "response.content_part.added", "response.refusal.delta",
        "response.refusal.done", "response.content_part.done", "response.output_item.done", "response.completed",
    ]  # fmt: skip
    assert len(recording.bodies) == since  # the model never saw either

    # Another tenant's request does not run it (its tenant is not named), unless it asks.
    other = _client(root, "sk-other-key")
    assert other.responses.create(model="m", input="sk-abcdefghijklmnop [[say fine]]").output_text == "fine"
    asked = other.responses.create(model="m", input="sk-abcdefghijklmnop [[say no]]",
                                   extra_body={"guardrails": ["no-secrets"]})  # fmt: skip
    assert asked.output[0].content[0].type == "refusal"


def test_output_is_redacted_as_it_streams_and_blocked_where_it_must_be(root) -> None:
    other = _client(root, "sk-other-key")
    with other.responses.stream(model="m", input="[[say write to ann@example.org soon]]",
                                extra_body={"guardrails": ["pii-out"]}) as stream:  # fmt: skip
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "write to [email] soon"

    blocked = other.responses.create(model="m", input="[[say the key: sk-abcdefghijklmnop and the rest]]",
                                     extra_body={"guardrails": ["pii-out"]})  # fmt: skip
    assert blocked.status == "incomplete" and blocked.incomplete_details.reason == "content_filter"
    # Not streamed, the text comes whole: the block is found before any of it is let through.
    assert blocked.output == [] and "sk-" not in blocked.model_dump_json()
    assert other.responses.retrieve(blocked.id).output == []
    traces = httpx.get(f"{root}/v1/responses/{blocked.id}/step_traces",
                       headers={"Authorization": "Bearer sk-other-key"}, timeout=10).json()  # fmt: skip
    assert [(t["kind"], t["name"]) for t in traces] == [("model", "sim"), ("guardrail", "pii-out")]
    assert traces[-1]["detail"] == {"stage": "output", "verdict": "blocked", "categories": ["secret"]}


def test_a_tool_call_is_blocked_before_it_runs_and_the_model_is_told(root, upstream) -> None:
    _, recording = upstream
    other = _client(root, "sk-other-key")
    since = len(recording.bodies)
    response = other.responses.create(model="m", input='[[call calculator {"expression": "9 ** 9 ** 9"}]]',
                                      extra_body={"guardrails": ["safe-math"]})  # fmt: skip
    call, output = response.output[0], response.output[1]
    assert call.type == "function_call" and output.type == "function_call_output"
    assert "blocked by guardrail 'safe-math' (power)" in output.output
    told = [m["content"] for b in recording.bodies[since:] for m in b["messages"] if m["role"] == "tool"]
    assert told == [output.output]  # what the client sees is what the model was told
    assert response.output_text.startswith("calculator -> Error: the tool call was blocked")


def test_an_unknown_guardrail_is_a_400_naming_it(root) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _client(root, "sk-other-key").responses.create(
            model="m", input="x", extra_body={"guardrails": ["pii-out", "x"]}
        )
    body = caught.value.body
    assert body["param"] == "guardrails[1]" and body["code"] == "invalid_value" and "'x'" in body["message"]
    assert json.dumps(body).count("pii-out") == 1  # the known names are listed


def test_a_moderation_guardrail_refuses_what_its_model_flags(root, upstream) -> None:
    _, recording = upstream
    other = _client(root, "sk-other-key")
    since = len(recording.bodies)
    with other.responses.stream(model="m", input="[[flag self-harm/intent]] [[say hi]]",
                                extra_body={"guardrails": ["mod"]}) as stream:  # fmt: skip
        refusal = "".join(e.delta for e in stream if e.type == "response.refusal.delta")
    assert refusal.endswith("blocked by guardrail 'mod' (self-harm/intent).") and len(recording.bodies) == since
    assert (
        other.responses.create(model="m", input="[[say calm]]", extra_body={"guardrails": ["mod"]}).output_text
        == "calm"
    )


def test_client_moderations_create_is_answered_by_a_configured_guardrail(root) -> None:
    client = _client(root, "sk-other-key")
    answer = client.moderations.create(input=["a calm text", "[[flag violence 0.8]] a threat"])
    assert answer.model == "mod" and answer.id.startswith("modr-")
    calm, threat = answer.results
    assert not calm.flagged and threat.flagged and threat.categories.violence
    assert threat.category_scores.violence == 0.8 and not threat.categories.hate
    # A regex guardrail answers too, with its own categories.
    regex = client.moderations.create(input="mail ann@example.org", model="pii-out")
    assert regex.results[0].flagged and regex.results[0].categories.model_extra == {"email": True, "secret": False}
    with pytest.raises(openai.BadRequestError) as caught:
        client.moderations.create(input="x", model="omni-moderation-latest-but-not-here")
    assert caught.value.body["param"] == "model" and "'mod'" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        client.moderations.create(input=[{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])
    assert caught.value.body["param"] == "input[0]"


def test_openais_moderation_parameter_scores_or_blocks_as_its_policy_says(root, upstream) -> None:
    _, recording = upstream
    other = _client(root, "sk-other-key")
    scored = other.responses.create(model="m", input="[[flag violence]] [[say hi]]", moderation={"model": "mod"})
    assert scored.status == "completed" and scored.output_text == "hi"  # score: recorded, not blocked
    assert scored.moderation is not None
    assert scored.moderation.input.type == "moderation_result" and scored.moderation.input.flagged
    assert scored.moderation.input.category_scores["violence"] == 0.9 and scored.moderation.input.model == "mod"
    assert scored.moderation.output.type == "moderation_result" and not scored.moderation.output.flagged
    assert other.responses.retrieve(scored.id).moderation == scored.moderation

    since = len(recording.bodies)
    block = {"model": "mod", "policy": {"input": {"mode": "block"}, "output": {"mode": "block"}}}
    with other.responses.stream(model="m", input="[[flag hate]] [[say hi]]", moderation=block) as stream:
        final = stream.get_final_response()
    assert final.output[0].content[0].type == "refusal" and len(recording.bodies) == since
    assert final.moderation.input.flagged and final.moderation.input.categories["hate"]

    # By a regex guardrail's name, too; an unknown one is a 400 naming it.
    regex = other.responses.create(model="m", input="[[say write to ann@example.org]]",
                                   moderation={"model": "pii-out"})  # fmt: skip
    assert regex.moderation.output.flagged and regex.moderation.output.categories == {"email": True, "secret": False}
    with pytest.raises(openai.BadRequestError) as caught:
        other.responses.create(model="m", input="x", moderation={"model": "nope"})
    assert caught.value.body["param"] == "moderation.model"


def test_a_judge_guardrail_refuses_streamed_input_and_answers_moderations_and_the_moderation_parameter(
    root, upstream
) -> None:
    _, recording = upstream
    other = _client(root, "sk-other-key")
    since = len(recording.bodies)
    with other.responses.stream(
        model="m", input="[[flag S10]] [[say hi]]", extra_body={"guardrails": ["judge"]}
    ) as stream:
        refusal = "".join(e.delta for e in stream if e.type == "response.refusal.delta")
        final = stream.get_final_response()
    assert refusal.endswith("blocked by guardrail 'judge' (hate).") and final.status == "completed"
    [asked] = recording.bodies[since:]  # the judge's own call upstream, and no turn
    assert "<BEGIN CONVERSATION>" in asked["messages"][0]["content"] and "S10: Hate." in asked["messages"][0]["content"]

    passed = other.responses.create(model="m", input="[[say calm]]", extra_body={"guardrails": ["judge"]})
    assert passed.output_text == "calm"
    assert len(recording.bodies) - since == 1 + 3  # the refused turn's judge, then input judge, turn, output judge

    answer = other.moderations.create(model="judge", input=["calm", "[[flag S1]] [[flag S12]]"])
    assert answer.model == "judge" and [r.flagged for r in answer.results] == [False, True]
    assert answer.results[1].categories.model_extra["violent-crimes"]
    assert answer.results[1].categories.model_extra["sexual-content"]

    scored = other.responses.create(model="m", input="[[flag S1]] [[say hi]]", moderation={"model": "judge"})
    assert scored.output_text == "hi" and scored.moderation.input.flagged and scored.moderation.input.model == "judge"
    assert scored.moderation.input.category_scores["violent-crimes"] == 1.0
