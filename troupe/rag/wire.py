"""The Files and Vector Stores APIs on the wire: request checks and object shapes.

Every check raises :class:`~troupe.protocol.InvalidRequest` naming the parameter, in
OpenAI's words; every object is built as the ``openai`` SDK's types read it
(``FileObject``, ``VectorStore``, ``VectorStoreFile``, ``VectorStoreFileBatch``,
``VectorStoreSearchResponse``).

Limits, as OpenAI documents them:

* ``chunking_strategy``: ``{"type": "auto"}`` (800 tokens, 400 overlap) or ``{"type":
  "static", "static": {"max_chunk_size_tokens": 100–4096, "chunk_overlap_tokens": 0–half}}``;
  a file's object always shows the static values it was chunked with.
* ``attributes``: at most 16 keys of at most 64 characters; values strings (≤ 512
  characters), numbers or booleans.
* ``filters``: a comparison ``{"type": eq|ne|gt|gte|lt|lte|in|nin, "key", "value"}`` or a
  compound ``{"type": and|or, "filters": [...]}`` of them, nested.
* ``max_num_results``: 1–50 (default 10). ``ranking_options``: ``ranker`` (``auto``,
  ``default-2024-11-15``, ``none``), ``score_threshold`` 0–1, and ``hybrid_search``
  ``{embedding_weight, text_weight}`` (what the Responses ``file_search`` tool documents).

Example::

    chunking_strategy({"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50}})
    matches({"type": "eq", "key": "team", "value": "infra"}, {"team": "infra"})   # True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from troupe.protocol import InvalidRequest, NotFound, describe_type, show_value

__all__ = [
    "AUTO_CHUNKING",
    "FILE_PURPOSES",
    "RankingOptions",
    "check_attributes",
    "check_expires_after",
    "check_file_ids",
    "check_filters",
    "check_max_num_results",
    "check_query",
    "check_ranking_options",
    "chunking_strategy",
    "file_counts",
    "matches",
    "not_found",
    "object_body",
]

AUTO_CHUNKING = {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}
"""What ``{"type": "auto"}`` means (OpenAI's defaults)."""
FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
"""The ``purpose`` values an upload may name."""

_MAX_ATTRIBUTES = 16
_MAX_KEY = 64
_MAX_VALUE = 512
_COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
_RANKERS = ("auto", "default-2024-11-15", "none")
_MAX_FILTER_DEPTH = 8


def not_found(kind: str, object_id: str, param: str) -> NotFound:
    """A file or vector store that is not there (404): ``No vector store found with id '…'.``"""
    return NotFound(f"No {kind} found with id '{object_id}'.", param=param)


def _invalid(param: str, message: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, param=param, code=code)


def _wrong_type(param: str, expected: str, value: Any) -> InvalidRequest:
    return _invalid(param, f"Invalid type for '{param}': expected {expected}, got {describe_type(value)}.", "invalid_type")


def object_body(body: Any, *, allowed: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
    """``body`` as a JSON object whose keys are all ``allowed`` and include ``required``."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    for key in body:
        if key not in allowed:
            raise _invalid(key, f"Unknown parameter: '{key}'.", "unknown_parameter")
    for key in required:
        if key not in body:
            raise _invalid(key, f"Missing required parameter: '{key}'.", "missing_required_parameter")
    return body


def chunking_strategy(value: Any, param: str = "chunking_strategy") -> dict[str, Any]:
    """The static strategy ``value`` asks for (None or ``auto``: :data:`AUTO_CHUNKING`), as a file shows it."""
    if value is None:
        return {"type": "static", "static": dict(AUTO_CHUNKING)}
    if not isinstance(value, dict):
        raise _wrong_type(param, "an object", value)
    kind = value.get("type")
    if kind == "auto":
        object_body(value, allowed=("type",))
        return {"type": "static", "static": dict(AUTO_CHUNKING)}
    if kind != "static":
        raise _invalid(f"{param}.type", f"Invalid '{param}.type': {show_value(kind)}. Expected 'auto' or 'static'.")
    static = value.get("static")
    if not isinstance(static, dict):
        raise _wrong_type(f"{param}.static", "an object", static)
    size = _int_in(static.get("max_chunk_size_tokens"), f"{param}.static.max_chunk_size_tokens", 100, 4096)
    overlap = _int_in(static.get("chunk_overlap_tokens"), f"{param}.static.chunk_overlap_tokens", 0, size // 2)
    return {"type": "static", "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap}}


def _int_in(value: Any, param: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(param, "an integer", value)
    if not low <= value <= high:
        raise _invalid(param, f"Invalid '{param}': {value}. Expected a value between {low} and {high}.")
    return value


def check_attributes(value: Any, param: str = "attributes") -> dict[str, str | float | bool] | None:
    """``value`` as a file's ``attributes`` (module docstring), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _wrong_type(param, "an object", value)
    if len(value) > _MAX_ATTRIBUTES:
        raise _invalid(param, f"Invalid '{param}': at most {_MAX_ATTRIBUTES} keys are allowed, got {len(value)}.")
    for key, item in value.items():
        if len(key) > _MAX_KEY:
            raise _invalid(param, f"Invalid '{param}': keys can be at most {_MAX_KEY} characters long.")
        if isinstance(item, str):
            if len(item) > _MAX_VALUE:
                raise _invalid(f"{param}.{key}", f"Invalid '{param}.{key}': at most {_MAX_VALUE} characters.")
        elif not isinstance(item, int | float) or item != item:  # bool is an int; NaN is refused
            raise _wrong_type(f"{param}.{key}", "a string, number or boolean", item)
    return value


def check_filters(value: Any, param: str = "filters", depth: int = 0) -> dict[str, Any] | None:
    """``value`` as a search's attribute filter (module docstring), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _wrong_type(param, "an object", value)
    if depth > _MAX_FILTER_DEPTH:
        raise _invalid(param, f"Invalid '{param}': filters nest at most {_MAX_FILTER_DEPTH} levels deep.")
    kind = value.get("type")
    if kind in ("and", "or"):
        object_body(value, allowed=("type", "filters"), required=("filters",))
        parts = value["filters"]
        if not isinstance(parts, list) or not parts:
            raise _invalid(f"{param}.filters", f"Invalid '{param}.filters': expected a non-empty array.")
        return {"type": kind, "filters": [check_filters(p, f"{param}.filters[{i}]", depth + 1) for i, p in enumerate(parts)]}
    if kind not in _COMPARISONS:
        expected = ", ".join(f"'{k}'" for k in (*_COMPARISONS, "and", "or"))
        raise _invalid(f"{param}.type", f"Invalid '{param}.type': {show_value(kind)}. Expected one of {expected}.")
    object_body(value, allowed=("type", "key", "value"), required=("key", "value"))
    if not isinstance(value["key"], str):
        raise _wrong_type(f"{param}.key", "a string", value["key"])
    operand = value["value"]
    if kind in ("in", "nin"):
        if not isinstance(operand, list) or not all(_scalar(v) for v in operand):
            raise _wrong_type(f"{param}.value", "an array of strings or numbers", operand)
    elif not _scalar(operand):
        raise _wrong_type(f"{param}.value", "a string, number or boolean", operand)
    return {"type": kind, "key": value["key"], "value": operand}


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and value == value  # bool is an int; NaN is not


def matches(filters: Mapping[str, Any] | None, attributes: Mapping[str, Any] | None) -> bool:
    """Whether a file with ``attributes`` passes ``filters`` (checked by :func:`check_filters`).

    A comparison with a key the file does not have is false, except ``ne`` and ``nin``;
    values of different kinds (a string and a number) are never equal nor ordered, and a
    boolean is not a number.
    """
    if filters is None:
        return True
    kind = filters["type"]
    if kind == "and":
        return all(matches(f, attributes) for f in filters["filters"])
    if kind == "or":
        return any(matches(f, attributes) for f in filters["filters"])
    attributes = attributes or {}
    if filters["key"] not in attributes:
        return kind in ("ne", "nin")
    have, want = attributes[filters["key"]], filters["value"]
    match kind:
        case "eq":
            return _same_kind(have, want) and have == want
        case "ne":
            return not (_same_kind(have, want) and have == want)
        case "in":
            return any(_same_kind(have, w) and have == w for w in want)
        case "nin":
            return not any(_same_kind(have, w) and have == w for w in want)
    if not _same_kind(have, want) or isinstance(have, bool):
        return False
    return {"gt": have > want, "gte": have >= want, "lt": have < want, "lte": have <= want}[kind]


def _same_kind(a: Any, b: Any) -> bool:
    def kind(v: Any) -> str:
        return "bool" if isinstance(v, bool) else "number" if isinstance(v, int | float) else "string"

    return kind(a) == kind(b)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankingOptions:
    """How a search ranks (the checked ``ranking_options``)."""

    ranker: str = "auto"
    """Accepted for OpenAI's sake; every ranker is the hybrid fusion (there is no re-ranking model)."""
    score_threshold: float = 0.0
    """Results scoring below it are dropped (scores are in [0, 1])."""
    embedding_weight: float = 1.0
    """The vector similarity ranking's weight in the fusion."""
    text_weight: float = 1.0
    """The BM25 ranking's weight in the fusion."""


def check_ranking_options(value: Any, param: str = "ranking_options") -> RankingOptions:
    """``value`` as a search's ``ranking_options`` (None: the defaults)."""
    if value is None:
        return RankingOptions()
    object_body(value, allowed=("ranker", "score_threshold", "hybrid_search"))
    ranker = value.get("ranker") or "auto"
    if ranker not in _RANKERS:
        raise _invalid(f"{param}.ranker", f"Invalid '{param}.ranker': {show_value(ranker)}. Expected one of "
                       + ", ".join(f"'{r}'" for r in _RANKERS) + ".")  # fmt: skip
    threshold = _number_in(value.get("score_threshold", 0.0), f"{param}.score_threshold", 0.0, 1.0)
    hybrid = value.get("hybrid_search")
    weights = (1.0, 1.0)
    if hybrid is not None:
        object_body(hybrid, allowed=("embedding_weight", "text_weight"), required=("embedding_weight", "text_weight"))
        weights = tuple(
            _number_in(hybrid[k], f"{param}.hybrid_search.{k}", 0.0, float("inf")) for k in ("embedding_weight", "text_weight")
        )  # type: ignore[assignment]
        if weights == (0.0, 0.0):
            raise _invalid(f"{param}.hybrid_search", f"Invalid '{param}.hybrid_search': the weights cannot both be 0.")
    return RankingOptions(ranker=ranker, score_threshold=threshold, embedding_weight=weights[0], text_weight=weights[1])


def _number_in(value: Any, param: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise _wrong_type(param, "a number", value)
    if not low <= value <= high:
        raise _invalid(param, f"Invalid '{param}': {value}. Expected a number between {low:g} and {high:g}.")
    return float(value)


def check_query(value: Any, param: str = "query") -> list[str]:
    """A search's ``query``: a non-empty string, or a non-empty array of them."""
    queries = [value] if isinstance(value, str) else value
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise _wrong_type(param, "a string or an array of strings", value)
    if not any(q.strip() for q in queries):
        raise _invalid(param, f"Invalid '{param}': the query is empty.")
    return queries


def check_max_num_results(value: Any, param: str = "max_num_results") -> int:
    """A search's ``max_num_results``: 1–50, 10 when None."""
    return 10 if value is None else _int_in(value, param, 1, 50)


def check_expires_after(value: Any, param: str = "expires_after") -> dict[str, Any] | None:
    """A vector store's ``expires_after``: ``{"anchor": "last_active_at", "days": 1–365}``, or None."""
    if value is None:
        return None
    object_body(value, allowed=("anchor", "days"), required=("anchor", "days"))
    if value["anchor"] != "last_active_at":
        raise _invalid(f"{param}.anchor", f"Invalid '{param}.anchor': {show_value(value['anchor'])}. "
                       "Expected 'last_active_at'.")  # fmt: skip
    return {"anchor": "last_active_at", "days": _int_in(value["days"], f"{param}.days", 1, 365)}


def check_file_ids(value: Any, param: str = "file_ids", *, most: int = 2000) -> list[str]:
    """A list of file ids (``file-…``), at most ``most``, without repeats (the first kept)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _wrong_type(param, "an array of strings", value)
    if len(value) > most:
        raise _invalid(param, f"Invalid '{param}': at most {most} files, got {len(value)}.", "array_above_max_length")
    return list(dict.fromkeys(value))


def file_counts(statuses: Mapping[str, int]) -> dict[str, int]:
    """``file_counts`` from how many files have each status."""
    counts = {k: int(statuses.get(k, 0)) for k in ("in_progress", "completed", "failed", "cancelled")}
    return {**counts, "total": sum(counts.values())}
