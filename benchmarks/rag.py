"""Vector stores: ingestion throughput (chunks/s) and search latency at 10k and 100k chunks.

    .venv/bin/python -m benchmarks.rag              # ~10 minutes on 2 cores
    .venv/bin/python -m benchmarks.rag --quick      # smoke test: 1k and 2k chunks, benchmarks/scratch/

The path ``troupe serve`` takes, without HTTP in front: a local Ray instance, the storage
actor on a DuckDB file (``storage_memory_limit`` 128MB, the default), and
:class:`troupe.runtime.rag.VectorStores` over its client, as the runtime holds it. Two
embedders:

* ``sim``: the built-in ``sim-embedding`` (feature hashing, 512 dimensions), computed in the
  ingestion tasks themselves;
* ``http-384``: an OpenAI-compatible ``/v1/embeddings`` server over HTTP (``troupe sim``, a
  separate process, its embedder at 384 dimensions), configured as ``kind = "openai"``:
  what a TEI or vLLM embedding server would be, without its model's cost.

For each embedder and size, synthetic files (Zipf-distributed words from a 20,000-word
vocabulary, 50 chunks of 100 tokens each, static chunking without overlap) are attached as
file batches; **ingestion throughput** is the chunks over the time from the first batch's
creation to the last one's completion (tasks already warm: a small batch runs first). Then
**search latency**: 200 searches one after another, each 3 words of the vocabulary's middle
ranks, through ``VectorStores.search`` (embedding the query, the storage actor round trip,
BM25 and the vector ranking in DuckDB, the fusion), p50 and p99. Results:
``benchmarks/results/rag/<date>-<commit>.{json,md}`` with the machine and the commit.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from troupe.bench.machine import describe_machine, machine_info

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "benchmarks" / "scratch"
CHUNKS_PER_FILE = 50
CHUNK_TOKENS = 100
VOCABULARY = 20_000
SEARCHES = 200
BATCH_FILES = 500


def log(message: str) -> None:
    print(f"[rag {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _documents(count: int, seed: int) -> list[bytes]:
    """``count`` files of :data:`CHUNKS_PER_FILE` chunks: words ``w0``… of Zipf-like frequency."""
    rng = np.random.default_rng(seed)
    words = CHUNKS_PER_FILE * CHUNK_TOKENS
    ranks = np.minimum(rng.zipf(1.2, size=(count, words)), VOCABULARY) - 1
    return [" ".join(f"w{r}" for r in row).encode() for row in ranks]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _ingest(stores: Any, store_id: str, files: list[bytes], tag: str) -> float:
    """Upload and attach ``files`` in batches; seconds from the first batch to the last one done."""
    from troupe.rag import wire

    chunking = wire.chunking_strategy({"type": "static", "static": {"max_chunk_size_tokens": CHUNK_TOKENS,
                                                                    "chunk_overlap_tokens": 0}})  # fmt: skip
    ids = []
    for start in range(0, len(files), 64):
        made = await asyncio.gather(*(
            stores.create_file("", filename=f"{tag}-{start + i}.txt", purpose="assistants", data=data)
            for i, data in enumerate(files[start : start + 64])
        ))  # fmt: skip
        ids += [f["id"] for f in made]
    started = time.perf_counter()
    batches = [
        await stores.create_batch("", store_id, [{"file_id": f, "attributes": None, "chunking": chunking}
                                                 for f in ids[i : i + BATCH_FILES]])  # fmt: skip
        for i in range(0, len(ids), BATCH_FILES)
    ]
    for batch in batches:
        while (found := await stores.get_batch("", store_id, batch["id"]))["status"] == "in_progress":
            await asyncio.sleep(0.05)
        if found["file_counts"]["failed"]:
            raise RuntimeError(f"{found['file_counts']['failed']} files failed to ingest")
    return time.perf_counter() - started


async def _searches(stores: Any, store_id: str, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    latencies = []
    for _ in range(SEARCHES):
        query = " ".join(f"w{r}" for r in rng.integers(50, 2000, size=3))
        started = time.perf_counter()
        hits = await stores.search("", [store_id], query, max_num_results=10)
        latencies.append(time.perf_counter() - started)
        assert hits, f"no result for {query!r}"
    return latencies


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


async def measure(settings: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    from troupe.runtime.rag import VectorStores
    from troupe.runtime.ray.storage_actor import RayStoreClient

    store = await RayStoreClient.connect(settings)
    stores = VectorStores(settings, store)
    rows = []
    try:
        for embedder in ("sim-embedding", "http-384"):
            warm = await stores.create_vector_store("", name="warm-up", embedding_model=embedder)
            await _ingest(stores, warm["id"], _documents(8, seed=1), f"warm-{embedder}")
            for size in args.sizes:
                files = _documents(size // CHUNKS_PER_FILE, seed=size)
                vs = await stores.create_vector_store("", name=f"{embedder}-{size}", embedding_model=embedder)
                log(f"{embedder}: ingesting {size:,} chunks ({len(files)} files)")
                seconds = await _ingest(stores, vs["id"], files, f"{embedder}-{size}")
                got = (await stores.get_vector_store("", vs["id"]))["file_counts"]["completed"] * CHUNKS_PER_FILE
                log(f"{embedder}: {got:,} chunks in {seconds:.1f} s; searching")
                latencies = await _searches(stores, vs["id"], seed=size)
                rows.append({
                    "embedder": embedder, "chunks": got, "files": len(files), "ingest_s": seconds,
                    "chunks_per_s": got / seconds, "search_p50_ms": _percentile(latencies, 50),
                    "search_p99_ms": _percentile(latencies, 99), "searches": len(latencies),
                })  # fmt: skip
                log(f"{embedder} {size:,}: {rows[-1]['chunks_per_s']:.0f} chunks/s, search p50 "
                    f"{rows[-1]['search_p50_ms']:.1f} ms, p99 {rows[-1]['search_p99_ms']:.1f} ms")  # fmt: skip
    finally:
        await stores.close()
    return rows


def render(report: dict[str, Any]) -> str:
    rows = [
        f"| {r['embedder']} | {r['chunks']:,} | {r['files']:,} | {r['ingest_s']:.1f} | {r['chunks_per_s']:,.0f} | "
        f"{r['search_p50_ms']:.1f} | {r['search_p99_ms']:.1f} |"
        for r in report["results"]
    ]
    return "\n".join([
        f"# Vector stores: ingestion and search — {report['commit']}" + (" (dirty)" if report["worktree_dirty"] else ""),
        "",
        f"Machine: {describe_machine(report['machine'])}. Command: `{report['command']}`.",
        "",
        f"Ray, the storage actor (DuckDB, memory_limit {report['params']['storage_memory_limit']}), ingestion tasks "
        f"of {report['params']['ingest_num_cpus']} CPU. Files of {CHUNKS_PER_FILE} chunks of {CHUNK_TOKENS} tokens; "
        f"{SEARCHES} searches of 3 words each, one at a time. `http-384`: `troupe sim`'s /v1/embeddings over HTTP "
        "as a kind = \"openai\" embedder.",
        "",
        "| embedder | chunks | files | ingest, s | chunks/s | search p50, ms | search p99, ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ])  # fmt: skip


def _git(*argv: str) -> str | None:
    done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=10)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 1k and 2k chunks, results in benchmarks/scratch/")
    args = parser.parse_args(argv)
    args.sizes = (1_000, 2_000) if args.quick else (10_000, 100_000)
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    work = SCRATCH / "rag" / f"run-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from troupe.runtime import ModelSpec, RuntimeSettings
    from troupe.serve.deployment import LOCAL_RAY_ENV

    for name, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(name, value)
    port = _free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "troupe", "sim", "--port", str(port), "--log-level", "warning"], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    http = ModelSpec(name="http-384", kind="openai", task="embeddings", base_url=f"http://127.0.0.1:{port}/v1",
                     dimensions=384)  # fmt: skip
    settings = RuntimeSettings(storage_path=str(work / "rag.duckdb"), namespace=f"rag-{uuid.uuid4().hex[:8]}",
                               models=(*RuntimeSettings().models, http))  # fmt: skip
    meta = {
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "worktree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "command": " ".join(["python -m benchmarks.rag", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(),
        "params": {"sizes": list(args.sizes), "chunks_per_file": CHUNKS_PER_FILE, "chunk_tokens": CHUNK_TOKENS,
                   "searches": SEARCHES, "ingest_num_cpus": settings.ingest_num_cpus,
                   "storage_memory_limit": settings.storage_memory_limit},  # fmt: skip
    }
    log(describe_machine(meta["machine"]))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _wait_for_sim(port)
        results = asyncio.run(measure(settings, args))
    finally:
        ray.shutdown()  # only the instance started above
        sim.terminate()
        sim.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    report = {**meta, "results": results}
    out_dir = SCRATCH / "results" if args.quick else ROOT / "benchmarks" / "results" / "rag"
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{datetime.date.today().isoformat()}-{commit}"
    Path(f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = render(report)
    Path(f"{stem}.md").write_text(markdown)
    print(markdown)
    return 0


def _wait_for_sim(port: int) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("troupe sim did not start")


if __name__ == "__main__":
    sys.exit(main())
