"""The Containers API (OpenAI's): containers, the files in them, and their bytes.

Routes::

    POST|GET    /v1/containers                                      create | list (name, after, limit, order)
    GET|DELETE  /v1/containers/{container_id}                       retrieve | delete
    POST|GET    /v1/containers/{container_id}/files                 add a file | list (after, limit, order)
    GET|DELETE  /v1/containers/{container_id}/files/{file_id}       retrieve | delete
    GET         /v1/containers/{container_id}/files/{file_id}/content   the bytes

A file is added as the ``openai`` SDK sends it (``client.containers.files.create``): a
multipart upload whose ``file`` field holds the bytes (its filename names it in ``/mnt/data``),
or a JSON body ``{"file_id": "file-…"}`` naming a file of the Files API to copy in. An upload
past the ``[containers]`` ``max_file_bytes`` answers 413 ``file_too_large`` as soon as it is
seen to be, before it is all read.

What the bodies may hold, the objects and the errors: :mod:`troupe.protocol.containers`; what
the runtime does: :mod:`troupe.runtime.containers`.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException

from troupe.protocol import InvalidRequest, ProtocolError, check_id_format
from troupe.protocol.containers import parse_container_file_body
from troupe.protocol.ids import CONTAINER, CONTAINER_FILE
from troupe.runtime.containers import ContainerService

from ..bodies import read_within
from ..dependencies import Order, PageSize, Tenant, json_body, runtime

__all__ = ["router"]

_FORM_SLACK = 64 * 1024
"""Bytes of multipart framing and small fields allowed beyond the file limit."""

router = APIRouter()


def _containers(request: Request) -> ContainerService:
    return runtime(request).containers


# -- containers ------------------------------------------------------------------------


@router.post("/v1/containers")
async def create_container(request: Request, who: Tenant) -> dict[str, Any]:
    return await _containers(request).create_container(who, await json_body(request))


@router.get("/v1/containers")
async def list_containers(
    request: Request, who: Tenant, name: str | None = None, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _containers(request).list_containers(who, name=name, after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/containers/{container_id}")
async def get_container(request: Request, container_id: str, who: Tenant) -> dict[str, Any]:
    return await _containers(request).get_container(who, _container_id(container_id))


@router.delete("/v1/containers/{container_id}")
async def delete_container(request: Request, container_id: str, who: Tenant) -> dict[str, Any]:
    return await _containers(request).delete_container(who, _container_id(container_id))


# -- container files --------------------------------------------------------------------


@router.post("/v1/containers/{container_id}/files")
async def create_container_file(request: Request, container_id: str, who: Tenant) -> dict[str, Any]:
    container_id = _container_id(container_id)
    containers = _containers(request)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        filename, data, file_id = await _read_upload(request, containers.settings.max_file_bytes)
        return await containers.create_file(who, container_id, filename=filename, data=data, file_id=file_id)
    file_id = parse_container_file_body(await json_body(request))
    return await containers.create_file(who, container_id, file_id=file_id)


@router.get("/v1/containers/{container_id}/files")
async def list_container_files(
    request: Request, container_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _containers(request).list_files(who, _container_id(container_id), after=after, limit=limit,
                                                 order=order)  # fmt: skip
    return page.to_list_object()


@router.get("/v1/containers/{container_id}/files/{file_id}")
async def get_container_file(request: Request, container_id: str, file_id: str, who: Tenant) -> dict[str, Any]:
    return await _containers(request).get_file(who, _container_id(container_id), _file_id(file_id))


@router.delete("/v1/containers/{container_id}/files/{file_id}")
async def delete_container_file(request: Request, container_id: str, file_id: str, who: Tenant) -> dict[str, Any]:
    return await _containers(request).delete_file(who, _container_id(container_id), _file_id(file_id))


@router.get("/v1/containers/{container_id}/files/{file_id}/content", response_class=Response)
async def container_file_content(request: Request, container_id: str, file_id: str, who: Tenant) -> Response:
    path, data = await _containers(request).file_content(who, _container_id(container_id), _file_id(file_id))
    media, _ = mimetypes.guess_type(path, strict=False)
    return Response(data, media_type=media or "application/octet-stream")


# -- helpers ------------------------------------------------------------------------------


async def _read_upload(request: Request, limit: int) -> tuple[str | None, bytes | None, str | None]:
    """``(filename, bytes, None)`` of a multipart upload's ``file``, within ``limit`` bytes; or
    ``(None, None, file_id)`` of a form that names a Files API file instead."""
    raw = await read_within(request, limit + _FORM_SLACK, lambda: _too_large(limit))

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=1, max_fields=8)
    except MultiPartException as exc:
        raise InvalidRequest(f"The multipart body could not be read: {exc.message}", param="file") from exc
    upload, file_id = form.get("file"), form.get("file_id")
    if isinstance(upload, UploadFile) == isinstance(file_id, str):
        raise InvalidRequest("Give exactly one of 'file' (the bytes, as a multipart upload) and 'file_id' (a file of "
                             "the Files API).", param="file", code="invalid_value")  # fmt: skip
    if isinstance(file_id, str):
        return None, None, parse_container_file_body({"file_id": file_id})
    assert isinstance(upload, UploadFile)
    data = await upload.read()
    if len(data) > limit:
        raise _too_large(limit)
    return upload.filename, data, None


def _too_large(limit: int) -> ProtocolError:
    return ProtocolError(f"The file is too large: at most {limit} bytes are allowed.", type="invalid_request_error",
                         param="file", code="file_too_large", status=413)  # fmt: skip


def _container_id(value: str) -> str:
    return check_id_format(value, f"{CONTAINER}_", "container_id")


def _file_id(value: str) -> str:
    return check_id_format(value, f"{CONTAINER_FILE}_", "file_id")
