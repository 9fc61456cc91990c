"""Awaiting Ray calls: the one place where Ray's wrapper around a callee's error comes off."""

from __future__ import annotations

from typing import Any

__all__ = ["ray_result", "ray_result_sync"]


async def ray_result(ref: Any, *, own: type[BaseException] | tuple[type[BaseException], ...] = Exception) -> Any:
    """Await a Ray call (an ``ObjectRef`` or an actor call); what it returned.

    An error the callee raised reaches the caller wrapped in ``RayTaskError``, with the
    callee's traceback. When the original is one of ``own`` (our own errors: StorageError,
    ProtocolError, …), it is raised as itself, so the caller handles it as if the call had
    been local; anything else stays wrapped.

    Example::

        row = await ray_result(storage.call.remote("get_response", (tenant, rid), {}), own=StorageError)
    """
    from ray.exceptions import RayTaskError  # here: importing this module must not import Ray

    try:
        return await ref
    except RayTaskError as exc:
        if isinstance(exc.cause, own):
            raise exc.cause from None
        raise


def ray_result_sync(ref: Any, *, own: type[BaseException] | tuple[type[BaseException], ...] = Exception) -> Any:
    """:func:`ray_result` for a thread that may block (``ray.get``); not on an event loop."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        return ray.get(ref)
    except RayTaskError as exc:
        if isinstance(exc.cause, own):
            raise exc.cause from None
        raise
