"""The Agents API's execution environments and their templates: :class:`EnvironmentService`,
what ``Runtime.environments`` is.

Ray-free. An ``openai_hosted`` environment is a container of the Containers API, made through
:class:`~troupe.runtime.containers.ContainerService` (so it has a container's limits, expiry,
metrics and tenant), with its files copied into the container's directory (its ``/workspace``).
Sessions run the agent's commands and code in that container, through the
:class:`~troupe.runtime.container_runs.ContainerRunner` (the ``container_id`` of the
environment's object).

Secrets, never in plain text on disk (:mod:`troupe.storage.credentials`):

* an **environment's** ``env`` goes to its sandbox when it is provisioned (the sandbox is
  started then, with the variables in its processes' environment) and nowhere else: not in the
  store, not in a file. A sandbox stops only when its container expires or is deleted (then the
  environment is done too) or when the server stops: an environment provisioned before a
  restart runs its commands without its ``env`` (provision a new one).
* a **template's** ``env`` and inline files' contents are sealed with the configured
  ``credentials_keys`` (Fernet) in its row; without keys, a template that has any is refused
  (400 naming ``env`` / ``files[i]``): a template is used across restarts and processes,
  which memory alone cannot serve.

Example::

    environments = EnvironmentService(settings, store, containers, fleet, keys)
    made = await environments.provision("acme", parse_environment({"type": "openai_hosted", "env": {"TOKEN": "…"}}))
    made["container_id"]        # run the agent's commands there (ContainerRunner.run_shell)
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib.metadata
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from troupe.protocol import InvalidRequest, NotFound, ServerError
from troupe.protocol.containers import MOUNT
from troupe.protocol.environments import (
    WORKSPACE,
    default_memory_limit,
    environment_file_object,
    environment_not_found,
    environment_object,
    environment_template_not_found,
    new_environment_file_id,
    new_environment_id,
    new_environment_template_id,
    parse_environment,
    parse_environment_create,
    parse_environment_file,
    parse_template_body,
    python_package_name,
    resolve_config,
    template_config,
    template_deleted,
    template_object,
    template_secrets,
    workspace_path,
)
from troupe.runtime.container_runs import ContainerFleet, ContainerRunner
from troupe.runtime.containers import ContainerService
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import StoreClient
from troupe.sandbox import SandboxUnavailable, check_available
from troupe.storage import Order, Page
from troupe.storage.credentials import CredentialKeys, CredentialsUnavailable

__all__ = ["EnvironmentService", "sandbox_python_packages"]

log = logging.getLogger(__name__)


@functools.cache
def sandbox_python_packages(directory: str | None = None) -> frozenset[str]:
    """The Python packages the sandbox's code can import (``make install`` puts them in
    ``.venv/sandbox-packages``), by :func:`~troupe.protocol.environments.python_package_name`."""
    from troupe.sandbox import DEFAULT_PACKAGES

    path = Path(directory) if directory is not None else DEFAULT_PACKAGES
    if not path.is_dir():
        return frozenset()
    return frozenset(python_package_name(d.metadata["Name"]) for d in importlib.metadata.distributions(path=[str(path)])
                     if d.metadata["Name"])  # fmt: skip


class EnvironmentService:
    """Environments (provisioned on containers) and environment templates (module docstring).

    Args:
        settings: the runtime's settings (``[containers]``: the memory cap, network allowlists).
        store: the store client (its environments area, and the Files API's files).
        containers: the runtime's containers.
        fleet: where sandboxes run (an environment with ``env`` starts its sandbox on it).
        keys: what seals a template's secrets (``credentials_keys``).
    """

    def __init__(
        self, settings: RuntimeSettings, store: StoreClient, containers: ContainerService, fleet: ContainerFleet | None,
        keys: CredentialKeys,
    ) -> None:  # fmt: skip
        self.settings = settings
        self.store = store
        self.containers = containers
        self.fleet = fleet
        self.keys = keys

    def _limits(self) -> dict[str, Any]:
        return {"python_packages": sandbox_python_packages(), "allowlists": self.settings.containers.network_allowlists}

    # -- templates ---------------------------------------------------------------------------

    async def create_template(self, tenant: str, body: Any) -> dict[str, Any]:
        """``POST /v1/agents/environments/templates``: a new template; its object.

        Raises:
            InvalidRequest: the body (:func:`~troupe.protocol.environments.parse_template_body`);
                ``env`` or inline ``files`` without ``credentials_keys`` to seal them with.
        """
        fields = parse_template_body(body, **self._limits())
        sealed = self._seal(template_secrets(fields))
        now = time.time()
        template = template_object(new_environment_template_id(), fields, created_at=now, updated_at=now)
        return await self.store.create_environment_template(tenant, template, sealed)

    async def get_template(self, tenant: str, template_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such template (naming ``environment_template_id``)."""
        return (await self._template(tenant, template_id))[0]

    async def list_templates(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        return await self.store.list_environment_templates(tenant, after=after, limit=limit, order=order)

    async def update_template(self, tenant: str, template_id: str, body: Any) -> dict[str, Any]:
        """``POST /v1/agents/environments/templates/{id}``: the fields given replace the
        template's; its object.

        Raises:
            NotFound: no such template. InvalidRequest: as :meth:`create_template`.
        """
        changes = parse_template_body(body, update=True, **self._limits())
        set_secrets = "env" in changes or "files" in changes
        sealed = None
        if set_secrets:
            # Read, opened, changed and sealed here (the store has no keys): of two updates of a
            # template's secrets at once, the later replaces them whole.
            _, kept = await self._template(tenant, template_id)
            secrets = {**self._open(kept), **template_secrets(changes)}
            for key in ("env", "files"):
                if key in changes and changes[key] is None:
                    secrets.pop(key, None)
            sealed = self._seal(secrets)
        safe = {key: value for key, value in changes.items() if key != "env"}
        if safe.get("files") is not None:  # the store keeps the sizes of inline files, never their bytes
            safe["files"] = [_without_data(f) for f in safe["files"]]
        found = await self.store.update_environment_template(tenant, template_id, safe, time.time(), secrets=sealed,
                                                             set_secrets=set_secrets)  # fmt: skip
        if found is None:
            raise environment_template_not_found(template_id)
        return found

    async def delete_template(self, tenant: str, template_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such template."""
        if not await self.store.delete_environment_template(tenant, template_id):
            raise environment_template_not_found(template_id)
        return template_deleted(template_id)

    async def _template(
        self, tenant: str, template_id: str, param: str = "environment_template_id"
    ) -> tuple[dict[str, Any], str | None]:
        found = await self.store.get_environment_template(tenant, template_id)
        if found is None:
            raise environment_template_not_found(template_id, param)
        return found[0], found[1]

    def _seal(self, secrets: Mapping[str, Any]) -> str | None:
        """``secrets`` sealed (None when there are none).

        Raises:
            InvalidRequest: there are some and no key to seal them with (naming ``env`` or ``files``).
        """
        given = {key: value for key, value in secrets.items() if value}
        if not given:
            return None
        if not self.keys.sealing:
            param = "env" if "env" in given else "files"
            raise InvalidRequest(f"Unsupported '{param}' in a template: a template's environment variables and inline "
                                 "files are secrets, kept sealed with the server's credentials_keys, and none are set "
                                 "here. Give them inline when the environment is made instead, or set "
                                 "credentials_keys.", param=param, code="unsupported_value")  # fmt: skip
        return self.keys.keep(given)

    def _open(self, kept: str | None) -> dict[str, Any]:
        try:
            return dict(self.keys.open(kept))
        except CredentialsUnavailable as exc:
            raise InvalidRequest(f"The template's secrets cannot be opened ({exc}): update its env and files, or "
                                 "make it again.", param="environment_template_id", code="invalid_value") from exc  # fmt: skip

    # -- environments ------------------------------------------------------------------------

    async def create_environment(self, tenant: str, body: Any) -> dict[str, Any]:
        """``POST /v1/agents/environments``: a new environment, provisioned; its object.

        Raises:
            InvalidRequest / NotFound: as :meth:`provision`, naming ``environment.…``.
        """
        limits = {**self._limits(), "max_memory_limit": self.settings.containers.max_memory_limit}
        spec = parse_environment_create(body, **limits)
        made = await self.provision(tenant, spec)
        assert made is not None
        return made

    def parse(self, value: Any, param: str = "environment") -> dict[str, Any]:
        """:func:`~troupe.protocol.environments.parse_environment` with this server's limits (what
        a session's body is checked with)."""
        return parse_environment(value, param, max_memory_limit=self.settings.containers.max_memory_limit,
                                 **self._limits())  # fmt: skip

    async def provision(self, tenant: str, environment: dict[str, Any]) -> dict[str, Any] | None:
        """The environment ``environment`` (:meth:`parse`'s) names: None for ``none``; the
        existing one for ``environment_id`` (checked: the tenant's, ``ready``); else a new one:
        a container with the resolved configuration, its files copied in, its sandbox started
        with ``env`` when there is one. The environment's object (``id``, ``container_id``).

        Raises:
            NotFound: the environment or template (naming ``environment.environment_id`` /
                ``environment.environment_template_id``), a Files API file (``environment.files[i].file_id``).
            InvalidRequest: the environment is not ready (expired); an override broadens the
                template's network; the template's secrets cannot be opened.
        """
        if environment["type"] == "none":
            return None
        if environment["environment_id"] is not None:
            found = await self.get_environment(tenant, environment["environment_id"], "environment.environment_id")
            if found["status"] != "ready":
                raise InvalidRequest(f"Environment '{found['id']}' is {found['status']}: provision a new one.",
                                     param="environment.environment_id", code="invalid_value")  # fmt: skip
            return found
        self._check_can_run(tenant)
        template: dict[str, Any] = {}
        if environment["environment_template_id"] is not None:
            stored, kept = await self._template(tenant, environment["environment_template_id"],
                                                "environment.environment_template_id")  # fmt: skip
            template = template_config(stored, self._open(kept))
        config = resolve_config(template, environment["config"])
        memory = config["memory_limit"] or default_memory_limit(self.settings.containers.max_memory_limit)
        env_id = new_environment_id()
        container = await self.containers.create_container(tenant, {"name": f"environment {env_id}",
                                                                    "memory_limit": memory,
                                                                    "network_policy": config["network_policy"]})  # fmt: skip
        cid = container["id"]
        try:
            files = [await self._copy_in(tenant, cid, f, f"environment.files[{i}].file_id")
                     for i, f in enumerate(config["files"])]  # fmt: skip
            if config["env"]:
                await self._start(tenant, cid, config["env"])
            made = environment_object(env_id, container_id=cid, status="ready", files=files)
            return await self.store.create_environment(tenant, made, time.time())
        except BaseException:
            try:
                await self.containers.delete_container(tenant, cid)
            except Exception:  # noqa: BLE001 - it expires by itself; the first error is the one to tell
                log.warning("environment %s: its container %s was not deleted", env_id, cid, exc_info=True)
            raise

    async def get_environment(self, tenant: str, environment_id: str, param: str = "environment_id") -> dict[str, Any]:
        """An environment, its ``status`` its container's now: ``ready`` while the container
        runs, ``expired`` once it expired, ``failed`` once it was deleted.

        Raises:
            NotFound: no such environment (naming ``param``).
        """
        found = await self.store.get_environment(tenant, environment_id)
        if found is None:
            raise environment_not_found(environment_id, param)
        return await self._with_status(tenant, found)

    async def list_environments(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        page = await self.store.list_environments(tenant, after=after, limit=limit, order=order)
        return Page(data=[await self._with_status(tenant, e) for e in page.data], has_more=page.has_more)

    async def _with_status(self, tenant: str, environment: dict[str, Any]) -> dict[str, Any]:
        container = await self.store.get_container(tenant, environment["container_id"])
        status = "failed" if container is None else "ready" if container["status"] == "running" else "expired"
        return {**environment, "status": status}

    # -- environment files ----------------------------------------------------------------------

    async def create_file(self, tenant: str, environment_id: str, body: Any) -> dict[str, Any]:
        """``POST /v1/agents/environments/{id}/files``: a file copied into the environment's
        workspace, replacing the file at its path; its ``agent.environment.file``.

        Raises:
            NotFound: the environment, the Files API file (``file_id``). InvalidRequest: the body;
                the environment's container is expired.
        """
        spec = parse_environment_file(body)
        environment = await self.get_environment(tenant, environment_id)
        cid = environment["container_id"]
        page = await self.containers.list_files(tenant, cid, limit=100)
        while True:  # the file at that path goes first: the copy takes its name, not a prefixed one
            for old in page.data:
                if old["path"] == f"{MOUNT}/{spec['name']}":
                    await self.containers.delete_file(tenant, cid, old["id"])
            if not page.has_more:
                break
            page = await self.containers.list_files(tenant, cid, after=page.data[-1]["id"], limit=100)
        made = await self._copy_in(tenant, cid, spec, "file_id")
        return environment_file_object(environment_id, made["path"], made["size_bytes"])

    async def list_files(
        self, tenant: str, environment_id: str, *, limit: int = 20, order: Order = "desc", page: str | None = None,
        path: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The files in the environment's workspace now (those its commands wrote too), by path
        (``order`` over the paths' components), ``path``: only under that directory; ``page``:
        the ``next`` of the previous page. A token page: ``{"object": "list", "data", "has_more", "next"}``.

        Raises:
            NotFound: the environment. InvalidRequest: ``path`` is not in /workspace, ``page`` is
                no token; the container is expired.
        """
        directory = (path or WORKSPACE).rstrip("/")
        if directory != WORKSPACE and not directory.startswith(WORKSPACE + "/"):
            raise InvalidRequest(f"Invalid 'path': {path!r}. Expected a directory inside {WORKSPACE}.", param="path",
                                 code="invalid_value")  # fmt: skip
        environment = await self.get_environment(tenant, environment_id)
        cid = environment["container_id"]
        files: list[dict[str, Any]] = []
        batch = await self.containers.list_files(tenant, cid, limit=100, order="asc")
        files.extend(batch.data)
        while batch.has_more:
            batch = await self.containers.list_files(tenant, cid, after=batch.data[-1]["id"], limit=100, order="asc")
            files.extend(batch.data)
        found = sorted(((workspace_path(f["path"]), f["bytes"]) for f in files), key=lambda pair: pair[0].split("/"),
                       reverse=order == "desc")  # fmt: skip
        found = [pair for pair in found if pair[0].startswith(directory + "/")]
        if page is not None:
            after = _token_path(page)
            key = after.split("/")
            found = [p for p in found if (p[0].split("/") < key if order == "desc" else p[0].split("/") > key)]
        shown = found[:limit]
        more = len(found) > limit
        data = [environment_file_object(environment_id, p, size) for p, size in shown]
        next_token = base64.urlsafe_b64encode(shown[-1][0].encode()).decode() if more and shown else None
        return {"object": "list", "data": data, "has_more": more, "next": next_token}

    # -- helpers ------------------------------------------------------------------------------

    async def _copy_in(self, tenant: str, container_id: str, spec: Mapping[str, Any], param: str) -> dict[str, Any]:
        """Copy one file (``file_id`` or inline) into the container as ``spec["name"]``; its
        environment's ``files[]`` entry."""
        if spec["type"] == "file_id":
            found = await self.store.file_content(tenant, spec["file_id"])
            if found is None:
                raise NotFound(f"No file found with id '{spec['file_id']}'.", param=param)
            data = found[1]
        else:
            data = spec["data"]
        made = await self.containers.create_file(tenant, container_id, filename=spec["name"], data=data)
        entry = {"id": new_environment_file_id(), "type": spec["type"], "path": workspace_path(made["path"]),
                 "size_bytes": made["bytes"]}  # fmt: skip
        if spec["type"] == "file_id":
            entry["file_id"] = spec["file_id"]
        return entry

    def _check_can_run(self, tenant: str) -> None:
        """An environment is where an agent's commands run: refuse one where they could not, as a
        request's ``code_interpreter`` or ``shell`` tool is refused (``check_code_tool``).

        Raises:
            InvalidRequest: the tenant may not run code here (``[containers] code_tenants``).
            ServerError: bubblewrap is missing (``sandbox_unavailable``).
        """
        allowed = self.settings.containers.code_tenants
        if self.fleet is None or ("*" not in allowed and tenant not in allowed):
            raise InvalidRequest("Unsupported 'environment.type': 'openai_hosted'. This server runs no code for this "
                                 "tenant ([containers] code_tenants), so an environment would have nothing to run.",
                                 param="environment.type", code="unsupported_value")  # fmt: skip
        try:
            check_available(self.settings.containers.isolation, bwrap=self.settings.containers.bwrap)
        except SandboxUnavailable as exc:
            raise ServerError(f"Environments cannot run on this server: {exc}.", param="environment.type",
                              code="sandbox_unavailable") from exc  # fmt: skip

    async def _start(self, tenant: str, container_id: str, env: Mapping[str, str]) -> None:
        assert self.fleet is not None  # _check_can_run
        await ContainerRunner(self.containers, self.fleet, tenant).start(container_id, env)


def _without_data(spec: Mapping[str, Any]) -> dict[str, Any]:
    if spec["type"] != "inline":
        return dict(spec)
    return {key: value for key, value in spec.items() if key != "data"} | {"size_bytes": len(spec["data"])}


def _token_path(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidRequest(f"Invalid 'page': {token!r} is not a page token of this listing.", param="page",
                             code="invalid_value") from None  # fmt: skip
