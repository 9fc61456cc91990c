"""The Agents API's execution environments with the ``openai`` SDK only
(``client.beta.agents.environments``, ``.templates``, ``.files``), over real HTTP.

On the in-process app and on Ray Serve's ``replica`` app of the session (environments are
containers: their rows and directories in the storage actor; an ``env`` in the container's
sandbox, a Ray actor there); what the placement cannot change (``LOCAL_ONLY``) in process only,
and the secrets' tests on in-process apps of their own (a DuckDB file to search, keys to seal with).
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.servers import served_local
from troupe.runtime.settings import ContainersSettings
from troupe.serve.config import ServerSettings
from troupe.storage.credentials import new_key

from .conftest import LOCAL_ONLY

CSV = b"city,temperature\nParis,21\nOslo,9\n"


@pytest.fixture
def client(containers_client: OpenAI) -> OpenAI:
    return containers_client


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _shell(client: OpenAI, container_id: str, *commands: str) -> list[Any]:
    """Run commands in a container through the shell tool (what a session will do); their outputs."""
    tool = {"type": "shell", "environment": {"type": "container_reference", "container_id": container_id}}
    response = client.responses.create(model="sim", input="[[shell]]" + "\n".join(commands) + "[[/shell]]",
                                       tools=[tool])  # type: ignore[list-item]  # fmt: skip
    return list(response.output[1].output)


def test_an_environment_with_files_from_create_to_list(client: OpenAI) -> None:
    file_id = client.files.create(file=("upload.csv", CSV), purpose="assistants").id
    made = client.beta.agents.environments.create(environment={
        "type": "openai_hosted", "container_size": "small", "network": {"access": "disabled"},
        "packages": {"python": ["pandas", "NumPy"]},
        "files": [{"type": "file_id", "file_id": file_id, "path": "/workspace/weather.csv"},
                  {"type": "inline", "data": _b64(b"# plan\n"), "path": "/workspace/plan.md"}],
    })  # fmt: skip
    assert made.id.startswith("env_") and (made.object, made.type, made.status) == ("agent.environment",
                                                                                     "openai_hosted", "ready")  # fmt: skip
    assert [(f.type, f.path, f.size_bytes) for f in made.files] == [("file_id", "/workspace/weather.csv", len(CSV)),
                                                                    ("inline", "/workspace/plan.md", 7)]  # fmt: skip
    assert made.files[0].file_id == file_id and made.plugins == [] and made.skills == []
    container_id = made.model_extra["container_id"]
    container = client.containers.retrieve(container_id)
    assert (container.memory_limit, container.network_policy.type) == ("1g", "disabled")
    assert client.beta.agents.environments.retrieve(made.id).model_dump() == made.model_dump()
    assert made.id in [e.id for e in client.beta.agents.environments.list(limit=100)]

    listed = client.beta.agents.environments.files.list(made.id, order="asc")
    assert [(f.path, f.size_bytes, f.environment_id) for f in listed] == [
        ("/workspace/plan.md", 7, made.id), ("/workspace/weather.csv", len(CSV), made.id)]  # fmt: skip
    # A file added later replaces the one at its path.
    added = client.beta.agents.environments.files.create(made.id, type="inline", path="/workspace/plan.md",
                                                         data=_b64(b"# plan, again\n"))  # fmt: skip
    assert (added.object, added.path, added.size_bytes) == ("agent.environment.file", "/workspace/plan.md", 14)
    page = client.beta.agents.environments.files.list(made.id, limit=1, order="asc")
    assert [f.path for f in page.data] == ["/workspace/plan.md"] and page.has_more and page.next
    assert [f.path for f in client.beta.agents.environments.files.list(made.id, limit=1, order="asc")] == [
        "/workspace/plan.md", "/workspace/weather.csv"]  # the SDK pages on with `page`
    assert [f.path for f in client.beta.agents.environments.files.list(made.id, path="/workspace/")] == [
        "/workspace/weather.csv", "/workspace/plan.md"]  # fmt: skip
    with pytest.raises(openai.BadRequestError) as outside:
        client.beta.agents.environments.files.list(made.id, path="/etc")
    assert outside.value.body["param"] == "path"
    # The files are in the container's directory, which is /workspace inside.
    outputs = _shell(client, container_id, "cat /workspace/plan.md", "head -1 weather.csv",
                     "mkdir out && echo 42 > out/answer.txt")  # fmt: skip
    assert [o.stdout for o in outputs] == ["# plan, again\n", "city,temperature\n", ""]
    written = client.beta.agents.environments.files.list(made.id, path="/workspace/out")
    assert [(f.path, f.size_bytes) for f in written] == [("/workspace/out/answer.txt", 3)]  # what the agent wrote


def test_an_env_reaches_the_commands_wherever_the_sandbox_runs(client: OpenAI) -> None:
    """On Ray the sandbox is the container's actor: the env goes to it at provisioning, and a
    host's shell call later reaches the same sandbox."""
    value = uuid.uuid4().hex
    made = client.beta.agents.environments.create(environment={"type": "openai_hosted", "env": {"GREETING": value}})
    [output] = _shell(client, made.model_extra["container_id"], 'printf %s "$GREETING" | sha256sum')
    assert output.stdout.split()[0] == _digest(value.encode())


