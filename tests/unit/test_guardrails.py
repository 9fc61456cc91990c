"""Guardrails (troupe.agentloop.guardrails): the regex check and the output gate alone, then
the in-process runtime against ``troupe sim`` over loopback HTTP with every body the upstream
received recorded, so that what a guardrail keeps from the model is checked where it matters."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.servers import RecordingUpstream, recorded_sim
from troupe.agentloop.guardrails import Guardrails, OutputGate, RegexCheck
from troupe.protocol import InvalidRequest, parse_create_request
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import GuardrailSpec, ModelSpec

EMAIL = {"category": "email", "pattern": r"[\w.+-]+@[\w-]+(\.[\w-]+)+", "action": "redact"}
SECRET = {"category": "secret", "pattern": r"sk-[A-Za-z0-9]{8,}", "action": "block"}
PII = GuardrailSpec(name="pii", kind="regex", rules=[EMAIL, SECRET], window=32)
PII_OUT = PII.model_copy(update={"name": "pii-out", "stages": ("output",)})
"""The same rules on the output only (the sim's input scripts what it says)."""


# -- the check and the gate, alone ----------------------------------------------------


def _check(spec: GuardrailSpec) -> RegexCheck:
    return RegexCheck(spec.name, spec.stages, spec.rules, spec.window)


def test_a_regex_check_blocks_and_redacts_by_category_never_echoing_the_match() -> None:
    check = _check(PII)
    found = check.find("write to ann@example.org or bob@corp.example.com")
    assert found.text == "write to [email] or [email]"
    assert found.categories == {"email": True, "secret": False} and not found.block
    blocked = check.find("the key is sk-ABCDEFGH1234")
    assert blocked.block and blocked.categories == {"email": False, "secret": True}
    assert check.find("nothing to see").categories == {"email": False, "secret": False}
    # Each rule keeps its own flags inside the alternation.
    loud = _check(GuardrailSpec(name="x", kind="regex", rules=[
        {"category": "shout", "pattern": "forbidden", "ignore_case": True}, {"category": "exact", "pattern": "Exact"},
    ]))  # fmt: skip
    assert loud.find("FORBIDDEN").block and not loud.find("EXACT").block


async def _through(gate: OutputGate, text: str, size: int) -> tuple[list[str], str]:
    """``text`` fed to ``gate`` in pieces of ``size``: what each piece released, and the whole."""
    released = [await gate.feed(text[i : i + size]) for i in range(0, len(text), size)]
    released.append(await gate.end())
    return released, "".join(released)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 13, 1000])
async def test_the_output_gate_redacts_whatever_the_deltas(size: int) -> None:
    text = "Hello bob@example.com, write to alice.smith@corp.example.org today, then rest a while."
    gate = OutputGate(Guardrails([_check(PII)]))
    released, whole = await _through(gate, text, size)
    assert whole == "Hello [email], write to [email] today, then rest a while."
    assert gate.sent == whole and gate.verdict is None
    if size < len(text):  # streamed: the text came out along the way, not all at the end
        assert len(released[-1]) <= len("a while.") and sum(map(len, released[:-1])) > 0


@pytest.mark.asyncio
async def test_the_output_gate_holds_back_only_what_could_still_become_a_match() -> None:
    gate = OutputGate(Guardrails([_check(PII)]))
    assert await gate.feed("Hello ") == "Hello "  # a space cannot begin an address: nothing waits
    assert await gate.feed("bob") == ""  # may be the start of one
    assert await gate.feed("@example") == ""
    assert await gate.feed(".com") == ""  # whole, but it may grow (".com.fr")
    assert await gate.feed(", bye") == "[email], "  # decided; "bye" may begin another
    assert await gate.feed(" now.") == "bye "  # "now." may still begin one ("now.then@…")
    assert await gate.end() == "now." and gate.sent == "Hello [email], bye now."
    # A blocked pattern's start waits too: "sk-" could become a key.
    gate = OutputGate(Guardrails([_check(PII)]))
    assert await gate.feed("the key: sk-") == "the key: "
    assert await gate.feed("ABCDEFGH") == "" and await gate.feed("12345 more") == ""
    assert gate.verdict is not None and gate.sent == "the key: "


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [1, 4, 9, 1000])
async def test_the_output_gate_sends_nothing_of_a_blocked_match_and_nothing_after_it(size: int) -> None:
    text = "Here is the key you asked for: sk-ABCDEFGHIJKLMNOP and some words after it."
    gate = OutputGate(Guardrails([_check(PII)]))
    _, whole = await _through(gate, text, size)
    assert "sk-" not in whole and "words after" not in whole
    assert text.startswith(whole)
    assert gate.verdict is not None and gate.verdict.flagged == ["secret"]
    assert await gate.feed("more") == "" and await gate.end() == ""


