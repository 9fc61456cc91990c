"""Troupe: an actor-model runtime for OpenAI-compatible agents."""
