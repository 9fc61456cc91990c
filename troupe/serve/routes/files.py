"""The Files, Vector Stores and Embeddings APIs (OpenAI's), over the runtime's vector stores.

Routes::

    POST        /v1/files                                  upload (multipart: file, purpose)
    GET         /v1/files                                  list (purpose, after, limit 1–10,000, order)
    GET|DELETE  /v1/files/{file_id}                        retrieve | delete (also out of every store)
    GET         /v1/files/{file_id}/content                the bytes
    POST|GET    /v1/vector_stores                          create | list (after, before, limit, order)
    GET|POST|DELETE /v1/vector_stores/{vs}                 retrieve | update | delete
    POST        /v1/vector_stores/{vs}/search              hybrid search
    POST|GET    /v1/vector_stores/{vs}/files               attach (ingestion starts) | list (filter, …)
    GET|POST|DELETE /v1/vector_stores/{vs}/files/{file_id} retrieve | update attributes | detach
    GET         /v1/vector_stores/{vs}/files/{file_id}/content   the file's chunks
    POST        /v1/vector_stores/{vs}/file_batches        attach many (file_ids, or files)
    GET         /v1/vector_stores/{vs}/file_batches/{b}    retrieve
    POST        /v1/vector_stores/{vs}/file_batches/{b}/cancel
    GET         /v1/vector_stores/{vs}/file_batches/{b}/files
    POST        /v1/embeddings                             the configured embedders

A file or batch still ``in_progress`` answers with ``openai-poll-after-ms: 100``: the
``openai`` SDK's ``create_and_poll`` waits that long between polls, not its default second.

Uploads are read whole (bounded): a body longer than the file limit (``max_file_bytes``) plus
a little for the multipart framing is refused with 413 as soon as it is seen to be, before it
is all read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException

from troupe.protocol import InvalidRequest, ProtocolError, check_id_format, check_metadata, describe_type
from troupe.protocol.query_params import QueryInt
from troupe.rag import wire
from troupe.runtime.rag import VectorStores

from ..bodies import read_within
from ..dependencies import Order, PageSize, Tenant, context, json_body, runtime

__all__ = ["router"]

_FORM_SLACK = 64 * 1024
"""Bytes of multipart framing and small fields allowed beyond the file limit."""
_POLL_AFTER = {"openai-poll-after-ms": "100"}
_STATUSES = Literal["in_progress", "completed", "failed", "cancelled"]

_MEDIA_TYPES = {".pdf": "application/pdf", ".html": "text/html", ".htm": "text/html", ".md": "text/markdown",
                ".txt": "text/plain", ".json": "application/json", ".csv": "text/csv"}  # fmt: skip

router = APIRouter()


def _stores(request: Request) -> VectorStores:
    return runtime(request).vector_stores


# -- files -----------------------------------------------------------------------------


@router.post("/v1/files")
async def create_file(request: Request, who: Tenant) -> dict[str, Any]:
    filename, data, purpose, expires_in_s = await _read_upload(request, context(request).settings.max_file_bytes)
    return await _stores(request).create_file(
        who, filename=filename, purpose=purpose, data=data, expires_in_s=expires_in_s
    )


@router.get("/v1/files")
async def list_files(
    request: Request,
    who: Tenant,
    purpose: str | None = None,
    after: str | None = None,
    limit: Annotated[QueryInt, Query(ge=1, le=10_000, description="Page size, 1–10,000.")] = 10_000,
    order: Order = "desc",
) -> dict[str, Any]:
    page = await _stores(request).list_files(who, purpose=purpose, after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/files/{file_id}")
async def get_file(request: Request, file_id: str, who: Tenant) -> dict[str, Any]:
    return await _stores(request).get_file(who, _file_id(file_id))


@router.delete("/v1/files/{file_id}")
async def delete_file(request: Request, file_id: str, who: Tenant) -> dict[str, Any]:
    return await _stores(request).delete_file(who, _file_id(file_id))


@router.get("/v1/files/{file_id}/content", response_class=Response)
async def file_content(request: Request, file_id: str, who: Tenant) -> Response:
    filename, data = await _stores(request).file_content(who, _file_id(file_id))
    media = _MEDIA_TYPES.get("." + filename.rpartition(".")[2].lower(), "application/octet-stream")
    return Response(data, media_type=media)


# -- vector stores -------------------------------------------------------------------------


@router.post("/v1/vector_stores")
async def create_vector_store(request: Request, who: Tenant) -> dict[str, Any]:
    body = wire.object_body(await json_body(request), allowed=(
        "name", "description", "metadata", "expires_after", "file_ids", "chunking_strategy", "embedding_model"))  # fmt: skip
    name, description = _optional_str(body, "name"), _optional_str(body, "description")
    model = _optional_str(body, "embedding_model")
    return await _stores(request).create_vector_store(
        who, name=name, description=description, metadata=check_metadata(body.get("metadata")),
        expires_after=wire.check_expires_after(body.get("expires_after")),
        file_ids=_file_ids(body.get("file_ids") or [], most=500), embedding_model=model,
        chunking=wire.chunking_strategy(body.get("chunking_strategy")),
    )  # fmt: skip


@router.get("/v1/vector_stores")
async def list_vector_stores(
    request: Request, who: Tenant,
    after: str | None = None, before: str | None = None, limit: PageSize = 20, order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _stores(request).list_vector_stores(who, after=after, before=before, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/vector_stores/{vector_store_id}")
async def get_vector_store(request: Request, vector_store_id: str, who: Tenant) -> dict[str, Any]:
    return await _stores(request).get_vector_store(who, _store_id(vector_store_id))


@router.post("/v1/vector_stores/{vector_store_id}")
async def update_vector_store(request: Request, vector_store_id: str, who: Tenant) -> dict[str, Any]:
    body = wire.object_body(await json_body(request), allowed=("name", "metadata", "expires_after"))
    changes: dict[str, Any] = {}
    if "name" in body:
        changes["name"] = _optional_str(body, "name")
    if "metadata" in body:
        changes["metadata"] = check_metadata(body["metadata"])
    if "expires_after" in body:
        changes["expires_after"] = wire.check_expires_after(body["expires_after"])
    return await _stores(request).update_vector_store(who, _store_id(vector_store_id), changes)


@router.delete("/v1/vector_stores/{vector_store_id}")
async def delete_vector_store(request: Request, vector_store_id: str, who: Tenant) -> dict[str, Any]:
    return await _stores(request).delete_vector_store(who, _store_id(vector_store_id))


@router.post("/v1/vector_stores/{vector_store_id}/search")
async def search(request: Request, vector_store_id: str, who: Tenant) -> dict[str, Any]:
    body = wire.object_body(await json_body(request), required=("query",), allowed=(
        "query", "max_num_results", "filters", "ranking_options", "rewrite_query"))  # fmt: skip
    if not isinstance(body.get("rewrite_query", False), bool):
        raise InvalidRequest("Invalid type for 'rewrite_query': expected a boolean.", param="rewrite_query",
                             code="invalid_type")  # fmt: skip
    hits = await _stores(request).search(
        who, [_store_id(vector_store_id)], body["query"], max_num_results=body.get("max_num_results", 10),
        filters=body.get("filters"), ranking_options=body.get("ranking_options"),
    )  # fmt: skip
    return {
        "object": "vector_store.search_results.page", "search_query": wire.check_query(body["query"]),
        "data": [_search_result(hit) for hit in hits], "has_more": False, "next_page": None,
    }  # fmt: skip


# -- a store's files ---------------------------------------------------------------------------


@router.post("/v1/vector_stores/{vector_store_id}/files")
async def add_file(request: Request, vector_store_id: str, who: Tenant) -> Response:
    body = wire.object_body(await json_body(request), required=("file_id",),
                            allowed=("file_id", "attributes", "chunking_strategy"))  # fmt: skip
    found = await _stores(request).add_file(
        who, _store_id(vector_store_id), _file_id(_str(body, "file_id"), "file_id"),
        attributes=wire.check_attributes(body.get("attributes")),
        chunking=wire.chunking_strategy(body.get("chunking_strategy")),
    )  # fmt: skip
    return _polled(found)


@router.get("/v1/vector_stores/{vector_store_id}/files")
async def list_store_files(
    request: Request, vector_store_id: str, who: Tenant, filter: _STATUSES | None = None,  # noqa: A002
    after: str | None = None, before: str | None = None, limit: PageSize = 20, order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _stores(request).list_store_files(who, _store_id(vector_store_id), status=filter, after=after,
                                                   before=before, limit=limit, order=order)  # fmt: skip
    return page.to_list_object()


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def get_store_file(request: Request, vector_store_id: str, file_id: str, who: Tenant) -> Response:
    return _polled(await _stores(request).get_store_file(who, _store_id(vector_store_id), _file_id(file_id)))


@router.post("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def update_store_file(request: Request, vector_store_id: str, file_id: str, who: Tenant) -> dict[str, Any]:
    body = wire.object_body(await json_body(request), required=("attributes",), allowed=("attributes",))
    attributes = wire.check_attributes(body["attributes"])
    return await _stores(request).update_store_file(who, _store_id(vector_store_id), _file_id(file_id), attributes)


@router.delete("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def delete_store_file(request: Request, vector_store_id: str, file_id: str, who: Tenant) -> dict[str, Any]:
    return await _stores(request).delete_store_file(who, _store_id(vector_store_id), _file_id(file_id))


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}/content")
async def store_file_content(request: Request, vector_store_id: str, file_id: str, who: Tenant) -> dict[str, Any]:
    texts = await _stores(request).store_file_chunks(who, _store_id(vector_store_id), _file_id(file_id))
    return {"object": "vector_store.file_content.page", "data": [{"type": "text", "text": t} for t in texts],
            "has_more": False, "next_page": None}  # fmt: skip


# -- file batches ------------------------------------------------------------------------------


@router.post("/v1/vector_stores/{vector_store_id}/file_batches")
async def create_batch(request: Request, vector_store_id: str, who: Tenant) -> Response:
    body = wire.object_body(await json_body(request), allowed=("file_ids", "files", "attributes", "chunking_strategy"))
    return _polled(await _stores(request).create_batch(who, _store_id(vector_store_id), _batch_entries(body)))


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}")
async def get_batch(request: Request, vector_store_id: str, batch_id: str, who: Tenant) -> Response:
    return _polled(await _stores(request).get_batch(who, _store_id(vector_store_id), _batch_id(batch_id)))


@router.post("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel")
async def cancel_batch(request: Request, vector_store_id: str, batch_id: str, who: Tenant) -> dict[str, Any]:
    return await _stores(request).cancel_batch(who, _store_id(vector_store_id), _batch_id(batch_id))


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files")
async def list_batch_files(
    request: Request, vector_store_id: str, batch_id: str, who: Tenant, filter: _STATUSES | None = None,  # noqa: A002
    after: str | None = None, before: str | None = None, limit: PageSize = 20, order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _stores(request).list_store_files(who, _store_id(vector_store_id), batch=_batch_id(batch_id),
                                                   status=filter, after=after, before=before, limit=limit,
                                                   order=order)  # fmt: skip
    return page.to_list_object()


# -- embeddings --------------------------------------------------------------------------------


@router.post("/v1/embeddings")
async def embeddings(request: Request, who: Tenant) -> dict[str, Any]:
    body = wire.object_body(await json_body(request), required=("model", "input"),
                            allowed=("model", "input", "encoding_format", "dimensions", "user"))  # fmt: skip
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise InvalidRequest(f"Invalid 'encoding_format': {encoding!r}. Expected 'float' or 'base64'.",
                             param="encoding_format", code="invalid_value")  # fmt: skip
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)
                                   or not 1 <= dimensions <= 8192):  # fmt: skip
        raise InvalidRequest("Invalid 'dimensions': expected an integer from 1 to 8192.", param="dimensions",
                             code="invalid_value")  # fmt: skip
    return await _stores(request).embed(_str(body, "model"), _embedding_inputs(body["input"]),
                                        encoding_format=encoding, dimensions=dimensions)  # fmt: skip


# -- helpers ------------------------------------------------------------------------------------------


async def _read_upload(request: Request, limit: int) -> tuple[str, bytes, str, int | None]:
    """``(filename, bytes, purpose, expires in s)`` of a multipart upload, within ``limit`` bytes."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidRequest("Uploads must be multipart/form-data with the fields 'file' and 'purpose'.",
                             param="file", code="invalid_type")  # fmt: skip
    raw = await read_within(request, limit + _FORM_SLACK, lambda: _too_large(limit))

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=1, max_fields=8)
    except MultiPartException as exc:
        raise InvalidRequest(f"The multipart body could not be read: {exc.message}", param="file") from exc
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
    data = await upload.read()
    if len(data) > limit:
        raise _too_large(limit)
    purpose = form.get("purpose")
    if not isinstance(purpose, str) or not purpose:
        raise InvalidRequest(
            "Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter"
        )
    if purpose not in wire.FILE_PURPOSES:
        expected = ", ".join(f"'{p}'" for p in wire.FILE_PURPOSES)
        raise InvalidRequest(f"Invalid 'purpose': {purpose!r}. Expected one of {expected}.", param="purpose",
                             code="invalid_value")  # fmt: skip
    return upload.filename or "upload", data, purpose, _expires_in(form)