@pytest.mark.asyncio
async def test_a_gate_without_output_checks_is_false_and_every_check_is_a_verdict() -> None:
    rails = Guardrails([_check(GuardrailSpec(name="in", kind="regex", stages=["input"], rules=[SECRET]))])
    assert not OutputGate(rails)
    text, refused = await rails.check("input", "use sk-0123456789")
    assert refused is not None and refused.stage == "input" and refused.flagged == ["secret"]
    assert [v.guardrail for v in rails.verdicts] == ["in"]
    assert await rails.check("output", "sk-0123456789") == ("sk-0123456789", None)  # not its stage


# -- through the runtime, the upstream recorded ------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, RecordingUpstream]]:
    with recorded_sim() as recorded:
        yield recorded


@contextlib.asynccontextmanager
async def _runtime(tmp_path: Any, url: str, *guardrails: GuardrailSpec) -> AsyncIterator[Runtime]:
    """An in-process runtime whose model ``m`` is the recorded sim at ``url``, with ``guardrails``."""
    models = (ModelSpec(name="m", base_url=url, upstream_model="sim"),)
    settings = RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), models=models, guardrails=guardrails)
    runtime = Runtime.local(settings)
    try:
        yield runtime
    finally:
        await runtime.close()


def _sent(recording: RecordingUpstream, since: int) -> str:
    """Every body the upstream got since the ``since``-th, as one JSON text."""
    return json.dumps(recording.bodies[since:])


async def _events(runtime: Runtime, body: dict[str, Any]) -> list[dict[str, Any]]:
    stream = await runtime.stream("", parse_create_request({**body, "stream": True}))
    return [event async for batch in stream for event in batch]


@pytest.mark.asyncio
async def test_a_blocked_input_never_reaches_the_model_now_or_in_a_later_turn(tmp_path, upstream) -> None:
    url, recording = upstream
    async with _runtime(tmp_path, url, PII) as runtime:
        conversation = await runtime.create_conversation("")
        since = len(recording.bodies)
        body = {"model": "m", "input": "my key is sk-SECRET123456, [[say ok]]", "guardrails": ["pii"],
                "conversation": conversation["id"]}  # fmt: skip
        events = await _events(runtime, body)
        assert len(recording.bodies) == since  # no model call
        types = [e["type"] for e in events]
        assert types == [
            "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
            "response.refusal.delta", "response.refusal.done", "response.content_part.done",
            "response.output_item.done", "response.completed",
        ]  # fmt: skip
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        response = events[-1]["response"]
        [message] = response["output"]
        [part] = message["content"]
        assert part["type"] == "refusal" and "pii" in part["refusal"] and "secret" in part["refusal"]
        assert "sk-SECRET" not in json.dumps(response)
        assert response["status"] == "completed" and response["usage"]["total_tokens"] == 0
        stored = await runtime.get_response("", response["id"])
        assert stored["output"] == response["output"]

        # The next turn of the conversation: the refused exchange is not sent upstream.
        since = len(recording.bodies)
        answer = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "[[say fine]]", "conversation": conversation["id"]}))  # fmt: skip
        assert answer["output"][0]["content"][0]["text"] == "fine"
        assert "sk-SECRET" not in _sent(recording, since) and "refusal" not in _sent(recording, since)
        traces = await runtime.step_traces("", response["id"])
        assert [(t["kind"], t["name"], t["detail"]) for t in traces] == [
            ("guardrail", "pii", {"stage": "input", "verdict": "blocked", "categories": ["secret"]})
        ]


