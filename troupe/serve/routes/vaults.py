"""The Agents API's vaults (OpenAI's Agents API, beta): vaults and their credentials.

Routes (the paths ``client.beta.agents.vaults`` of the ``openai`` SDK calls; they are under
``/v1/vaults``, not ``/v1/agents/``)::

    POST|GET         /v1/vaults                                      create | list (after, limit, order, status, metadata)
    GET|POST|DELETE  /v1/vaults/{vault_id}                           retrieve | update | delete
    POST|GET         /v1/vaults/{vault_id}/credentials               create | list (after, limit, order, status, metadata)
    GET|POST|DELETE  /v1/vaults/{vault_id}/credentials/{cred_id}     retrieve | update (rotate) | delete

``status`` is one status (``status=active``) or several (``status[]=active&status[]=archived``);
``metadata`` filters are ``metadata[key]=value`` pairs. Secret values are write-only: no answer
holds one. What the bodies may hold and what is refused: :mod:`troupe.protocol.vaults`; sealing
and what sessions do with them: :mod:`troupe.runtime.vaults`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from troupe.protocol import check_id_format
from troupe.protocol.vaults import CREDENTIAL, VAULT, parse_status_filter
from troupe.runtime.vaults import VaultService

from ..dependencies import Order, PageSize, Tenant, json_body, runtime
from .sessions import _metadata_filter

__all__ = ["router"]

router = APIRouter()


def _vaults(request: Request) -> VaultService:
    return runtime(request).vaults


def _filters(request: Request) -> dict[str, Any]:
    values = [v for k, v in request.query_params.multi_items() if k in ("status", "status[]")]
    return {"statuses": parse_status_filter(values), "metadata": _metadata_filter(request)}


@router.post("/v1/vaults")
async def create_vault(request: Request, who: Tenant) -> dict[str, Any]:
    return await _vaults(request).create_vault(who, await json_body(request, empty_ok=True))


@router.get("/v1/vaults")
async def list_vaults(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    page = await _vaults(request).list_vaults(who, after=after, limit=limit, order=order, **_filters(request))
    return page.to_list_object()


@router.get("/v1/vaults/{vault_id}")
async def get_vault(request: Request, vault_id: str, who: Tenant) -> dict[str, Any]:
    return await _vaults(request).get_vault(who, _vault_id(vault_id))


@router.post("/v1/vaults/{vault_id}")
async def update_vault(request: Request, vault_id: str, who: Tenant) -> dict[str, Any]:
    vault_id = _vault_id(vault_id)
    return await _vaults(request).update_vault(who, vault_id, await json_body(request, empty_ok=True))


@router.delete("/v1/vaults/{vault_id}")
async def delete_vault(request: Request, vault_id: str, who: Tenant) -> dict[str, Any]:
    return await _vaults(request).delete_vault(who, _vault_id(vault_id))


@router.post("/v1/vaults/{vault_id}/credentials")
async def create_credential(request: Request, vault_id: str, who: Tenant) -> dict[str, Any]:
    vault_id = _vault_id(vault_id)
    return await _vaults(request).create_credential(who, vault_id, await json_body(request))


@router.get("/v1/vaults/{vault_id}/credentials")
async def list_credentials(
    request: Request, vault_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _vaults(request).list_credentials(who, _vault_id(vault_id), after=after, limit=limit, order=order,
                                                   **_filters(request))  # fmt: skip
    return page.to_list_object()


@router.get("/v1/vaults/{vault_id}/credentials/{credential_id}")
async def get_credential(request: Request, vault_id: str, credential_id: str, who: Tenant) -> dict[str, Any]:
    return await _vaults(request).get_credential(who, _vault_id(vault_id), _credential_id(credential_id))


@router.post("/v1/vaults/{vault_id}/credentials/{credential_id}")
async def update_credential(request: Request, vault_id: str, credential_id: str, who: Tenant) -> dict[str, Any]:
    vault_id, credential_id = _vault_id(vault_id), _credential_id(credential_id)
    body = await json_body(request, empty_ok=True)
    return await _vaults(request).update_credential(who, vault_id, credential_id, body)


@router.delete("/v1/vaults/{vault_id}/credentials/{credential_id}")
async def delete_credential(request: Request, vault_id: str, credential_id: str, who: Tenant) -> dict[str, Any]:
    return await _vaults(request).delete_credential(who, _vault_id(vault_id), _credential_id(credential_id))


def _vault_id(value: str) -> str:
    return check_id_format(value, f"{VAULT}_", "vault_id")


def _credential_id(value: str) -> str:
    return check_id_format(value, f"{CREDENTIAL}_", "credential_id")
