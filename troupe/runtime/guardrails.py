"""The configured guardrails as checks (troupe.agentloop.guardrails), built once per host.

A ``regex`` guardrail compiles its rules; a ``moderation`` one calls its server's
``/v1/moderations`` over one connection pool the host keeps (or the sim's moderation model in
process, when it names no server); a ``judge`` one asks its chat model through the host's
model clients, as a turn's model calls go. :meth:`GuardrailRegistry.for_turn` picks a turn's: those
its tenant and model must have, then those the request names; :meth:`GuardrailRegistry.moderations`
answers ``POST /v1/moderations`` with one of them.

Example::

    registry = GuardrailRegistry(settings)
    rails = registry.for_turn("acme", request)   # None when no guardrail applies
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from troupe.agentloop.guardrails import (
    JUDGE_PROMPT,
    Guardrails,
    GuardrailUnavailable,
    JudgeCheck,
    ModerationCheck,
    RegexCheck,
    RequestModeration,
)
from troupe.agentloop.model import ChatRequest, ModelError, TextChunk, TurnEnd
from troupe.protocol import CreateResponseRequest, InvalidRequest, ServerError
from troupe.runtime.models import ModelRegistry
from troupe.runtime.settings import GuardrailSpec, RuntimeSettings
from troupe.sim import moderation as sim_moderation

if TYPE_CHECKING:
    import httpx

__all__ = ["GuardrailRegistry"]


class GuardrailRegistry:
    """One check per configured guardrail, made on first use; one HTTP client for the
    moderation servers, opened on first use and closed with the host. A judge asks its model
    through ``models`` (the host's clients; without them, clients of the registry's own)."""

    def __init__(self, settings: RuntimeSettings, models: ModelRegistry | None = None) -> None:
        self.settings = settings
        self._checks: dict[str, RegexCheck | ModerationCheck | JudgeCheck] = {}
        self._http: httpx.AsyncClient | None = None
        self._own_models = models is None
        self.models = ModelRegistry(settings.models) if models is None else models

    def for_turn(self, tenant: str, request: CreateResponseRequest) -> Guardrails | None:
        """The guardrails a turn runs; None for none. A name the request gives that is not
        configured is a 400 (the ingress checks it first)."""
        specs = {g.name: g for g in self.settings.required_guardrails(tenant, request.model)}
        moderation = None
        if request.moderation is not None:  # OpenAI's parameter: one classifier, its own policy
            chosen = self.moderator(request.moderation.get("model"))
            policy = request.moderation.get("policy") or {}
            moderation = RequestModeration(
                self.check(chosen), _model_name(chosen),
                input=(policy.get("input") or {}).get("mode", "score"),
                output=(policy.get("output") or {}).get("mode", "score"),
            )  # fmt: skip
        for i, name in enumerate(request.guardrails or ()):
            named = self.settings.guardrail(name)
            if named is None:
                raise InvalidRequest(f"Invalid value for 'guardrails[{i}]': unknown guardrail {name!r}.",
                                     param=f"guardrails[{i}]", code="invalid_value")  # fmt: skip
            specs.setdefault(name, named)
        if not specs and moderation is None:
            return None
        return Guardrails([self.check(spec) for spec in specs.values()], moderation=moderation)

    def check(self, spec: GuardrailSpec) -> RegexCheck | ModerationCheck | JudgeCheck:
        """The check of guardrail ``spec`` (made once)."""
        if (check := self._checks.get(spec.name)) is None:
            if spec.kind == "regex":
                check = RegexCheck(spec.name, spec.stages, spec.rules, spec.window)
            elif spec.kind == "judge":
                check = JudgeCheck(spec.name, spec.stages, spec.window, self._judge(spec), model=spec.judge_model,
                                   categories=spec.categories, prompt=spec.prompt or JUDGE_PROMPT)  # fmt: skip
            else:
                moderate = _sim_moderate if spec.base_url is None else self._moderator(spec)
                check = ModerationCheck(spec.name, spec.stages, spec.window, moderate, spec.thresholds,
                                        model=_model_name(spec))  # fmt: skip
            self._checks[spec.name] = check
        return check

    def _judge(self, spec: GuardrailSpec) -> Callable[[str], Awaitable[str]]:
        """How a judge asks its model: one non-streamed chat call, temperature 0, its answer's text."""
        model = self.settings.model(spec.judge_model or "")
        assert model is not None  # the settings check that a judge names a chat model

        async def ask(prompt: str) -> str:
            request = ChatRequest(model=model.upstream_model or model.name, stream=False, temperature=0.0,
                                  max_tokens=64, messages=[{"role": "user", "content": prompt}])  # fmt: skip
            pieces, whole = [], ""
            try:
                async with asyncio.timeout(spec.timeout_s):
                    async for chunk in self.models.client(model).stream(request):
                        if isinstance(chunk, TextChunk):
                            pieces.append(chunk.text)
                        elif isinstance(chunk, TurnEnd):
                            whole = chunk.text
            except TimeoutError:
                raise GuardrailUnavailable(f"the judge model took longer than {spec.timeout_s:g} s") from None
            except ModelError as exc:
                raise GuardrailUnavailable(f"the judge model failed (HTTP {exc.status}: {exc.message})") from None
            except ValueError as exc:  # a model configured wrongly
                raise GuardrailUnavailable(f"the judge model cannot be called ({exc})") from None
            return whole or "".join(pieces)

        return ask

    def _moderator(self, spec: GuardrailSpec) -> Any:
        url = f"{(spec.base_url or '').rstrip('/')}/moderations"
        key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}

        import httpx  # with the first moderation guardrail: a host without one never imports it

        async def moderate(text: str) -> dict[str, Any]:
            if self._http is None:
                self._http = httpx.AsyncClient()
            try:
                answer = await self._http.post(url, json={"model": spec.upstream_model, "input": text},
                                               headers=headers, timeout=spec.timeout_s)  # fmt: skip
            except httpx.TimeoutException:
                raise GuardrailUnavailable(f"the moderation server took longer than {spec.timeout_s:g} s") from None
            except httpx.HTTPError as exc:
                raise GuardrailUnavailable(
                    f"the moderation server could not be reached ({type(exc).__name__})"
                ) from None
            if answer.status_code != 200:
                raise GuardrailUnavailable(f"the moderation server answered HTTP {answer.status_code}")
            try:
                return answer.json()["results"][0]
            except (ValueError, KeyError, IndexError, TypeError):
                raise GuardrailUnavailable("the moderation server's answer is not OpenAI's shape") from None

        return moderate

    async def moderations(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/moderations``: each text of ``body["input"]`` classified by a configured
        guardrail, as OpenAI's ``ModerationCreateResponse``.

        ``model`` names the guardrail, by its name or (a ``moderation`` one) its
        ``upstream_model``; by default the first ``moderation`` guardrail configured, else the
        first ``judge``. A ``regex`` or ``judge`` guardrail answers with its own categories
        (score 1 where flagged). A model behind it that cannot answer is a 502."""
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not texts:
            raise InvalidRequest("'input' must be a string or a non-empty array of strings.", param="input",
                                 code="invalid_type")  # fmt: skip
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidRequest(f"Invalid value for 'input[{i}]': only text is moderated here (a string).",
                                     param=f"input[{i}]", code="invalid_value")  # fmt: skip
        spec = self.moderator(body.get("model"), param="model")
        check = self.check(spec)
        results = []
        for text in texts:
            try:
                categories, scores = await check.classify(text)
            except GuardrailUnavailable as exc:  # the model behind it: 502, as a failed upstream is
                raise ServerError(f"Guardrail {spec.name!r} could not classify the input: {exc}.", status=502,
                                  code="moderation_failed") from None  # fmt: skip
            results.append({
                "flagged": any(categories.values()), "categories": categories, "category_scores": scores,
                "category_applied_input_types": {c: ["text"] for c in categories},
            })  # fmt: skip
        return sim_moderation.moderation_response(results, _model_name(spec))

    def moderator(self, model: Any, *, param: str = "moderation.model") -> GuardrailSpec:
        """The guardrail a moderation ``model`` names: by its name, or a ``moderation``
        guardrail's ``upstream_model``; None: the first ``moderation`` guardrail, else the first
        ``judge``. A 400 naming ``param`` when there is none."""
        if model is None:
            kinds = [g for kind in ("moderation", "judge") for g in self.settings.guardrails if g.kind == kind]
            if not kinds:
                raise InvalidRequest("No moderation model is configured (a [[guardrails]] entry of kind "
                                     f"'moderation' or 'judge'); name a guardrail in '{param}'.", param=param,
                                     code="model_not_found")  # fmt: skip
            return kinds[0]
        if not isinstance(model, str):
            raise InvalidRequest(f"'{param}' must be a string.", param=param, code="invalid_type")
        spec = self.settings.guardrail(model) or next(
            (g for g in self.settings.guardrails if g.kind == "moderation" and g.upstream_model == model), None
        )
        if spec is None:
            known = ", ".join(repr(g.name) for g in self.settings.guardrails) or "none is configured"
            raise InvalidRequest(f"Invalid value for '{param}': {model!r} is not a guardrail of this server "
                                 f"({known}).", param=param, code="model_not_found")  # fmt: skip
        return spec

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._own_models:
            await self.models.close()


def _model_name(spec: GuardrailSpec) -> str:
    """The ``model`` a guardrail's moderation results name: its server's model, else its own name."""
    return spec.upstream_model if spec.kind == "moderation" and spec.base_url else spec.name


async def _sim_moderate(text: str) -> dict[str, Any]:
    return sim_moderation.moderate(text)