@pytest.mark.asyncio
async def test_a_blocked_output_stops_the_stream_and_the_response_is_incomplete(tmp_path, upstream) -> None:
    url, _ = upstream
    async with _runtime(tmp_path, url, PII_OUT) as runtime:
        body = {"model": "m", "input": "[[say here you go: sk-ABCDEFGHIJKL and more words after that]]",
                "guardrails": ["pii-out"]}  # fmt: skip
        events = await _events(runtime, body)
        deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert "sk-" not in json.dumps(events[1:]) and "after" not in deltas  # (the first holds the input)
        response = events[-1]["response"]
        assert events[-1]["type"] == "response.incomplete"
        assert response["incomplete_details"] == {"reason": "content_filter"}
        [message] = response["output"]
        assert message["status"] == "incomplete" and message["content"][0]["text"] == deltas
        assert (await runtime.get_response("", response["id"]))["output"] == response["output"]

        # Not streamed, the same end.
        plain = await runtime.respond("", parse_create_request(body))
        assert plain["status"] == "incomplete" and "sk-" not in json.dumps(plain)


@pytest.mark.asyncio
async def test_redacted_output_is_what_the_client_sees_what_is_stored_and_what_the_model_sees_next(
    tmp_path, upstream
) -> None:
    url, recording = upstream
    async with _runtime(tmp_path, url, PII_OUT) as runtime:
        body = {"model": "m", "input": "[[say mail ann@example.org or bob@corp.example.com today]]",
                "guardrails": ["pii-out"]}  # fmt: skip
        events = await _events(runtime, body)
        deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert deltas == "mail [email] or [email] today"
        done = next(e for e in events if e["type"] == "response.output_text.done")
        response = events[-1]["response"]
        assert done["text"] == deltas == response["output"][0]["content"][0]["text"]
        assert response["status"] == "completed"
        since = len(recording.bodies)
        await runtime.respond("", parse_create_request(
            {"model": "m", "input": "[[say ok]]", "previous_response_id": response["id"]}))  # fmt: skip
        sent = json.dumps([m for m in recording.bodies[since]["messages"] if m["role"] == "assistant"])
        assert "[email]" in sent and "ann@" not in sent


@pytest.mark.asyncio
async def test_redacted_input_is_what_the_model_is_sent_and_what_is_stored(tmp_path, upstream) -> None:
    url, recording = upstream
    async with _runtime(tmp_path, url, PII) as runtime:
        since = len(recording.bodies)
        answer = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "reach me at ann@example.org", "guardrails": ["pii"]}))  # fmt: skip
        assert "ann@" not in _sent(recording, since) and "reach me at [email]" in _sent(recording, since)
        items = (await runtime.list_input_items("", answer["id"])).data
        assert "ann@" not in json.dumps(items) and "reach me at [email]" in json.dumps(items)
        traces = await runtime.step_traces("", answer["id"])
        assert traces[0]["detail"] == {"stage": "input", "verdict": "redacted", "categories": ["email"]}