def _expires_in(form: Any) -> int | None:
    seconds = form.get("expires_after[seconds]")
    if seconds is None:
        return None
    if form.get("expires_after[anchor]") != "created_at" or not str(seconds).isdigit() \
            or not 3600 <= int(seconds) <= 2_592_000:  # fmt: skip
        raise InvalidRequest("Invalid 'expires_after': expected anchor 'created_at' and 3600–2592000 seconds.",
                             param="expires_after", code="invalid_value")  # fmt: skip
    return int(seconds)


def _too_large(limit: int) -> ProtocolError:
    return ProtocolError(f"The file is too large: at most {limit} bytes are allowed.", type="invalid_request_error",
                         param="file", code="file_too_large", status=413)  # fmt: skip


def _file_id(value: str, param: str = "file_id") -> str:
    return check_id_format(value, "file-", param)


def _store_id(value: str) -> str:
    return check_id_format(value, "vs_", "vector_store_id")


def _batch_id(value: str) -> str:
    return check_id_format(value, "vsfb_", "batch_id")


def _str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise InvalidRequest(f"Invalid type for '{key}': expected a string, got {describe_type(value)}.", param=key,
                             code="invalid_type")  # fmt: skip
    return value


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    return None if body.get(key) is None else _str(body, key)


def _file_ids(value: Any, param: str = "file_ids", *, most: int = 2000) -> list[str]:
    return [_file_id(f, param) for f in wire.check_file_ids(value, param, most=most)]


