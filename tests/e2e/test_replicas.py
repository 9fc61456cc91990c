"""Two ingress replicas with the replica placement: each thread is hosted by the replica its id
hashes to, and a turn sent to the other replica's port is handed to that one.

The session's app of two replicas (each serving on its own port, as ``troupe serve`` runs them
with ``num_replicas = 2``; the other suites reach it through a balancer): the tests send the turns of each chain and conversation to both ports
in turn, read them from both, and check from each replica's own metrics that every thread was
cached by one replica only (the turns ran where the thread lives, not where they arrived).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal

import httpx
import pytest
from openai import OpenAI

from tests.servers import healthy, replica_roots, wait_for
from troupe.protocol import thread_of_response
from troupe.runtime.ray.replicas import owner_rank, this_rank

from .conftest import REPLICAS2

APP = REPLICAS2


@pytest.fixture
def roots(troupe_apps) -> list[str]:
    """The root URLs of the session's two-replica app's replicas, each on its own port (the
    other suites reach them through a balancer; these tests choose the replica themselves)."""
    return replica_roots(APP)


def _clients(roots: list[str]) -> list[OpenAI]:
    return [OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0) for root in roots]


def _cached_threads(root: str) -> float:
    """The conversations this replica's host keeps in its cache (its own metrics)."""
    text = httpx.get(f"{root}/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(r'^troupe_host_conversations\{[^}]*\} (\S+)$', text, re.M))


def test_a_chain_whose_turns_alternate_replicas(roots):
    first, second = _clients(roots)
    one = first.responses.create(model="sim", input="[[say one]]")
    two = second.responses.create(model="sim", input="[[history]]", previous_response_id=one.id)
    assert two.output_text == "[[say one]] | [[history]]"
    three = first.responses.create(model="sim", input="[[history]]", previous_response_id=two.id)
    assert three.output_text == "[[say one]] | [[history]] | [[history]]"
    for client in (first, second):  # either replica reads any of them at once
        assert client.responses.retrieve(three.id).output_text == three.output_text


def test_a_response_is_read_at_once_on_the_replica_that_did_not_make_it(roots):
    """Each replica journals its responses and ships them behind; a read on another replica
    first has them shipped, so it never misses one that was acknowledged."""
    first, second = _clients(roots)
    for i in range(8):
        maker, reader = (first, second) if i % 2 else (second, first)  # each way
        made = maker.responses.create(model="sim", input=f"[[say {i}]]")  # a new chain: hosted by its maker
        assert reader.responses.retrieve(made.id).output_text == str(i)
        listed = reader.responses.input_items.list(made.id)
        assert [item.content[0].text for item in listed.data] == [f"[[say {i}]]"]


def test_a_streamed_turn_sent_to_the_other_replica_arrives_whole_and_in_order(roots):
    first, second = _clients(roots)
    start = first.responses.create(model="sim", input="[[say hello]]")
    for client in (first, second):  # one of the two is not the thread's replica
        events = list(client.responses.create(
            model="sim", input="[[tokens 40]]", previous_response_id=start.id, stream=True
        ))  # fmt: skip
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert deltas == events[-1].response.output_text and len(deltas.split()) == 40


def test_a_client_that_leaves_a_handed_off_stream_cancels_its_turn_on_the_owner(roots):
    """A 20 s turn streamed through the replica that does not host the conversation, left after
    its first delta: the owner's turn is cancelled (the next turn, which waits for it, completes
    in seconds), and it stored nothing."""
    owner, other = _clients(roots)
    conversation = owner.conversations.create()  # hosted by the replica that made it
    body = {"model": "sim", "input": "[[latency itl=100]] [[tokens 200]]", "stream": True,
            "conversation": conversation.id}  # fmt: skip
    with httpx.stream("POST", f"{roots[1]}/v1/responses", json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: response.output_text.delta"):
                break  # the turn runs on the owner; leaving the block closes the connection
    quick = OpenAI(base_url=other.base_url, api_key="unused", max_retries=0, timeout=15)
    follow = quick.responses.create(model="sim", input="[[say next]]", conversation=conversation.id)
    assert follow.output_text == "next"
    items = owner.conversations.items.list(conversation.id, order="asc").data
    assert [item.content[0].text for item in items] == ["[[say next]]", "next"]


def test_a_conversation_whose_turns_alternate_replicas(roots):
    clients = _clients(roots)
    conversation = clients[0].conversations.create()
    for i in range(4):
        clients[i % 2].responses.create(model="sim", input=f"[[say turn {i}]]", conversation=conversation.id)
    last = clients[1].responses.create(model="sim", input="[[history]]", conversation=conversation.id)
    assert last.output_text == " | ".join(f"[[say turn {i}]]" for i in range(4)) + " | [[history]]"
    for client in clients:
        texts = [i.content[0].text for i in client.conversations.items.list(conversation.id, order="asc")
                 if i.type == "message" and i.role == "assistant"]  # fmt: skip
        assert texts == [f"turn {i}" for i in range(4)] + [last.output_text]


def test_each_thread_is_cached_by_one_replica_only(roots):
    """Eight new chains, each turn sent to both replicas in turn: every replica's host caches
    only the threads that live on it, so the two caches grow by eight in all, not sixteen."""
    clients = _clients(roots)
    before = [_cached_threads(root) for root in roots]
    for chain in range(8):
        first = clients[chain % 2].responses.create(model="sim", input=f"[[say {chain}]]")
        clients[(chain + 1) % 2].responses.create(model="sim", input="[[history]]", previous_response_id=first.id)
    after = [_cached_threads(root) for root in roots]
    assert sum(after) - sum(before) == 8


def test_a_thread_whose_replica_died_goes_on_on_the_replica_serve_starts_in_its_place(roots, balancer):
    """kill -9 of the replica a chain lives on: its next turn, sent to the other replica, waits
    for Serve to start another with the same rank, which rebuilds the chain from storage."""
    first, second = _clients(roots)
    one = first.responses.create(model="sim", input="[[say before]]")  # a new chain lives where it starts
    owner = owner_rank(thread_of_response(one.id), 2)
    pids = _pids_by_rank()
    assert sorted(pids) == [0, 1]
    os.kill(pids[owner], signal.SIGKILL)
    # Within 10 s the turn waits for the new replica; past that it answers a 503 the SDK retries.
    patient = OpenAI(base_url=second.base_url, api_key="unused", max_retries=4)
    after = patient.responses.create(model="sim", input="[[history]]", previous_response_id=one.id)
    assert after.output_text == "[[say before]] | [[history]]"
    assert _pids_by_rank()[owner] != pids[owner], "a new process has the dead one's rank"
    wait_for(lambda: len(replica_roots(APP)) == 2 and all(map(healthy, replica_roots(APP))), what="both replicas serving")
    balancer.roots = replica_roots(APP)  # the new one may serve on another port


def _pids_by_rank() -> dict[int, int]:
    """Each live replica's process id, by its Serve rank."""
    import ray

    from troupe.serve.deployment import _ingress_replicas

    answers = []
    for replica in _ingress_replicas(APP):
        with contextlib.suppress(ray.exceptions.RayActorError):  # the dead one, not yet replaced
            answers.append(ray.get(replica.__ray_call__.remote(lambda _actor: (os.getpid(), this_rank())), timeout=30))
    return {rank: pid for pid, rank in answers if rank is not None}


def test_every_answer_about_a_thread_names_its_replica_so_a_balancer_can_route_by_header(roots):
    """``Troupe-Replica`` names the rank hosting the request's thread, on whichever replica
    answered: a new chain's is the replica that made it; a turn handed over names the owner;
    a stream's answer carries it too. Sending each next turn to the named replica's port keeps
    the thread's turns there (its cache is the only one to grow)."""
    by_rank = {}
    for root in roots:
        made = httpx.post(f"{root}/v1/responses", json={"model": "sim", "input": "[[say hi]]"}, timeout=30)
        rank = int(made.headers["troupe-replica"])
        assert rank == owner_rank(thread_of_response(made.json()["id"]), 2)
        by_rank[rank] = root
    assert sorted(by_rank) == [0, 1], "each replica makes chains it hosts itself"
    first = httpx.post(f"{roots[0]}/v1/responses", json={"model": "sim", "input": "[[say a]]"}, timeout=30)
    last = first.json()["id"]
    for root in (roots[1], roots[0], roots[1]):  # every turn through either port names the same owner
        body = {"model": "sim", "input": "[[history]]", "previous_response_id": last, "stream": True}
        with httpx.stream("POST", f"{root}/v1/responses", json=body, timeout=30) as turn:
            assert turn.headers["troupe-replica"] == first.headers["troupe-replica"]
            lines = list(turn.iter_lines())
        completed = lines[lines.index("event: response.completed") + 1]
        last = json.loads(completed.removeprefix("data: "))["response"]["id"]
    owner = by_rank[int(first.headers["troupe-replica"])]
    before = [_cached_threads(root) for root in roots]
    conversation = httpx.post(f"{owner}/v1/conversations", json={}, timeout=30)
    named = by_rank[int(conversation.headers["troupe-replica"])]
    for i in range(3):  # a client that follows the header: every turn on the hosting replica
        turn = httpx.post(f"{named}/v1/responses", json={"model": "sim", "input": f"[[say {i}]]",
                                                         "conversation": conversation.json()["id"]}, timeout=30)  # fmt: skip
        assert turn.status_code == 200 and by_rank[int(turn.headers["troupe-replica"])] == named
    grown = [after - b for after, b in zip([_cached_threads(root) for root in roots], before, strict=True)]
    assert grown[roots.index(named)] == 1 and sum(grown) == 1