@pytest.mark.asyncio
async def test_tool_calls_and_results_are_checked_before_they_run_and_before_the_model_sees_them(
    tmp_path, upstream
) -> None:
    url, recording = upstream
    math = GuardrailSpec(name="math", kind="regex", stages=["tool_call"],
                         rules=[{"category": "forbidden_math", "pattern": r"6\s*\*\s*7"}])  # fmt: skip
    numbers = GuardrailSpec(name="numbers", kind="regex", stages=["tool_output"],
                            rules=[{"category": "number", "pattern": r"\d+", "action": "redact"}])  # fmt: skip
    async with _runtime(tmp_path, url, math, numbers) as runtime:
        since = len(recording.bodies)
        blocked = await runtime.respond("", parse_create_request({
            "model": "m", "input": '[[call calculator {"expression": "6*7"}]]', "guardrails": ["math"],
        }))  # fmt: skip
        call, output = blocked["output"][0], blocked["output"][1]
        assert call["type"] == "function_call" and output["type"] == "function_call_output"
        assert "blocked by guardrail 'math'" in output["output"] and "42" not in output["output"]
        assert "blocked by guardrail 'math'" in _sent(recording, since)  # the model was told
        traces = await runtime.step_traces("", blocked["id"])
        assert [t["kind"] for t in traces] == ["model", "guardrail", "model"]  # the tool never ran
        assert traces[1]["call_id"] == call["call_id"] and traces[1]["detail"]["verdict"] == "blocked"

        since = len(recording.bodies)
        redacted = await runtime.respond("", parse_create_request({
            "model": "m", "input": '[[call calculator {"expression": "40+2"}]]', "guardrails": ["numbers"],
        }))  # fmt: skip
        assert redacted["output"][1]["output"] == "[number]"
        tool_messages = [m for b in recording.bodies[since:] for m in b["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in tool_messages] == ["[number]"]


@pytest.mark.asyncio
async def test_guardrails_a_tenant_or_model_must_have_run_without_being_asked_and_unknown_names_are_a_400(
    tmp_path, upstream
) -> None:
    url, recording = upstream
    everyone = GuardrailSpec(name="everyone", kind="regex", stages=["input"], tenants=["*"],
                             rules=[{"category": "banned", "pattern": "forbidden"}])  # fmt: skip
    async with _runtime(tmp_path, url, everyone) as runtime:
        since = len(recording.bodies)
        refused = await runtime.respond("", parse_create_request({"model": "m", "input": "something forbidden"}))
        assert refused["output"][0]["content"][0]["type"] == "refusal" and len(recording.bodies) == since
        with pytest.raises(InvalidRequest) as caught:
            await runtime.respond("", parse_create_request({"model": "m", "input": "x", "guardrails": ["nope"]}))
        assert caught.value.param == "guardrails[0]" and "'nope'" in str(caught.value)


# -- a durable run resumed on another host ------------------------------------------------


@pytest.mark.asyncio
async def test_a_resumed_run_sends_the_redacted_input_again_and_tells_no_step_twice() -> None:
    from tests.fakes import RecordingModel
    from troupe.agentloop.checkpoint import ResumePoint
    from troupe.agentloop.driver import prepare, run_loop
    from troupe.agentloop.events import Checkpoint, StepTraced
    from troupe.agentloop.tools import LocalFunctionExecutor
    from troupe.agentloop.writer import WireWriter
    from troupe.sim.model import SimModel

    body = {"model": "sim", "input": 'mail ann@example.org [[call add {"a": 2, "b": 40}]]'}
    tools = LocalFunctionExecutor({"add": lambda a, b: a + b})

    def rails() -> Guardrails:
        return Guardrails([_check(PII)])

    # The first host: stopped right after the model turn that calls the tool was stored.
    request = parse_create_request(body)
    writer, events, steps = WireWriter(request, response_id="resp_1", created_at=1_700_000_000), [], []
    first = RecordingModel(SimModel())
    async for event in run_loop(prepare(request, [], [tools]), model=first, executors=[tools], checkpoints=True,
                                guardrails=rails()):  # fmt: skip
        if isinstance(event, Checkpoint):
            steps.append(event.step.to_data())
            break
        if not isinstance(event, StepTraced):
            events.extend(writer.write(event))
    assert "ann@" not in json.dumps(first.calls[0].messages)
    # The next host, from the stored request (its input as the client sent it) and steps.
    request = parse_create_request(body)
    resumed = WireWriter(request, response_id="resp_1", created_at=1_700_000_000)
    resumed.restore(events)
    second = RecordingModel(SimModel())
    traced = []
    async for event in run_loop(prepare(request, [], [tools]), model=second, executors=[tools], checkpoints=True,
                                resume=ResumePoint.from_stored(steps, output=resumed.output), guardrails=rails()):  # fmt: skip
        if isinstance(event, StepTraced):
            traced.append(event)
    assert second.calls and "ann@" not in json.dumps(second.calls[0].messages)
    assert "[email]" in json.dumps(second.calls[0].messages)
    assert [s.kind for s in traced if s.kind == "guardrail" and s.detail["stage"] == "input"] == []


# -- moderation: the sim's model in process, and a server over HTTP ---------------------


def test_the_sims_moderation_is_scripted_by_the_text() -> None:
    from troupe.sim.moderation import CATEGORIES, moderate

    calm = moderate("a calm sentence")
    assert not calm["flagged"] and set(calm["categories"]) == set(CATEGORIES) and not any(calm["categories"].values())
    angry = moderate("[[flag violence]] and [[flag hate 0.4]] and [[flag house-rule 0.6]]")
    assert angry["flagged"] and angry["categories"]["violence"] and not angry["categories"]["hate"]
    assert angry["category_scores"]["hate"] == 0.4 and angry["categories"]["house-rule"]


class _Counting:
    """A moderation function over the sim's model that counts its calls, or fails."""

    def __init__(self, fail: bool = False) -> None:
        self.texts: list[str] = []
        self.fail = fail

    async def __call__(self, text: str) -> dict[str, Any]:
        from troupe.agentloop.guardrails import GuardrailUnavailable
        from troupe.sim.moderation import moderate

        self.texts.append(text)
        if self.fail:
            raise GuardrailUnavailable("the moderation server answered HTTP 503")
        return moderate(text)


@pytest.mark.asyncio
async def test_a_moderation_check_classifies_streamed_output_a_window_at_a_time_and_blocks_what_it_flags() -> None:
    from troupe.agentloop.guardrails import ModerationCheck

    counting = _Counting()
    check = ModerationCheck("mod", ["output"], 20, counting)
    gate = OutputGate(Guardrails([check]))
    text = "one two three four five six seven eight nine ten eleven twelve"
    released, whole = await _through(gate, text, 3)
    assert whole == text and gate.verdict is None
    assert 2 <= len(counting.texts) <= len(text) // 20 + 1  # one call per window, and one at the end
    assert all(text.startswith(t) for t in counting.texts) and counting.texts[-1] == text
    assert released[0] == ""  # held until a window gathered

    gate = OutputGate(Guardrails([check]))
    _, whole = await _through(gate, "all fine so far, then [[flag violence]] comes and more", 4)
    assert "[[flag" not in whole and gate.verdict is not None and gate.verdict.flagged == ["violence"]
    assert gate.verdict.scores is not None and gate.verdict.scores["violence"] == 0.9

    # Thresholds: only those categories count, each from its own score.
    strict = ModerationCheck("strict", ["input"], 64, counting, thresholds={"hate": 0.3})
    rails = Guardrails([strict])
    assert (await rails.check("input", "[[flag hate 0.35]]"))[1] is not None
    assert (await rails.check("input", "[[flag violence 0.99]]"))[1] is None


@pytest.mark.asyncio
async def test_a_moderation_server_that_fails_blocks_the_text_and_says_why() -> None:
    from troupe.agentloop.guardrails import ModerationCheck, refusal_text

    rails = Guardrails([ModerationCheck("mod", ["input"], 64, _Counting(fail=True))])
    _, refused = await rails.check("input", "anything")
    assert refused is not None and refused.error == "the moderation server answered HTTP 503"
    assert "could not be checked" in refusal_text(refused)


@pytest.mark.asyncio
async def test_a_moderation_guardrail_calls_its_server_over_http_and_is_a_step(tmp_path, upstream) -> None:
    url, _ = upstream  # the sim server serves /v1/moderations too
    mod = GuardrailSpec(name="mod", kind="moderation", base_url=url, stages=["input", "output"], window=16)
    async with _runtime(tmp_path, url, mod) as runtime:
        refused = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "[[flag harassment]] [[say hi]]", "guardrails": ["mod"]}))  # fmt: skip
        assert refused["output"][0]["content"][0]["type"] == "refusal"
        assert "(harassment)" in refused["output"][0]["content"][0]["refusal"]
        stopped = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "[[say fine words and then trouble]]", "guardrails": ["mod"]}))  # fmt: skip
        assert (
            stopped["status"] == "completed"
            and stopped["output"][0]["content"][0]["text"] == "fine words and then trouble"
        )
        traces = await runtime.step_traces("", stopped["id"])
        assert [(t["kind"], t["detail"] and t["detail"]["stage"]) for t in traces][0] == ("guardrail", "input")
        assert any(t["kind"] == "guardrail" and t["detail"]["stage"] == "output" for t in traces)
    down = GuardrailSpec(name="down", kind="moderation", base_url="http://127.0.0.1:9/v1", timeout_s=2)
    async with _runtime(tmp_path, url, down) as runtime:
        refused = await runtime.respond(
            "", parse_create_request({"model": "m", "input": "hello", "guardrails": ["down"]})
        )
        assert "could not be checked" in refused["output"][0]["content"][0]["refusal"]
        [trace] = await runtime.step_traces("", refused["id"])
        assert trace["detail"]["verdict"] == "blocked" and "could not be reached" in trace["detail"]["error"]
        from troupe.protocol import ProtocolError

        with pytest.raises(ProtocolError) as caught:  # and POST /v1/moderations answers 502
            await runtime.moderations("", {"model": "down", "input": "hello"})
        assert caught.value.status == 502 and caught.value.code == "moderation_failed"


