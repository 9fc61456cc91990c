"""Session artifacts on the Ray-free runtime (Runtime.local, the sim model, real sandboxes and
DuckDB): what a turn publishes, when, once, as copies, within the bounds, and what deleting
removes (troupe.runtime.artifacts)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import wait_until
from tests.unit.sandbox_support import needs_bwrap
from troupe.protocol import NotFound
from troupe.protocol.sessions import parse_session_create, parse_session_events
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.settings import ContainersSettings

pytestmark = needs_bwrap
HOSTED = {"type": "openai_hosted", "container_size": "small"}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    containers = ContainersSettings(directory=str(tmp_path / "boxes"), artifact_max_bytes=1000, artifact_max_files=3)
    made = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), containers=containers))
    yield made
    await made.close()


async def new_session(runtime: Runtime, script: str, **agent: Any) -> tuple[str, str]:
    """A session in a hosted environment whose first turn runs ``script``, once it has ended:
    its id and that turn's."""
    made = await runtime.sessions.create_session("acme", parse_session_create(
        {"environment": HOSTED, "agent": {"model": "sim", **agent}, "input": script}))  # fmt: skip
    return made["id"], await settled(runtime, made["id"], 1)


async def send(runtime: Runtime, session_id: str, script: str) -> str:
    """A turn running ``script``, once it has ended (or waits for the client): its id."""
    turns = len((await runtime.sessions.list_turns("acme", session_id)).data)
    message = {"role": "user", "content": [{"type": "input_text", "text": script}]}
    await runtime.sessions.submit_events("acme", session_id, parse_session_events(
        {"events": [{"type": "agent.session.input.message", "input": [message]}]}))  # fmt: skip
    return await settled(runtime, session_id, turns + 1)


async def settled(runtime: Runtime, session_id: str, turns: int) -> str:
    async def ended() -> bool:
        page = await runtime.sessions.list_turns("acme", session_id)
        session = await runtime.sessions.get_session("acme", session_id)
        return len(page.data) == turns and session["status"] != "in_progress"

    await wait_until(ended, what=f"the session's turn {turns}'s end")
    return (await runtime.sessions.list_turns("acme", session_id, limit=1)).data[0]["id"]


async def artifacts(runtime: Runtime, session_id: str) -> list[dict[str, Any]]:
    return (await runtime.artifacts.list_artifacts("acme", session_id, order="asc")).data


async def content(runtime: Runtime, session_id: str, artifact_id: str) -> bytes:
    return (await runtime.artifacts.artifact_content("acme", session_id, artifact_id))[1]


async def test_a_completed_turn_publishes_a_copy_of_each_file_it_wrote(runtime: Runtime) -> None:
    session_id, first = await new_session(runtime, "[[shell]]printf one > /mnt/data/report.txt\nmkdir -p out\n"
                                                   "printf deep > out/deep.txt[[/shell]]")  # fmt: skip
    session = await runtime.sessions.get_session("acme", session_id)
    [deep, report] = await artifacts(runtime, session_id)  # one publication: in path order
    assert (report["path"], report["size_bytes"], report["turn_id"]) == ("/mnt/data/report.txt", 3, first)
    assert report["environment_id"] == session["environment"]["id"] and report["id"].startswith("art_")
    assert (report["object"], report["session_id"]) == ("agent.session.artifact", session_id)
    assert (deep["path"], await content(runtime, session_id, deep["id"])) == ("/mnt/data/out/deep.txt", b"deep")
    assert await content(runtime, session_id, report["id"]) == b"one"

    # The second turn changes the file: a new artifact; the first keeps its bytes.
    second = await send(runtime, session_id, "[[shell]]printf 'two, longer' > /workspace/report.txt[[/shell]]")
    [_, old, new] = await artifacts(runtime, session_id)
    assert (old["id"], new["turn_id"], new["path"], new["size_bytes"]) == (report["id"], second, report["path"], 11)
    assert await content(runtime, session_id, old["id"]) == b"one"
    assert await content(runtime, session_id, new["id"]) == b"two, longer"

    # A turn that writes nothing publishes nothing; nor does a session's other environment filter.
    await send(runtime, session_id, "[[shell]]cat /mnt/data/report.txt[[/shell]]")
    assert len(await artifacts(runtime, session_id)) == 3
    env_id = session["environment"]["id"]
    assert len((await runtime.artifacts.list_artifacts("acme", session_id, environment_id=env_id)).data) == 3
    assert (await runtime.artifacts.list_artifacts("acme", session_id, environment_id="env_other")).data == []


