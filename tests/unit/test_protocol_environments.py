"""The Agents API's environments, pure (troupe.protocol.environments): what maps onto a
container, and that every refusal names its field."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from troupe.protocol import InvalidRequest
from troupe.protocol.environments import (
    RESERVED_ENV,
    apply_template_update,
    parse_environment,
    parse_environment_create,
    parse_template_body,
    resolve_config,
    template_config,
    template_object,
    template_secrets,
)
from troupe.sandbox import Limits
from troupe.sandbox._launch import Launcher

PACKAGES = frozenset({"numpy", "pandas", "python-dateutil"})


def hosted(**fields: Any) -> dict[str, Any]:
    return parse_environment({"type": "openai_hosted", **fields}, python_packages=PACKAGES, max_memory_limit="4g")


def test_what_maps_onto_a_container() -> None:
    assert parse_environment(None) == parse_environment({"type": "none"}) == {"type": "none"}
    parsed = hosted(container_size="small", network={"access": "restricted", "allowed_domains": ["PyPI.org"]},
                    packages={"python": ["Pandas", "python_dateutil"], "npm": [], "system": None},
                    env={"TOKEN": "x"}, desktop={"enabled": False}, plugins=[], skills=None,
                    files=[{"type": "inline", "data": base64.b64encode(b"hi").decode(), "path": "/workspace/a.txt"},
                           {"type": "file_id", "file_id": "file-1", "path": "/workspace/b.csv"}])  # fmt: skip
    assert parsed == {"type": "openai_hosted", "environment_id": None, "environment_template_id": None, "config": {
        "memory_limit": "1g", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org"]},
        "python_packages": ["Pandas", "python_dateutil"], "env": {"TOKEN": "x"}, "desktop": {"enabled": False},
        "files": [{"type": "inline", "path": "/workspace/a.txt", "name": "a.txt", "data": b"hi"},
                  {"type": "file_id", "file_id": "file-1", "path": "/workspace/b.csv", "name": "b.csv"}]}}  # fmt: skip
    assert hosted(environment_id="env_1")["environment_id"] == "env_1"
    assert resolve_config({}, {})["network_policy"] == {"type": "disabled"}  # no network unless asked


REFUSED = [
    ({"type": "self_hosted", "workspace_directory": "/srv"}, "environment.type", "unsupported_value"),
    ({"type": "cloud"}, "environment.type", "invalid_value"),
    ({"type": "openai_hosted", "color": "red"}, "environment.color", "unknown_parameter"),
    ({"type": "openai_hosted", "desktop": {"enabled": True}}, "environment.desktop.enabled", "unsupported_value"),
    ({"type": "openai_hosted", "network": {"access": "enabled"}}, "environment.network.access", "unsupported_value"),
    ({"type": "openai_hosted", "network": {"access": "restricted", "blocked_domains": ["x.com"]}},
     "environment.network.blocked_domains", "unsupported_value"),
    ({"type": "openai_hosted", "network": {"access": "restricted", "allowed_domains": []}},
     "environment.network.allowed_domains", "invalid_value"),
    ({"type": "openai_hosted", "network": {"access": "restricted", "allowed_domains": ["not a domain"]}},
     "environment.network.allowed_domains[0]", "invalid_value"),
    ({"type": "openai_hosted", "network": {"access": "disabled", "allowed_domains": ["x.com"]}},
     "environment.network.allowed_domains", "invalid_value"),
    ({"type": "openai_hosted", "packages": {"python": ["numpy", "torch"]}}, "environment.packages.python[1]",
     "unsupported_value"),
    ({"type": "openai_hosted", "packages": {"python": ["pandas==2.0"]}}, "environment.packages.python[0]",
     "unsupported_value"),
    ({"type": "openai_hosted", "packages": {"npm": ["left-pad"]}}, "environment.packages.npm", "unsupported_value"),
    ({"type": "openai_hosted", "packages": {"system": ["curl"]}}, "environment.packages.system", "unsupported_value"),
    ({"type": "openai_hosted", "container_size": "large"}, "environment.container_size", "unsupported_value"),
    ({"type": "openai_hosted", "container_size": "huge"}, "environment.container_size", "invalid_value"),
    ({"type": "openai_hosted", "env": {"PATH": "/evil"}}, "environment.env.PATH", "unsupported_value"),
    ({"type": "openai_hosted", "env": {"1BAD": "x"}}, "environment.env.1BAD", "invalid_value"),
    ({"type": "openai_hosted", "env": {"N": 3}}, "environment.env.N", "invalid_type"),
    ({"type": "openai_hosted", "files": [{"type": "inline", "data": "aGk=", "path": "/etc/passwd"}]},
     "environment.files[0].path", "invalid_value"),
    ({"type": "openai_hosted", "files": [{"type": "inline", "data": "aGk=", "path": "/workspace/a/b.txt"}]},
     "environment.files[0].path", "unsupported_value"),
    ({"type": "openai_hosted", "files": [{"type": "inline", "data": "not base64!", "path": "/workspace/a"}]},
     "environment.files[0].data", "invalid_value"),
    ({"type": "openai_hosted", "files": [{"type": "file_id", "file_id": "f", "path": "/workspace/a"},
                                        {"type": "inline", "data": "", "path": "/workspace/a"}]},
     "environment.files[1].path", "invalid_value"),
    ({"type": "openai_hosted", "files": [{"type": "url", "path": "/workspace/a"}]}, "environment.files[0].type",
     "invalid_value"),
    ({"type": "openai_hosted", "setup_commands": [{"command": "make"}]}, "environment.setup_commands",
     "unsupported_value"),
    ({"type": "openai_hosted", "plugins": [{"data": "…"}]}, "environment.plugins", "unsupported_value"),
    ({"type": "openai_hosted", "skills": [{"skill_id": "s"}]}, "environment.skills", "unsupported_value"),
    ({"type": "openai_hosted", "capability_directories": ["/x"]}, "environment.capability_directories",
     "unsupported_value"),
    ({"type": "openai_hosted", "environment_id": "env_1", "env": {"A": "b"}}, "environment.env", "invalid_value"),
    ({"type": "openai_hosted", "environment_id": "cntr_1"}, "environment.environment_id", "invalid_value"),
    ({"type": "openai_hosted", "environment_template_id": "env_1"}, "environment.environment_template_id",
     "invalid_value"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "param", "code"), REFUSED)
def test_every_refusal_names_its_field(value: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_environment(value, python_packages=PACKAGES, max_memory_limit="4g")
    assert (refused.value.param, refused.value.code) == (param, code)


def test_a_secret_value_is_never_in_an_error() -> None:
    with pytest.raises(InvalidRequest) as refused:
        hosted(env={"TOKEN": "s3cret\x00"})
    assert "s3cret" not in refused.value.message and refused.value.param == "environment.env.TOKEN"


def test_the_create_body_takes_no_reference_and_no_vaults() -> None:
    for body, param in [({"environment": {"type": "openai_hosted", "environment_id": "env_1"}},
                         "environment.environment_id"),
                        ({"environment": {"type": "none"}}, "environment.type"),
                        ({"environment": {"type": "openai_hosted"}, "vault_ids": ["v"]}, "vault_ids"),
                        ({}, "environment")]:  # fmt: skip
        with pytest.raises(InvalidRequest) as refused:
            parse_environment_create(body)
        assert refused.value.param == param


def test_a_template_is_narrowed_never_broadened() -> None:
    template = {"network_policy": {"type": "allowlist", "allowed_domains": ["example.com"]}, "env": {"A": "1"}}
    narrowed = resolve_config(template, {"network_policy": {"type": "allowlist", "allowed_domains": ["api.example.com"]},
                                         "env": {"B": "2"}})  # fmt: skip
    assert narrowed["network_policy"]["allowed_domains"] == ["api.example.com"] and narrowed["env"] == {"B": "2"}
    assert resolve_config(template, {"network_policy": {"type": "disabled"}})["network_policy"] == {"type": "disabled"}
    for wider in ({"type": "allowlist", "allowed_domains": ["openai.com"]}, {"type": "allowlist",
                                                                            "allowed_domains": ["com"]}):
        with pytest.raises(InvalidRequest) as refused:
            resolve_config(template, {"network_policy": wider})
        assert refused.value.param == "environment.network"
    with pytest.raises(InvalidRequest):
        resolve_config({"network_policy": {"type": "disabled"}},
                       {"network_policy": {"type": "allowlist", "allowed_domains": ["a.com"]}})  # fmt: skip


def test_a_template_object_holds_no_secret_and_comes_back_whole() -> None:
    body = {"name": "t", "env": {"TOKEN": "s3cret"}, "packages": {"python": ["numpy"]},
            "network": {"access": "restricted", "allowed_domains": ["example.com"]},
            "files": [{"type": "inline", "data": base64.b64encode(b"key!").decode(), "path": "/workspace/k"},
                      {"type": "file_id", "file_id": "file-1", "path": "/workspace/d.csv"}]}  # fmt: skip
    fields = parse_template_body(body, python_packages=PACKAGES)
    made = template_object("envtpl_1", fields, created_at=1, updated_at=1)
    assert "s3cret" not in str(made) and "a2V5IQ" not in str(made)
    assert made["files"] == [{"type": "inline", "path": "/workspace/k", "size_bytes": 4},
                             {"type": "file_id", "file_id": "file-1", "path": "/workspace/d.csv"}]  # fmt: skip
    secrets = template_secrets(fields)
    assert secrets == {"env": {"TOKEN": "s3cret"}, "files": {"/workspace/k": base64.b64encode(b"key!").decode()}}
    config = template_config(made, secrets)
    assert (config["env"], config["files"][0]["data"], config["python_packages"]) == ({"TOKEN": "s3cret"}, b"key!",
                                                                                      ["numpy"])  # fmt: skip
    changes = parse_template_body({"name": None, "network": None}, update=True)
    updated = apply_template_update(made, changes, 5)
    assert (updated["name"], updated["network"], updated["updated_at"]) == (None, {"access": "disabled",
                                                                                   "allowed_domains": []}, 5)  # fmt: skip
    assert updated["files"] == made["files"] and updated["packages"] == made["packages"]
    with pytest.raises(InvalidRequest) as refused:
        parse_template_body({"container_size": "small"})  # a template has no size
    assert refused.value.param == "container_size"


def test_the_reserved_variables_are_the_sandboxs(tmp_path: Path) -> None:
    launcher = Launcher(isolation="bwrap", directory=tmp_path, scratch=tmp_path, limits=Limits(), packages=tmp_path,
                        bwrap="bwrap", uid=None, egress=tmp_path)  # fmt: skip
    assert set(launcher.environment()) <= RESERVED_ENV
