"""The app's OpenAPI description: request bodies and OpenAI error answers FastAPI cannot see.

The POST handlers of :mod:`.routes` read the raw request (to answer OpenAI's 400s rather
than FastAPI's 422s), so FastAPI describes no request body for them. :func:`install_openapi`
wraps ``app.openapi()`` to add them, built from the validators the server itself uses:

- ``POST /v1/responses``: :class:`~troupe.protocol.request.CreateResponseRequest`, with its
  free-form nested fields narrowed to the ``openai`` SDK types the request validates them
  against (input items, tools, ``tool_choice``, ``text``, ``reasoning``…);
- the three conversation bodies (``{items?, metadata?}``, ``{metadata}``, ``{items}``),
  with the limits :mod:`.routes.conversations` enforces (≤ 20 items; metadata ≤ 16 pairs, keys ≤ 64 and
  values ≤ 512 characters);
- the Prompts API's three bodies (create, update, set the default version);
- the Containers API's two: a container's create, and a container file's (a multipart upload,
  or JSON naming a file of the Files API);
- the Agents API's two: an agent's create and update, with what this server serves of them
  (the tool types, service tiers and settings it refuses are left out);
- the Agents API's automations: create (one-time or periodic) and update, with a target's
  inline agent as an agent's create body without ``name`` and ``metadata``;
- the vaults' four: a vault's create and update, a credential's create and rotation (the
  credential types served; secrets write-only);
- the webhook endpoints' four: create, update, rotate_secret and test (the event types Troupe sends).

Every operation also lists its error answers (OpenAI's ``{"error": {message, type, param,
code}}`` body (OpenAI's error shape): 400, 401, 404, 413 where there is a body, 429; 424/500 for a
create whose run failed; 409 for a prompt update that lost a race) in place of FastAPI's 422, which the server never sends; the
create's 200 is JSON or, with ``"stream": true``, Server-Sent Events. OpenAPI links say which
answer names the object other operations address (a created response, conversation, item).

The result is OpenAPI 3.1 (JSON Schema 2020-12); pydantic's ``$defs`` live under
``components/schemas``. It is built once, on the first ``GET /openapi.json``, and
tests/e2e/test_fuzz_openapi.py fuzzes the server from it.

Example::

    app = create_app(get_runtime, settings)   # calls install_openapi(app)
    app.openapi()["paths"]["/v1/responses"]["post"]["requestBody"]

Every route's description is generated from the same validators the routes use.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from typing import Any

from fastapi import FastAPI
from openai.types.responses import response_create_params as create_params
from openai.types.responses.tool_param import ToolParam
from pydantic import TypeAdapter

from troupe.protocol import sdk as _sdk
from troupe.protocol.agents import REASONING_EFFORTS, REASONING_SUMMARIES, SERVED_SERVICE_TIERS
from troupe.protocol.automations import MAX_AUTOMATION_NAME, MAX_RUN_AT
from troupe.protocol.containers import MAX_EXPIRES_MINUTES, MEMORY_LIMITS
from troupe.protocol.prompts import MAX_VERSION, VARIABLE_PATTERN
from troupe.protocol.request import METADATA_MAX_KEY, METADATA_MAX_KEYS, METADATA_MAX_VALUE, CreateResponseRequest
from troupe.protocol.vaults import MAX_SECRET_CHARS
from troupe.protocol.webhooks import MAX_EVENT_TYPES, SENT_EVENT_TYPES

from .bounds import MAX_ITEMS

__all__ = ["install_openapi"]

_REF = "#/components/schemas/{model}"
_JSON = "application/json"

# (status, component name, description) of the error answers; each is OpenAI's error body.
_ERRORS: tuple[tuple[str, str, str], ...] = (
    ("400", "BadRequest", "Invalid request: malformed JSON or an invalid parameter (named by `error.param`)."),
    ("401", "Unauthorized", "Missing or unknown API key (only when the server is configured with API keys)."),
    ("404", "NotFound", "The addressed response, conversation, item, prompt, model, container, file, agent or "
     "automation does not exist."),
    ("409", "Conflict", "A prompt updated from a version that is not its latest (`version_conflict`)."),
    ("413", "PayloadTooLarge", "The request body is too large (`request_too_large`)."),
    ("424", "ExternalConnectorError", "An MCP server the request names could not be used."),
    ("429", "RateLimited", "Too many requests (`rate_limit_exceeded`): retry after `Retry-After` seconds."),
    ("500", "ServerError", "The run failed on the server's side (`x-should-retry: false`)."),
)
_ALL_ERRORS = ("400", "401", "404", "413", "429")  # 413 only where there is a body
_CREATE_ERRORS = ("424", "500")  # POST /v1/responses: a run that failed
_CONFLICTS = {("post", "/v1/prompts/{prompt_id}")}  # 409: an update from a version that is not the latest

_RESPONSE = {"response_id": "$response.body#/id"}
_CONVERSATION = {"conversation_id": "$response.body#/id"}
_ITEM = {"conversation_id": "$request.path.conversation_id", "item_id": "$response.body#/data/0/id"}
_PROMPT = {"prompt_id": "$response.body#/id"}
_CONTAINER = {"container_id": "$response.body#/id"}
_CONTAINER_FILE = {"container_id": "$request.path.container_id", "file_id": "$response.body#/id"}
_AGENT = {"agent_id": "$response.body#/id"}
_ENVIRONMENT = {"environment_id": "$response.body#/id"}
_TEMPLATE = {"template_id": "$response.body#/id"}
_AUTOMATION = {"automation_id": "$response.body#/id"}
_VAULT = {"vault_id": "$response.body#/id"}
_CREDENTIAL = {"vault_id": "$request.path.vault_id", "credential_id": "$response.body#/id"}
_WEBHOOK = {"endpoint_id": "$response.body#/id"}
# OpenAPI links: which operation's answer names the object other operations address.
_LINKS: dict[tuple[str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("post", "/v1/responses"): {
        "GetResponse": ("get", "/v1/responses/{response_id}", _RESPONSE),
        "DeleteResponse": ("delete", "/v1/responses/{response_id}", _RESPONSE),
        "ListInputItems": ("get", "/v1/responses/{response_id}/input_items", _RESPONSE),
        "GetStepTraces": ("get", "/v1/responses/{response_id}/step_traces", _RESPONSE),
        "CancelResponse": ("post", "/v1/responses/{response_id}/cancel", _RESPONSE),
    },
    ("post", "/v1/conversations"): {
        "GetConversation": ("get", "/v1/conversations/{conversation_id}", _CONVERSATION),
        "UpdateConversation": ("post", "/v1/conversations/{conversation_id}", _CONVERSATION),
        "DeleteConversation": ("delete", "/v1/conversations/{conversation_id}", _CONVERSATION),
        "AddItems": ("post", "/v1/conversations/{conversation_id}/items", _CONVERSATION),
        "ListItems": ("get", "/v1/conversations/{conversation_id}/items", _CONVERSATION),
    },
    ("post", "/v1/prompts"): {
        "GetPrompt": ("get", "/v1/prompts/{prompt_id}", _PROMPT),
        "UpdatePrompt": ("post", "/v1/prompts/{prompt_id}", _PROMPT),
        "DeletePrompt": ("delete", "/v1/prompts/{prompt_id}", _PROMPT),
        "ListPromptVersions": ("get", "/v1/prompts/{prompt_id}/versions", _PROMPT),
        "SetDefaultPromptVersion": ("post", "/v1/prompts/{prompt_id}/set-default-version", _PROMPT),
    },
    ("post", "/v1/containers"): {
        "GetContainer": ("get", "/v1/containers/{container_id}", _CONTAINER),
        "DeleteContainer": ("delete", "/v1/containers/{container_id}", _CONTAINER),
        "CreateContainerFile": ("post", "/v1/containers/{container_id}/files", _CONTAINER),
        "ListContainerFiles": ("get", "/v1/containers/{container_id}/files", _CONTAINER),
    },
    ("post", "/v1/containers/{container_id}/files"): {
        "GetContainerFile": ("get", "/v1/containers/{container_id}/files/{file_id}", _CONTAINER_FILE),
        "GetContainerFileContent": ("get", "/v1/containers/{container_id}/files/{file_id}/content", _CONTAINER_FILE),
        "DeleteContainerFile": ("delete", "/v1/containers/{container_id}/files/{file_id}", _CONTAINER_FILE),
    },
    ("post", "/v1/agents"): {
        "GetAgent": ("get", "/v1/agents/{agent_id}", _AGENT),
        "UpdateAgent": ("post", "/v1/agents/{agent_id}", _AGENT),
        "DeleteAgent": ("delete", "/v1/agents/{agent_id}", _AGENT),
    },
    ("post", "/v1/agents/environments"): {
        "GetEnvironment": ("get", "/v1/agents/environments/{environment_id}", _ENVIRONMENT),
        "AddEnvironmentFile": ("post", "/v1/agents/environments/{environment_id}/files", _ENVIRONMENT),
        "ListEnvironmentFiles": ("get", "/v1/agents/environments/{environment_id}/files", _ENVIRONMENT),
    },
    ("post", "/v1/agents/environments/templates"): {
        "GetEnvironmentTemplate": ("get", "/v1/agents/environments/templates/{template_id}", _TEMPLATE),
        "UpdateEnvironmentTemplate": ("post", "/v1/agents/environments/templates/{template_id}", _TEMPLATE),
        "DeleteEnvironmentTemplate": ("delete", "/v1/agents/environments/templates/{template_id}", _TEMPLATE),
    },
    ("post", "/v1/agents/automations"): {
        "GetAutomation": ("get", "/v1/agents/automations/{automation_id}", _AUTOMATION),
        "UpdateAutomation": ("post", "/v1/agents/automations/{automation_id}", _AUTOMATION),
        "DeleteAutomation": ("delete", "/v1/agents/automations/{automation_id}", _AUTOMATION),
        "PauseAutomation": ("post", "/v1/agents/automations/{automation_id}/pause", _AUTOMATION),
        "ListAutomationInvocations": ("get", "/v1/agents/automations/{automation_id}/invocations", _AUTOMATION),
    },
    ("post", "/v1/vaults"): {
        "GetVault": ("get", "/v1/vaults/{vault_id}", _VAULT),
        "UpdateVault": ("post", "/v1/vaults/{vault_id}", _VAULT),
        "DeleteVault": ("delete", "/v1/vaults/{vault_id}", _VAULT),
        "CreateCredential": ("post", "/v1/vaults/{vault_id}/credentials", _VAULT),
        "ListCredentials": ("get", "/v1/vaults/{vault_id}/credentials", _VAULT),
    },
    ("post", "/v1/vaults/{vault_id}/credentials"): {
        "GetCredential": ("get", "/v1/vaults/{vault_id}/credentials/{credential_id}", _CREDENTIAL),
        "UpdateCredential": ("post", "/v1/vaults/{vault_id}/credentials/{credential_id}", _CREDENTIAL),
        "DeleteCredential": ("delete", "/v1/vaults/{vault_id}/credentials/{credential_id}", _CREDENTIAL),
    },
    ("post", "/v1/webhook_endpoints"): {
        "GetWebhookEndpoint": ("get", "/v1/webhook_endpoints/{endpoint_id}", _WEBHOOK),
        "UpdateWebhookEndpoint": ("post", "/v1/webhook_endpoints/{endpoint_id}", _WEBHOOK),
        "DeleteWebhookEndpoint": ("delete", "/v1/webhook_endpoints/{endpoint_id}", _WEBHOOK),
        "RotateWebhookSecret": ("post", "/v1/webhook_endpoints/{endpoint_id}/rotate_secret", _WEBHOOK),
        "ListWebhookDeliveries": ("get", "/v1/webhook_endpoints/{endpoint_id}/deliveries", _WEBHOOK),
    },
    ("post", "/v1/conversations/{conversation_id}/items"): {
        "GetItem": ("get", "/v1/conversations/{conversation_id}/items/{item_id}", _ITEM),
        "DeleteItem": ("delete", "/v1/conversations/{conversation_id}/items/{item_id}", _ITEM),
    },
}


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` describe the JSON request bodies and the error answers.

    Call it once, after the routes' error handlers are installed (the routes themselves
    may be added later: the description is built lazily, on first use, and cached).
    """
    generate = app.openapi  # FastAPI's own: builds and caches app.openapi_schema

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = copy.deepcopy(generate())
            _describe(schema)
            app.openapi_schema = _strip_private_names(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


# -- the patch ---------------------------------------------------------------------------


def _describe(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    bodies = _body_schemas(schemas)
    schemas.update(_error_schemas())
    headers = {
        "x-should-retry": {"$ref": "#/components/headers/XShouldRetry"},
        "retry-after": {"$ref": "#/components/headers/RetryAfter"},
    }
    components["responses"] = {
        name: {
            "description": description,
            "headers": {k: v for k, v in headers.items() if (k == "retry-after") == (status == "429")},
            "content": {_JSON: {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
        }
        for status, name, description in _ERRORS
    }
    components["headers"] = {
        "XShouldRetry": {
            "description": "`false` on every error but 429/503: the `openai` SDK then does not retry "
            "(a non-idempotent agent loop must not be re-run).",
            "schema": {"type": "string", "enum": ["false"]},
        },
        "RetryAfter": {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}},
    }
    components["securitySchemes"] = {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key, when the server is configured with `api_keys`; otherwise none is needed.",
        }
    }

    error_names = {status: name for status, name, _ in _ERRORS}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if not path.startswith("/v1/"):
                continue
            operation["security"] = [{"bearerAuth": []}, {}]
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)  # the server answers 400, never FastAPI's 422
            body = bodies.get((method, path))
            statuses = [s for s in _ALL_ERRORS if s != "413" or body is not None]
            if (method, path) == ("post", "/v1/responses"):
                statuses += _CREATE_ERRORS
            if (method, path) in _CONFLICTS:
                statuses.append("409")
            for status in sorted(statuses):
                responses[status] = {"$ref": f"#/components/responses/{error_names[status]}"}
            if body is not None:
                operation["requestBody"] = body
    _describe_create_success(schema["paths"]["/v1/responses"]["post"])
    _add_links(schema["paths"])

    # FastAPI's 422 bodies are gone; so are their schemas, unless something else uses them.
    if "#/components/schemas/HTTPValidationError'" not in repr(schema["paths"]):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)