@pytest.mark.asyncio
async def test_the_requests_moderation_blocks_streamed_output_only_when_its_policy_says_block() -> None:
    from troupe.agentloop.guardrails import ModerationCheck, RequestModeration

    check = ModerationCheck("mod", [], 8, _Counting())  # in no stage of its own: the request's only
    blocking = Guardrails([], moderation=RequestModeration(check, "mod", output="block"))
    gate = OutputGate(blocking)
    # A classifier judges what has come so far, a window at a time: what it has passed is sent.
    assert await gate.feed("calm words, ") == "calm words, "
    assert await gate.feed("then ") == ""  # less than a window waits
    assert await gate.feed("[[flag violence]]") == "" and await gate.feed(" and more") == ""
    assert gate.verdict is not None and gate.verdict.flagged == ["violence"] and gate.sent == "calm words, "
    scoring = Guardrails([], moderation=RequestModeration(check, "mod", output="score"))
    assert not OutputGate(scoring)  # score: nothing held back; the whole text is classified at the end


# -- judge: a chat model asked whether a text is safe ---------------------------------------


def test_a_judges_answer_is_read_leniently_and_an_answer_that_is_neither_safe_nor_unsafe_blocks() -> None:
    from troupe.agentloop.guardrails import JUDGE_CATEGORIES, GuardrailUnavailable, JudgeCheck

    async def never(prompt: str) -> str:
        raise AssertionError("not asked")

    judge = JudgeCheck("guard", ["input"], 256, never, categories={"weapons": "Weapons", "fraud": "Fraud"})
    assert judge.parse("safe") == judge.parse("  Safe.\n") == judge.parse("**safe**") == []
    assert judge.parse("unsafe\nS2") == ["fraud"]
    assert judge.parse("UNSAFE\nS1, fraud,S2") == ["weapons", "fraud"]  # codes, names, titles; once each
    assert judge.parse("unsafe S1") == ["weapons"]  # the list on the verdict's own line
    assert judge.parse("unsafe") == ["unsafe"]  # unsafe without a list is still unsafe
    assert judge.parse("unsafe\nS9") == ["S9"]  # a code it made up is flagged as it wrote it
    for answer in ("", "I think it is fine", "safe-ish", "safe and sound"):
        with pytest.raises(GuardrailUnavailable, match="neither 'safe' nor 'unsafe'"):
            judge.parse(answer)

    prompt = judge.prompt_for("give me a gun", "output")
    assert "S1: Weapons.\nS2: Fraud." in prompt and "Agent: give me a gun" in prompt
    assert "User: hi" in judge.prompt_for("hi", "input") and "Tool: out" in judge.prompt_for("out", "tool_output")
    default = JudgeCheck("guard", ["input"], 256, never)
    assert list(default.categories) == list(JUDGE_CATEGORIES)
    assert "S14: Code Interpreter Abuse." in default.prompt_for("x")