async def test_only_a_completed_turn_publishes_and_each_path_once(runtime: Runtime) -> None:
    # The turn writes a file and calls the client's function: it waits, and publishes nothing.
    session_id, waiting = await new_session(
        runtime, '[[shell]]printf draft > draft.txt[[/shell]] [[call get_weather {"city": "Paris"}]]', tools=[WEATHER])
    assert (await runtime.sessions.get_session("acme", session_id))["status"] == "requires_action"
    assert await artifacts(runtime, session_id) == []
    await runtime.sessions.submit_events("acme", session_id, parse_session_events(
        {"events": [{"type": "agent.session.input.cancel"}]}))  # fmt: skip
    turn = await runtime.sessions.get_turn("acme", session_id, waiting)
    assert turn["status"] == "cancelled"

    # The next turn completes: it publishes its own file, never the cancelled turn's.
    done = await send(runtime, session_id, "[[shell]]printf final > final.txt[[/shell]]")
    [published] = await artifacts(runtime, session_id)
    assert (published["path"], published["turn_id"]) == ("/mnt/data/final.txt", done)

    # A second publisher of the same completion (another replica, a resumed run) adds nothing.
    session = await runtime.store.get_session("acme", session_id)
    await runtime.store.note_turn_files("acme", session_id, done, ["final.txt"])
    again = await runtime.store.publish_artifacts(
        "acme", session_id, done, environment_id=session["environment"]["id"], container_id=session["container_id"],
        max_file_bytes=1000, max_files=3)  # fmt: skip
    assert again == [] and len(await artifacts(runtime, session_id)) == 1


async def test_files_past_the_bounds_are_not_published(runtime: Runtime) -> None:
    # artifact_max_bytes = 1000, artifact_max_files = 3 (the fixture's settings)
    # In path order: a.txt, b.txt, big.bin (one byte too many), c.bin (just fits), d.txt (the 4th).
    session_id, _ = await new_session(runtime, "[[shell]]head -c 1001 /dev/zero > big.bin\nhead -c 1000 /dev/zero > "
                                               "c.bin\nfor f in a b d; do echo $f > $f.txt; done[[/shell]]")  # fmt: skip
    published = await artifacts(runtime, session_id)
    assert sorted((a["path"], a["size_bytes"]) for a in published) == [
        ("/mnt/data/a.txt", 2), ("/mnt/data/b.txt", 2), ("/mnt/data/c.bin", 1000)]  # fmt: skip


async def test_deleting_an_artifact_or_its_session_removes_the_copies_not_the_live_file(runtime: Runtime) -> None:
    session_id, _ = await new_session(runtime, "[[shell]]printf kept > kept.txt\nprintf gone > gone.txt[[/shell]]")
    [gone, kept] = await artifacts(runtime, session_id)
    session = await runtime.store.get_session("acme", session_id)
    live = Path(await runtime.containers.directory("acme", session["container_id"])) / "gone.txt"
    copies = Path(runtime.store._rag.rag.file_bytes.directory)  # type: ignore[attr-defined]
    assert (copies / gone["id"]).read_bytes() == b"gone" and (copies / kept["id"]).is_file()

    assert await runtime.artifacts.delete_artifact("acme", session_id, gone["id"]) == {
        "id": gone["id"], "object": "agent.session.artifact.deleted", "deleted": True}  # fmt: skip
    assert not (copies / gone["id"]).exists() and live.read_bytes() == b"gone"
    for call in (runtime.artifacts.get_artifact, runtime.artifacts.delete_artifact, runtime.artifacts.artifact_content):
        with pytest.raises(NotFound) as unknown:
            await call("acme", session_id, gone["id"])
        assert unknown.value.param == "artifact_id"
    with pytest.raises(NotFound) as foreign:  # another tenant's session is an unknown one
        await runtime.artifacts.get_artifact("other", session_id, kept["id"])
    assert foreign.value.param == "session_id"

    await runtime.sessions.delete_session("acme", session_id)
    assert not (copies / kept["id"]).exists()
    with pytest.raises(NotFound):
        await runtime.artifacts.list_artifacts("acme", session_id)
    assert await runtime.store.get_artifact("acme", session_id, kept["id"]) is None
    assert not os.listdir(copies), "no copy is left behind"


async def test_a_session_without_an_environment_publishes_nothing(runtime: Runtime) -> None:
    made = await runtime.sessions.create_session("acme", parse_session_create(
        {"environment": {"type": "none"}, "agent": {"model": "sim"}, "input": "hello"}))  # fmt: skip
    await settled(runtime, made["id"], 1)
    [turn] = (await runtime.sessions.list_turns("acme", made["id"])).data
    assert (await runtime.sessions.get_turn("acme", made["id"], turn["id"]))["status"] == "completed"
    assert await artifacts(runtime, made["id"]) == []
