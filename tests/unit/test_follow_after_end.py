"""A background run stays followable on its host for a moment after it is stored
(``troupe.runtime.runs.ENDED_KEPT_S``): a follower that comes just after the end (a session
driving on its turn) reads the events from memory, not from the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loop_harness import sim_request as req
from tests.servers import wait_until
from troupe.protocol.ids import thread_of_response
from troupe.runtime import Runtime, RuntimeSettings, runs
from troupe.runtime.runs import NoLiveRun


def runtime(tmp_path: Path) -> Runtime:
    return Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))


async def ended(rt: Runtime, response_id: str) -> dict:
    async def done() -> bool:
        return (await rt.get_response("", response_id))["status"] == "completed"

    await wait_until(done, what="the run stored")
    return await rt.get_response("", response_id)


async def test_a_follower_just_after_the_end_gets_every_event_from_the_host(tmp_path):
    rt = runtime(tmp_path)
    try:
        started = await rt.background("", req(input="[[say hello]]", background=True))
        stored = await ended(rt, started["id"])
        host = await rt.placement.host_for(thread_of_response(started["id"]))
        events = [e async for batch in host.follow("", started["id"], -1) for e in batch]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"] == stored["output"]
        later = [e async for batch in host.follow("", started["id"], 2) for e in batch]
        assert later == events[3:], "starting_after is kept"
        with pytest.raises(NoLiveRun):  # another tenant's run is not there
            [e async for batch in host.follow("other", started["id"], -1) for e in batch]
    finally:
        await rt.close()


async def test_after_the_moment_the_run_is_read_from_the_store(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "ENDED_KEPT_S", 0.0)
    rt = runtime(tmp_path)
    try:
        started = await rt.background("", req(input="[[say hello]]", background=True))
        await ended(rt, started["id"])
        host = await rt.placement.host_for(thread_of_response(started["id"]))
        with pytest.raises(NoLiveRun):
            [e async for batch in host.follow("", started["id"], -1) for e in batch]
        assert host.runs._ended == {}, "an ended run leaves on its timer, with no later run to prune it"
        replayed = [e async for batch in await rt.follow_response("", started["id"]) for e in batch]
        assert replayed[-1]["type"] == "response.completed"
    finally:
        await rt.close()
