"""Local JSON Schema references (``{"$ref": "#/$defs/x"}``): resolving them, finding dangling ones.

A schema whose ``$ref`` points at nothing is refused at the door (400 naming the schema's
parameter), as OpenAI does, rather than failing later inside whatever reads it.

Example::

    >>> dangling_refs({"$defs": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/b"}}})
    ['#/$defs/b']
"""

from __future__ import annotations

from typing import Any

__all__ = ["MISSING", "dangling_refs", "resolve_ref"]


MISSING = object()
"""What :func:`resolve_ref` returns for a reference that points at nothing."""


def resolve_ref(ref: Any, root: Any) -> Any:
    """The node a local ``$ref`` (``#/...``) points at in ``root``, or a sentinel when there is none."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return MISSING
    node: Any = root
    for part in ref[1:].strip("/").split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return MISSING
    return node


def dangling_refs(schema: Any) -> list[str]:
    """Every ``$ref`` in ``schema`` that does not resolve against it (iterative walk)."""
    bad, stack = [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and resolve_ref(ref, schema) is MISSING:
                bad.append(ref)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return bad
