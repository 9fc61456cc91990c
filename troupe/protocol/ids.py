"""Object ids: ``<prefix>_<26 chars>``, unique and sortable by creation order.

The 26-character suffix is ULID-shaped: 10 characters of millisecond timestamp
followed by 16 characters (80 bits) that start random in each millisecond and
then count up. Both halves use the lowercase Crockford base-32 alphabet, whose
characters sort in ASCII order, so comparing two ids' suffixes compares their
creation order — also within one millisecond and across threads, because one
lock serialises the generator of the process. Ids of different processes made in
the same millisecond are unique (random) but not ordered against each other.

Example::

    >>> rid = new_id("resp")
    >>> rid.startswith("resp_"), len(rid)
    (True, 31)
    >>> new_id(MESSAGE) < new_id(MESSAGE)
    True
"""

from __future__ import annotations

import os
import threading
import time

__all__ = [
    "RESPONSE",
    "MESSAGE",
    "FUNCTION_CALL",
    "CALL",
    "FUNCTION_CALL_OUTPUT",
    "MCP_CALL",
    "MCP_LIST_TOOLS",
    "MCP_APPROVAL_REQUEST",
    "MCP_APPROVAL_RESPONSE",
    "CONVERSATION",
    "REASONING",
    "COMPACTION",
    "CODE_INTERPRETER_CALL",
    "SHELL_CALL",
    "SHELL_CALL_OUTPUT",
    "CONTAINER",
    "CONTAINER_FILE",
    "ENVIRONMENT",
    "ENVIRONMENT_FILE",
    "ENVIRONMENT_TEMPLATE",
    "AGENT",
    "AGENT_SESSION",
    "TURN",
    "SESSION_ARTIFACT",
    "ITEM",
    "ITEM_ID_PREFIXES",
    "new_id",
    "new_response_id",
    "thread_of_response",
]

RESPONSE = "resp"
"""``Response.id``."""
MESSAGE = "msg"
"""``message`` item id."""
FUNCTION_CALL = "fc"
"""``function_call`` item id (the item, not the call)."""
CALL = "call"
"""``function_call.call_id``: what a ``function_call_output`` pairs with."""
FUNCTION_CALL_OUTPUT = "fco"
"""``function_call_output`` item id."""
MCP_CALL = "mcp"
"""``mcp_call`` item id."""
MCP_LIST_TOOLS = "mcpl"
"""``mcp_list_tools`` item id."""
MCP_APPROVAL_REQUEST = "mcpr"
"""``mcp_approval_request`` item id (what an approval response names)."""
MCP_APPROVAL_RESPONSE = "mcpa"
"""``mcp_approval_response`` item id."""
CONVERSATION = "conv"
"""``Conversation.id``."""
REASONING = "rs"
"""``reasoning`` item id."""
COMPACTION = "cmp"
"""``compaction`` item id."""
CODE_INTERPRETER_CALL = "ci"
"""``code_interpreter_call`` item id (OpenAI's own prefix: ``ci_…``)."""
SHELL_CALL = "sh"
"""``shell_call`` item id (the item; its ``call_id`` is the model's, ``call_…``)."""
SHELL_CALL_OUTPUT = "sho"
"""``shell_call_output`` item id."""
CONTAINER = "cntr"
"""A container's id (the Containers API; OpenAI's own prefix: ``cntr_…``)."""
CONTAINER_FILE = "cfile"
"""A container file's id (OpenAI's own prefix: ``cfile_…``)."""
ENVIRONMENT = "env"
"""An Agents API environment's id (OpenAI does not document its prefix; ``env_…`` is ours)."""
ENVIRONMENT_TEMPLATE = "envtpl"
"""An Agents API environment template's id (ours, as ``env_``)."""
ENVIRONMENT_FILE = "envfile"
"""The id of a file in an environment (an environment's ``files[].id``; ours)."""
AGENT = "agent"
"""An agent's id (the Agents API). OpenAI does not document its prefix; ``agent_…`` is ours."""
AGENT_SESSION = "sess"
"""An Agents API session's id (OpenAI does not document its prefix; ``sess_…`` is ours)."""
TURN = "turn"
"""A session turn's id (ours, as ``sess_``)."""
SESSION_ARTIFACT = "art"
"""A session artifact's id (the SDK's ``SessionArtifact``; OpenAI does not document its prefix: ours)."""
ITEM = "item"
"""Fallback for item kinds without a conventional prefix."""

