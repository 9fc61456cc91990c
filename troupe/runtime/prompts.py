"""The Prompts API of :class:`~troupe.runtime.facade.Runtime` (a part of it, kept apart), and the
resolution of a response's ``prompt`` (:meth:`PromptCalls.resolve_prompt`).

Prompts live in the store, per tenant; what a version holds and how a reference resolves is
:mod:`troupe.protocol.prompts`.
"""

from __future__ import annotations

import time
from typing import Any

from troupe.protocol import CreateResponseRequest, ProtocolError
from troupe.protocol.prompts import new_prompt_id, prompt_not_found, prompt_reference, resolve_prompt
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page, PromptConflict

__all__ = ["PromptCalls"]


class PromptCalls:
    """The prompt calls of the runtime facade (it provides ``store``). Every method answers the
    wire objects of :func:`troupe.protocol.prompts.prompt_object`."""

    store: StoreClient

    async def create_prompt(self, tenant: str, content: dict[str, Any]) -> dict[str, Any]:
        """A new prompt with ``content`` (:func:`~troupe.protocol.prompts.parse_prompt_create`) as its version 1."""
        return await self.store.create_prompt(tenant, new_prompt_id(), content, time.time())

    async def list_prompts(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The tenant's prompts, each as its default version."""
        return await self.store.list_prompts(tenant, after=after, limit=limit, order=order)

    async def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any]:
        """A version of a prompt, its default when ``version`` is None.

        Raises:
            NotFound: no such prompt (naming ``prompt_id``) or version (naming ``version``).
        """
        found = await self.store.get_prompt(tenant, prompt_id, version)
        if found is None:
            await self._known(tenant, prompt_id)
            raise prompt_not_found(prompt_id, version, param="version")
        return found

    async def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool = True
    ) -> dict[str, Any]:
        """A new version of a prompt, made from its latest version ``from_version``.

        Raises:
            NotFound: no such prompt.
            ProtocolError: 409 ``version_conflict`` naming ``version``, when ``from_version`` is not the
                latest: another update came first (the answer says which version is), or it never existed.
        """
        try:
            found = await self.store.update_prompt(
                tenant, prompt_id, content, from_version=from_version, set_default=set_default, created_at=time.time()
            )
        except PromptConflict as exc:
            raise ProtocolError(
                f"Version {from_version} is not the latest version of prompt '{prompt_id}': version {exc.latest} is. "
                f"Update from version {exc.latest} (see what changed with GET /v1/prompts/{prompt_id}?version="
                f"{exc.latest}).",
                type="invalid_request_error", param="version", code="version_conflict", status=409,
            ) from exc  # fmt: skip
        if found is None:
            raise prompt_not_found(prompt_id)
        return found

    async def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any]:
        """Make ``version`` the prompt's default; that version.

        Raises:
            NotFound: no such prompt (naming ``prompt_id``) or version (naming ``version``).
        """
        found = await self.store.set_default_prompt_version(tenant, prompt_id, version)
        if found is None:
            await self._known(tenant, prompt_id)
            raise prompt_not_found(prompt_id, version, param="version")
        return found

    async def delete_prompt(self, tenant: str, prompt_id: str) -> dict[str, Any]:
        if not await self.store.delete_prompt(tenant, prompt_id):
            raise prompt_not_found(prompt_id)
        return {"id": prompt_id, "object": "prompt.deleted", "deleted": True}

    async def list_prompt_versions(self, tenant: str, prompt_id: str) -> dict[str, Any]:
        """Every version of a prompt, oldest first, as a list object."""
        found = await self.store.list_prompt_versions(tenant, prompt_id)
        if found is None:
            raise prompt_not_found(prompt_id)
        return Page(data=found, has_more=False).to_list_object()

    async def _known(self, tenant: str, prompt_id: str) -> None:
        if await self.store.get_prompt(tenant, prompt_id) is None:
            raise prompt_not_found(prompt_id)

    async def resolve_prompt(self, tenant: str, request: CreateResponseRequest) -> CreateResponseRequest:
        """``request`` with its ``prompt`` resolved (:func:`troupe.protocol.prompts.resolve_prompt`):
        as it is without one, or when it is resolved already.

        Raises:
            NotFound: the prompt (naming ``prompt``) or its version (``prompt.version``) does not exist.
            InvalidRequest: a variable is missing, unknown, or cannot go where its placeholder is.
        """
        if request.prompt is None or request.prelude is not None:
            return request
        prompt_id, version = prompt_reference(request.prompt)
        stored = await self.store.get_prompt(tenant, prompt_id, version)
        if stored is None:
            if version is None or await self.store.get_prompt(tenant, prompt_id) is None:
                raise prompt_not_found(prompt_id, param="prompt")
            raise prompt_not_found(prompt_id, version, param="prompt.version")
        return resolve_prompt(request, stored)