def test_an_env_reaches_the_code_and_is_never_stored(tmp_path: Path) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    database = tmp_path / "troupe.duckdb"
    for url in served_local(ServerSettings(), storage_path=str(database)):
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        made = client.beta.agents.environments.create(environment={"type": "openai_hosted", "env": {"TOKEN": secret}})
        container_id = made.model_extra["container_id"]
        # Their digests, not the values: a command's output is stored with its response.
        outputs = _shell(client, container_id, 'printf %s "$TOKEN" | sha256sum',
                         "python -c 'import hashlib, os; print(hashlib.sha256(os.environ[\"TOKEN\"].encode()).hexdigest())'")
        assert [o.stdout.split()[0] for o in outputs] == [_digest(secret.encode())] * 2
        client.containers.delete(container_id)
    found = [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert database.exists() and found == []


def test_a_template_from_create_to_delete(client: OpenAI) -> None:
    name = f"tpl-{uuid.uuid4().hex[:8]}"
    templates = client.beta.agents.environments.templates
    made = templates.create(name=name, network={"access": "restricted", "allowed_domains": ["example.com"]},
                            packages={"python": ["pandas"]}, desktop={"enabled": False})  # fmt: skip
    assert made.id.startswith("envtpl_") and (made.object, made.name) == ("agent.environment.template", name)
    assert (made.network.access, made.network.allowed_domains) == ("restricted", ["example.com"])
    assert (made.packages.python, made.packages.npm, made.files, made.desktop.enabled) == (["pandas"], [], [], False)
    assert templates.retrieve(made.id).model_dump() == made.model_dump()
    assert made.id in [t.id for t in templates.list(limit=100)]
    updated = templates.update(made.id, name=None, network={"access": "disabled"})
    assert (updated.name, updated.network.access, updated.packages.python) == (None, "disabled", ["pandas"])
    assert updated.updated_at >= made.updated_at

    # An environment from the template: its network, narrowed; never broadened.
    templates.update(made.id, network={"access": "restricted", "allowed_domains": ["example.com"]})
    env = client.beta.agents.environments.create(environment={
        "type": "openai_hosted", "environment_template_id": made.id,
        "network": {"access": "restricted", "allowed_domains": ["api.example.com"]}})  # fmt: skip
    policy = client.containers.retrieve(env.model_extra["container_id"]).network_policy
    assert (policy.type, policy.allowed_domains) == ("allowlist", ["api.example.com"])
    with pytest.raises(openai.BadRequestError) as wider:
        client.beta.agents.environments.create(environment={
            "type": "openai_hosted", "environment_template_id": made.id,
            "network": {"access": "restricted", "allowed_domains": ["openai.com"]}})  # fmt: skip
    assert wider.value.body["param"] == "environment.network"

    deleted = templates.delete(made.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (made.id, True, "agent.environment.template.deleted")
    with pytest.raises(openai.NotFoundError) as gone:
        templates.retrieve(made.id)
    assert gone.value.body["param"] == "environment_template_id"
    with pytest.raises(openai.NotFoundError) as gone:
        client.beta.agents.environments.create(environment={"type": "openai_hosted",
                                                            "environment_template_id": made.id})  # fmt: skip
    assert gone.value.body["param"] == "environment.environment_template_id"


@LOCAL_ONLY
@pytest.mark.parametrize(
    ("environment", "param"),
    [
        ({"type": "self_hosted", "workspace_directory": "/srv"}, "environment.type"),
        ({"type": "openai_hosted", "network": {"access": "enabled"}}, "environment.network.access"),
        ({"type": "openai_hosted", "packages": {"python": ["left-pad-nowhere"]}}, "environment.packages.python[0]"),
        ({"type": "openai_hosted", "setup_commands": [{"command": "make"}]}, "environment.setup_commands"),
        ({"type": "openai_hosted", "files": [{"type": "inline", "data": "aGk=", "path": "/workspace/a/b"}]},
         "environment.files[0].path"),
    ],
)
def test_what_cannot_be_provided_is_refused_by_name(client: OpenAI, environment: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.beta.agents.environments.create(environment=environment)  # type: ignore[arg-type]
    assert refused.value.body["param"] == param


@LOCAL_ONLY
def test_unknown_ids_are_404_naming_them(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.beta.agents.environments.retrieve("env_nope")
    assert unknown.value.body["param"] == "environment_id"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.beta.agents.environments.files.list("env_nope")
    assert unknown.value.body["param"] == "environment_id"
    with pytest.raises(openai.BadRequestError) as bad:
        client.beta.agents.environments.retrieve("cntr_nope")
    assert bad.value.body["param"] == "environment_id"
    before = [c.id for c in client.containers.list(limit=100)]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.beta.agents.environments.create(environment={"type": "openai_hosted", "files": [
            {"type": "file_id", "file_id": "file-nope", "path": "/workspace/a.csv"}]})  # fmt: skip
    assert unknown.value.body["param"] == "environment.files[0].file_id"
    assert [c.id for c in client.containers.list(limit=100)] == before  # the container made for it is gone


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[OpenAI, Path]]:
    """An in-process app whose templates' secrets are sealed (``credentials_keys``), over its own DuckDB file."""
    database = tmp_path / "troupe.duckdb"
    for url in served_local(ServerSettings(), storage_path=str(database), credentials_keys=(new_key(),)):
        yield OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), database


def test_a_templates_secrets_are_sealed_and_reach_its_environments(keyed: tuple[OpenAI, Path]) -> None:
    client, database = keyed
    secret = f"tpl-secret-{uuid.uuid4().hex}"
    inline = f"inline-{uuid.uuid4().hex}".encode()
    template = client.beta.agents.environments.templates.create(
        env={"API_TOKEN": secret}, files=[{"type": "inline", "data": _b64(inline), "path": "/workspace/key.txt"}])
    assert [(f.type, f.path, f.size_bytes) for f in template.files] == [("inline", "/workspace/key.txt", len(inline))]
    assert "env" not in template.model_dump()
    env = client.beta.agents.environments.create(environment={"type": "openai_hosted",
                                                              "environment_template_id": template.id})  # fmt: skip
    container_id = env.model_extra["container_id"]
    outputs = _shell(client, container_id, 'printf %s "$API_TOKEN" | sha256sum', "sha256sum < /workspace/key.txt")
    assert [o.stdout.split()[0] for o in outputs] == [_digest(secret.encode()), _digest(inline)]
    client.containers.delete(container_id)
    # An update replaces the env it gives, sealed again; the inline file stays.
    renewed = f"renewed-{uuid.uuid4().hex}"
    client.beta.agents.environments.templates.update(template.id, env={"API_TOKEN": renewed})
    env = client.beta.agents.environments.create(environment={"type": "openai_hosted",
                                                              "environment_template_id": template.id})  # fmt: skip
    outputs = _shell(client, env.model_extra["container_id"], 'printf %s "$API_TOKEN" | sha256sum',
                     "sha256sum < /workspace/key.txt")  # fmt: skip
    assert [o.stdout.split()[0] for o in outputs] == [_digest(renewed.encode()), _digest(inline)]
    client.containers.delete(env.model_extra["container_id"])
    stored = b"".join(p.read_bytes() for p in database.parent.glob("troupe.duckdb*") if p.is_file())
    assert all(value not in stored for value in (secret.encode(), renewed.encode(), inline))


@LOCAL_ONLY
def test_a_template_with_secrets_and_no_keys_is_refused(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.beta.agents.environments.templates.create(env={"TOKEN": "x"})
    assert refused.value.body["param"] == "env" and "credentials_keys" in refused.value.body["message"]


KEYS = {"sk-alice": "alice", "sk-bob": "bob", "sk-carol": "carol"}


@pytest.fixture
def tenants_root() -> Iterator[str]:
    """A keyed in-process app on which carol may run no code."""
    yield from served_local(ServerSettings(api_keys=KEYS), containers=ContainersSettings(code_tenants=("alice", "bob")))


def test_another_tenant_sees_none_of_it_and_a_tenant_without_code_gets_no_environment(tenants_root: str) -> None:
    alice, bob, carol = (OpenAI(base_url=f"{tenants_root}/v1", api_key=key, max_retries=0) for key in KEYS)
    made = alice.beta.agents.environments.create(environment={"type": "openai_hosted"})
    template = alice.beta.agents.environments.templates.create(name="alice's")
    for call, param in (
        (lambda: bob.beta.agents.environments.retrieve(made.id), "environment_id"),
        (lambda: bob.beta.agents.environments.files.list(made.id), "environment_id"),
        (lambda: bob.beta.agents.environments.files.create(made.id, type="inline", data="", path="/workspace/x"),
         "environment_id"),
        (lambda: bob.beta.agents.environments.templates.retrieve(template.id), "environment_template_id"),
        (lambda: bob.beta.agents.environments.templates.delete(template.id), "environment_template_id"),
        (lambda: bob.beta.agents.environments.create(environment={
            "type": "openai_hosted", "environment_template_id": template.id}), "environment.environment_template_id"),
    ):  # fmt: skip
        with pytest.raises(openai.NotFoundError) as refused:
            call()
        assert refused.value.body["param"] == param
    assert bob.beta.agents.environments.list().data == [] and bob.beta.agents.environments.templates.list().data == []
    assert [e.id for e in alice.beta.agents.environments.list()] == [made.id]
    with pytest.raises(openai.BadRequestError) as refused:
        carol.beta.agents.environments.create(environment={"type": "openai_hosted"})
    assert refused.value.body["param"] == "environment.type" and "code_tenants" in refused.value.body["message"]
    alice.containers.delete(made.model_extra["container_id"])