def _add_links(paths: dict[str, Any]) -> None:
    for (method, path), links in _LINKS.items():
        ok = paths[path][method]["responses"]["200"]
        ok["links"] = {
            name: {"operationId": paths[target_path][target_method]["operationId"], "parameters": parameters}
            for name, (target_method, target_path, parameters) in links.items()
        }


def _describe_create_success(operation: dict[str, Any]) -> None:
    ok = operation["responses"]["200"]
    ok["description"] = (
        "The Response object; with `\"stream\": true`, Server-Sent Events (one `response.*` event "
        "per frame, then `data: [DONE]`)."
    )
    ok["content"] = {
        _JSON: {"schema": {"type": "object", "additionalProperties": True, "title": "Response"}},
        # OpenAPI 3.1 has no itemSchema: `schema` describes each event of the stream.
        "text/event-stream": {
            "schema": {
                "type": "object",
                "title": "ServerSentEvent",
                "required": ["data"],
                "properties": {
                    "event": {"type": "string", "description": "The event's `type`, e.g. `response.completed`."},
                    "data": {"type": "string", "description": "The event as JSON; the last frame is `[DONE]`."},
                },
            }
        },
    }


# -- request bodies ----------------------------------------------------------------------


def _body_schemas(schemas: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The request bodies by (method, path); their component schemas go into ``schemas``."""
    found, nested = _sdk_schemas()
    for name in found:
        if name in schemas:
            raise RuntimeError(f"OpenAPI component {name!r} is defined twice")
    schemas.update(found)

    def ref(name: str) -> dict[str, str]:
        return {"$ref": _REF.format(model=name)}

    def nullable(value: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [value, {"type": "null"}]}

    schemas["Metadata"] = {
        "type": "object",
        "description": f"Up to {METADATA_MAX_KEYS} string pairs: keys of at most {METADATA_MAX_KEY} "
        f"characters, values of at most {METADATA_MAX_VALUE}.",
        "maxProperties": METADATA_MAX_KEYS,
        "propertyNames": {"type": "string", "maxLength": METADATA_MAX_KEY},
        "additionalProperties": {"type": "string", "maxLength": METADATA_MAX_VALUE},
    }
    items = {
        "type": "array",
        "maxItems": MAX_ITEMS,
        "items": ref("InputItem"),
        "description": f"Up to {MAX_ITEMS} input items, stored in order.",
    }
    schemas["ConversationCreateRequest"] = {
        "type": "object",
        "title": "ConversationCreateRequest",
        "additionalProperties": False,
        "properties": {"items": nullable(items), "metadata": nullable(ref("Metadata"))},
    }
    schemas["ConversationUpdateRequest"] = {
        "type": "object",
        "title": "ConversationUpdateRequest",
        "additionalProperties": False,
        "required": ["metadata"],
        "properties": {"metadata": nullable(ref("Metadata"))},
    }
    schemas["ConversationItemsCreateRequest"] = {
        "type": "object",
        "title": "ConversationItemsCreateRequest",
        "additionalProperties": False,
        "required": ["items"],
        "properties": {"items": items},
    }
    schemas["ModerationCreateRequest"] = {
        "type": "object",
        "title": "ModerationCreateRequest",
        "additionalProperties": False,
        "required": ["input"],
        "properties": {
            "input": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}}],
                      "description": "A text, or texts, to classify (text only)."},
            "model": {"type": "string", "description": "A configured guardrail's name, or a `moderation` "
                      "guardrail's `upstream_model`; default: the first `moderation` guardrail."},
        },
    }  # fmt: skip
    schemas.update(_prompt_schemas(ref, nullable))
    schemas.update(_container_schemas())
    schemas.update(_agent_schemas(ref, nullable))
    schemas.update(_environment_schemas(ref, nullable))
    schemas.update(_automation_schemas(ref, nullable, schemas["AgentCreateRequest"]["properties"]))
    schemas.update(_vault_schemas(ref, nullable))
    schemas.update(_webhook_schemas())
    _narrow_create_request(schemas["CreateResponseRequest"], nested, ref, nullable)

    def body(name: str, *, required: bool = True) -> dict[str, Any]:
        return {"required": required, "content": {_JSON: {"schema": ref(name)}}}

    return {
        ("post", "/v1/responses"): body("CreateResponseRequest"),
        ("post", "/v1/moderations"): body("ModerationCreateRequest"),
        ("post", "/v1/conversations"): body("ConversationCreateRequest", required=False),  # empty body: {}
        ("post", "/v1/conversations/{conversation_id}"): body("ConversationUpdateRequest"),
        ("post", "/v1/conversations/{conversation_id}/items"): body("ConversationItemsCreateRequest"),
        ("post", "/v1/prompts"): body("PromptCreateRequest"),
        ("post", "/v1/prompts/{prompt_id}"): body("PromptUpdateRequest"),
        ("post", "/v1/prompts/{prompt_id}/set-default-version"): body("PromptSetDefaultVersionRequest"),
        ("post", "/v1/containers"): body("ContainerCreateRequest"),
        ("post", "/v1/containers/{container_id}/files"): {
            "required": True,
            "content": {
                "multipart/form-data": {"schema": ref("ContainerFileUpload")},
                _JSON: {"schema": ref("ContainerFileCreateRequest")},
            },
        },
        ("post", "/v1/agents"): body("AgentCreateRequest"),
        ("post", "/v1/agents/{agent_id}"): body("AgentUpdateRequest", required=False),  # empty body: no change
        ("post", "/v1/agents/environments"): body("EnvironmentCreateRequest"),
        ("post", "/v1/agents/environments/{environment_id}/files"): body("EnvironmentFile"),
        ("post", "/v1/agents/environments/templates"): body("EnvironmentTemplateRequest", required=False),
        ("post", "/v1/agents/environments/templates/{template_id}"): body("EnvironmentTemplateRequest",
                                                                          required=False),  # fmt: skip
        ("post", "/v1/agents/automations"): body("AutomationCreateRequest"),
        ("post", "/v1/agents/automations/{automation_id}"): body("AutomationUpdateRequest", required=False),
        ("post", "/v1/vaults"): body("VaultCreateRequest", required=False),
        ("post", "/v1/vaults/{vault_id}"): body("VaultUpdateRequest", required=False),
        ("post", "/v1/vaults/{vault_id}/credentials"): body("CredentialCreateRequest"),
        ("post", "/v1/vaults/{vault_id}/credentials/{credential_id}"): body("CredentialUpdateRequest", required=False),
        ("post", "/v1/webhook_endpoints"): body("WebhookEndpointCreateRequest"),
        ("post", "/v1/webhook_endpoints/{endpoint_id}"): body("WebhookEndpointUpdateRequest", required=False),
        ("post", "/v1/webhook_endpoints/{endpoint_id}/rotate_secret"): body("WebhookRotateSecretRequest",
                                                                            required=False),  # fmt: skip
        ("post", "/v1/webhook_endpoints/{endpoint_id}/test"): body("WebhookTestRequest"),
    }


def _webhook_schemas() -> dict[str, Any]:
    """The webhook endpoints' bodies (:mod:`troupe.protocol.webhooks` checks them)."""
    name = {"type": "string", "minLength": 1, "description": "Trimmed; 1 to 256 UTF-8 bytes."}
    url = {"type": "string", "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://", "description": "An http(s) URL the webhook URL "
           "policy allows (public, or matching [webhooks] allowed_urls)."}  # fmt: skip
    kind = {"enum": list(SENT_EVENT_TYPES)}
    types = {"type": "array", "minItems": 1, "maxItems": MAX_EVENT_TYPES, "items": kind}
    fields = {"name": name, "url": url, "event_types": types}
    return {
        "WebhookEndpointCreateRequest": {"type": "object", "title": "WebhookEndpointCreateRequest",
                                         "additionalProperties": False, "required": ["name", "url", "event_types"],
                                         "properties": fields},
        "WebhookEndpointUpdateRequest": {"type": "object", "title": "WebhookEndpointUpdateRequest",
                                         "additionalProperties": False, "properties": fields},
        "WebhookRotateSecretRequest": {"type": "object", "title": "WebhookRotateSecretRequest",
                                       "additionalProperties": False,
                                       "properties": {"keep_old_secret_active_for_24_hours": {"type": "boolean"}}},
        "WebhookTestRequest": {"type": "object", "title": "WebhookTestRequest", "additionalProperties": False,
                               "required": ["event_type"], "properties": {"event_type": kind}},
    }  # fmt: skip


def _vault_schemas(ref: Any, nullable: Any) -> dict[str, Any]:
    """The vaults' bodies (:mod:`troupe.protocol.vaults` checks them); what is refused
    (``environment_variable``) is left out."""
    name = {"type": "string", "minLength": 1, "description": "Trimmed; 1 to 256 UTF-8 bytes."}
    secret = {"type": "string", "minLength": 1, "maxLength": MAX_SECRET_CHARS, "pattern": "^[^\\r\\n\\x00]*$",
              "description": "Write-only: never returned."}  # fmt: skip
    url = {"type": "string", "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://", "description": "An http(s) URL."}
    endpoint_auth = {"oneOf": [
        {"type": "object", "additionalProperties": False, "required": ["type"],
         "properties": {"type": {"const": "none"}}},
        {"type": "object", "additionalProperties": False, "required": ["type", "client_secret"],
         "properties": {"type": {"enum": ["client_secret_basic", "client_secret_post"]}, "client_secret": secret}},
    ]}  # fmt: skip
    refresh = {
        "type": "object", "additionalProperties": False,
        "required": ["client_id", "refresh_token", "token_endpoint", "token_endpoint_auth"],
        "properties": {"client_id": {"type": "string", "minLength": 1}, "refresh_token": secret, "token_endpoint": url,
                       "token_endpoint_auth": endpoint_auth, "resource": nullable({"type": "string"}),
                       "scope": nullable({"type": "string"})},
    }  # fmt: skip
    expires_at = nullable({"type": "string", "format": "date-time"})
    auth = {"oneOf": [
        {"type": "object", "additionalProperties": False, "required": ["type", "mcp_server_url", "token"],
         "properties": {"type": {"const": "static_bearer"}, "mcp_server_url": url, "token": secret}},
        {"type": "object", "additionalProperties": False, "required": ["type", "mcp_server_url", "access_token"],
         "properties": {"type": {"const": "mcp_oauth"}, "mcp_server_url": url, "access_token": secret,
                        "expires_at": expires_at, "refresh": nullable(refresh)}},
    ], "description": "The MCP server's credential (environment_variable is refused: docs/vaults.md)."}  # fmt: skip
    rotation = {"oneOf": [
        {"type": "object", "additionalProperties": False, "required": ["type", "token"],
         "properties": {"type": {"const": "static_bearer"}, "token": secret}},
        {"type": "object", "additionalProperties": False, "required": ["type"],
         "properties": {"type": {"const": "mcp_oauth"}, "access_token": nullable(secret), "expires_at": expires_at,
                        "refresh": nullable({"type": "object", "additionalProperties": False, "properties": {
                            "refresh_token": nullable(secret), "scope": nullable({"type": "string"}),
                            "token_endpoint_auth": nullable({"type": "object"})}})}},
    ], "description": "The credential's own type only."}  # fmt: skip
    return {
        "VaultCreateRequest": {"type": "object", "title": "VaultCreateRequest", "additionalProperties": False,
                               "properties": {"name": name, "metadata": nullable(ref("Metadata"))}},
        "VaultUpdateRequest": {"type": "object", "title": "VaultUpdateRequest", "additionalProperties": False,
                               "properties": {"name": nullable(name), "metadata": ref("Metadata")}},
        "CredentialCreateRequest": {"type": "object", "title": "CredentialCreateRequest", "additionalProperties": False,
                                    "required": ["name", "auth"],
                                    "properties": {"name": name, "metadata": ref("Metadata"), "auth": auth}},
        "CredentialUpdateRequest": {"type": "object", "title": "CredentialUpdateRequest", "additionalProperties": False,
                                    "properties": {"metadata": ref("Metadata"), "auth": rotation}},
    }  # fmt: skip


def _prompt_schemas(ref: Any, nullable: Any) -> dict[str, Any]:
    """The Prompts API's bodies (:mod:`troupe.protocol.prompts` checks them)."""
    version = {"type": "integer", "minimum": 1, "maximum": MAX_VERSION}
    content = {
        "prompt": {**nullable({"type": "string"}), "description": "The prompt's text (its instructions), with "
                   "`{{variable}}` placeholders."},
        "messages": {**nullable({"type": "array", "items": ref("InputItem")}), "description": "Input messages "
                     "that follow the text (placeholders in their text too); messages only."},
        "variables": {
            **nullable({"type": "array", "items": {"type": "string", "pattern": VARIABLE_PATTERN}}),
            "description": "The variables it takes; every placeholder must be one. Left out: the placeholders used.",
        },
    }  # fmt: skip
    return {
        "PromptCreateRequest": {
            "type": "object", "title": "PromptCreateRequest", "additionalProperties": False, "properties": content,
            "description": "A new prompt: its version 1. It needs text in `prompt` or messages in `messages`.",
        },
        "PromptUpdateRequest": {
            "type": "object", "title": "PromptUpdateRequest", "additionalProperties": False, "required": ["version"],
            "properties": {
                **content,
                "version": {**version, "description": "The latest version, which this one follows (else 409)."},
                "set_as_default": {"type": "boolean", "default": True, "description": "Make it the default."},
            },
            "description": "A new version, whole (what it leaves out, it does not have).",
        },
        "PromptSetDefaultVersionRequest": {
            "type": "object", "title": "PromptSetDefaultVersionRequest", "additionalProperties": False,
            "required": ["version"], "properties": {"version": version},
        },
    }  # fmt: skip


def _container_schemas() -> dict[str, Any]:
    """The Containers API's bodies (:mod:`troupe.protocol.containers` checks them)."""
    return {
        "ContainerCreateRequest": {
            "type": "object", "title": "ContainerCreateRequest", "additionalProperties": False, "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 256},
                "expires_after": {
                    "type": "object", "additionalProperties": False, "required": ["anchor", "minutes"],
                    "properties": {
                        "anchor": {"type": "string", "enum": ["last_active_at"]},
                        "minutes": {"type": "integer", "minimum": 1, "maximum": MAX_EXPIRES_MINUTES,
                                    "description": "Idle minutes before it expires (default 20); at most the "
                                    "server's `max_expires_minutes` (1440 by default)."},
                    },
                },
                "file_ids": {"type": "array", "maxItems": 100, "items": {"type": "string", "minLength": 1},
                             "description": "Files of the Files API to copy into /mnt/data."},
                "memory_limit": {"type": "string", "enum": list(MEMORY_LIMITS), "description": "Default \"1g\"; "
                                 "at most the server's `max_memory_limit` (\"4g\" by default)."},
                "network_policy": {
                    "type": "object", "additionalProperties": False, "required": ["type"],
                    "properties": {"type": {"type": "string", "enum": ["disabled"]}},
                    "description": "Only `disabled` (the default): containers have no network.",
                },
                "skills": {"type": "array", "maxItems": 0, "description": "None are supported."},
            },
        },
        "ContainerFileUpload": {
            "type": "object", "title": "ContainerFileUpload", "required": ["file"],
            "properties": {"file": {"type": "string", "format": "binary", "description": "The bytes; the "
                                    "filename names the file in /mnt/data."}},
        },
        "ContainerFileCreateRequest": {
            "type": "object", "title": "ContainerFileCreateRequest", "additionalProperties": False,
            "required": ["file_id"],
            "properties": {"file_id": {"type": "string", "minLength": 1, "description": "A file of the Files API, "
                                       "copied in."}},
        },
    }  # fmt: skip


