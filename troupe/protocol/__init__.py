"""The Responses wire contract, pure: no Ray, no FastAPI, no DuckDB.

- :mod:`.request` — ``CreateResponseRequest`` and :func:`parse_create_request`
- :mod:`.items` — input item validation, canonical stored form
- :mod:`.response` — the Response object and usage
- :mod:`.sse` — event framing
- :mod:`.ids` — time-ordered object ids
- :mod:`.errors` — the error tree and the OpenAI error body
- :mod:`.schema_refs` — local JSON Schema ``$ref`` resolution
- :mod:`.job` — :class:`TurnJob`, a response to run as it travels inside Troupe
- :mod:`.containers` — the Containers API's bodies and objects
- :mod:`.agents` — the Agents API's agents: their bodies and objects
- :mod:`.sessions` — the Agents API's sessions: bodies, objects, events from a turn's responses
- :mod:`.subagents` — the subagent tools an agent with ``multi_agent`` gets, their items, the subagent
- :mod:`.environments` — the Agents API's environments and templates: what maps onto a container
- :mod:`.body` — strict JSON request bodies (no NaN, no lone surrogates, bounded nesting)

Built on the ``openai`` SDK's types (``openai.types.responses``); only what they
lack is written here.
"""

from .agents import (
    agent_deleted,
    agent_not_found,
    agent_object,
    apply_agent_update,
    new_agent_id,
    parse_agent_create,
    parse_agent_update,
)
from .body import DEFAULT_MAX_DEPTH, decode_json_body
from .containers import (
    ContainerSpec,
    container_deleted,
    container_expired,
    container_file_deleted,
    container_file_not_found,
    container_file_object,
    container_not_found,
    container_object,
    new_container_file_id,
    new_container_id,
    parse_container_create,
    parse_container_file_body,
    parse_network_policy,
    upload_name,
    wire_path,
)
from .environments import (
    apply_template_update,
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
from .errors import (
    AuthenticationFailed,
    ExternalConnectorError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ProtocolError,
    ServerError,
    check_id_format,
    conversation_not_found,
    describe_type,
    failed_response_error,
    format_param,
    invalid_request_from_errors,
    model_not_found,
    object_body,
    previous_response_not_found,
    show_value,
    validate_as,
    wrong_type,
)
from .ids import ITEM_ID_PREFIXES, new_id, new_response_id, thread_of_response
from .items import (
    CONTENT_PART_TYPES,
    INPUT_ITEM_TYPES,
    MESSAGE_ROLES,
    by_type,
    content_text,
    infer_item_type,
    item_adapters,
    normalize_input,
    validate_input_items,
)
from .job import TurnJob
from .prompts import (
    new_prompt_id,
    parse_prompt_create,
    parse_prompt_update,
    parse_set_default_version,
    placeholders,
    prompt_not_found,
    prompt_object,
    prompt_reference,
    resolve_prompt,
)
from .request import (
    METADATA_MAX_KEY,
    METADATA_MAX_KEYS,
    METADATA_MAX_VALUE,
    CreateResponseRequest,
    check_metadata,
    parse_create_request,
)
from .response import (
    EXTENSION_STATUSES,
    MCP_SECRET_KEYS,
    RESPONSE_STATUSES,
    ResponseStatus,
    build_response,
    echo_tool,
    usage_dict,
)
from .schema_refs import dangling_refs, resolve_ref
from .sessions import (
    TurnEvents,
    command_done,
    describe_result,
    hosted_environment,
    new_session_id,
    new_turn_id,
    open_calls,
    parse_session_create,
    parse_session_events,
    parse_session_input,
    parse_session_update,
    pending_calls,
    required_actions,
    response_body,
    session_deleted,
    session_event,
    session_item,
    session_items,
    session_not_found,
    session_object,
    turn_not_found,
    turn_object,
    turn_status,
)
from .sse import SSE_DONE, SSE_KEEPALIVE, SSE_MEDIA_TYPE, encode_sse
from .subagents import subagent_id_of, subagent_item, subagent_object

__all__ = [
    "TurnJob",
    # schema_refs
    "dangling_refs",
    "resolve_ref",
    # body
    "DEFAULT_MAX_DEPTH",
    "decode_json_body",
    # errors
    "ProtocolError",
    "InvalidRequest",
    "AuthenticationFailed",
    "PermissionDenied",
    "NotFound",
    "ExternalConnectorError",
    "ServerError",
    "previous_response_not_found",
    "conversation_not_found",
    "model_not_found",
    "check_id_format",
    "failed_response_error",
    "format_param",
    "invalid_request_from_errors",
    "validate_as",
    "describe_type",
    "show_value",
    "object_body",
    "wrong_type",
    # ids
    "ITEM_ID_PREFIXES",
    "new_id",
    "new_response_id",
    "thread_of_response",
    # items
    "CONTENT_PART_TYPES",
    "INPUT_ITEM_TYPES",
    "MESSAGE_ROLES",
    "infer_item_type",
    "by_type",
    "item_adapters",
    "content_text",
    "normalize_input",
    "validate_input_items",
    # request
    "CreateResponseRequest",
    "parse_create_request",
    "check_metadata",
    "METADATA_MAX_KEYS",
    "METADATA_MAX_KEY",
    "METADATA_MAX_VALUE",
    # response
    "EXTENSION_STATUSES",
    "MCP_SECRET_KEYS",
    "RESPONSE_STATUSES",
    "ResponseStatus",
    "build_response",
    "echo_tool",
    "usage_dict",
    # agents
    "agent_deleted",
    "agent_not_found",
    "agent_object",
    "apply_agent_update",
    "new_agent_id",
    "parse_agent_create",
    "parse_agent_update",
    # subagents
    "subagent_id_of",
    "subagent_item",
    "subagent_object",
    # sessions
    "open_calls",
    "command_done",
    "hosted_environment",
    "session_items",
    "TurnEvents",
    "describe_result",
    "new_session_id",
    "new_turn_id",
    "parse_session_create",
    "parse_session_events",
    "parse_session_input",
    "parse_session_update",
    "pending_calls",
    "required_actions",
    "response_body",
    "session_deleted",
    "session_event",
    "session_item",
    "session_not_found",
    "session_object",
    "turn_not_found",
    "turn_object",
    "turn_status",
    # environments
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
    # containers
    "ContainerSpec",
    "container_deleted",
    "container_expired",
    "container_file_deleted",
    "container_file_not_found",
    "container_file_object",
    "container_not_found",
    "container_object",
    "new_container_file_id",
    "new_container_id",
    "parse_container_create",
    "parse_container_file_body",
    "parse_network_policy",
    "upload_name",
    "wire_path",
    # prompts
    "new_prompt_id",
    "parse_prompt_create",
    "parse_prompt_update",
    "parse_set_default_version",
    "placeholders",
    "prompt_not_found",
    "prompt_object",
    "prompt_reference",
    "resolve_prompt",
    # sse
    "SSE_DONE",
    "SSE_KEEPALIVE",
    "SSE_MEDIA_TYPE",
    "encode_sse",
]
