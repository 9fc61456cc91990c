"""The Containers API with the ``openai`` SDK only (``client.containers``), over real HTTP.

On the in-process app and on Ray Serve's ``replica`` app of the session (the containers' rows
and directories in the storage actor, beside its DuckDB file); the tenants' test and the upload
limit on a keyed in-process app. Running code in a container is not here: that is the
container actor's (code_interpreter's tests).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from tests.servers import served_local
from troupe.runtime.settings import ContainersSettings
from troupe.serve.config import ServerSettings

CSV = b"city,temperature\nParis,21\nOslo,9\n"


@pytest.fixture
def client(root: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def test_a_container_from_create_to_delete(client: OpenAI) -> None:
    file_id = client.files.create(file=("weather.csv", CSV), purpose="assistants").id
    name = f"analysis-{uuid.uuid4().hex[:8]}"
    made = client.containers.create(name=name, file_ids=[file_id], memory_limit="4g",
                                    expires_after={"anchor": "last_active_at", "minutes": 30})  # fmt: skip
    assert made.id.startswith("cntr_") and (made.object, made.name, made.status) == ("container", name, "running")
    assert (made.expires_after.anchor, made.expires_after.minutes, made.memory_limit) == ("last_active_at", 30, "4g")
    assert made.network_policy.type == "disabled" and made.last_active_at >= made.created_at
    got = client.containers.retrieve(made.id)
    assert (got.id, got.name, got.status, got.memory_limit) == (made.id, name, "running", "4g")

    [copied] = client.containers.files.list(container_id=made.id).data
    assert (copied.object, copied.path, copied.bytes, copied.source) == ("container.file", "/mnt/data/weather.csv",
                                                                         len(CSV), "user")  # fmt: skip
    assert copied.id.startswith("cfile_") and copied.container_id == made.id
    content = client.containers.files.content.retrieve(copied.id, container_id=made.id)
    assert content.read() == CSV and content.response.headers["content-type"].startswith("text/csv")

    notes = client.containers.files.create(made.id, file=("notes/plan.md", b"# plan\n"))
    assert (notes.path, notes.bytes, notes.source) == ("/mnt/data/plan.md", 7, "user")
    again = client.containers.files.create(made.id, file_id=file_id)  # the same name: OpenAI's prefixed form
    assert again.path.endswith("-weather.csv") and again.path != copied.path
    assert client.containers.files.retrieve(notes.id, container_id=made.id).model_dump() == notes.model_dump()

    page = client.containers.files.list(container_id=made.id, limit=2, order="asc")
    assert [f.id for f in page.data] == [copied.id, notes.id] and page.has_more
    assert [f.id for f in client.containers.files.list(container_id=made.id, limit=2, order="asc")] == [
        copied.id, notes.id, again.id]  # the SDK pages on with `after`

    assert client.containers.files.delete(notes.id, container_id=made.id) is None
    with pytest.raises(openai.NotFoundError) as gone:
        client.containers.files.content.retrieve(notes.id, container_id=made.id)
    assert gone.value.body["param"] == "file_id"
    assert client.containers.delete(made.id) is None
    with pytest.raises(openai.NotFoundError) as gone:
        client.containers.retrieve(made.id)
    assert gone.value.body["param"] == "container_id"
    with pytest.raises(openai.NotFoundError):
        client.containers.files.list(container_id=made.id)


def test_containers_list_in_pages(client: OpenAI) -> None:
    name = f"paged-{uuid.uuid4().hex[:8]}"
    made = [client.containers.create(name=name).id for _ in range(3)]
    page = client.containers.list(name=name, limit=2)
    assert [c.id for c in page.data] == made[:0:-1] and page.has_more  # newest first
    assert [c.id for c in client.containers.list(name=name, limit=2)] == made[::-1]
    assert [c.id for c in client.containers.list(name=name, order="asc")] == made
    assert client.containers.list(name=name, after=made[0]).data == []
    for cid in made:
        client.containers.delete(cid)
    assert client.containers.list(name=name).data == []


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({}, 400, "name", "missing_required_parameter"),
        ({"name": "n", "memory_limit": "64g"}, 400, "memory_limit", "unsupported_value"),
        ({"name": "n", "memory_limit": "2g"}, 400, "memory_limit", "invalid_value"),
        ({"name": "n", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi org"]}}, 400,
         "network_policy.allowed_domains[0]", "invalid_value"),
        ({"name": "n", "expires_after": {"anchor": "last_active_at", "minutes": 0}}, 400, "expires_after.minutes",
         "invalid_value"),
        ({"name": "n", "skills": [{"type": "skill_reference", "skill_id": "skill_1"}]}, 400, "skills",
         "unsupported_parameter"),
        ({"name": "n", "file_ids": ["file-nope"]}, 404, "file_ids", "not_found"),
    ],
)
def test_a_bad_body_names_its_field(client: OpenAI, body: dict, status: int, param: str, code: str) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        client.post("/containers", body=body, cast_to=object)
    assert refused.value.status_code == status
    assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)


def test_bad_ids_and_file_bodies_are_refused(client: OpenAI, root: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.retrieve("vs_123")
    assert refused.value.body["param"] == "container_id"
    made = client.containers.create(name="ids")
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.files.retrieve("file-123", container_id=made.id)
    assert refused.value.body["param"] == "file_id"
    with pytest.raises(openai.NotFoundError) as missing:
        client.containers.files.create(made.id, file_id="file-nope")
    assert missing.value.body["param"] == "file_id"
    with pytest.raises(openai.BadRequestError) as refused:
        client.containers.files.create(made.id)  # neither a file nor a file_id
    assert refused.value.body["param"] == "file_id"
    both = httpx.post(f"{root}/v1/containers/{made.id}/files", files={"file": ("a.txt", b"a")},
                      data={"file_id": "file-x"})  # fmt: skip
    assert both.status_code == 400 and both.json()["error"]["param"] == "file"
    client.containers.delete(made.id)


# -- tenants, and the upload limit (a keyed in-process app) --------------------------------------


@pytest.fixture(scope="module")
def keyed_root() -> Iterator[str]:
    keys = {"sk-alice": "alice", "sk-bob": "bob"}
    yield from served_local(ServerSettings(api_keys=keys), containers=ContainersSettings(max_file_bytes=1024))


def test_another_tenant_sees_none_of_it(keyed_root: str) -> None:
    alice = OpenAI(base_url=f"{keyed_root}/v1", api_key="sk-alice", max_retries=0)
    bob = OpenAI(base_url=f"{keyed_root}/v1", api_key="sk-bob", max_retries=0)
    file_id = alice.files.create(file=("secret.csv", b"a,b\n"), purpose="assistants").id
    made = alice.containers.create(name="alice's", file_ids=[file_id])
    [cfile] = alice.containers.files.list(container_id=made.id).data
    for call in (
        lambda: bob.containers.retrieve(made.id),
        lambda: bob.containers.delete(made.id),
        lambda: bob.containers.files.list(container_id=made.id),
        lambda: bob.containers.files.create(made.id, file=("x.txt", b"x")),
        lambda: bob.containers.files.retrieve(cfile.id, container_id=made.id),
        lambda: bob.containers.files.content.retrieve(cfile.id, container_id=made.id),
        lambda: bob.containers.files.delete(cfile.id, container_id=made.id),
    ):
        with pytest.raises(openai.NotFoundError) as refused:
            call()
        assert refused.value.body["param"] == "container_id"
    bobs = bob.containers.create(name="bob's")
    with pytest.raises(openai.NotFoundError) as refused:
        bob.containers.create(name="stolen", file_ids=[file_id])
    assert refused.value.body["param"] == "file_ids"
    with pytest.raises(openai.NotFoundError) as refused:
        bob.containers.files.create(bobs.id, file_id=file_id)
    assert refused.value.body["param"] == "file_id"
    assert [c.id for c in bob.containers.list()] == [bobs.id]
    assert alice.containers.files.content.retrieve(cfile.id, container_id=made.id).read() == b"a,b\n"


def test_an_upload_past_the_limit_is_a_413(keyed_root: str) -> None:
    alice = OpenAI(base_url=f"{keyed_root}/v1", api_key="sk-alice", max_retries=0)
    made = alice.containers.create(name="small")
    with pytest.raises(openai.APIStatusError) as refused:
        alice.containers.files.create(made.id, file=("big.bin", b"x" * 1025))
    assert refused.value.status_code == 413 and refused.value.body["code"] == "file_too_large"
    assert alice.containers.files.create(made.id, file=("ok.bin", b"x" * 1024)).bytes == 1024