def _agent_schemas(ref: Any, nullable: Any) -> dict[str, Any]:
    """The Agents API's bodies (:mod:`troupe.protocol.agents` checks them), as this server serves
    them: the SDK's ``AgentCreateParams`` without what it refuses (docs/agents.md)."""
    function = {
        "type": "object", "title": "AgentFunctionTool", "additionalProperties": False,
        "required": ["type", "name", "description", "parameters"],
        "properties": {
            "type": {"type": "string", "enum": ["function"]},
            "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
            "description": {"type": "string"},
            "parameters": {"type": "object", "description": "A JSON Schema object of the function's arguments."},
            "defer_loading": {"type": "boolean", "enum": [False], "description": "No tool search here."},
            "async": {**nullable({"type": "boolean", "enum": [False]}), "description": "The agent waits for "
                      "every result here."},
        },
    }
    mcp = {
        "type": "object", "title": "AgentMcpTool", "additionalProperties": False,
        "required": ["type", "server_label", "transport"],
        "properties": {
            "type": {"type": "string", "enum": ["mcp"]},
            "server_label": {"type": "string", "minLength": 1},
            "transport": {
                "type": "object", "additionalProperties": False, "required": ["type", "server_url"],
                "properties": {"type": {"type": "string", "enum": ["http"]}, "server_url": {"type": "string"},
                               "headers": nullable({"type": "object", "maxProperties": 0,
                                                    "description": "None: MCP headers are credentials."})},
                "description": "Over HTTP: the server's URL must be one the MCP policy lets a request reach.",
            },
            "allowed_tools": nullable({"type": "array", "items": {"type": "string"}}),
            "connection_origin": nullable({"type": "string", "enum": ["service"]}),
            "credential_id": nullable({"type": "string", "pattern": "^vcred_",
                                       "description": "A credential of the session's vaults."}),
            "request_metadata": nullable({"type": "object", "maxProperties": 0}),
            "required": {"type": "boolean"},
        },
    }
    fields = {
        "model": {"type": "string", "description": "A model this server serves (`GET /v1/models`)."},
        "instructions": nullable({"type": "string", "maxLength": 1_048_576}),
        "name": nullable({"type": "string", "maxLength": 128}),
        "metadata": nullable(ref("Metadata")),
        "tools": {**nullable({"type": "array", "items": {"anyOf": [ref("AgentFunctionTool"), ref("AgentMcpTool")]}}),
                  "description": "Function and MCP tools (within 3 MiB of compact JSON)."},
        "text": nullable({
            "type": "object", "additionalProperties": False,
            "properties": {
                "format": nullable({"anyOf": [
                    {"type": "object", "additionalProperties": False, "required": ["type"],
                     "properties": {"type": {"type": "string", "enum": ["text"]}}},
                    {"type": "object", "additionalProperties": False, "required": ["type", "schema"],
                     "properties": {"type": {"type": "string", "enum": ["json_schema"]}, "schema": {"type": "object"}}},
                ]}),
                "verbosity": nullable({"type": "string", "enum": ["low", "medium", "high"]}),
            },
        }),
        "reasoning": nullable({
            "type": "object", "additionalProperties": False,
            "properties": {
                "effort": nullable({"type": "string", "enum": list(REASONING_EFFORTS)}),
                "summary": nullable({"type": "string", "enum": list(REASONING_SUMMARIES)}),
            },
        }),
        "service_tier": nullable({"type": "string", "enum": list(SERVED_SERVICE_TIERS)}),
        "multi_agent": nullable({
            "type": "object", "additionalProperties": False, "required": ["enabled"],
            "properties": {"enabled": {"type": "boolean", "enum": [False], "description": "No subagents yet."},
                           "max_concurrent_subagents": {"type": "integer", "minimum": 1}},
        }),
        "compaction": nullable({"type": "object", "additionalProperties": False,
                                "properties": {"async": nullable({"type": "boolean", "enum": [False]})}}),
        "experimental": nullable({"type": "object", "additionalProperties": False,
                                  "properties": {"time_awareness": {"type": "boolean", "enum": [False]}}}),
    }
    return {
        "AgentFunctionTool": function,
        "AgentMcpTool": mcp,
        "AgentCreateRequest": {
            "type": "object", "title": "AgentCreateRequest", "additionalProperties": False, "required": ["model"],
            "properties": fields, "description": "A new agent; what is left out takes OpenAI's default.",
        },
        "AgentUpdateRequest": {
            "type": "object", "title": "AgentUpdateRequest", "additionalProperties": False,
            "properties": fields,
            "description": "The fields to change: each replaces the agent's (null: its default), but "
                           "`experimental`, merged by key.",
        },
    }  # fmt: skip


