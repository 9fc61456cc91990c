"""Durable runs: the checkpoint at each step, what it costs a run, the resume after a kill -9.

    .venv/bin/python -m benchmarks.durable_runs                         # the full run, a minute or two on 2 cores
    .venv/bin/python -m benchmarks.durable_runs --runs 200 --resumes 5  # the same, the counts said
    .venv/bin/python -m benchmarks.durable_runs --quick                 # smoke test: tiny counts, benchmarks/scratch/

A durable run checkpoints at every step boundary: its loop yields a ``Checkpoint`` and its
host stores it (``ConversationHost._checkpoint`` → ``checkpoint_steps``) before it takes the
loop's next event; a host killed mid-run restarts in place and the runtime resumes the run
from its last step. A background response (``background: true``) is durable from its start
(its ``runs`` row, ``start_run``, is written before it is answered). A stored foreground
response is durable from its first step (``start_run`` then, just before that step's
checkpoint), unless the runtime option ``durable_foreground`` is false; a foreground
response that calls no tool writes no checkpoint, since the model turn that ends a response
is not checkpointed (the response is stored next). Run starts and checkpoints are
group-committed on the storage actor (``AsyncStore.runs``, a ``GroupCommitWriter`` over
``Store.write_run_progress``: the steps of many runs in one transaction, appended). This
measures, on the Ray runtime as ``troupe serve`` starts it (``Runtime.on_ray``, pooled
placement, ``pool_size=1``, the test tools ``tests.side_effects.COUNTED_TOOLS``, the ``sim``
model at zero latency), in one local Ray instance, two runtimes in their own namespaces, each
with a fresh DuckDB file under ``benchmarks/scratch/durable/``: one with
``durable_foreground=True`` (the default; parts 1 and 3 use it too) and one with
``durable_foreground=False``:

1. **Checkpoint cost per step**, where the host pays it: ``start_run`` and
   ``checkpoint_steps([RunStep(...)])`` through a ``RayStoreClient.by_name`` from inside a Ray
   actor (a stand-in host defined here), timed around the ``await``: the pickling, the hop to
   the storage actor, the group commit (the wait for the batch, its transaction), the reply.
   The payloads are the three checkpoints of one run of a tool loop whose model turn thinks
   64 tokens before its call (``REASONING_LOOP``), built by running the real loop and
   ``WireWriter`` in-process over sim turns, as the host builds them: ``model`` (the turn:
   about 77 wire events, 16 KB of JSON), ``tool`` (the calculator's result), ``tools`` (the
   outputs emitted). Each run is a ``runs`` row first (``start_run``) and ends with
   ``end_run``, so nothing is left behind. With 1 writer (one run at a time) and with 16
   concurrent writers (16 runs checkpointing at once, spread over ``--hosts`` actors as over
   pooled hosts). p50/p90/p99 in ms, and the run writes (starts and checkpoints) per storage
   transaction: the storage actor's ``AsyncStore.runs.write_calls``, read before and after.
2. **What it costs a run end to end**: the 3-checkpoint tool loop (model → tool → tools;
   the final model turn is not checkpointed: ``[[call calculator {"expression": "6*7"}]]``)
   ``--runs`` times in the foreground (``respond``) on each runtime: durable (``start_run``
   and 3 checkpoints, each waited for) and not durable (no write before its response). Also
   in the background (``background``, waited for with the host's ``run_ended``) on each
   runtime: a background run checkpoints whatever the option, so the two background columns
   differ only by the runtime (their process, their DuckDB file), a control for the
   headline. All four interleaved (the order rotated), one at a time. Compared on the stored
   ``e2e_s`` (the host's run time, from the loop's start to the finished record; the same
   measure for all), p50/p99, the difference durable − not durable and that difference per
   checkpoint (/3; the ``start_run`` before the first one is in it). A durable response also
   keeps its event log (every wire event, for ``GET ?stream=true``), written with the
   response after ``e2e_s`` ends: the client-observed times (until the response is stored;
   for background: the start, which writes ``start_run`` before it answers, and the wait on
   the host) include that write, and the hops from this driver process.
3. **Resume latency after a host death**, ``--resumes`` times: a background run whose tool
   is ``gate_again`` (idempotent; it counts its executions in a SQLite table and blocks
   until its gate file exists); once it runs (1 execution) the pooled host's process is
   killed with SIGKILL, and the time is taken from the kill to (a) the tool's second
   execution starting (the run resumed on the restarted host; polled every 5 ms, SQLite),
   then the gate is opened and the time taken from there to (b) the response stored
   ``completed`` (polled every 5 ms through the storage actor; the tool itself looks for
   its gate every 20 ms). Beside (a), every 20 ms, a call to the host: when the restarted
   host answers again (Ray's restart of the actor, apart from the resume that follows).
   Ray prints a "worker died or was killed" line for each kill: that is these kills.

It starts its own local Ray instance (``ray.init(address="local")`` with ``troupe serve``'s
environment, ``LOCAL_RAY_ENV``), never joins or stops another (no ``ray stop``), ends with
``ray.shutdown()`` and ends by pid any process of its own tree that outlived it. Results:
``benchmarks/results/durable/<date>-<commit>-durable.{json,md}`` (``--quick``:
``benchmarks/scratch/results/``), with the machine, its load and the commit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from troupe.bench.machine import describe_machine, machine_info
from troupe.bench.stats import summarize

__all__ = ["main", "step_payloads", "CheckpointWriter"]

SCHEMA = "troupe-durable/2"
"""/2: part 2 compares durable_foreground True / False (four columns); part 1 writes 3 checkpoints a run."""
ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "benchmarks" / "scratch"
TOOL_LOOP = '[[call calculator {"expression": "6*7"}]]'
"""Part 2: model → tool → tools, 3 checkpoints (the answer that ends it is not checkpointed)."""
REASONING_LOOP = f"[[think {' '.join(['thought'] * 64)}]] {TOOL_LOOP}"
"""Part 1: the same loop, its model turn thinking 64 tokens before its call (a bigger ``model`` step)."""
TENANT = ""
CONCURRENT_WRITERS = 16
POLL_S = 0.005
"""How often the resume measure looks (the SQLite side table, then the stored response)."""
HOST_POLL_S = 0.02
"""How often it asks the killed host, beside that, whether it answers again (a call each time)."""
GATE_POLL_S = 0.02
"""How often ``tests.side_effects.gate`` looks for its gate file."""
RESUME_TIMEOUT_S = 120.0


def log(message: str) -> None:
    print(f"[durable {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the payloads: what a host stores at each step ---------------------------------------


async def step_payloads(text: str) -> list[dict[str, Any]]:
    """Every checkpoint of one durable run of ``text``, as ``ConversationHost._checkpoint``
    builds it: the step's data, the wire events and step traces since the previous step.

    The real loop (checkpoints on), the sim model and the real ``WireWriter``, in-process;
    tools are the example tools run in-process.
    """
    from troupe.agentloop.driver import prepare, run_loop
    from troupe.agentloop.events import Checkpoint, StepTraced
    from troupe.agentloop.writer import WireWriter
    from troupe.protocol import new_id, new_response_id, parse_create_request
    from troupe.runtime.host import DELTA_TYPES, _trace
    from troupe.runtime.ray.tool_tasks import local_executor
    from troupe.runtime.settings import DEFAULT_TOOLS
    from troupe.sim.model import SimModel

    request = parse_create_request({"model": "sim", "input": text, "background": True})
    executors = [local_executor(DEFAULT_TOOLS)]
    prepared = prepare(request, [], executors)
    response_id = new_response_id(new_id("thread"))
    writer = WireWriter(request, response_id=response_id, created_at=int(time.time()))
    events: list[dict[str, Any]] = []
    traces: list[Any] = []
    steps: list[dict[str, Any]] = []
    logged = traced = 0
    started, ttft_s = time.time(), None
    async for event in run_loop(prepared, model=SimModel(), executors=executors, checkpoints=True):
        if isinstance(event, StepTraced):
            traces.append(_trace(response_id, len(traces), event))
        elif isinstance(event, Checkpoint):
            steps.append({**event.step.to_data(), "events": events[logged:],
                          "traces": [dataclasses.asdict(t) for t in traces[traced:]], "ttft_s": ttft_s})  # fmt: skip
            logged, traced = len(events), len(traces)
        else:
            wire = writer.write(event)
            events.extend(wire)
            if ttft_s is None and any(e["type"] in DELTA_TYPES for e in wire):
                ttft_s = time.time() - started
    return steps


def _request_body(text: str) -> dict[str, Any]:
    """A background request as ``start_run`` stores it in its ``runs`` row."""
    from troupe.protocol import parse_create_request

    request = parse_create_request({"model": "sim", "input": text, "background": True})
    return request.model_dump(mode="json", exclude_unset=True)


# -- 1. checkpoint cost per step ---------------------------------------------------------


class CheckpointWriter:
    """A stand-in conversation host: stores checkpoints through the storage actor the way a
    pooled host does (``RayStoreClient.by_name``, from inside a Ray actor)."""

    def __init__(self, settings: Any) -> None:
        from troupe.runtime.ray.storage_actor import RayStoreClient

        self.store = RayStoreClient.by_name(settings)

    async def write(self, response_ids: list[str], request: dict[str, Any], steps: list[tuple[str, dict[str, Any]]],
                    concurrency: int) -> list[tuple[str, float]]:  # fmt: skip
        """For each run: ``start_run``, each step's ``checkpoint_steps`` in order, ``end_run``;
        ``concurrency`` runs at once. The time of each call but ``end_run``, by kind (seconds)."""
        from troupe.protocol import thread_of_response
        from troupe.storage import RunRecord, RunStep

        samples: list[tuple[str, float]] = []
        pending = iter(response_ids)  # shared by the workers (one event loop)

        async def worker() -> None:
            for rid in pending:
                run = RunRecord(tenant=TENANT, response_id=rid, thread_id=thread_of_response(rid) or rid,
                                created_at=int(time.time()), request=request)  # fmt: skip
                started = time.perf_counter()
                await self.store.start_run(run)
                samples.append(("start_run", time.perf_counter() - started))
                for seq, (kind, data) in enumerate(steps):
                    step = RunStep(tenant=TENANT, response_id=rid, seq=seq, data=data)
                    started = time.perf_counter()
                    await self.store.checkpoint_steps([step])
                    samples.append((kind, time.perf_counter() - started))
                await self.store.end_run(TENANT, rid)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return samples


def _new_response_ids(count: int) -> list[str]:
    from troupe.protocol import new_id, new_response_id

    return [new_response_id(new_id("thread")) for _ in range(count)]


async def checkpoint_cost(settings: Any, args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from troupe.runtime.ray.storage_actor import STORAGE_ACTOR_NAME

    steps = [(data["kind"], data) for data in await step_payloads(REASONING_LOOP)]
    request = _request_body(REASONING_LOOP)
    payloads = {kind: {"wire_events": len(data["events"]), "json_bytes": len(json.dumps(data))} for kind, data in steps}
    log(f"1. checkpoint payloads: {payloads}")
    storage = ray.get_actor(STORAGE_ACTOR_NAME, namespace=settings.namespace)

    async def transactions() -> int | None:
        """The storage actor's run-progress transactions so far (None if it cannot say)."""
        try:
            return await storage.__ray_call__.remote(lambda actor: actor.runs.write_calls)
        except Exception:  # noqa: BLE001 - an actor without the counter: the ratio is left out
            return None

    actor = ray.remote(num_cpus=0, max_concurrency=1_000)(CheckpointWriter)
    writers = [actor.remote(settings) for _ in range(max(1, args.hosts))]
    try:
        await asyncio.gather(*(w.write.remote(_new_response_ids(3), request, steps, 1) for w in writers))  # warm-up
        configs = []
        for concurrent in (1, CONCURRENT_WRITERS):
            hosts = writers[: min(len(writers), concurrent)]
            per_host = [concurrent // len(hosts) + (i < concurrent % len(hosts)) for i in range(len(hosts))]
            runs = max(args.checkpoint_runs, concurrent)
            log(f"1. {runs} runs x {len(steps)} checkpoints, {concurrent} writer(s) on {len(hosts)} actor(s)")
            ids = _new_response_ids(runs)
            shares = [ids[i :: len(hosts)] for i in range(len(hosts))]
            before = await transactions()
            started = time.perf_counter()
            results = await asyncio.gather(*(h.write.remote(share, request, steps, n)
                                             for h, share, n in zip(hosts, shares, per_host, strict=True)))  # fmt: skip
            wall = time.perf_counter() - started
            after = await transactions()
            samples = [s for result in results for s in result]
            by_kind: dict[str, Any] = {}
            for kind in (*(k for k, _ in steps), "start_run"):
                summary = summarize([seconds for k, seconds in samples if k == kind])
                by_kind[kind] = None if summary is None else summary.scaled(1000).to_dict(3)
            checkpoints = sum(1 for k, _ in samples if k != "start_run")
            # Every start_run and checkpoint_steps is one item of the runs writer; nothing else writes meanwhile.
            writes = None if before is None or after is None else after - before
            configs.append({"writers": concurrent, "actors": len(hosts), "runs": runs, "wall_s": round(wall, 3),
                            "checkpoints_per_s": round(checkpoints / wall, 1), "transactions": writes,
                            "run_writes_per_transaction": round(len(samples) / writes, 2) if writes else None,
                            "ms": by_kind})  # fmt: skip
    finally:
        for writer in writers:
            ray.kill(writer)
    return {"payloads": payloads, "configs": configs}


# -- 2. what it costs a run end to end ---------------------------------------------------

MODES = ("foreground_durable", "foreground_not_durable", "background_durable_rt", "background_not_durable_rt")
"""Part 2's columns: the mode, and which runtime (``durable_foreground`` True / False) it ran on."""


async def run_cost(durable: Any, plain: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``durable``: the runtime with ``durable_foreground=True``; ``plain``: with False."""
    from troupe.protocol import parse_create_request, thread_of_response

    def foreground(runtime: Any) -> Any:
        async def run() -> tuple[str, float]:
            started = time.perf_counter()
            response = await runtime.respond(TENANT, parse_create_request({"model": "sim", "input": TOOL_LOOP}))
            assert response["status"] == "completed", response
            return response["id"], time.perf_counter() - started

        return run

    def background(runtime: Any) -> Any:
        async def run() -> tuple[str, float]:
            started = time.perf_counter()
            body = {"model": "sim", "input": TOOL_LOOP, "background": True}
            response = await runtime.background(TENANT, parse_create_request(body))
            host = await runtime.placement.running_host(thread_of_response(response["id"]))
            if host is not None:  # None: it has ended already
                await host.run_ended(TENANT, response["id"])  # returns once it is stored
            return response["id"], time.perf_counter() - started

        return run

    runtime_of = dict(zip(MODES, (durable, plain, durable, plain), strict=True))
    calls = {mode: (foreground if mode.startswith("foreground") else background)(runtime_of[mode]) for mode in MODES}
    for _ in range(3):  # warm-up, not counted
        for call in calls.values():
            await call()
    ids: dict[str, list[str]] = {mode: [] for mode in MODES}
    client_s: dict[str, list[float]] = {mode: [] for mode in MODES}
    log(f"2. {args.runs} runs of each of {', '.join(MODES)}, interleaved")
    for i in range(args.runs):
        for mode in MODES[i % len(MODES) :] + MODES[: i % len(MODES)]:  # the order rotated
            rid, seconds = await calls[mode]()
            ids[mode].append(rid)
            client_s[mode].append(seconds)
    # Whether each kept its event log (a durable response does): the option took effect.
    event_log = {mode: await runtime_of[mode].store.response_events(TENANT, ids[mode][0]) is not None
                 for mode in MODES if ids[mode]}  # fmt: skip
    checkpoints = len(await step_payloads(TOOL_LOOP))
    return {"ids": ids, "client_s": client_s, "checkpoints_per_run": checkpoints, "kept_event_log": event_log}


def run_cost_report(raw: dict[str, Any], e2e: dict[str, float]) -> dict[str, Any]:
    """``raw`` from :func:`run_cost` with the stored ``e2e_s`` of each response (by id)."""
    per = raw["checkpoints_per_run"]
    out: dict[str, Any] = {"runs": len(raw["ids"][MODES[0]]), "checkpoints_per_run": per,
                           "kept_event_log": raw["kept_event_log"]}  # fmt: skip
    for mode, ids in raw["ids"].items():
        values = [e2e[rid] for rid in ids if rid in e2e]
        out[mode] = {
            "e2e_ms": _ms_summary(values),
            "client_ms": _ms_summary(raw["client_s"][mode]),
            "missing": len(ids) - len(values),
        }

    def difference(a: str, b: str) -> dict[str, Any] | None:
        """``a`` − ``b`` on ``e2e_s``: the p50s, the p99s, the median of the per-round differences."""
        sa, sb = out[a]["e2e_ms"], out[b]["e2e_ms"]
        paired = [e2e[x] - e2e[y] for x, y in zip(raw["ids"][a], raw["ids"][b], strict=True) if x in e2e and y in e2e]
        if not sa or not sb or not paired:
            return None
        return {"p50": round(sa["p50"] - sb["p50"], 3), "p99": round(sa["p99"] - sb["p99"], 3),
                "paired_median": round(_ms_summary(paired)["p50"], 3)}  # type: ignore[index]  # fmt: skip

    diff = difference("foreground_durable", "foreground_not_durable")
    if diff:
        diff["p50_per_checkpoint"] = round(diff["p50"] / per, 3)
        diff["paired_median_per_checkpoint"] = round(diff["paired_median"] / per, 3)
    out["difference_ms"] = diff
    out["runtime_control_ms"] = difference("background_durable_rt", "background_not_durable_rt")
    return out


def _ms_summary(values: list[float]) -> dict[str, Any] | None:
    summary = summarize(values)
    return None if summary is None else summary.scaled(1000).to_dict(3)


# -- 3. resume latency after a host death ------------------------------------------------


async def _answers(handle: Any) -> bool:
    from ray.exceptions import RayActorError

    try:
        await handle.ping.remote()
    except RayActorError:
        return False
    return True


async def _host_pid(handle: Any) -> int:
    return await handle.__ray_call__.remote(lambda self: os.getpid())


async def _wait(condition: Any, what: str, timeout_s: float = RESUME_TIMEOUT_S, poll_s: float = POLL_S) -> float:
    """Poll ``condition`` (a callable, maybe async) every ``poll_s``; when it held (perf_counter)."""
    deadline = time.perf_counter() + timeout_s
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(poll_s)


async def resume_latency(runtime: Any, settings: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from tests.side_effects import executions
    from troupe.protocol import parse_create_request

    db = str(work / "side.sqlite")
    host = ray.get_actor("troupe-host-0", namespace=settings.namespace)  # pool_size=1: every run's host
    trials = []
    for i in range(args.resumes):
        key, gate = f"resume-{i}", work / f"gate-{i}"
        arguments = json.dumps({"db": db, "key": key, "path": str(gate)})
        body = {"model": "sim", "input": f"[[call gate_again {arguments}]]", "background": True}
        await _wait(lambda: _answers(host), "the host up")  # restarted after the last kill
        pid = await _host_pid(host)
        response = await runtime.background(TENANT, parse_create_request(body))
        rid = response["id"]
        await _wait(lambda k=key: executions(db, k) == 1, "the tool running")
        os.kill(pid, signal.SIGKILL)
        killed = time.perf_counter()
        # Beside it, less often: when the restarted host answers a call again.
        back = asyncio.create_task(_wait(lambda: _answers(host), "the host back", poll_s=HOST_POLL_S))
        trial: dict[str, Any] = {"response_id": rid, "killed_pid": pid}
        try:
            resumed = await _wait(lambda k=key: executions(db, k) >= 2, "the tool started again")
            trial["kill_to_rerun_ms"] = round((resumed - killed) * 1000, 1)
            trial["kill_to_host_back_ms"] = round((await back - killed) * 1000, 1)
            gate.touch()
            opened = time.perf_counter()

            async def stored(r: str = rid) -> bool:
                found = await runtime.store.get_response(TENANT, r)
                return found is not None

            done = await _wait(stored, "the response stored")
            final = await runtime.store.get_response(TENANT, rid)
            trial["gate_to_completed_ms"] = round((done - opened) * 1000, 1)
            trial["kill_to_completed_ms"] = round((done - killed) * 1000, 1)
            trial["status"] = final["status"]
            trial["executions"] = executions(db, key)
            trial["new_pid"] = await _host_pid(host)
        except TimeoutError as exc:
            gate.touch()
            trial["error"] = str(exc)
        finally:
            back.cancel()
        log(f"3. resume {i + 1}/{args.resumes}: {trial}")
        trials.append(trial)
    good = [t for t in trials if t.get("status") == "completed"]
    return {
        "trials": trials,
        "completed": len(good),
        "kill_to_host_back_ms": _p50_max([t["kill_to_host_back_ms"] for t in trials if "kill_to_host_back_ms" in t]),
        "kill_to_rerun_ms": _p50_max([t["kill_to_rerun_ms"] for t in trials if "kill_to_rerun_ms" in t]),
        "gate_to_completed_ms": _p50_max([t["gate_to_completed_ms"] for t in good]),
        "poll_ms": POLL_S * 1000,
        "host_poll_ms": HOST_POLL_S * 1000,
        "gate_poll_ms": GATE_POLL_S * 1000,
    }


def _p50_max(values: list[float]) -> dict[str, Any] | None:
    summary = summarize(values)
    return None if summary is None else {"count": summary.count, "p50": round(summary.p50, 1),
                                         "max": round(summary.max, 1)}  # fmt: skip


# -- the stored timings, after the runtime is gone ---------------------------------------


def stored_timings(path: Path, ids: list[str]) -> tuple[dict[str, float], dict[str, int]]:
    """``e2e_s`` of each response of ``ids``, and the ``runs`` / ``run_steps`` rows left over."""
    from troupe.storage.duckdb_store import DuckDBStore

    for attempt in range(50):  # the storage actor's process may still hold the file a moment
        try:
            store = DuckDBStore(str(path))
            break
        except Exception:  # noqa: BLE001 - DuckDB's lock error; retried
            if attempt == 49:
                raise
            time.sleep(0.2)
    try:
        _, rows = store.query("SELECT id, e2e_s FROM responses WHERE list_contains(?, id)", [ids])
        _, [(runs,)] = store.query("SELECT count(*) FROM runs")
        _, [(steps,)] = store.query("SELECT count(*) FROM run_steps")
    finally:
        store.close()
    return {rid: e2e for rid, e2e in rows}, {"runs": runs, "run_steps": steps}


# -- processes ---------------------------------------------------------------------------


def _own_tree() -> dict[int, float]:
    """Every process this one started (pid → start time): Ray's daemons and workers."""
    tree = {}
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            tree[proc.pid] = proc.create_time()
    return tree


def _end_leftovers(tree: dict[int, float], wait_s: float = 15.0) -> list[dict[str, Any]]:
    """After ``ray.shutdown()``: wait for the processes of ``tree`` to exit; end any that do not
    (by pid, only those this run started). What had to be ended."""
    deadline, leftovers = time.monotonic() + wait_s, []
    for pid, created in sorted(tree.items()):
        try:
            proc = psutil.Process(pid)
            if proc.create_time() != created:
                continue
            while proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                leftovers.append({"pid": pid, "name": proc.name()})
                proc.kill()
        except psutil.Error:
            continue
    return leftovers


# -- the run -----------------------------------------------------------------------------


async def measure(settings: Any, plain_settings: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``settings``: the runtime with ``durable_foreground=True`` (parts 1, 2, 3); ``plain_settings``:
    the one with False (part 2), in its own namespace and DuckDB file."""
    from troupe.runtime import Runtime

    log("starting the two runtimes (pooled, pool_size=1; durable_foreground True and False)")
    runtime = await Runtime.on_ray(settings)
    try:
        plain = await Runtime.on_ray(plain_settings)
        try:
            results: dict[str, Any] = {"checkpoint_cost": await checkpoint_cost(settings, args)}
            results["run_cost_raw"] = await run_cost(runtime, plain, args)
        finally:
            await plain.close()
        results["resume"] = await resume_latency(runtime, settings, work, args)
    finally:
        await runtime.close()
    return results


def _git(*argv: str) -> str | None:
    try:
        done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, help="2: runs of each of the 4 columns (default 200, quick 4)")
    parser.add_argument("--resumes", type=int, help="3: kill -9 and resume, this many times (default 5, quick 1)")
    parser.add_argument(
        "--checkpoint-runs",
        type=int,
        help="1: runs of a start and 3 checkpoints, per writer count (default 400, quick 32)",
    )
    parser.add_argument(
        "--hosts",
        type=int,
        default=4,
        help="1: actors the 16 concurrent writers are spread over (default 4, the default pool)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke test: tiny counts, results to benchmarks/scratch/results/"
    )
    parser.add_argument("--out-dir", help="where the results go (default benchmarks/results/durable/)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch DuckDB file and side table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name, full, quick in (("runs", 200, 4), ("resumes", 5, 1), ("checkpoint_runs", 400, 32)):
        if getattr(args, name) is None:  # a count given wins over --quick's
            setattr(args, name, quick if args.quick else full)
    out_dir = (
        Path(args.out_dir) if args.out_dir else (SCRATCH / "results" if args.quick else ROOT / "benchmarks" / "results" / "durable")
    )
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    meta = {
        "schema": SCHEMA,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "command": " ".join(["python -m benchmarks.durable_runs", *(argv if argv is not None else sys.argv[1:])]),
        "quick": args.quick,
        "machine": machine_info(),
        "params": {
            "runs": args.runs,
            "resumes": args.resumes,
            "checkpoint_runs": args.checkpoint_runs,
            "concurrent_writers": CONCURRENT_WRITERS,
            "hosts": args.hosts,
        },  # fmt: skip
    }
    log(describe_machine(meta["machine"]))

    work = SCRATCH / "durable" / f"run-{os.getpid()}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    db_path, plain_db_path = work / "durable.duckdb", work / "not-durable.duckdb"

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from tests.side_effects import COUNTED_TOOLS
    from troupe.runtime import RuntimeSettings
    from troupe.serve.deployment import LOCAL_RAY_ENV

    for name, value in LOCAL_RAY_ENV.items():  # the local instance as `troupe serve` starts it
        os.environ.setdefault(name, value)
    tag = uuid.uuid4().hex[:8]
    settings, plain_settings = (
        RuntimeSettings(
            storage_path=str(path),
            namespace=f"durable-bench-{name}-{tag}",
            placement="pooled",
            pool_size=1,
            tools=COUNTED_TOOLS,
            durable_foreground=durable,
        )
        for path, name, durable in ((db_path, "durable", True), (plain_db_path, "plain", False))
    )
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    tree: dict[int, float] = {}
    try:
        tree = _own_tree()
        results = asyncio.run(measure(settings, plain_settings, work, args))
    finally:
        tree.update(_own_tree())
        ray.shutdown()  # only the instance started above
        leftovers = _end_leftovers(tree)
    raw = results.pop("run_cost_raw")
    ids = [rid for mode_ids in raw["ids"].values() for rid in mode_ids]
    e2e, left = stored_timings(db_path, ids)
    plain_e2e, plain_left = stored_timings(plain_db_path, ids)
    results["run_cost"] = run_cost_report(raw, {**e2e, **plain_e2e})
    left = {key: left[key] + plain_left[key] for key in left}
    results["left_behind"] = {**left, "processes_ended_by_pid": leftovers}
    report = {**meta, **results}

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}-durable"
    Path(f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = render(report)
    Path(f"{stem}.md").write_text(markdown)
    print(markdown)
    log(f"wrote {stem}.json and .md")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if results["resume"]["completed"] == args.resumes and not left["runs"] else 1


# -- the report --------------------------------------------------------------------------


def _f(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(report: dict[str, Any]) -> str:
    """The Markdown of a results JSON."""
    checkpoint = report["checkpoint_cost"]
    kinds = [*checkpoint["payloads"], "start_run"]
    lines = [
        f"# Durable runs: checkpoints and resume — {report['commit']}{' (dirty)' if report['worktree_dirty'] else ''}",
        "",
        f"{report['created_at']}, `{report['command']}`{' (QUICK: smoke test)' if report['quick'] else ''}.",
        f"Machine: {describe_machine(report['machine'])}.",
        "Runtimes: `Runtime.on_ray`, pooled placement, `pool_size=1`, the `sim` model at zero latency, two in one Ray",
        "instance, each in its namespace with its DuckDB file: `durable_foreground=True` (parts 1-3) and `False` (part 2).",
        "",
        "## 1. Checkpoint cost per step",
        "",
        "`start_run` and `checkpoint_steps` through `RayStoreClient.by_name` from inside a Ray actor (where a pooled host",
        "makes them), timed around the call; on the storage actor they are group-committed (`AsyncStore.runs`: many",
        "runs' steps in one transaction). Per run, `start_run` then the 3 checkpoints of one run of `REASONING_LOOP`",
        "(a tool loop whose model turn thinks 64 tokens), built by the real loop and `WireWriter` over sim turns: "
        + ", ".join(
            f"`{k}` {v['wire_events']} wire events, {v['json_bytes']:,} bytes of JSON"
            for k, v in checkpoint["payloads"].items()
        )
        + ". Run writes per transaction: (starts + checkpoints) / the storage actor's `AsyncStore.runs.write_calls`.",
        "",
        "| writers | actors | call | count | p50 ms | p90 ms | p99 ms | max ms | checkpoints/s | run writes per transaction |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for config in checkpoint["configs"]:
        for kind in kinds:
            s = config["ms"].get(kind)
            if s is None:
                continue
            first = kind == kinds[0]
            rate = config["checkpoints_per_s"] if first else ""
            batch = _f(config.get("run_writes_per_transaction")) if first else ""
            lines.append(f"| {config['writers']} | {config['actors']} | {kind} | {s['count']} | {_f(s['p50'])} | "
                         f"{_f(s['p90'])} | {_f(s['p99'])} | {_f(s['max'])} | {rate} | {batch} |")  # fmt: skip
    cost = report["run_cost"]
    per = cost["checkpoints_per_run"]
    labels = {
        "foreground_durable": "foreground, durable (`durable_foreground=True`)",
        "foreground_not_durable": "foreground, not durable (`durable_foreground=False`)",
        "background_durable_rt": "background (on the `True` runtime)",
        "background_not_durable_rt": "background (on the `False` runtime)",
    }
    lines += [
        "",
        "## 2. What it costs a run end to end",
        "",
        f"`{TOOL_LOOP}`: {per} checkpoints (model, tool, tools; the final model turn is not checkpointed) when",
        "durable, each waited for, and the `runs` row (`start_run`) before the first; none when not durable.",
        f"{cost['runs']} runs of each column, interleaved (the order rotated), one at a time. `e2e_s` is the stored",
        "host-side run time (loop start to the finished record), the same measure for all. A background run",
        "checkpoints on either runtime: its two columns differ only by the runtime (process, DuckDB file), a control.",
        "**A durable response also keeps its event log** (every wire event, for `GET ?stream=true`), written with",
        "the response after `e2e_s` ends; the not-durable foreground response keeps none. The client columns",
        "(measured in this driver: for foreground, `respond` until the response is stored; for background, the",
        "start, which writes `start_run` before it answers, then waiting on the host) include that write and the",
        "Ray hops. Kept an event log: "
        + ", ".join(f"{mode} {'yes' if kept else 'no'}" for mode, kept in cost["kept_event_log"].items())
        + ".",
        "",
        "| column | e2e p50 ms | e2e p99 ms | client p50 ms | client p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for mode, label in labels.items():
        e, c = cost[mode]["e2e_ms"] or {}, cost[mode]["client_ms"] or {}
        lines.append(f"| {label} | {_f(e.get('p50'))} | {_f(e.get('p99'))} | {_f(c.get('p50'))} | {_f(c.get('p99'))} |")
    diff, control = cost.get("difference_ms"), cost.get("runtime_control_ms")
    if diff:
        lines += ["", f"**Durable − not durable foreground** (`e2e_s`): p50 {diff['p50']:+.2f} ms, p99 {diff['p99']:+.2f} ms, "
                  f"median of the per-round differences {diff['paired_median']:+.2f} ms; per checkpoint (/{per}, the "
                  f"`start_run` included): p50 {diff['p50_per_checkpoint']:+.2f} ms, paired median "
                  f"{diff['paired_median_per_checkpoint']:+.2f} ms."]  # fmt: skip
    if control:
        lines += ["", f"Control, background on the `True` − the `False` runtime: p50 {control['p50']:+.2f} ms, p99 "
                  f"{control['p99']:+.2f} ms, paired median {control['paired_median']:+.2f} ms."]  # fmt: skip
    resume = report["resume"]
    lines += [
        "",
        "## 3. Resume latency after a host death",
        "",
        "A background run of `gate_again` (idempotent, blocks on a gate file); once it runs, SIGKILL to the pooled",
        "host's process. (a) kill → the tool's second execution starts (the run resumed from its checkpoint on the",
        "restarted host); (b) gate opened → the response stored `completed`. Polled every "
        f"{resume['poll_ms']:g} ms (the tool looks for its gate every {resume['gate_poll_ms']:g} ms, within (b)). "
        "Beside (a), every "
        f"{resume['host_poll_ms']:g} ms: kill → the restarted host answers a call again.",
        "",
        "| # | kill → host answers ms | (a) kill → rerun ms | (b) gate → completed ms | kill → completed ms | status |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for i, t in enumerate(resume["trials"], 1):
        cells = [_f(t.get(k), 1) for k in ("kill_to_host_back_ms", "kill_to_rerun_ms", "gate_to_completed_ms",
                                            "kill_to_completed_ms")]  # fmt: skip
        lines.append(f"| {i} | {' | '.join(cells)} | {t.get('status') or t.get('error')} |")
    lines += ["", "| measure | count | p50 ms | max ms |", "|---|---:|---:|---:|"]
    for label, key in (("kill → host answers", "kill_to_host_back_ms"), ("(a) kill → rerun", "kill_to_rerun_ms"),
                       ("(b) gate → completed", "gate_to_completed_ms")):  # fmt: skip
        s = resume.get(key)
        if s:
            lines.append(f"| {label} | {s['count']} | {s['p50']:.1f} | {s['max']:.1f} |")
    left = report["left_behind"]
    lines += [
        "",
        f"Left behind: {left['runs']} `runs` rows, {left['run_steps']} `run_steps` rows; processes of this run "
        f"ended by pid after `ray.shutdown()`: {len(left['processes_ended_by_pid'])}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
