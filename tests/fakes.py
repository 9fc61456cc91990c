"""Deterministic fake models for loop tests: scripted turns as data, no mocks.

``ScriptedModel`` holds a queue of turns and records every ``ChatRequest`` it
is sent; an unexpected call fails the test, and ``assert_complete()`` fails when
scripted turns were left unused. ``FunctionModel`` answers from a function of
the request, for reactive scenarios.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from troupe.agentloop.model import (
    ChatRequest,
    ModelChunk,
    ModelError,
    ReasoningChunk,
    TextChunk,
    TokenUsage,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    TurnEnd,
)

Turn = Sequence[ModelChunk] | Exception


def text_turn(text: str, *, reasoning: str = "", finish_reason: str = "stop", input_tokens: int = 10) -> list[ModelChunk]:
    """A turn that answers ``text`` word by word."""
    chunks: list[ModelChunk] = [ReasoningChunk(text=w) for w in _pieces(reasoning)]
    chunks += [TextChunk(text=w) for w in _pieces(text)]
    usage = TokenUsage(input_tokens=input_tokens, output_tokens=len(text.split()) + len(reasoning.split()))
    chunks.append(TurnEnd(text=text, reasoning=reasoning, finish_reason=finish_reason, usage=usage))
    return chunks


def tool_turn(*calls: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str], text: str = "", input_tokens: int = 10) -> list[ModelChunk]:
    """A turn that calls tools: each call is ``(name, arguments)`` or ``(name, arguments, call_id)``."""
    chunks: list[ModelChunk] = [TextChunk(text=w) for w in _pieces(text)]
    assembled = []
    for index, spec in enumerate(calls):
        name, args = spec[0], spec[1]
        call_id = spec[2] if len(spec) > 2 else f"call_{name}_{index}"
        arguments = json.dumps(args)
        chunks.append(ToolCallStart(index=index, call_id=call_id, name=name))
        half = len(arguments) // 2  # arguments arrive in two pieces, as over the wire
        chunks += [ToolCallArgumentsDelta(index=index, delta=arguments[:half]), ToolCallArgumentsDelta(index=index, delta=arguments[half:])]
        assembled.append(ToolCall(call_id=call_id, name=name, arguments=arguments))
    usage = TokenUsage(input_tokens=input_tokens, output_tokens=len(calls) * 5 + len(text.split()))
    chunks.append(TurnEnd(text=text, tool_calls=tuple(assembled), finish_reason="tool_calls", usage=usage))
    return chunks


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)] if text else []


class ScriptedModel:
    """Plays back scripted turns, one per model call."""

    def __init__(self, *turns: Turn) -> None:
        self._turns: deque[Turn] = deque(turns)
        self.calls: list[ChatRequest] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelChunk]:
        self.calls.append(request)
        if not self._turns:
            raise AssertionError(f"unexpected model call #{len(self.calls)}: {request.messages[-1:]}")
        turn = self._turns.popleft()
        if isinstance(turn, Exception):
            raise turn
        for chunk in turn:
            yield chunk

    def assert_complete(self) -> None:
        assert not self._turns, f"{len(self._turns)} scripted turn(s) were never used"


class FunctionModel:
    """Answers each call with ``fn(request)``: a list of chunks (or raises)."""

    def __init__(self, fn: Callable[[ChatRequest], Sequence[ModelChunk]]) -> None:
        self.fn = fn
        self.calls: list[ChatRequest] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelChunk]:
        self.calls.append(request)
        for chunk in self.fn(request):
            yield chunk


class RecordingModel:
    """Hands every call to ``model`` (the sim, say) and keeps its ``ChatRequest``: what went upstream."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.calls: list[ChatRequest] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelChunk]:
        self.calls.append(request)
        async for chunk in self.model.stream(request):
            yield chunk


__all__ = ["ScriptedModel", "FunctionModel", "RecordingModel", "FunctionMcpClient", "ToyCodeRunner", "ToyShellRunner", "text_turn", "tool_turn",
           "ModelError"]  # fmt: skip


