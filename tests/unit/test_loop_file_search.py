"""The file_search tool in the loop (troupe/agentloop/file_search.py), with the sim model and an
in-process stand-in for the vector stores (tests/fakes.py ``WordsFileSearcher``); the e2e tests
search real vector stores."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import WordsFileSearcher
from tests.loop_harness import check_stream, history_of, run
from troupe.agentloop.file_search import FILE_SEARCH, citations, format_results, parse_results
from troupe.protocol import InvalidRequest
from troupe.sim.model import SimModel

DOCS = {
    "vs_1": {
        "file-launch": ("launch.md", "The launch code for the rocket is blue seven."),
        "file-menu": ("menu.html", "The cafeteria serves soup on Tuesdays."),
    },
    "vs_2": {"file-pets": ("pets.txt", "The office cat is called Pixel.")},
}


def body(question: str, **extra: Any) -> dict[str, Any]:
    tool = {"type": "file_search", "vector_store_ids": ["vs_1"], **extra.pop("tool", {})}
    return {"model": "sim", "input": question, "tools": [tool], **extra}


async def test_a_question_is_searched_and_answered_with_a_citation():
    searcher = WordsFileSearcher(DOCS)
    outcome = await run(body("What is the launch code for the rocket?"), SimModel(), file_searcher=searcher)
    check_stream(outcome)
    call, message = outcome.response["output"]
    assert (call["type"], call["queries"], call["status"]) == ("file_search_call", ["What is the launch code for the rocket?"], "completed")
    assert call["results"] is None, "results only when included"
    assert call["id"].startswith("fs_")
    text = message["content"][0]["text"]
    assert text == "The launch code for the rocket is blue seven. 【0†launch.md】"
    assert message["content"][0]["annotations"] == [
        {"file_id": "file-launch", "filename": "launch.md", "index": text.index("【"), "type": "file_citation"}
    ]
    kinds = [e["type"] for e in outcome.events]
    fs_events = [k for k in kinds if k.startswith("response.file_search_call.")]
    assert fs_events == [f"response.file_search_call.{s}" for s in ("in_progress", "searching", "completed")]
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    assert searcher.searches == [{"vector_store_ids": ["vs_1"], "query": "What is the launch code for the rocket?",
                                  "max_num_results": 10}]  # fmt: skip


async def test_results_are_included_when_asked_and_max_num_results_is_passed_on():
    searcher = WordsFileSearcher(DOCS)
    request = body("What does the cafeteria serve?", include=["file_search_call.results"], tool={"max_num_results": 1})
    outcome = await run(request, SimModel(), file_searcher=searcher, stream=False)
    [result] = outcome.response["output"][0]["results"]
    assert (result["file_id"], result["filename"], result["text"]) == ("file-menu", "menu.html", DOCS["vs_1"]["file-menu"][1])
    assert result["score"] > 0 and list(result) == ["attributes", "file_id", "filename", "score", "text"]
    assert searcher.searches[0]["max_num_results"] == 1


async def test_the_model_sees_numbered_passages_and_markers_go_on_across_searches():
    script = '[[call file_search {"query": "launch code"}]] [[call file_search {"query": "office cat"}]]'
    request = body(script, tool={"vector_store_ids": ["vs_1", "vs_2"]})
    outcome = await run(request, SimModel(), file_searcher=WordsFileSearcher(DOCS))
    outputs = outcome.prepared.transcript.outputs_of(FILE_SEARCH)
    assert [[m for m, *_ in parse_results(o)] for o in outputs] == [[0], [1]], "one numbering for the response"
    message = outcome.response["output"][-1]["content"][0]
    assert [a["file_id"] for a in message["annotations"]] == ["file-launch", "file-pets"]
    assert [a["index"] for a in message["annotations"]] == [message["text"].index(f"【{n}†") for n in (0, 1)]


async def test_a_later_turn_replays_the_search_and_numbers_on():
    searcher = WordsFileSearcher(DOCS)
    first = await run(body("What is the launch code?", include=["file_search_call.results"]), SimModel(),
                      file_searcher=searcher)  # fmt: skip
    second = await run(body("Who is the office cat?", tool={"vector_store_ids": ["vs_2"]}), SimModel(),
                       file_searcher=searcher, history=history_of(first))  # fmt: skip
    replayed, fresh = second.prepared.transcript.outputs_of(FILE_SEARCH)
    assert parse_results(replayed)[0][:3] == (0, "launch.md", "file-launch"), "history's search, as the model saw it"
    after = parse_results(replayed)[-1][0] + 1
    assert parse_results(fresh)[0][:3] == (after, "pets.txt", "file-pets"), "numbered on after history's passages"
    assert second.response["output"][-1]["content"][0]["annotations"][0]["file_id"] == "file-pets"


async def test_a_search_that_fails_is_a_failed_item_and_the_model_is_told():
    outcome = await run(body("Where is it?", tool={"vector_store_ids": ["vs_nope"]}), SimModel(),
                        file_searcher=WordsFileSearcher(DOCS))  # fmt: skip
    check_stream(outcome)
    call = outcome.response["output"][0]
    assert call["status"] == "failed" and call["queries"] == ["Where is it?"]
    assert "response.file_search_call.completed" not in [e["type"] for e in outcome.events]
    told = outcome.prepared.transcript.outputs_of(FILE_SEARCH)
    assert told == ["Error: LookupError: No vector store found with id 'vs_nope'."]


async def test_nothing_found_is_said_and_nothing_is_cited():
    outcome = await run(body("Xylophones anywhere?"), SimModel(), file_searcher=WordsFileSearcher(DOCS))
    message = outcome.response["output"][-1]["content"][0]
    assert message["text"] == "I found nothing about that in the files." and message["annotations"] == []


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"vector_store_ids": []}, "tools[0].vector_store_ids"),
        ({"vector_store_ids": "vs_1"}, "tools[0].vector_store_ids"),
        ({"max_num_results": 51}, "tools[0].max_num_results"),
    ],
)
async def test_a_bad_file_search_tool_is_a_400_naming_it(tool, param):
    with pytest.raises(InvalidRequest) as info:
        await run(body("x?", tool=tool), SimModel(), file_searcher=WordsFileSearcher(DOCS))
    assert info.value.param == param


async def test_without_vector_stores_the_tool_is_refused():
    with pytest.raises(InvalidRequest) as info:
        await run(body("x?"), SimModel())
    assert info.value.param == "tools[0].type"


def test_a_marker_of_no_passage_is_not_a_citation():
    output = format_results([{"file_id": "file-a", "filename": "a.md", "text": "Alpha\\nbeta.", "score": 1.0}], 4)
    assert parse_results(output) == [(4, "a.md", "file-a", "Alpha\\nbeta.")]
    text = "See 【4†a.md】 and 【9†b.md】."
    assert citations(text, [output]) == [{"file_id": "file-a", "filename": "a.md", "index": 4, "type": "file_citation"}]
    assert json.loads(json.dumps(citations(text, [])) or "[]") == []


async def test_a_run_resumed_after_its_search_was_called_searches_and_cites_as_if_uninterrupted():
    from troupe.agentloop.checkpoint import ResumePoint
    from troupe.agentloop.driver import prepare, run_loop
    from troupe.agentloop.events import Checkpoint, StepTraced
    from troupe.agentloop.writer import WireWriter
    from troupe.protocol import parse_create_request

    request = parse_create_request(body("What is the launch code?", include=["file_search_call.results"]))
    searcher = WordsFileSearcher(DOCS)

    def fresh_writer() -> WireWriter:
        return WireWriter(request, response_id="resp_1", created_at=1_700_000_000)

    # The first host: stopped right after the model turn that calls file_search was stored.
    writer, events, steps = fresh_writer(), [], []
    async for event in run_loop(prepare(request, [], file_searcher=searcher), model=SimModel(), checkpoints=True):
        if isinstance(event, Checkpoint):
            steps.append(event.step.to_data())  # as a host stores it
            break
        if not isinstance(event, StepTraced):
            events.extend(writer.write(event))
    assert [s["kind"] for s in steps] == ["model"] and list(steps[0]["fs_items"].values())
    # The next host: the same steps, the same log.
    resumed = fresh_writer()
    resumed.restore(events)
    point = ResumePoint.from_stored(steps, output=resumed.output)
    prepared = prepare(request, [], file_searcher=searcher)
    async for event in run_loop(prepared, model=SimModel(), checkpoints=True, resume=point):
        if not isinstance(event, StepTraced | Checkpoint):
            events.extend(resumed.write(event))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    call, message = resumed.response["output"]
    assert call["status"] == "completed" and call["results"][0]["file_id"] == "file-launch"
    assert len([e for e in events if e["type"] == "response.output_item.added"]) == 2, "no item opened twice"
    assert message["content"][0]["annotations"][0]["file_id"] == "file-launch"
    assert len(searcher.searches) == 1, "no tool starts before its turn is stored: the search ran on the next host"


async def test_tool_choice_can_force_or_allow_file_search():
    forced = await run(body("Tell me about soup", tool_choice={"type": "file_search"}), SimModel(),
                       file_searcher=WordsFileSearcher(DOCS))  # fmt: skip
    assert forced.response["output"][0]["type"] == "file_search_call"
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "file_search"}]}
    outcome = await run(body("Where is the launch code?", tool_choice=allowed), SimModel(),
                        file_searcher=WordsFileSearcher(DOCS))  # fmt: skip
    assert outcome.response["output"][0]["status"] == "completed"


async def test_a_file_search_call_a_client_sends_is_replayed_whatever_its_results_hold():
    # Found by the OpenAPI fuzzer: results without file_id, not dicts, not a list.
    odd = [
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"],
         "results": [{"filename": "a.md"}, {}, "x", {"file_id": "file-b", "text": "B\nb"}]},
        {"type": "file_search_call", "id": "fs_2", "status": "completed", "queries": "not a list", "results": {"k": 1}},
    ]  # fmt: skip
    outcome = await run(body("What now?"), SimModel(), file_searcher=WordsFileSearcher(DOCS),
                        history=[{"role": "user", "content": "x", "type": "message"}, *odd])  # fmt: skip
    replayed = outcome.prepared.transcript.outputs_of(FILE_SEARCH)[:2]
    assert [m for m, *_ in parse_results(replayed[0])] == [0, 1, 2]
    assert parse_results(replayed[0])[2][1:] == ("file-b", "file-b", "B b")
    assert replayed[1].startswith("The results of this search were not kept")
    assert outcome.response["status"] == "completed"
