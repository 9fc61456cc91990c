"""The Agents API's execution environments, pure: the ``environment`` a session or
``POST /v1/agents/environments`` names, environment templates' bodies and objects, and what of
them Troupe refuses, by name.

An ``openai_hosted`` environment is, in Troupe, a container of the Containers API
(:mod:`troupe.protocol.containers`): its sandbox runs the agent's commands and code. Its
``/workspace`` is the container's directory, which the sandbox mounts at ``/mnt/data`` (and
links at ``/workspace``): ``/workspace/data.csv`` is the container file ``/mnt/data/data.csv``.

What maps (:func:`parse_environment`, :func:`parse_template_body`)::

    container_size   small | medium | large  → memory_limit 1g | 4g | 16g (default medium,
                                              at most the server's max_memory_limit)
    network.access   disabled                → no network (the default)
                     restricted + allowed_domains → the egress proxy's allowlist
    packages.python  names of packages the sandbox has (numpy, pandas…): nothing is installed
    env              variables of every command and of the Python kernel (secret: see below)
    files            file_id (a Files API file, copied) or inline (standard base64), at
                     /workspace/<name> (the top directory only)
    desktop          {"enabled": false} only

Refused, naming the field (400 ``unsupported_value``): ``network.access: "enabled"`` (the
sandbox reaches the network only through its allowlist proxy), ``network.blocked_domains``,
``desktop.enabled: true``, ``packages.npm`` / ``packages.system`` and python packages the
sandbox lacks (nothing is installed at provisioning), ``setup_commands``, ``plugins``,
``skills``, ``capability_directories`` (non-empty), files below a subdirectory of
``/workspace``, and ``self_hosted`` (a Codex exec-server the service connects to: not offered).

``env`` values and inline files' contents are secrets: they are never stored in plain text
(an environment's ``env`` lives in its sandbox's memory, a template's is sealed with the
configured ``credentials_keys``: :mod:`troupe.runtime.environments`).

:func:`parse_environment` returns a plain dict::

    None given / {"type": "none"}  →  {"type": "none"}
    {"type": "openai_hosted", "environment_id": "env_…"}
        →  {"type": "openai_hosted", "environment_id": "env_…", "environment_template_id": None, "config": {}}
    {"type": "openai_hosted", "environment_template_id": "envtpl_…", "container_size": "small",
     "env": {"TOKEN": "s3cret"}, "files": [{"type": "inline", "path": "/workspace/a.txt", "data": "aGk="}]}
        →  {"type": "openai_hosted", "environment_id": None, "environment_template_id": "envtpl_…",
            "config": {"memory_limit": "1g", "env": {"TOKEN": "s3cret"},
                       "files": [{"type": "inline", "path": "/workspace/a.txt", "name": "a.txt", "data": b"hi"}]}}

``config`` holds only the fields given (each parsed): a template's are applied first
(:func:`resolve_config`), and what is still missing takes its default.

Example::

    >>> parse_environment({"type": "openai_hosted", "network": {"access": "disabled"}})["config"]
    {'network_policy': {'type': 'disabled'}}
    >>> resolve_config({}, {"memory_limit": "1g"})["memory_limit"]
    '1g'
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Mapping
from typing import Any

from .containers import MEMORY_LIMITS, parse_network_policy
from .errors import InvalidRequest, NotFound, object_body, show_value, wrong_type
from .ids import ENVIRONMENT, ENVIRONMENT_FILE, ENVIRONMENT_TEMPLATE, new_id

__all__ = [
    "CONTAINER_SIZES",
    "RESERVED_ENV",
    "WORKSPACE",
    "apply_template_update",
    "default_memory_limit",
    "environment_file_object",
    "environment_not_found",
    "environment_object",
    "environment_template_not_found",
    "new_environment_file_id",
    "new_environment_id",
    "new_environment_template_id",
    "parse_environment",
    "parse_environment_create",
    "parse_environment_file",
    "parse_template_body",
    "python_package_name",
    "resolve_config",
    "template_config",
    "template_deleted",
    "template_object",
    "template_secrets",
    "workspace_path",
]

WORKSPACE = "/workspace"
"""An environment's workspace: the container's directory (``/mnt/data`` in its sandbox)."""

CONTAINER_SIZES: dict[str, str] = {"small": "1g", "medium": "4g", "large": "16g"}
"""``container_size`` → the container's ``memory_limit``."""