ITEM_ID_PREFIXES: dict[str, str] = {
    "message": MESSAGE,
    "function_call": FUNCTION_CALL,
    "function_call_output": FUNCTION_CALL_OUTPUT,
    "mcp_call": MCP_CALL,
    "mcp_list_tools": MCP_LIST_TOOLS,
    "mcp_approval_request": MCP_APPROVAL_REQUEST,
    "mcp_approval_response": MCP_APPROVAL_RESPONSE,
    "reasoning": REASONING,
    "compaction": COMPACTION,
    "web_search_call": "ws",
    "file_search_call": "fs",
    "code_interpreter_call": CODE_INTERPRETER_CALL,
    "shell_call": SHELL_CALL,
    "shell_call_output": SHELL_CALL_OUTPUT,
}
"""Item ``type`` → id prefix (OpenAI's convention; clients do not check it)."""

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base 32, ASCII-ordered
_ALPHABET_SET = frozenset(_ALPHABET)
_TIME_CHARS = 10  # 50 bits: milliseconds until the year 10889
_RANDOM_BITS = 80
_RANDOM_CHARS = 16

_lock = threading.Lock()
_last_ms = -1
_last_random = 0
# Random bytes drawn from os.urandom a block at a time: one getrandom() system call per 100
# fresh milliseconds rather than per id (each call also hands the GIL to whichever thread
# waits for it). Read under _lock; emptied in a forked child, like the counter.
_POOL_BYTES = 1000
_pool = b""
_pool_at = 0


def _encode(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def _reset_after_fork() -> None:
    # A forked child would otherwise continue the parent's counter and mint the
    # very ids the parent mints next.
    global _last_ms, _last_random, _pool, _pool_at
    _last_ms, _last_random = -1, 0
    _pool, _pool_at = b"", 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _fresh_random() -> int:
    """79 random bits (headroom below 80, so that counting up within a millisecond cannot overflow); under _lock."""
    global _pool, _pool_at
    size = _RANDOM_BITS // 8
    if _pool_at + size > len(_pool):
        _pool, _pool_at = os.urandom(_POOL_BYTES), 0
    value = int.from_bytes(_pool[_pool_at : _pool_at + size], "big") >> 1
    _pool_at += size
    return value


def _next_suffix() -> str:
    global _last_ms, _last_random
    with _lock:
        now = time.time_ns() // 1_000_000
        if now > _last_ms:
            _last_ms = now
            _last_random = _fresh_random()
        else:
            # Same millisecond, or the clock stepped back: keep the last time and
            # count up, which preserves the order of ids already handed out.
            _last_random += 1
            if _last_random >= 1 << _RANDOM_BITS:
                _last_ms += 1
                _last_random = _fresh_random()
        return _encode(_last_ms, _TIME_CHARS) + _encode(_last_random, _RANDOM_CHARS)


def new_id(prefix: str) -> str:
    """A new id ``f"{prefix}_{suffix}"`` with a 26-character, time-ordered suffix.

    Args:
        prefix: one of the module constants (``RESPONSE``, ``MESSAGE``…) or any
            short lowercase word.

    Returns:
        A process-unique id; suffixes sort in creation order.
    """
    if not prefix or "_" in prefix:
        raise ValueError(f"id prefix must be a non-empty word without '_', got {prefix!r}")
    return f"{prefix}_{_next_suffix()}"


# A response id carries the id of its thread (the conversation, or the
# previous_response_id chain), so that a request continuing it is routed to the
# thread's host without a storage read: resp_<26 time-ordered><kind><26 of the
# thread>. The thread's host still checks that the response exists, for the
# caller's tenant, before it continues it; the id is a routing hint, never trusted.
_SUFFIX_CHARS = _TIME_CHARS + _RANDOM_CHARS
_THREAD_KINDS = {"thread": "t", "conv": "c"}
_KIND_PREFIXES = {kind: prefix for prefix, kind in _THREAD_KINDS.items()}


def new_response_id(thread_id: str) -> str:
    """A new response id that names its thread (see :func:`thread_of_response`).

    A thread id of another shape (not ``thread_`` or ``conv_`` with a 26-character
    suffix) is not carried: the response id is then a plain ``new_id("resp")``.

    Example::

        >>> thread = new_id("thread")
        >>> thread_of_response(new_response_id(thread)) == thread
        True
    """
    prefix, _, suffix = thread_id.partition("_")
    kind = _THREAD_KINDS.get(prefix)
    if kind is None or len(suffix) != _SUFFIX_CHARS or not set(suffix) <= _ALPHABET_SET:
        return new_id(RESPONSE)
    return f"{RESPONSE}_{_next_suffix()}{kind}{suffix}"


def thread_of_response(response_id: str) -> str | None:
    """The thread id a response id carries; None for an id that carries none (or is malformed)."""
    prefix, _, rest = response_id.partition("_")
    if prefix != RESPONSE or len(rest) != 2 * _SUFFIX_CHARS + 1:
        return None
    thread_prefix = _KIND_PREFIXES.get(rest[_SUFFIX_CHARS])
    suffix = rest[_SUFFIX_CHARS + 1 :]
    if thread_prefix is None or not set(suffix) <= _ALPHABET_SET:
        return None
    return f"{thread_prefix}_{suffix}"