def test_the_sims_judge_answers_from_the_flags_in_the_judged_text_only() -> None:
    from troupe.agentloop.guardrails import JudgeCheck
    from troupe.sim.moderation import judge

    async def never(prompt: str) -> str:
        raise AssertionError("not asked")

    check = JudgeCheck("guard", ["input"], 256, never)
    assert judge(check.prompt_for("calm words")) == "safe"
    assert judge(check.prompt_for("[[flag S1]] and [[flag hate]] [[flag S1]]")) == "unsafe\nS1,hate"
    assert judge(check.prompt_for("[[flag hate 0.2]]")) == "safe"  # below the sim's 0.5
    assert judge("[[flag S1]] but no conversation in it") is None  # not a judge's prompt: the sim as usual


def test_a_judge_must_name_a_configured_chat_model_and_its_prompt_only_known_fields() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="needs 'judge_model'"):
        GuardrailSpec(name="j", kind="judge")
    with pytest.raises(ValidationError, match="only a 'judge' guardrail takes it"):
        GuardrailSpec(name="j", kind="moderation", judge_model="sim")
    with pytest.raises(ValidationError, match=r"can fill in only \{role\}"):
        GuardrailSpec(name="j", kind="judge", judge_model="sim", prompt="judge {texts}")
    with pytest.raises(ValidationError, match="'nope' is not a configured chat model"):
        RuntimeSettings(guardrails=[GuardrailSpec(name="j", kind="judge", judge_model="nope")])
    assert RuntimeSettings(guardrails=[GuardrailSpec(name="j", kind="judge", judge_model="sim")]).guardrails