RESERVED_ENV = frozenset({
    "PATH", "HOME", "TMPDIR", "LANG", "TERM", "USER", "LOGNAME", "MPLBACKEND", "MPLCONFIGDIR",
    "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
    "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
})  # fmt: skip
"""Variables the sandbox sets itself (``troupe.sandbox._launch.Launcher.environment``): an
``env`` naming one is refused, as the sandbox's value would win."""

_HOSTED_KEYS = ("type", "capability_directories", "container_size", "desktop", "env", "environment_id",
                "environment_template_id", "files", "network", "packages", "plugins", "setup_commands", "skills")  # fmt: skip
_TEMPLATE_KEYS = ("name", "capability_directories", "desktop", "env", "files", "network", "packages", "plugins",
                  "setup_commands", "skills")  # fmt: skip
_UNSERVED_LISTS = {
    "capability_directories": "capability directories are not exposed to agents here",
    "plugins": "plugins are not installed in this server's environments",
    "skills": "skills are not installed in this server's environments",
    "setup_commands": "setup commands are not run at provisioning here (run them as the agent's first commands)",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}\Z")
_MAX_ENV = 100
_MAX_ENV_VALUE = 32 << 10
_MAX_FILES = 100
_MAX_INLINE_BYTES = 16 << 20
_MAX_NAME_BYTES = 255
_MAX_TEMPLATE_NAME = 256
_DEFAULT_SIZE = "medium"


def new_environment_id() -> str:
    return new_id(ENVIRONMENT)


def new_environment_template_id() -> str:
    return new_id(ENVIRONMENT_TEMPLATE)


def new_environment_file_id() -> str:
    return new_id(ENVIRONMENT_FILE)


