"""A workaround for Ray Serve 2.60: the direct-ingress replica's HTTP socket gets ``SO_REUSEADDR``.

Serve's direct ingress starts each ingress replica's HTTP server with
``ray.serve._private.http_util.start_asgi_http_server(..., enable_so_reuseport=False)``
(``ray/serve/_private/replica.py``), which binds a fresh socket with no option set. The
connections that socket accepted stay in TIME-WAIT for a minute after the replica's process
dies (``kill -9`` of ``troupe serve`` under load, or a replica Serve restarts after a crash),
and they carry the listener's missing flag: Linux refuses every new bind of the port until
they are gone, even a bind that sets ``SO_REUSEADDR`` itself. uvicorn and Serve's own proxy
set the flag; Serve has no option that sets it for the replica (docs/behaviour.md, "Limits").

:func:`patch_direct_ingress_bind`, called in the replica's process before Serve starts the
replica's server (from ``TroupeIngress.__init__``), replaces ``start_asgi_http_server`` in
``ray.serve._private.replica`` with the same function, the same code, whose
``socket.socket(...)`` sets ``SO_REUSEADDR`` on the socket it makes. Only that flag: not
``SO_REUSEPORT``, with which a second server could bind a port this one listens on and take
half its connections. The function's signature is checked first; if a Ray upgrade changed
it, Ray is left alone with a warning. ``tests/unit/test_reuse_addr.py`` fails when the
function changes, and once Serve sets the flag itself (then this module can go).

Example::

    patch_direct_ingress_bind()   # in the replica's process, before its HTTP server starts
"""

from __future__ import annotations

import functools
import inspect
import logging
import socket
import types
from collections.abc import Callable
from typing import Any

__all__ = ["patch_direct_ingress_bind", "with_reuse_addr", "EXPECTED_PARAMETERS"]

logger = logging.getLogger(__name__)

_P = inspect.Parameter
EXPECTED_PARAMETERS = (
    ("app", _P.POSITIONAL_OR_KEYWORD, _P.empty),
    ("http_options", _P.POSITIONAL_OR_KEYWORD, _P.empty),
    ("event_loop", _P.KEYWORD_ONLY, _P.empty),
    ("enable_so_reuseport", _P.KEYWORD_ONLY, False),
)
"""``start_asgi_http_server``'s parameters (name, kind, default) in Ray 2.60, which the patch was written for."""

_MARK = "__troupe_reuse_addr__"


def _reuse_addr_socket(*args: Any, **kwargs: Any) -> socket.socket:
    sock = socket.socket(*args, **kwargs)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def with_reuse_addr(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a function of a module that did ``import socket``) whose ``socket.socket`` sets ``SO_REUSEADDR``.

    The same code object over a copy of its module's globals in which ``socket`` is a module
    like :mod:`socket` but for ``socket()``; the module itself is not touched.
    """
    sockets = types.ModuleType("socket", "socket, whose socket() sets SO_REUSEADDR (troupe.serve._reuse_addr)")
    sockets.__dict__.update({name: value for name, value in vars(socket).items() if not name.startswith("__")})
    sockets.socket = _reuse_addr_socket  # type: ignore[attr-defined]
    patched = types.FunctionType(
        fn.__code__, {**fn.__globals__, "socket": sockets}, fn.__name__, fn.__defaults__, fn.__closure__
    )
    patched.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(patched, fn)  # __wrapped__ is the original
    setattr(patched, _MARK, True)
    return patched


def patch_direct_ingress_bind() -> bool:
    """Make Serve's direct-ingress replica bind its HTTP socket with ``SO_REUSEADDR`` (idempotent).

    Returns:
        Whether the patch is in place: False (and a warning) when ``start_asgi_http_server``
        is not the function this module knows.
    """
    from ray.serve._private import replica

    current = replica.start_asgi_http_server
    if getattr(current, _MARK, False):
        return True
    parameters = tuple((p.name, p.kind, p.default) for p in inspect.signature(current).parameters.values())
    if parameters != EXPECTED_PARAMETERS or current.__globals__.get("socket") is not socket:
        logger.warning(
            "Ray Serve's start_asgi_http_server is not the one Troupe's SO_REUSEADDR workaround was written "
            "for (Ray 2.60); it is left alone. After a crash, the ingress port may stay blocked for a minute "
            "by TIME-WAIT connections."
        )
        return False
    replica.start_asgi_http_server = with_reuse_addr(current)
    return True
