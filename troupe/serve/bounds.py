"""Bounds of request bodies that both the routes enforce (the conversations' items) and the
OpenAPI description states (:mod:`.openapi`), kept here so that neither imports the other."""

from __future__ import annotations

__all__ = ["MAX_ITEMS"]

MAX_ITEMS = 20
"""The most items one conversation create or items add takes (OpenAI's limit)."""
