"""The scenario definitions: what each benchmark sends, at which loads, how many requests.

Counts are modest on purpose: a full run (``python -m benchmarks.run``) takes a few minutes
on a 2-core machine, the client shares those cores with every server, and percentiles from
a few dozen requests are indicative, not precise (the results say so). ``--quick`` divides
the counts further, for a smoke test of the harness itself.

Every Troupe figure is also reported as a ratio to the bare sim server measured in the same
run: the *physical limit*, the same wire protocol with no gateway in between.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["Level", "Definitions", "FULL", "QUICK", "definitions", "SLEEP_MS", "TURNS", "IDLE_SLEEP_MS",
           "MAIN_APP", "MAIN", "MAIN_PROXY", "POOLED", "POOLED_PROXY"]

MAIN_APP = "replica"
"""The benchmark server's app that is *the* Troupe measured: ``placement = "replica"`` (the loop in
the one ingress replica), what ``troupe serve`` runs by default."""
MAIN = f"troupe-{MAIN_APP}"
"""The main Troupe target (direct ingress): the Headline's and the Targets table's Troupe, the
profile's, and the one app of scenarios 3 and 4."""
MAIN_PROXY = f"{MAIN}-proxy"
"""The main Troupe app through Serve's proxy."""
POOLED, POOLED_PROXY = "troupe-pooled", "troupe-pooled-proxy"
"""Troupe with pooled host actors (a Ray hop per streamed batch), measured beside the main target in
scenarios 1 and 2; the main target of results from before the replica placement."""

SLEEP_MS = 200
"""Scenario 3: each of the four parallel server-side tool calls sleeps this long."""
TURNS = 20
"""Scenario 4: turns per conversation / chain depth."""
IDLE_SLEEP_MS = 400
"""Scenario 7: each of the four parallel server-side tool calls sleeps this long."""


@dataclass(frozen=True, slots=True)
class Level:
    """One load level: concurrency, measured requests, warm-up requests, a time cap."""

    concurrency: int
    requests: int
    warmup: int
    max_s: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Definitions:
    """All scenario parameters of one run."""

    # 0. the client's own overhead, against the bare sim: 64 tokens streamed 5 ms apart, so that
    #    each event arrives in a network read of its own (the client's worst case)
    overhead_input: str = "[[latency ttft=0 itl=5]] [[tokens 64]]"
    overhead_levels: tuple[Level, ...] = (Level(1, 20, 3), Level(16, 64, 16))
    # 1. single-turn streaming text: sim ttft 50 ms, 10 ms per token, 64 tokens
    streaming_input: str = "[[latency ttft=50 itl=10]] [[tokens 64]]"
    streaming_levels: tuple[Level, ...] = (Level(1, 10, 2), Level(16, 48, 16), Level(64, 128, 32))
    # 2. non-streaming throughput, zero-latency sim, store on and off
    throughput_input: str = "[[tokens 16]]"
    throughput_levels: tuple[Level, ...] = (Level(1, 40, 5, 15), Level(16, 160, 16, 15), Level(64, 256, 64, 15))
    # P. py-spy on Troupe's processes under the streaming and the store-on load (seconds each)
    profile_seconds: float = 10.0
    # 3. agent loop: two model turns around four parallel SLEEP_MS server-side tool calls
    agent_input: str = "[[latency ttft=50 itl=10]] " + " ".join(
        f'[[call sleep {{"ms": {SLEEP_MS}}}]]' for _ in range(4)
    )
    agent_levels: tuple[Level, ...] = (Level(1, 8, 1), Level(8, 24, 8))
    agent_model_samples: int = 5
    # 4. a TURNS-turn conversation and a TURNS-deep previous_response_id chain
    history_sessions: int = 4
    """Sessions run side by side; each turn's latency is summarized over them."""
    history_turns: int = TURNS
    history_input: str = "[[tokens 16]] turn {turn}: tell me more."
    # 5. placement: new conversations, one first turn each, until a cap or a memory budget
    placement_input: str = "[[tokens 8]]"
    placement_pooled_cap: int = 200
    """The cap of the pooled placement and of the replica placement (one host in the ingress replica)."""
    placement_dedicated_cap: int = 16
    placement_memory_budget_mib: float = 4096.0
    """Stop adding conversations once the server's memory grew by this much."""
    placement_min_available_mib: float = 4096.0
    """…or once the machine has less than this available."""
    # 6. MCP: long-lived connection actor vs a session per call
    mcp_calls: int = 60
    # 7. tools after an idle gap: four parallel IDLE_SLEEP_MS calls in one response (zero-latency
    #    sim), on the first request after Troupe is ready, then each idle_tools_gap_s after the last
    idle_tools_input: str = " ".join(f'[[call sleep {{"ms": {IDLE_SLEEP_MS}}}]]' for _ in range(4))
    idle_tools_gap_s: float = 5.0
    idle_tools_samples: int = 5
    # every server's CPU use at rest, measured once all are up (seconds)
    idle_seconds: float = 10.0


FULL = Definitions()
QUICK = replace(
    FULL,
    overhead_levels=(Level(1, 5, 1), Level(16, 16, 16)),
    streaming_levels=(Level(1, 3, 1), Level(16, 16, 16), Level(64, 64, 64)),
    throughput_levels=(Level(1, 10, 2, 10), Level(16, 32, 16, 10), Level(64, 64, 64, 10)),
    agent_levels=(Level(1, 2, 1), Level(8, 8, 8)),
    agent_model_samples=2,
    history_sessions=2,
    history_turns=5,
    placement_pooled_cap=20,
    placement_dedicated_cap=4,
    mcp_calls=10,
    profile_seconds=4.0,
    idle_tools_samples=2,
    idle_seconds=5.0,
)


def definitions(quick: bool) -> Definitions:
    return QUICK if quick else FULL