class FunctionMcpClient:
    """An in-process stand-in for MCP servers, for loop unit tests: server label -> {tool: function}.

    Integration tests use real MCP servers (tests/mcp_servers.py); this one lets the
    loop's MCP logic be tested with plain values. It records every list and call.
    """

    def __init__(self, servers: dict[str, dict[str, Callable[..., Any]]], *, down: frozenset[str] = frozenset()) -> None:
        self.servers = servers
        self.down = down
        self.listed: list[str] = []
        self.called: list[tuple[str, str, dict[str, Any]]] = []

    def check_server(self, server: Any, index: int | None = None) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_tools(self, server: Any) -> list[Any]:
        from troupe.agentloop.mcp import McpError, McpTool

        self.listed.append(server.label)
        if server.label in self.down:
            raise McpError(f"cannot connect to {server.url}", kind="protocol")
        return [
            McpTool(name=name, input_schema={"type": "object", "properties": {}}, description=fn.__doc__)
            for name, fn in self.servers[server.label].items()
        ]

    async def call_tool(self, server: Any, name: str, arguments: dict[str, Any]) -> str:
        import inspect

        from troupe.agentloop.mcp import McpError

        self.called.append((server.label, name, arguments))
        try:
            result = self.servers[server.label][name](**arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise McpError(str(exc), kind="tool") from exc
        return str(result)


class WordsFileSearcher:
    """An in-process stand-in for the vector stores, for loop unit tests: store id ->
    {file_id: (filename, text)}, ranked by the query's words each passage holds.

    The e2e tests search real vector stores (DuckDB, through the storage actor); this one lets
    the loop's file_search logic be tested with plain values. It records every search.
    """

    def __init__(self, stores: dict[str, dict[str, tuple[str, str]]]) -> None:
        self.stores = stores
        self.searches: list[dict[str, Any]] = []

    async def search(self, vector_store_ids: Sequence[str], query: str, *, max_num_results: int,
                     filters: dict[str, Any] | None, ranking_options: dict[str, Any] | None) -> list[dict[str, Any]]:  # fmt: skip
        self.searches.append({"vector_store_ids": list(vector_store_ids), "query": query, "max_num_results": max_num_results})
        words = set(query.lower().replace("?", "").split())
        found = []
        for store_id in vector_store_ids:
            if store_id not in self.stores:
                raise LookupError(f"No vector store found with id '{store_id}'.")
            for file_id, (filename, text) in self.stores[store_id].items():
                score = len(words & set(text.lower().replace(".", "").split())) / max(len(words), 1)
                if score > 0:
                    found.append({"file_id": file_id, "filename": filename, "score": score, "text": text,
                                  "attributes": {}})  # fmt: skip
        return sorted(found, key=lambda r: -r["score"])[:max_num_results]


class PagesWebSearcher:
    """An in-process stand-in for the web, for loop unit tests: url -> (title, text), searched by
    the query's words each page holds. The e2e tests search a SearXNG-compatible server over HTTP
    (tests/web_search_server.py) with the runtime's searcher; this one lets the loop's web_search
    logic be tested with plain values. It records every search and page opened; ``fail`` makes
    every call fail with that message."""

    def __init__(self, pages: dict[str, tuple[str, str]], fail: str | None = None) -> None:
        self.pages = pages
        self.fail = fail
        self.calls: list[tuple[str, ...]] = []

    async def search(self, query: str, *, max_results: int, allowed_domains: Sequence[str] = (),
                     user_location: dict[str, Any] | None = None) -> list[Any]:  # fmt: skip
        from troupe.agentloop.web_search import SearchHit, WebSearchFailed

        self.calls.append(("search", query, str(max_results), ",".join(allowed_domains), json.dumps(user_location)))
        if self.fail:
            raise WebSearchFailed(self.fail)
        words = set(query.lower().replace("?", "").split())
        scored = [(len(words & set(text.lower().replace(".", "").split())), url, title, text)
                  for url, (title, text) in self.pages.items()]  # fmt: skip
        return [SearchHit(url, title, text[:80]) for score, url, title, text in sorted(scored, key=lambda s: -s[0])
                if score][:max_results]  # fmt: skip

    async def open_page(self, url: str) -> Any:
        from troupe.agentloop.web_search import Page, WebSearchFailed

        self.calls.append(("open", url))
        if self.fail or url not in self.pages:
            raise WebSearchFailed(self.fail or f"{url} answered 404")
        title, text = self.pages[url]
        return Page(url, title, text)


class ToyCodeRunner:
    """A small, real :class:`troupe.agentloop.code_interpreter.CodeRunner` for loop unit tests:
    containers are dicts of variables and files, and code is a few kinds of lines, run one by one:

    * ``NAME = EXPR`` and ``print(EXPR, …)``: arithmetic on numbers, strings and the variables
      (kept between runs of one container);
    * ``open("/mnt/data/NAME", "w").write(EXPR)``: writes a container file (``cfile_<n>``);
    * ``plt.show()``: shows a figure (an image URL);
    * ``while True: pass``: runs into the time limit (``limit="timeout"``);
    * ``crash()``: the runner itself fails (an exception: the call cannot run);
    * anything else, or an unknown name: raises, as Python would (a traceback in the logs).

    The e2e tests run real sandboxes; this one lets the loop's code_interpreter logic be tested
    with plain values. It records the containers it made and every run.
    """

    def __init__(self, *, containers: Sequence[str] = (), broken: bool = False) -> None:
        self.variables: dict[str, dict[str, Any]] = {c: {} for c in containers}
        self.files: dict[str, dict[str, str]] = {c: {} for c in containers}
        self.created: list[dict[str, Any]] = []
        self.asked: list[tuple[Any, str | None]] = []
        self.runs: list[tuple[str, str]] = []
        self.broken = broken
        self._files = 0

    def expire(self, container_id: str) -> None:
        self.variables.pop(container_id, None)

    async def container_for(self, spec: str | dict[str, Any], *, reuse: str | None) -> str:
        from troupe.agentloop.code_interpreter import ContainerNotFound

        self.asked.append((spec, reuse))
        if self.broken:
            raise RuntimeError("no sandbox is available")
        if isinstance(spec, str):
            if spec not in self.variables:
                raise ContainerNotFound(spec)
            return spec
        if reuse is not None and reuse in self.variables:
            return reuse
        container_id = f"cntr_{len(self.created) + 1}"
        self.created.append(dict(spec))
        self.variables[container_id], self.files[container_id] = {}, {}
        return container_id

    async def run(self, container_id: str, code: str) -> Any:
        import ast
        import re

        from troupe.agentloop.code_interpreter import CodeRun, ContainerFile, ContainerNotFound

        self.runs.append((container_id, code))
        if container_id not in self.variables:
            raise ContainerNotFound(container_id)
        scope, logs, images, written = self.variables[container_id], [], [], []

        def value(expr: str) -> Any:
            node = ast.parse(expr.strip(), mode="eval").body

            def ev(n: ast.AST) -> Any:
                match n:
                    case ast.Constant(value=v):
                        return v
                    case ast.Name(id=name):
                        if name not in scope:
                            raise NameError(f"name '{name}' is not defined")
                        return scope[name]
                    case ast.BinOp(left=left, op=op, right=right):
                        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
                               ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}  # fmt: skip
                        return ops[type(op)](ev(left), ev(right))
                    case ast.UnaryOp(op=ast.USub(), operand=operand):
                        return -ev(operand)
                raise SyntaxError("unsupported expression")

            return ev(node)

        for line in code.splitlines():
            line = line.strip()
            try:
                if not line or line.startswith("#"):
                    continue
                if line == "while True: pass":
                    return CodeRun(logs="".join(logs) + "TimeoutError: the run took longer than 1 s\n",
                                   limit="timeout", images=tuple(images))  # fmt: skip
                if line == "crash()":
                    raise ConnectionError("the container's kernel is unreachable")
                if line == "plt.show()":
                    images.append(f"https://files.example/{container_id}/figure-{len(images) + 1}.png")
                elif match := re.fullmatch(r"print\((.*)\)", line):
                    logs.append(" ".join(str(value(part)) for part in match[1].split(",")) + "\n")
                elif match := re.fullmatch(r"open\(['\"](/mnt/data/[^'\"]+)['\"], ['\"]w['\"]\)\.write\((.*)\)", line):
                    path = match[1]
                    value(match[2])
                    if path not in self.files[container_id]:
                        self._files += 1
                        self.files[container_id][path] = f"cfile_{self._files}"
                    file_id = self.files[container_id][path]
                    written.append(ContainerFile(file_id=file_id, filename=path.rsplit("/", 1)[-1], path=path))
                elif match := re.fullmatch(r"([A-Za-z_]\w*) = (.*)", line):
                    scope[match[1]] = value(match[2])
                else:
                    raise SyntaxError("invalid syntax")
            except (NameError, SyntaxError, ZeroDivisionError, TypeError) as exc:
                trace = f"Traceback (most recent call last):\n  line: {line}\n{type(exc).__name__}: {exc}\n"
                return CodeRun(logs="".join(logs) + trace, failed=True, images=tuple(images), files=tuple(written))
        return CodeRun(logs="".join(logs), images=tuple(images), files=tuple(written))