JUDGE = GuardrailSpec(name="judge", kind="judge", judge_model="m", stages=["input", "output"], window=16)


def _judged(recording: RecordingUpstream, since: int) -> list[dict[str, Any]]:
    """The bodies since the ``since``-th that were a judge's call (its prompt, not a turn)."""
    return [b for b in recording.bodies[since:] if "<BEGIN CONVERSATION>" in json.dumps(b)]


@pytest.mark.asyncio
async def test_a_judge_guardrail_asks_its_chat_model_upstream_and_its_call_is_a_step(tmp_path, upstream) -> None:
    url, recording = upstream
    output_only = JUDGE.model_copy(update={"name": "judge-out", "stages": ("output",)})
    async with _runtime(tmp_path, url, JUDGE, output_only) as runtime:
        since = len(recording.bodies)
        refused = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "[[flag S1]] [[say hi]]", "guardrails": ["judge"]}))  # fmt: skip
        assert refused["output"][0]["content"][0]["type"] == "refusal"
        assert "guardrail 'judge' (violent-crimes)" in refused["output"][0]["content"][0]["refusal"]
        [asked] = recording.bodies[since:]  # the judge's call, and no turn
        assert asked["stream"] is False and asked["temperature"] == 0.0 and asked["model"] == "sim"
        assert "User: [[flag S1]] [[say hi]]" in asked["messages"][0]["content"]
        [trace] = await runtime.step_traces("", refused["id"])
        assert trace["kind"] == "guardrail" and trace["detail"] == {
            "stage": "input", "verdict": "blocked", "categories": ["violent-crimes"], "model": "m"}  # fmt: skip

        # Output: judged a window at a time as it streams; what it flags is never sent. (The sim
        # echoes a plain input, "You said: …", flag and all; this judge looks at output only.)
        since = len(recording.bodies)
        events = await _events(runtime, {"model": "m", "input": "all calm words here, then [[flag hate]] and more",
                                         "tool_choice": "none", "guardrails": ["judge-out"]})  # fmt: skip
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text.startswith("You said: all calm") and "[[flag" not in text
        assert events[-1]["type"] == "response.incomplete"
        assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}
        judged = _judged(recording, since)
        assert len(judged) >= 2 and "Agent: " in judged[-1]["messages"][0]["content"]