def _automation_schemas(ref: Any, nullable: Any, agent_fields: dict[str, Any]) -> dict[str, Any]:
    """The Agents API's automation bodies (:mod:`troupe.protocol.automations` checks them); an
    inline agent is an agent's create body without ``name`` and ``metadata``."""
    text = {"type": "string", "minLength": 1}
    message = {
        "type": "object", "additionalProperties": False, "required": ["role", "content"],
        "properties": {
            "role": {"type": "string", "enum": ["user"]}, "type": {"type": "string", "enum": ["message"]},
            "content": {"type": "array", "minItems": 1, "items": {"anyOf": [
                {"type": "object", "additionalProperties": False, "required": ["type", "text"],
                 "properties": {"type": {"type": "string", "enum": ["input_text"]}, "text": {"type": "string"}}},
                {"type": "object", "additionalProperties": False, "required": ["type", "image_url"],
                 "properties": {"type": {"type": "string", "enum": ["input_image"]}, "image_url": {"type": "string"}}},
            ]}},
        },
    }
    new_session = {
        "type": "object", "additionalProperties": False, "required": ["type", "environment", "input"],
        "description": "Start a session at each invocation; exactly one of `agent` and `agent_id`.",
        "properties": {
            "type": {"type": "string", "enum": ["new_session"]},
            "agent": {"type": "object", "additionalProperties": False, "required": ["model"],
                      "properties": {k: v for k, v in agent_fields.items() if k not in ("name", "metadata")}},
            "agent_id": {"type": "string", "pattern": "^agent_"},
            "environment": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}},
                            "description": "`{\"type\": \"none\"}`, or an environment the sessions take."},
            "input": {"type": "array", "minItems": 1, "items": message},
            "metadata": nullable(ref("Metadata")),
            "vault_ids": nullable({"type": "array", "items": {"type": "string"}}),
        },
    }
    existing_session = {
        "type": "object", "additionalProperties": False, "required": ["type", "session_id", "instructions"],
        "description": "Send the instructions to an existing session at each invocation.",
        "properties": {"type": {"type": "string", "enum": ["existing_session"]}, "session_id": text,
                       "instructions": text},
    }
    run_at = {"type": "integer", "maximum": MAX_RUN_AT, "description": "A Unix time in seconds, after now."}
    expression = {"type": "string", "description": "A five-field cron expression (minute hour day month weekday)."}
    timezone = {"type": "string", "description": "An IANA timezone (`Europe/Berlin`, `UTC`)."}
    common = {"name": {"type": "string", "minLength": 1, "maxLength": MAX_AUTOMATION_NAME},
              "metadata": ref("Metadata"), "target": ref("AutomationTarget")}
    return {
        "AutomationTarget": {"anyOf": [new_session, existing_session], "title": "AutomationTarget"},
        "AutomationCreateRequest": {"title": "AutomationCreateRequest", "anyOf": [
            {"type": "object", "additionalProperties": False, "required": ["type", "name", "target", "run_at"],
             "properties": {"type": {"type": "string", "enum": ["once"]}, "run_at": run_at, **common}},
            {"type": "object", "additionalProperties": False,
             "required": ["type", "name", "target", "expression", "timezone"],
             "properties": {"type": {"type": "string", "enum": ["periodic"]}, "expression": expression,
                            "timezone": timezone, **common}},
        ]},
        "AutomationUpdateRequest": {
            "type": "object", "title": "AutomationUpdateRequest", "additionalProperties": False,
            "properties": {"run_at": run_at, "expression": expression, "timezone": timezone, **common},
            "description": "The fields to change; `run_at` for a one-time automation, `expression` and "
                           "`timezone` for a periodic one; `target` whole, of the same type.",
        },
    }  # fmt: skip