class ToyShellRunner:
    """A small, real :class:`troupe.agentloop.shell.ShellRunner` for loop unit tests: containers
    are dicts of files, and commands are a few kinds, run one by one:

    * ``echo TEXT``: prints TEXT; ``echo TEXT > NAME`` writes it to the file NAME instead;
    * ``cat NAME``: prints the file, or says on stderr that it is missing (exit code 1);
    * ``ls``: the files' names, one a line;
    * ``exit N``: ends with exit code N;
    * ``sleep``: runs into its timeout (``timed_out``);
    * ``crash``: the runner itself fails (an exception: the call cannot run);
    * anything else: ``sh: CMD: not found`` on stderr, exit code 127.

    ``max_output_length`` cuts each stream. It records the containers it made and every run
    (container, commands, timeout_ms, max_output_length).
    """

    def __init__(self, *, containers: Sequence[str] = (), broken: bool = False) -> None:
        self.files: dict[str, dict[str, str]] = {c: {} for c in containers}
        self.created: list[dict[str, Any]] = []
        self.asked: list[tuple[Any, str | None]] = []
        self.runs: list[tuple[str, list[str], int | None, int | None]] = []
        self.broken = broken

    async def container_for(self, spec: str | dict[str, Any], *, reuse: str | None) -> str:
        from troupe.agentloop.code_interpreter import ContainerNotFound

        self.asked.append((spec, reuse))
        if self.broken:
            raise RuntimeError("no sandbox is available")
        if isinstance(spec, str):
            if spec not in self.files:
                raise ContainerNotFound(spec)
            return spec
        if reuse is not None and reuse in self.files:
            return reuse
        container_id = f"cntr_{len(self.created) + 1}"
        self.created.append(dict(spec))
        self.files[container_id] = {}
        return container_id

    async def run_shell(
        self, container_id: str, commands: Sequence[str], *, timeout_ms: int | None, max_output_length: int | None
    ) -> list[Any]:
        from troupe.agentloop.code_interpreter import ContainerNotFound
        from troupe.agentloop.shell import CommandRun

        self.runs.append((container_id, list(commands), timeout_ms, max_output_length))
        if container_id not in self.files:
            raise ContainerNotFound(container_id)
        files = self.files[container_id]
        cut = (lambda text: text[:max_output_length]) if max_output_length else (lambda text: text)
        runs = []
        for command in commands:
            word, _, rest = command.strip().partition(" ")
            out, err, code, timed_out = "", "", 0, False
            if word == "crash":
                raise RuntimeError("the sandbox went away")
            if word == "echo" and " > " in rest:
                text, _, name = rest.partition(" > ")
                files[name.strip()] = text + "\n"
            elif word == "echo":
                out = rest + "\n"
            elif word == "cat" and rest in files:
                out = files[rest]
            elif word == "cat":
                err, code = f"cat: {rest}: No such file or directory\n", 1
            elif word == "ls":
                out = "".join(f"{name}\n" for name in sorted(files))
            elif word == "exit":
                code = int(rest)
            elif word == "sleep":
                code, timed_out = None, True  # type: ignore[assignment]
            else:
                err, code = f"sh: {word}: not found\n", 127
            runs.append(CommandRun(stdout=cut(out), stderr=cut(err), exit_code=code, timed_out=timed_out))
        return runs