@pytest.mark.asyncio
async def test_a_judge_that_fails_or_answers_anything_else_blocks_and_moderations_say_502(tmp_path, upstream) -> None:
    url, _ = upstream
    chatty = JUDGE.model_copy(update={"name": "chatty", "prompt": "Is this fine? {text}"})  # the sim just chats
    async with _runtime(tmp_path, url, JUDGE, chatty) as runtime:
        failed = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "[[fail 503]]", "guardrails": ["judge"]}))  # fmt: skip
        assert "could not be checked" in failed["output"][0]["content"][0]["refusal"]
        [trace] = await runtime.step_traces("", failed["id"])
        assert "the judge model failed (HTTP 503" in trace["detail"]["error"]

        rambled = await runtime.respond("", parse_create_request(
            {"model": "m", "input": "hello", "guardrails": ["chatty"]}))  # fmt: skip
        [trace] = await runtime.step_traces("", rambled["id"])
        assert trace["detail"]["verdict"] == "blocked" and "neither 'safe' nor 'unsafe'" in trace["detail"]["error"]

        judged = await runtime.moderations("", {"model": "judge", "input": ["fine", "[[flag hate]]"]})
        assert [r["flagged"] for r in judged["results"]] == [False, True] and judged["model"] == "judge"
        assert judged["results"][1]["categories"]["hate"] and judged["results"][1]["category_scores"]["hate"] == 1.0
        from troupe.protocol import ProtocolError

        with pytest.raises(ProtocolError) as caught:
            await runtime.moderations("", {"model": "chatty", "input": "hello"})
        assert caught.value.status == 502 and "'chatty' could not classify" in caught.value.message


@pytest.mark.asyncio
async def test_a_clients_own_tool_output_is_checked_at_the_tool_output_stage_before_the_model_sees_it(
    tmp_path, upstream
) -> None:
    url, recording = upstream
    outputs = GuardrailSpec(name="outputs", kind="regex", stages=["tool_output"], rules=[EMAIL, SECRET])
    lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    async with _runtime(tmp_path, url, outputs) as runtime:
        for given, seen in [("write to ann@example.org", "write to [email]"),
                            ("the key is sk-abcdefghijkl", "blocked by guardrail 'outputs' (secret)")]:  # fmt: skip
            asked = await runtime.respond("", parse_create_request({"model": "m", "input": "[[call lookup]]",
                                                                    "tools": [lookup]}))  # fmt: skip
            [call] = [o for o in asked["output"] if o["type"] == "function_call"]
            since = len(recording.bodies)
            answer = {"type": "function_call_output", "call_id": call["call_id"], "output": given}
            done = await runtime.respond("", parse_create_request({
                "model": "m", "input": [answer], "previous_response_id": asked["id"], "tools": [lookup],
                "guardrails": ["outputs"]}))  # fmt: skip
            [sent] = recording.bodies[since:]
            [tool] = [m for m in sent["messages"] if m["role"] == "tool"]
            assert seen in tool["content"] and given not in json.dumps(sent)  # the model never saw it
            items = await runtime.list_input_items("", done["id"])
            assert given not in json.dumps(items.to_list_object())  # nor is it stored
            [step] = [t for t in await runtime.step_traces("", done["id"]) if t["kind"] == "guardrail"]
            assert step["call_id"] == call["call_id"] and step["detail"]["stage"] == "tool_output"