def _sdk_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """Component schemas from the validators: the create request, the SDK types it checks nested
    fields against, every input item kind and content part; plus the unions ``InputItem``,
    ``ContentPart``, ``Tool`` and ``ToolChoice``. Also the schema (a ``$ref``) of each nested
    create parameter, by name."""
    item_adapters = _sdk.ITEM_ADAPTERS
    inputs: list[tuple[tuple[str, str], Any, TypeAdapter[Any]]] = [
        (("request", "CreateResponseRequest"), "validation", TypeAdapter(CreateResponseRequest)),
        (("union", "Tool"), "validation", TypeAdapter(ToolParam)),
        (("union", "ToolChoice"), "validation", TypeAdapter(create_params.ToolChoice)),
    ]
    inputs += [(("nested", name), "validation", adapter) for name, adapter in _sdk.NESTED_ADAPTERS.items()]
    inputs += [(("item", kind), "validation", adapter) for kind, adapter in item_adapters.items()]
    inputs += [(("part", kind), "validation", adapter) for kind, adapter in _sdk.PART_ADAPTERS.items()]
    by_mode, defs = TypeAdapter.json_schemas(inputs, ref_template=_REF)
    top: dict[tuple[str, str], Any] = {key: value for (key, _mode), value in by_mode.items()}
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))

    def name_of(key: tuple[str, str]) -> str:
        return top[key]["$ref"].rsplit("/", 1)[1]

    # Nested parameters: each gets a component under the field's own name (e.g. `TextParam`).
    for name in _sdk.NESTED_ADAPTERS:
        value = top[("nested", name)]
        if "$ref" not in value:
            schemas[_camel(name) + "Param"] = value
            top[("nested", name)] = {"$ref": _REF.format(model=_camel(name) + "Param")}
    for union in ("Tool", "ToolChoice"):
        schemas[union] = top[("union", union)]
    schemas["InputItem"] = {
        "anyOf": [top[("item", kind)] for kind in item_adapters],
        "description": "An input item, dispatched on `type`; a message may omit it (`type: \"message\"`).",
    }
    schemas["ContentPart"] = {"anyOf": [top[("part", kind)] for kind in _sdk.PART_ADAPTERS]}

    # Where the server is more lenient or stricter than the SDK type (see items.py, request.py).
    message = schemas[name_of(("item", "message"))]
    message["properties"]["content"] = {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": _REF.format(model="ContentPart")}}],
        "title": "Content",
    }
    function_tool = schemas["FunctionToolParam"]
    function_tool["required"] = [f for f in function_tool.get("required", []) if f not in ("parameters", "strict")]
    output = schemas[name_of(("item", "function_call_output"))]
    output["required"] = sorted({*output.get("required", []), "call_id"})

    return schemas, {name: top[("nested", name)] for name in _sdk.NESTED_ADAPTERS}