def python_package_name(name: str) -> str:
    """A package's name as PEP 503 compares them (``Scikit_Learn`` → ``scikit-learn``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# -- the environment of a session or of POST /v1/agents/environments ---------------------------


def parse_environment(
    value: Any, param: str = "environment", *, python_packages: Collection[str] = (), max_memory_limit: str = "64g",
    allowlists: bool = True, references: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """The SDK's ``EnvironmentParam``, checked (module docstring for what it returns).

    Args:
        param: where the value is in its body, for the errors' ``param``.
        python_packages: the packages the sandbox has (their :func:`python_package_name`).
        max_memory_limit: the largest container this server makes.
        allowlists: whether a network allowlist may be asked for (``[containers] network_allowlists``).
        references: whether ``environment_id`` (an existing environment) may be given.

    Raises:
        InvalidRequest: naming the field (``environment.type``, ``environment.files[1].path``,
            ``environment.packages.python[0]``…): a wrong shape, or what Troupe cannot provide
            (``unsupported_value``).
    """
    if value is None:
        return {"type": "none"}
    if not isinstance(value, dict):
        raise wrong_type(param, "an object", value)
    kind = value.get("type")
    if kind == "none":
        object_body(value, param, ("type",))
        return {"type": "none"}
    if kind == "self_hosted":
        raise InvalidRequest(f"Unsupported '{param}.type': 'self_hosted'. A self-hosted environment is a Codex "
                             "exec-server connected to the service's remote_url, which this server does not offer: "
                             "use 'openai_hosted' (a Troupe container) or 'none'.",
                             param=f"{param}.type", code="unsupported_value")  # fmt: skip
    if kind != "openai_hosted":
        raise InvalidRequest(f"Invalid '{param}.type': {show_value(kind)}. Expected 'none', 'openai_hosted' or "
                             "'self_hosted'.", param=f"{param}.type", code="invalid_value")  # fmt: skip
    body = object_body(value, param, _HOSTED_KEYS)
    environment_id = _optional_id(body, "environment_id", param)
    template_id = _optional_id(body, "environment_template_id", param)
    if environment_id is not None:
        if not references:
            raise InvalidRequest(f"Unknown parameter: '{param}.environment_id'.", param=f"{param}.environment_id",
                                 code="unknown_parameter")  # fmt: skip
        others = [key for key in body if key not in ("type", "environment_id")]
        if others:
            raise InvalidRequest(f"'{param}.environment_id' names an existing environment: it cannot be combined with "
                                 f"a template or inline configuration ('{param}.{others[0]}').",
                                 param=f"{param}.{others[0]}", code="invalid_value")  # fmt: skip
        return {"type": "openai_hosted", "environment_id": environment_id, "environment_template_id": None,
                "config": {}}  # fmt: skip
    config = _hosted_fields(body, f"{param}.", python_packages=python_packages, allowlists=allowlists)
    if body.get("container_size") is not None:
        config["memory_limit"] = _memory_limit(body["container_size"], f"{param}.container_size", max_memory_limit)
    return {"type": "openai_hosted", "environment_id": None, "environment_template_id": template_id, "config": config}


def parse_environment_create(body: Any, **limits: Any) -> dict[str, Any]:
    """``POST /v1/agents/environments``'s body (``{"environment", "vault_ids"}``): its
    ``environment``, as :func:`parse_environment` parses it (``openai_hosted`` only, no
    ``environment_id``; ``limits``: its keyword arguments).

    Raises:
        InvalidRequest: as :func:`parse_environment`; ``vault_ids`` (non-empty) is ``unsupported_value``.
    """
    body = object_body(body, "", ("environment", "vault_ids"))
    if body.get("vault_ids"):
        # An environment's vaults serve its sandbox environment_variable credentials, which this
        # server refuses (troupe.protocol.vaults): its egress proxy does not read inside TLS.
        raise InvalidRequest("Unsupported 'vault_ids' on an environment: an environment's vaults give its sandbox "
                             "environment_variable credentials, which this server cannot substitute (its egress proxy "
                             "does not intercept TLS). Give vault_ids to the session instead: its MCP servers get "
                             "their tokens from them.", param="vault_ids", code="unsupported_value")  # fmt: skip
    if body.get("environment") is None:
        raise InvalidRequest("Missing required parameter: 'environment'.", param="environment",
                             code="missing_required_parameter")  # fmt: skip
    value = body["environment"]
    if isinstance(value, dict) and value.get("type") not in ("openai_hosted", "self_hosted"):
        raise InvalidRequest(f"Invalid 'environment.type': {show_value(value.get('type'))}. Expected "
                             "'openai_hosted'.", param="environment.type", code="invalid_value")  # fmt: skip
    return parse_environment(value, "environment", references=False, **limits)


def resolve_config(template: Mapping[str, Any], inline: Mapping[str, Any]) -> dict[str, Any]:
    """The whole configuration of a new environment: ``template``'s fields (a parsed template's
    config with its secrets, or ``{}``), then ``inline``'s over them, then the defaults.

    Raises:
        InvalidRequest: ``inline``'s network is broader than the template's (naming
            ``environment.network``): a template's policy may be narrowed, never widened.
    """
    template_policy = template.get("network_policy")
    policy = inline.get("network_policy")
    if template_policy is not None and policy is not None and not _narrower(policy, template_policy):
        raise InvalidRequest("Invalid 'environment.network': it would broaden the template's network policy "
                             f"({_describe(template_policy)}); an override may only narrow it.",
                             param="environment.network", code="invalid_value")  # fmt: skip
    merged = {**template, **inline}
    return {
        "memory_limit": merged.get("memory_limit"),
        "network_policy": merged.get("network_policy") or {"type": "disabled"},
        "python_packages": list(merged.get("python_packages") or ()),
        "env": dict(merged.get("env") or {}),
        "files": list(merged.get("files") or ()),
    }


def default_memory_limit(max_memory_limit: str) -> str:
    """``container_size`` medium's limit, or the server's largest when that is smaller."""
    wanted = CONTAINER_SIZES[_DEFAULT_SIZE]
    return wanted if MEMORY_LIMITS.index(wanted) <= MEMORY_LIMITS.index(max_memory_limit) else max_memory_limit


def parse_environment_file(body: Any) -> dict[str, Any]:
    """``POST /v1/agents/environments/{id}/files``'s body: one file, as in ``files``
    (``{"type": "file_id", "file_id", "path"}`` or ``{"type": "inline", "data", "path"}``).

    Raises:
        InvalidRequest: naming ``path``, ``data``, ``file_id`` or ``type``.
    """
    return _file(body, "")


# -- templates ------------------------------------------------------------------------------


def parse_template_body(
    body: Any, *, update: bool = False, python_packages: Collection[str] = (), allowlists: bool = True
) -> dict[str, Any]:
    """``POST /v1/agents/environments/templates`` (or ``update``: ``…/{id}``): the template's
    fields as given (parsed, as :func:`parse_environment`'s ``config``), and ``name``.

    In an update, a field left out is kept; ``name`` or ``network`` null clears it (to no name,
    to the default policy: no network), another field null empties it.

    Raises:
        InvalidRequest: as :func:`parse_environment`, naming the top-level field (``files[0].path``).
    """
    body = object_body(body, "", _TEMPLATE_KEYS)
    fields = _hosted_fields(body, "", python_packages=python_packages, allowlists=allowlists)
    if update:
        for key, field in (("network", "network_policy"), ("packages", "python_packages"), ("env", "env"),
                           ("files", "files"), ("desktop", "desktop")):  # fmt: skip
            if key in body and body[key] is None:
                fields[field] = None
    if "name" in body:
        name = body["name"]
        if name is not None and (not isinstance(name, str) or len(name) > _MAX_TEMPLATE_NAME):
            raise wrong_type("name", f"a string of at most {_MAX_TEMPLATE_NAME} characters, or null", name)
        fields["name"] = name
    elif not update:
        fields["name"] = None
    return fields


def template_secrets(fields: Mapping[str, Any]) -> dict[str, Any]:
    """What of a template's fields is secret (its ``env``, its inline files' contents, base64),
    apart: ``{"env": {...}, "files": {path: data}}`` with only the keys ``fields`` sets."""
    secrets: dict[str, Any] = {}
    if fields.get("env") is not None:
        secrets["env"] = dict(fields["env"])
    if fields.get("files") is not None:
        secrets["files"] = {f["path"]: base64.b64encode(f["data"]).decode("ascii") for f in fields["files"]
                            if f["type"] == "inline"}  # fmt: skip
    return secrets


def template_object(
    template_id: str, fields: Mapping[str, Any], *, created_at: float, updated_at: float
) -> dict[str, Any]:
    """The wire object (the SDK's ``EnvironmentTemplate``) of a template with ``fields``
    (:func:`parse_template_body`'s, whole): no ``env``, no inline contents (their sizes only)."""
    return {
        "id": template_id, "object": "agent.environment.template", "name": fields.get("name"),
        "created_at": int(created_at), "updated_at": int(updated_at), "capability_directories": [],
        "files": _template_files(fields.get("files")), "network": _network_object(fields.get("network_policy")),
        "packages": _packages_object(fields.get("python_packages")), "plugins": [], "skills": [],
        "desktop": fields.get("desktop"),
    }  # fmt: skip


def template_config(template: Mapping[str, Any], secrets: Mapping[str, Any]) -> dict[str, Any]:
    """A stored template (its object and its opened secrets) as an environment's config, for
    :func:`resolve_config`: what the template sets, with the inline files' contents put back."""
    network = template["network"]
    policy = ({"type": "allowlist", "allowed_domains": list(network["allowed_domains"])}
              if network["access"] == "restricted" else {"type": "disabled"})  # fmt: skip
    inline = secrets.get("files") or {}
    files = []
    for f in template["files"]:
        name = f["path"].rpartition("/")[2]
        if f["type"] == "file_id":
            files.append({"type": "file_id", "file_id": f["file_id"], "path": f["path"], "name": name})
        else:
            files.append({"type": "inline", "path": f["path"], "name": name, "data": base64.b64decode(inline[f["path"]])})
    return {"network_policy": policy, "python_packages": list(template["packages"]["python"]),
            "env": dict(secrets.get("env") or {}), "files": files}  # fmt: skip


def apply_template_update(current: Mapping[str, Any], changes: Mapping[str, Any], updated_at: float) -> dict[str, Any]:
    """A template's object with ``changes`` (:func:`parse_template_body` with ``update``, its
    inline files with ``size_bytes`` in place of ``data``) made; ``env`` is not in the object."""
    updated = dict(current)
    for key, value in changes.items():
        if key == "name":
            updated["name"] = value
        elif key == "desktop":
            updated["desktop"] = value
        elif key == "network_policy":
            updated["network"] = _network_object(value)
        elif key == "python_packages":
            updated["packages"] = _packages_object(value)
        elif key == "files":
            updated["files"] = _template_files(value)
    updated["updated_at"] = int(updated_at)
    return updated


def _network_object(policy: Mapping[str, Any] | None) -> dict[str, Any]:
    if policy is not None and policy["type"] == "allowlist":
        return {"access": "restricted", "allowed_domains": list(policy["allowed_domains"])}
    return {"access": "disabled", "allowed_domains": []}


def _packages_object(python: Any) -> dict[str, Any]:
    return {"npm": [], "python": list(python or ()), "system": []}


def _template_files(files: Any) -> list[dict[str, Any]]:
    return [{"type": "file_id", "file_id": f["file_id"], "path": f["path"]} if f["type"] == "file_id"
            else {"type": "inline", "path": f["path"], "size_bytes": f.get("size_bytes", len(f.get("data") or b""))}
            for f in files or ()]  # fmt: skip


def template_deleted(template_id: str) -> dict[str, Any]:
    return {"id": template_id, "object": "agent.environment.template.deleted", "deleted": True}


# -- environments and their files ----------------------------------------------------------------


def environment_object(
    environment_id: str, *, container_id: str, status: str, files: list[dict[str, Any]]
) -> dict[str, Any]:
    """The wire object (the SDK's ``EnvironmentInfo``), with Troupe's ``container_id``: the
    container of the Containers API it runs in."""
    return {"id": environment_id, "object": "agent.environment", "type": "openai_hosted", "status": status,
            "files": files, "plugins": [], "skills": [], "container_id": container_id}  # fmt: skip


def environment_file_object(environment_id: str, path: str, size: int) -> dict[str, Any]:
    """The wire object (the SDK's ``EnvironmentFile``) of a file at ``path`` (under /workspace)."""
    return {"environment_id": environment_id, "object": "agent.environment.file", "path": path, "size_bytes": size}


def workspace_path(container_path: str) -> str:
    """A container file's path (``/mnt/data/a.csv``) in the workspace (``/workspace/a.csv``)."""
    return WORKSPACE + container_path.removeprefix("/mnt/data")


def environment_not_found(environment_id: str, param: str = "environment_id") -> NotFound:
    return NotFound(f"Environment with id '{environment_id}' not found.", param=param)


def environment_template_not_found(template_id: str, param: str = "environment_template_id") -> NotFound:
    return NotFound(f"Environment template with id '{template_id}' not found.", param=param)


# -- fields ---------------------------------------------------------------------------------------


def _hosted_fields(
    body: Mapping[str, Any], where: str, *, python_packages: Collection[str], allowlists: bool
) -> dict[str, Any]:
    """The fields an inline configuration and a template share, those given, parsed."""
    for key, why in _UNSERVED_LISTS.items():
        value = body.get(key)
        if value is None or value == []:
            continue
        if not isinstance(value, list):
            raise wrong_type(f"{where}{key}", "an array", value)
        raise InvalidRequest(f"Unsupported '{where}{key}': {why}.", param=f"{where}{key}", code="unsupported_value")
    fields: dict[str, Any] = {}
    if body.get("desktop") is not None:
        desktop = object_body(body["desktop"], f"{where}desktop", ("enabled",))
        if not isinstance(desktop.get("enabled"), bool):
            raise wrong_type(f"{where}desktop.enabled", "a boolean", desktop.get("enabled"))
        if desktop["enabled"]:
            raise InvalidRequest(f"Unsupported '{where}desktop.enabled': true. Environments here have no desktop "
                                 "or browser proxy.", param=f"{where}desktop.enabled", code="unsupported_value")  # fmt: skip
        fields["desktop"] = {"enabled": False}
    if body.get("network") is not None:
        fields["network_policy"] = _network(body["network"], f"{where}network", allowlists)
    if body.get("packages") is not None:
        fields["python_packages"] = _packages(body["packages"], f"{where}packages", python_packages)
    if body.get("env") is not None:
        fields["env"] = _env(body["env"], f"{where}env")
    if body.get("files") is not None:
        fields["files"] = _files(body["files"], f"{where}files")
    return fields


def _optional_id(body: Mapping[str, Any], key: str, param: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    prefix = ENVIRONMENT if key == "environment_id" else ENVIRONMENT_TEMPLATE
    if not isinstance(value, str) or not value.startswith(prefix + "_"):
        raise InvalidRequest(f"Invalid '{param}.{key}': {show_value(value)}. Expected an ID that begins with "
                             f"'{prefix}_'.", param=f"{param}.{key}", code="invalid_value")  # fmt: skip
    return value


def _memory_limit(value: Any, param: str, most: str) -> str:
    if value not in CONTAINER_SIZES:
        raise InvalidRequest(f"Invalid '{param}': {show_value(value)}. Expected 'small', 'medium' or 'large'.",
                             param=param, code="invalid_value")  # fmt: skip
    limit = CONTAINER_SIZES[value]
    if MEMORY_LIMITS.index(limit) > MEMORY_LIMITS.index(most):
        raise InvalidRequest(f"Unsupported '{param}': {value!r} ({limit} of memory). This server makes containers "
                             f"of at most {most!r}.", param=param, code="unsupported_value")  # fmt: skip
    return limit


def _network(value: Any, param: str, allowlists: bool) -> dict[str, Any]:
    value = object_body(value, param, ("access", "allowed_domains", "blocked_domains"))
    access = value.get("access")
    if value.get("blocked_domains"):
        raise InvalidRequest(f"Unsupported '{param}.blocked_domains': the sandbox's egress proxy allows listed "
                             f"domains only; use '{param}.allowed_domains'.", param=f"{param}.blocked_domains",
                             code="unsupported_value")  # fmt: skip
    if access == "disabled":
        if value.get("allowed_domains"):
            raise InvalidRequest(f"Invalid '{param}.allowed_domains': domains are allowed with access 'restricted' "
                                 "only.", param=f"{param}.allowed_domains", code="invalid_value")  # fmt: skip
        return {"type": "disabled"}
    if access == "enabled":
        raise InvalidRequest(f"Unsupported '{param}.access': 'enabled'. A sandbox here reaches the network only "
                             "through its egress proxy, for the domains of an allowlist: use 'restricted' with "
                             "'allowed_domains', or 'disabled'.", param=f"{param}.access", code="unsupported_value")  # fmt: skip
    if access != "restricted":
        raise InvalidRequest(f"Invalid '{param}.access': {show_value(access)}. Expected 'enabled', 'disabled' or "
                             "'restricted'.", param=f"{param}.access", code="invalid_value")  # fmt: skip
    return parse_network_policy({"type": "allowlist", "allowed_domains": value.get("allowed_domains")}, param=param,
                                allowlists=allowlists)  # fmt: skip


def _packages(value: Any, param: str, available: Collection[str]) -> list[str]:
    value = object_body(value, param, ("npm", "python", "system"))
    for key, why in (("npm", "no npm packages are installed"), ("system", "no system packages are installed")):
        if value.get(key):
            raise InvalidRequest(f"Unsupported '{param}.{key}': {why} in this server's environments.",
                                 param=f"{param}.{key}", code="unsupported_value")  # fmt: skip
    names = value.get("python")
    if names is None:
        return []
    if not isinstance(names, list):
        raise wrong_type(f"{param}.python", "an array of package names", names)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise wrong_type(f"{param}.python[{i}]", "a package name", name)
        if python_package_name(name) not in available:
            raise InvalidRequest(f"Unsupported '{param}.python[{i}]': {show_value(name)}. Nothing is installed at "
                                 "provisioning here: a package must be one the sandbox has (by its bare name), "
                                 f"such as {', '.join(sorted(available)[:5]) or 'none'}.",
                                 param=f"{param}.python[{i}]", code="unsupported_value")  # fmt: skip
    return list(dict.fromkeys(names))


def _env(value: Any, param: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise wrong_type(param, "an object of strings", value)
    if len(value) > _MAX_ENV:
        raise InvalidRequest(f"Invalid '{param}': at most {_MAX_ENV} variables, got {len(value)}.", param=param,
                             code="invalid_value")  # fmt: skip
    for name, text in value.items():
        if not _ENV_NAME.match(name):
            raise InvalidRequest(f"Invalid '{param}': {show_value(name)} is not a variable name ([A-Za-z_][A-Za-z0-9_]*).",
                                 param=f"{param}.{name}", code="invalid_value")  # fmt: skip
        if name in RESERVED_ENV:
            raise InvalidRequest(f"Unsupported '{param}.{name}': the sandbox sets {name} itself.",
                                 param=f"{param}.{name}", code="unsupported_value")  # fmt: skip
        if not isinstance(text, str):  # never the value in the message: it is a secret
            raise InvalidRequest(f"Invalid type for '{param}.{name}': expected a string.", param=f"{param}.{name}",
                                 code="invalid_type")  # fmt: skip
        if "\x00" in text or len(text) > _MAX_ENV_VALUE:
            raise InvalidRequest(f"Invalid '{param}.{name}': at most {_MAX_ENV_VALUE} characters, no NUL.",
                                 param=f"{param}.{name}", code="invalid_value")  # fmt: skip
    return dict(value)


def _files(value: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise wrong_type(param, "an array of files", value)
    if len(value) > _MAX_FILES:
        raise InvalidRequest(f"Invalid '{param}': at most {_MAX_FILES} files, got {len(value)}.", param=param,
                             code="array_above_max_length")  # fmt: skip
    files, seen = [], set()
    for i, item in enumerate(value):
        parsed = _file(item, f"{param}[{i}]")
        if parsed["path"] in seen:
            raise InvalidRequest(f"Invalid '{param}[{i}].path': {parsed['path']!r} is given twice.",
                                 param=f"{param}[{i}].path", code="invalid_value")  # fmt: skip
        seen.add(parsed["path"])
        files.append(parsed)
    return files


def _file(value: Any, where: str) -> dict[str, Any]:
    at = f"{where}." if where else ""
    if not isinstance(value, dict):
        raise wrong_type(where or "body", "an object", value)
    kind = value.get("type")
    if kind not in ("file_id", "inline"):
        raise InvalidRequest(f"Invalid '{at}type': {show_value(kind)}. Expected 'file_id' or 'inline'.",
                             param=f"{at}type", code="invalid_value")  # fmt: skip
    value = object_body(value, where, ("type", "path", "file_id" if kind == "file_id" else "data"))
    path = value.get("path")
    if not isinstance(path, str):
        raise wrong_type(f"{at}path", "an absolute path inside /workspace", path)
    name = path.removeprefix(WORKSPACE + "/") if path.startswith(WORKSPACE + "/") else None
    if name is None or name in ("", ".", "..") or "\x00" in name or len(name.encode()) > _MAX_NAME_BYTES:
        raise InvalidRequest(f"Invalid '{at}path': {show_value(path)}. Expected an absolute path inside "
                             f"{WORKSPACE} (such as {WORKSPACE}/data.csv).", param=f"{at}path", code="invalid_value")  # fmt: skip
    if "/" in name:
        raise InvalidRequest(f"Unsupported '{at}path': {show_value(path)}. Files go in {WORKSPACE} itself here, not "
                             "in its subdirectories.", param=f"{at}path", code="unsupported_value")  # fmt: skip
    if kind == "file_id":
        file_id = value.get("file_id")
        if not isinstance(file_id, str) or not file_id:
            raise wrong_type(f"{at}file_id", "a file id", file_id)
        return {"type": "file_id", "file_id": file_id, "path": path, "name": name}
    data = value.get("data")
    if not isinstance(data, str):
        raise wrong_type(f"{at}data", "a standard-base64 string", data)
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"Invalid '{at}data': not standard base64.", param=f"{at}data",
                             code="invalid_value") from None  # fmt: skip
    if len(decoded) > _MAX_INLINE_BYTES:
        raise InvalidRequest(f"Invalid '{at}data': at most {_MAX_INLINE_BYTES} bytes decoded, got {len(decoded)}.",
                             param=f"{at}data", code="invalid_value")  # fmt: skip
    return {"type": "inline", "path": path, "name": name, "data": decoded}


def _narrower(policy: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    """Whether ``policy`` allows nothing ``than`` does not (both parsed container policies)."""
    if policy["type"] == "disabled":
        return True
    if than["type"] == "disabled":
        return False
    allowed = set(than["allowed_domains"])
    return all(domain in allowed or any(domain.endswith("." + a.removeprefix("*.")) for a in allowed)
               for domain in policy["allowed_domains"])  # fmt: skip


def _describe(policy: Mapping[str, Any]) -> str:
    if policy["type"] == "disabled":
        return "no network"
    return "only " + ", ".join(policy["allowed_domains"])