def _batch_entries(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch's files: ``file_ids`` with the shared ``attributes`` and ``chunking_strategy``, or
    ``files``, each with its own (OpenAI: the two are mutually exclusive)."""
    if ("file_ids" in body) == ("files" in body):
        raise InvalidRequest("Give exactly one of 'file_ids' and 'files'.", param="file_ids")
    if "file_ids" in body:
        attributes = wire.check_attributes(body.get("attributes"))
        chunking = wire.chunking_strategy(body.get("chunking_strategy"))
        ids = _file_ids(body["file_ids"])
        return [{"file_id": f, "attributes": attributes, "chunking": chunking} for f in ids]
    files = body["files"]
    if not isinstance(files, list) or not files or len(files) > 2000:
        raise InvalidRequest("Invalid 'files': expected an array of 1 to 2000 objects.", param="files")
    entries: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(files):
        entry = wire.object_body(entry, allowed=("file_id", "attributes", "chunking_strategy"), required=("file_id",))
        fid = _file_id(_str(entry, "file_id"), f"files[{i}].file_id")
        entries[fid] = {"file_id": fid, "attributes": wire.check_attributes(entry.get("attributes"), f"files[{i}].attributes"),
                        "chunking": wire.chunking_strategy(entry.get("chunking_strategy"), f"files[{i}].chunking_strategy")}  # fmt: skip
    return list(entries.values())


def _embedding_inputs(value: Any) -> list[str]:
    inputs = [value] if isinstance(value, str) else value
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise InvalidRequest("Invalid 'input': expected a string or an array of strings (token arrays are not "
                             "supported).", param="input", code="invalid_type")  # fmt: skip
    if len(inputs) > 2048:
        raise InvalidRequest("Invalid 'input': at most 2048 inputs.", param="input", code="array_above_max_length")
    if any(not i for i in inputs):
        raise InvalidRequest(
            "Invalid 'input': an input cannot be an empty string.", param="input", code="invalid_value"
        )
    return inputs


def _search_result(hit: dict[str, Any]) -> dict[str, Any]:
    return {"file_id": hit["file_id"], "filename": hit["filename"], "score": hit["score"],
            "attributes": hit["attributes"] or {}, "content": [{"type": "text", "text": hit["text"]}]}  # fmt: skip


def _polled(found: dict[str, Any]) -> Response:
    """``found`` as JSON; still in progress: with the SDK's poll interval hint."""
    headers = _POLL_AFTER if found.get("status") == "in_progress" else None
    return JSONResponse(found, headers=headers)