def _narrow_create_request(create: dict[str, Any], nested: dict[str, Any], ref: Any, nullable: Any) -> None:
    """Narrow the free-form fields of the create request to the SDK types they are validated against."""
    props = create["properties"]
    docs = _field_docs(CreateResponseRequest)
    narrowed: dict[str, dict[str, Any]] = {
        "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": ref("InputItem")}]},
        "tools": {"type": "array", "items": ref("Tool")},
        "tool_choice": ref("ToolChoice"),
        "metadata": nullable(ref("Metadata")),
        "conversation": {"anyOf": [{"type": "string"}, nested["conversation"], {"type": "null"}]},
    }
    for name, value in nested.items():
        narrowed.setdefault(name, nullable(value))
    for name, value in narrowed.items():
        keep = {k: props[name][k] for k in ("title", "default") if k in props[name]}
        props[name] = {**value, **keep}
    for name, doc in docs.items():
        if name in props:
            props[name]["description"] = doc
    create["description"] = "The body of `POST /v1/responses`."


def _error_schemas() -> dict[str, Any]:
    nullable_string = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    return {
        "Error": {
            "type": "object",
            "title": "Error",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string", "description": "Human-readable; shown as is."},
                "type": {"type": "string", "description": "`invalid_request_error`, `server_error`…"},
                "param": {**nullable_string, "description": "The offending parameter, e.g. `input[2].call_id`."},
                "code": {**nullable_string, "description": "`invalid_value`, `not_found`…"},
            },
        },
        "ErrorResponse": {
            "type": "object",
            "title": "ErrorResponse",
            "required": ["error"],
            "properties": {"error": {"$ref": _REF.format(model="Error")}},
        },
    }


