"""The Containers API's bodies and objects (troupe.protocol.containers), with plain values."""

from __future__ import annotations

import pytest
from openai.types import ContainerRetrieveResponse
from openai.types.containers import FileRetrieveResponse

from troupe.protocol import InvalidRequest
from troupe.protocol.containers import (
    container_file_object,
    container_object,
    parse_container_create,
    parse_container_file_body,
    upload_name,
)


def test_the_defaults_are_openais() -> None:
    spec = parse_container_create({"name": "analysis"})
    assert (spec.name, spec.expires_minutes, spec.file_ids, spec.memory_limit, spec.network_policy) == (
        "analysis", 20, (), "1g", {"type": "disabled"})


def test_every_field_is_taken() -> None:
    spec = parse_container_create({
        "name": "n", "expires_after": {"anchor": "last_active_at", "minutes": 90}, "file_ids": ["file-a", "file-b",
        "file-a"], "memory_limit": "4g", "network_policy": {"type": "disabled"}, "skills": [],
    }, max_memory_limit="4g")  # fmt: skip
    assert (spec.expires_minutes, spec.file_ids, spec.memory_limit) == (90, ("file-a", "file-b"), "4g")


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ([], None, "invalid_type"),
        ({}, "name", "missing_required_parameter"),
        ({"name": 7}, "name", "invalid_type"),
        ({"name": "  "}, "name", "invalid_value"),
        ({"name": "n", "colour": "red"}, "colour", "unknown_parameter"),
        ({"name": "n", "expires_after": 20}, "expires_after", "invalid_type"),
        ({"name": "n", "expires_after": {"minutes": 5}}, "expires_after.anchor", "missing_required_parameter"),
        ({"name": "n", "expires_after": {"anchor": "created_at", "minutes": 5}}, "expires_after.anchor", "invalid_value"),
        ({"name": "n", "expires_after": {"anchor": "last_active_at", "minutes": 0}}, "expires_after.minutes",
         "invalid_value"),
        ({"name": "n", "expires_after": {"anchor": "last_active_at", "minutes": 1441}}, "expires_after.minutes",
         "invalid_value"),
        ({"name": "n", "expires_after": {"anchor": "last_active_at", "minutes": True}}, "expires_after.minutes",
         "invalid_type"),
        ({"name": "n", "expires_after": {"anchor": "last_active_at", "minutes": 5, "x": 1}}, "expires_after.x",
         "unknown_parameter"),
        ({"name": "n", "file_ids": "file-a"}, "file_ids", "invalid_type"),
        ({"name": "n", "file_ids": ["file-a", 3]}, "file_ids[1]", "invalid_type"),
        ({"name": "n", "memory_limit": "2g"}, "memory_limit", "invalid_value"),
        ({"name": "n", "memory_limit": "16g"}, "memory_limit", "unsupported_value"),
        ({"name": "n", "network_policy": {"type": "allowlist", "allowed_domains": []}},
         "network_policy.allowed_domains", "invalid_value"),
        ({"name": "n", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org", "no spaces.org"]}},
         "network_policy.allowed_domains[1]", "invalid_value"),
        ({"name": "n", "network_policy": {"type": "allowlist", "allowed_domains": "pypi.org"}},
         "network_policy.allowed_domains", "invalid_type"),
        ({"name": "n", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org"],
                                          "domain_secrets": [{"domain": "pypi.org", "name": "T", "value": "v"}]}},
         "network_policy.domain_secrets", "unsupported_value"),
        ({"name": "n", "network_policy": {"type": "open"}}, "network_policy.type", "invalid_value"),
        ({"name": "n", "network_policy": "disabled"}, "network_policy", "invalid_type"),
        ({"name": "n", "network_policy": {"type": "disabled", "x": 1}}, "network_policy.x", "unknown_parameter"),
        ({"name": "n", "skills": [{"type": "skill_reference", "skill_id": "s"}]}, "skills", "unsupported_parameter"),
    ],
)
def test_a_bad_body_names_its_field(body: object, param: str | None, code: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_container_create(body, max_memory_limit="4g", max_minutes=1440)
    assert (raised.value.param, raised.value.code, raised.value.status) == (param, code, 400)


def test_an_allowlist_is_kept_unless_the_server_allows_none() -> None:
    body = {"name": "n", "network_policy": {"type": "allowlist", "allowed_domains": ["PyPI.org", "*.github.com"]}}
    spec = parse_container_create(body)
    assert spec.network_policy == {"type": "allowlist", "allowed_domains": ["pypi.org", "*.github.com"]}
    with pytest.raises(InvalidRequest, match="without network access") as refused:
        parse_container_create(body, allowlists=False)
    assert (refused.value.param, refused.value.code) == ("network_policy", "unsupported_value")


def test_file_bodies_and_upload_names() -> None:
    assert parse_container_file_body({"file_id": "file-a"}) == "file-a"
    for body, param in (({}, "file_id"), ({"file_id": 3}, "file_id"), ({"file_id": "f", "x": 1}, "x")):
        with pytest.raises(InvalidRequest) as raised:
            parse_container_file_body(body)
        assert raised.value.param == param
    assert upload_name("reports/2024/q1.csv") == "q1.csv" and upload_name("C:\\data\\x.txt") == "x.txt"
    for bad in (None, "", "a/..", "dir/", "x\x00y", "é" * 200):
        with pytest.raises(InvalidRequest) as raised:
            upload_name(bad)
        assert raised.value.param == "file"


def test_the_objects_are_the_sdks() -> None:
    container = container_object("cntr_1", name="n", created_at=10.7, status="running", expires_minutes=20,
                                 last_active_at=11.2, memory_limit="1g", network_policy={"type": "disabled"})  # fmt: skip
    parsed = ContainerRetrieveResponse.model_validate(container)
    assert parsed.model_dump(exclude_unset=True) == container and (parsed.created_at, parsed.last_active_at) == (10, 11)
    file = container_file_object("cfile_1", container_id="cntr_1", relative="plots/a.png", size=3, created_at=1.5,
                                 source="assistant")  # fmt: skip
    assert FileRetrieveResponse.model_validate(file).model_dump() == file
    assert file["path"] == "/mnt/data/plots/a.png"
