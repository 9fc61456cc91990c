"""cluster.yaml passes the Ray cluster launcher's own checks, offline, so a typo fails CI.

``ray up`` prepares a configuration (``prepare_config``: defaults, the on-prem node type,
merged setup commands) and validates it against Ray's JSON schema (``validate_config``);
this test runs the same two helpers without touching any machine. Ray's schema leaves the
``provider`` section open, so its keys are checked against the schema's list here, and the
``troupe serve`` command the head runs is parsed by Troupe's own command line (click).
"""

from __future__ import annotations

import copy
import json
import os
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray.autoscaler
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from troupe.cli import cli

CLUSTER_YAML = Path(__file__).parents[2] / "cluster.yaml"


def load() -> dict[str, Any]:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def check(config: dict[str, Any]) -> dict[str, Any]:
    """What `ray up` does to the file before using it: prepare, then validate."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    schema_path = Path(ray.autoscaler.__file__).parent / "ray-schema.json"
    known = set(json.loads(schema_path.read_text())["properties"]["provider"]["properties"])
    unknown = set(config["provider"]) - known
    assert not unknown, f"unknown provider keys: {unknown}"
    return prepared


def test_cluster_yaml_is_a_valid_on_prem_cluster_config() -> None:
    config = load()
    prepared = check(config)
    assert prepared["provider"]["type"] == "local"
    assert prepared["head_node_type"] in prepared["available_node_types"]
    # The shared setup commands ran into both node kinds.
    assert prepared["head_setup_commands"][: len(config["setup_commands"])] == config["setup_commands"]
    assert prepared["worker_setup_commands"][: len(config["setup_commands"])] == config["setup_commands"]


def test_setup_installs_troupe_and_the_head_starts_troupe_serve_on_the_cluster() -> None:
    config = load()
    assert config["file_mounts"] == {"~/troupe": "."}
    assert any("pip install" in c and "~/troupe" in c for c in config["setup_commands"])
    serve = [c for c in config["head_start_ray_commands"] if "troupe serve" in c]
    assert len(serve) == 1
    words = shlex.split(serve[0].split("nohup", 1)[1].split(">", 1)[0])
    assert os.path.basename(words[0]) == "troupe"
    command = cli.commands[words[1]]
    params = command.make_context(words[1], words[2:]).params  # parsed as `troupe serve` would, not run
    assert (command.name, params["address"]) == ("serve", "auto")
    starts = config["head_start_ray_commands"]
    assert any("ray start --head" in c for c in starts) and starts.index(serve[0]) == len(starts) - 1


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c.__setitem__("setup_comands", c.pop("setup_commands")),  # a misspelled section
        lambda c: c.__setitem__("head_start_ray_commands", "ray start --head"),  # a string, not a list
        lambda c: c["auth"].__setitem__("ssh_usr", "ubuntu"),  # a misspelled auth key
        lambda c: c["provider"].__setitem__("head_ipp", "10.0.0.1"),  # a misspelled provider key
    ],
)
def test_a_typo_fails_the_check(mutate: Any) -> None:
    config = load()
    mutate(config)
    with pytest.raises((jsonschema.ValidationError, AssertionError)):
        check(config)