# -- helpers -----------------------------------------------------------------------------


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _strip_private_names(document: dict[str, Any]) -> dict[str, Any]:
    """Rename components of private TypedDicts (``_MessageItem`` → ``MessageItem``), refs included."""
    schemas = document["components"]["schemas"]
    renames = {
        _REF.format(model=name): _REF.format(model=name.lstrip("_"))
        for name in schemas
        if name.startswith("_") and name.lstrip("_") not in schemas
    }

    def rewrite(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (renames.get(v, v) if k == "$ref" else rewrite(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        return value

    document = rewrite(document)
    renamed = {}
    for name, value in document["components"]["schemas"].items():
        if _REF.format(model=name) in renames:
            name = name.lstrip("_")
            value = {**value, "title": name} if str(value.get("title", "")).startswith("_") else value
        renamed[name] = value
    document["components"]["schemas"] = renamed
    return document


def _field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a class (the string right after each annotated field)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):  # no source (e.g. a frozen build): no descriptions
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _environment_schemas(ref: Any, nullable: Any) -> dict[str, Any]:
    """The Agents API's environments' bodies (:mod:`troupe.protocol.environments` checks them), as
    this server serves them: the SDK's shapes without what it refuses (docs/environments.md)."""
    none = {"type": "array", "maxItems": 0, "description": "None are supported here."}
    file = {
        "title": "EnvironmentFile", "description": "A file at /workspace/<name> (the top directory only).",
        "anyOf": [
            {"type": "object", "additionalProperties": False, "required": ["type", "file_id", "path"],
             "properties": {"type": {"type": "string", "enum": ["file_id"]}, "file_id": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/workspace/[^/]+$"}}},
            {"type": "object", "additionalProperties": False, "required": ["type", "data", "path"],
             "properties": {"type": {"type": "string", "enum": ["inline"]},
                            "data": {"type": "string", "contentEncoding": "base64"},
                            "path": {"type": "string", "pattern": "^/workspace/[^/]+$"}}},
        ],
    }
    fields = {
        "capability_directories": nullable(none), "plugins": nullable(none), "skills": nullable(none),
        "setup_commands": nullable(none),
        "desktop": nullable({"type": "object", "additionalProperties": False, "required": ["enabled"],
                             "properties": {"enabled": {"type": "boolean", "enum": [False]}}}),
        "env": nullable({"type": "object", "maxProperties": 100, "additionalProperties": {"type": "string"},
                         "description": "Variables of the commands and code: secret, never stored in plain text."}),
        "files": nullable({"type": "array", "maxItems": 100, "items": ref("EnvironmentFile")}),
        "network": nullable({
            "type": "object", "additionalProperties": False, "required": ["access"],
            "properties": {"access": {"type": "string", "enum": ["disabled", "restricted"]},
                           "allowed_domains": nullable({"type": "array", "maxItems": 100, "items": {"type": "string"}}),
                           "blocked_domains": nullable(none)},
        }),
        "packages": nullable({
            "type": "object", "additionalProperties": False,
            "properties": {"python": nullable({"type": "array", "items": {"type": "string"},
                                               "description": "Packages the sandbox has: nothing is installed."}),
                           "npm": nullable(none), "system": nullable(none)},
        }),
    }  # fmt: skip
    return {
        "EnvironmentFile": file,
        "EnvironmentCreateRequest": {
            "type": "object", "title": "EnvironmentCreateRequest", "additionalProperties": False,
            "required": ["environment"],
            "properties": {
                "environment": {
                    "type": "object", "additionalProperties": False, "required": ["type"],
                    "properties": {"type": {"type": "string", "enum": ["openai_hosted"]},
                                   "container_size": {"type": "string", "enum": ["small", "medium", "large"]},
                                   "environment_template_id": {"type": "string"}, **fields},
                },
                "vault_ids": nullable(none),
            },
        },
        "EnvironmentTemplateRequest": {
            "type": "object", "title": "EnvironmentTemplateRequest", "additionalProperties": False,
            "properties": {"name": nullable({"type": "string", "maxLength": 256}), **fields},
        },
    }  # fmt: skip
