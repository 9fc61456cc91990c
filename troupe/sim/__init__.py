"""The ``sim`` model: a deterministic stand-in for an OpenAI-compatible model server.

* :mod:`troupe.sim.model`: :class:`SimModel`, a :class:`~troupe.agentloop.model.ModelClient`
  run in-process, steered by ``[[...]]`` directives in the last user message
  (:mod:`troupe.sim.directives`; JSON-schema answers from :mod:`troupe.sim.schema`);
* :mod:`troupe.sim.server`: the same model as an HTTP server (``troupe sim``): Chat
  Completions, and one-turn Responses (:mod:`troupe.sim.responses`).

It is the only simulated part of Troupe's tests and benchmarks; everything else is real.
"""

from .model import SimModel, SimReply, SimSettings, stream_reply

__all__ = ["SimModel", "SimReply", "SimSettings", "stream_reply"]
