"""Session artifacts through the ``openai`` SDK (``client.beta.agents.sessions.artifacts``), on the
in-process app and on Ray: the files a session's completed turns wrote in its environment's
sandbox (real bubblewrap; the sim model scripts the shell commands), copies per turn."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI

from tests.unit.sandbox_support import needs_bwrap

pytestmark = needs_bwrap  # the turns' commands run in real sandboxes
REPORT = "/mnt/data/report.txt"


def test_each_completed_turn_publishes_its_files_and_the_copies_keep_their_bytes(containers_client: OpenAI) -> None:
    client = containers_client
    artifacts = client.beta.agents.sessions.artifacts
    hosted = {"type": "openai_hosted", "container_size": "small"}
    with client.beta.agents.sessions.create(environment=hosted, agent={"model": "sim"}, stream=True,
                                            input=f"[[shell]]printf 'first draft' > {REPORT}[[/shell]]") as events:  # fmt: skip
        for event in events:
            if event.type == "agent.session.created":
                session = event.session
            elif event.type == "agent.session.turn.completed":
                first = event.turn_id
                break
    # The second turn changes the file, through /workspace (the same directory).
    with client.beta.agents.sessions.stream(
        session.id, input="[[shell]]printf 'final report' > /workspace/report.txt[[/shell]]"
    ) as stream:
        result = stream.get_final_result()

    listed = artifacts.list(session.id, order="asc").data
    assert [(a.turn_id, a.path, a.size_bytes) for a in listed] == [(first, REPORT, 11), (result.turn_id, REPORT, 12)]
    assert {a.environment_id for a in listed} == {session.environment.id}
    assert artifacts.retrieve(listed[0].id, session_id=session.id) == listed[0]
    assert artifacts.content(listed[0].id, session_id=session.id).content == b"first draft"
    raw = artifacts.with_raw_response.content(listed[1].id, session_id=session.id)
    assert (raw.http_response.content, raw.headers["content-type"].split(";")[0]) == (b"final report", "text/plain")
    # The SDK's helper finds the result's turn's artifact of that path.
    assert artifacts.for_result(result).content(REPORT).content == b"final report"
    assert [a.id for a in artifacts.list(session.id, environment_id=session.environment.id, limit=1)] == [
        listed[1].id, listed[0].id]  # fmt: skip  (newest first, a page at a time)

    # Deleting an artifact deletes the copy, not the environment's file.
    assert artifacts.delete(listed[1].id, session_id=session.id).deleted
    assert [a.id for a in artifacts.list(session.id)] == [listed[0].id]
    container_id = client.beta.agents.environments.retrieve(session.environment.id).model_extra["container_id"]
    [live] = [f for f in client.containers.files.list(container_id) if f.path == REPORT]
    assert client.containers.files.content.retrieve(live.id, container_id=container_id).content == b"final report"

    for call, param in ((lambda: artifacts.retrieve(listed[1].id, session_id=session.id), "artifact_id"),
                        (lambda: artifacts.content("art_nope", session_id=session.id), "artifact_id"),
                        (lambda: artifacts.list("sess_nope"), "session_id")):  # fmt: skip
        with pytest.raises(openai.NotFoundError) as unknown:
            call()
        assert unknown.value.body["param"] == param
    for call, param in ((lambda: artifacts.list(session.id, limit=0), "limit"),
                        (lambda: artifacts.list(session.id, order="up"), "order"),  # type: ignore[arg-type]
                        (lambda: artifacts.list(session.id, environment_id="cntr_1"), "environment_id"),
                        (lambda: artifacts.retrieve("file-1", session_id=session.id), "artifact_id")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as bad:
            call()
        assert bad.value.body["param"] == param

    client.beta.agents.sessions.delete(session.id)  # its artifacts go with it
    with pytest.raises(openai.NotFoundError):
        artifacts.list(session.id)
