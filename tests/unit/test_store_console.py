"""The console's reads of the Store contract (find_responses, response_stats, thread_turns),
run against both implementations like the rest of the contract (tests/unit/test_store_contract.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.unit.test_store_contract import T0, conversation, make_record, message
from troupe.storage import DuckDBStore, ResponseFilter, Store
from troupe.storage.base import ResponseRecord, quantile


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    """DuckDB in memory (what ``storage_path = ":memory:"`` opens) and on a file."""
    s: Store = DuckDBStore() if request.param == "memory" else DuckDBStore(tmp_path / "t.duckdb")
    yield s
    s.close()


def timed(record: ResponseRecord, *, ended: float, e2e: float = 1.0, ttft: float | None = 0.5) -> ResponseRecord:
    return dataclasses.replace(record, started_at=ended - e2e, ended_at=ended, ttft_s=ttft)


def ids_of(store: Store, where: ResponseFilter, **page) -> list[str]:
    return [s.id for s in store.find_responses(where, **page).data]


def _history(store: Store) -> None:
    store.write_responses([
        make_record("resp_a1", tenant="acme", created_at=T0, model="m1"),
        make_record("resp_a2", tenant="acme", created_at=T0 + 10, model="m2", status="failed"),
        make_record("resp_a3", tenant="acme", created_at=T0 + 10, model="m1"),  # a created_at tie: write order
        make_record("resp_b1", tenant="beta", created_at=T0 + 5, model="m1"),
        make_record("resp_o1", tenant="", created_at=T0 + 20, model="m2"),
    ])  # fmt: skip


def test_find_responses_newest_first_and_filtered(store: Store) -> None:
    _history(store)
    assert ids_of(store, ResponseFilter(tenant="acme")) == ["resp_a3", "resp_a2", "resp_a1"]
    assert ids_of(store, ResponseFilter(tenant="acme", model="m1")) == ["resp_a3", "resp_a1"]
    assert ids_of(store, ResponseFilter(tenant="acme", status="failed")) == ["resp_a2"]
    assert ids_of(store, ResponseFilter(tenant="acme", since=T0 + 1)) == ["resp_a3", "resp_a2"]
    assert ids_of(store, ResponseFilter(tenant="acme", until=T0 + 10)) == ["resp_a1"]
    assert ids_of(store, ResponseFilter(tenant="acme", id="resp_a2")) == ["resp_a2"]
    assert ids_of(store, ResponseFilter(tenant="acme", model="nope")) == []


def test_find_responses_summary_fields(store: Store) -> None:
    store.create_conversation("acme", conversation("conv_1"), [])
    store.write_responses([timed(make_record("resp_1", conversation="conv_1", status="failed"), ended=T0 + 3)])
    (summary,) = store.find_responses(ResponseFilter(tenant="acme")).data
    assert (summary.tenant, summary.id, summary.created_at, summary.model, summary.status) == (
        "acme", "resp_1", T0, "gpt-test", "failed",
    )  # fmt: skip
    assert (summary.thread_id, summary.conversation_id, summary.previous_response_id) == ("conv_1", "conv_1", None)
    assert (summary.started_at, summary.ended_at, summary.e2e_s, summary.ttft_s) == (T0 + 2, T0 + 3, 1.0, 0.5)
    assert (summary.input_tokens, summary.output_tokens, summary.error_code) == (12, 5, "server_error")


def test_a_tenant_never_sees_another_tenants_responses(store: Store) -> None:
    _history(store)
    assert ids_of(store, ResponseFilter(tenant="beta")) == ["resp_b1"]
    assert ids_of(store, ResponseFilter(tenant="")) == ["resp_o1"]
    assert ids_of(store, ResponseFilter(tenant="beta", id="resp_a1")) == []
    # A cursor of another tenant is unknown here.
    assert store.find_responses(ResponseFilter(tenant="beta"), after="resp_a3").data == []
    assert store.thread_turns("beta", "resp_a1") == []
    assert store.response_stats("beta", T0, T0 + 100).responses == 1


def test_every_tenant_with_tenant_none(store: Store) -> None:
    _history(store)
    everyone = store.find_responses(ResponseFilter())
    assert [(s.tenant, s.id) for s in everyone.data] == [
        ("", "resp_o1"), ("acme", "resp_a3"), ("acme", "resp_a2"), ("beta", "resp_b1"), ("acme", "resp_a1"),
    ]  # fmt: skip
    assert ids_of(store, ResponseFilter(model="m1")) == ["resp_a3", "resp_b1", "resp_a1"]
    assert [s.tenant for s in store.find_responses(ResponseFilter(id="resp_b1")).data] == ["beta"]


def test_find_responses_pages(store: Store) -> None:
    _history(store)
    first = store.find_responses(ResponseFilter(), limit=2)
    assert [s.id for s in first.data] == ["resp_o1", "resp_a3"] and first.has_more
    second = store.find_responses(ResponseFilter(), after="resp_a3", limit=2)
    assert [s.id for s in second.data] == ["resp_a2", "resp_b1"] and second.has_more
    last = store.find_responses(ResponseFilter(), after="resp_b1", limit=2)
    assert [s.id for s in last.data] == ["resp_a1"] and not last.has_more
    # The cursor marks a position; it need not match the filter.
    assert ids_of(store, ResponseFilter(model="m1"), after="resp_a2") == ["resp_b1", "resp_a1"]
    assert store.find_responses(ResponseFilter(), after="resp_missing").data == []
    with pytest.raises(ValueError):
        store.find_responses(ResponseFilter(), limit=0)


def test_response_stats_over_a_window(store: Store) -> None:
    ttfts = [0.1, 0.2, 0.3, 0.4, None]
    records = [
        timed(make_record(f"resp_{i}", tenant="acme", status="failed" if i == 4 else "completed",
                          thread_id="conv_x" if i < 2 else None), ended=T0 + 10 + i, e2e=1.0 + i, ttft=ttft)
        for i, ttft in enumerate(ttfts)
    ]  # fmt: skip
    records.append(timed(make_record("resp_old", tenant="acme"), ended=T0, ttft=9.0))  # before the window
    records.append(timed(make_record("resp_other", tenant="beta"), ended=T0 + 12, ttft=9.0))
    store.write_responses(records)
    stats = store.response_stats("acme", T0 + 10, T0 + 20)
    assert (stats.since, stats.until, stats.responses) == (T0 + 10, T0 + 20, 5)
    assert stats.by_status == {"completed": 4, "failed": 1}
    assert stats.threads == 4  # conv_x (two responses), and three responses of their own
    assert stats.ttft_p50_s == pytest.approx(quantile([0.1, 0.2, 0.3, 0.4], 0.5)) == pytest.approx(0.25)
    assert stats.ttft_p99_s == pytest.approx(0.397)
    assert stats.e2e_p50_s == pytest.approx(3.0)
    assert stats.e2e_p99_s == pytest.approx(4.96)
    assert store.response_stats(None, T0 + 10, T0 + 20).responses == 6
    empty = store.response_stats("acme", T0 + 100, T0 + 200)
    assert (empty.responses, empty.by_status, empty.threads) == (0, {}, 0)
    assert (empty.ttft_p50_s, empty.e2e_p99_s) == (None, None)


def test_thread_turns_in_order_with_their_items(store: Store) -> None:
    store.create_conversation("acme", conversation("conv_1"), [])
    store.write_responses([
        make_record("resp_2", conversation="conv_1", created_at=T0 + 5),
        make_record("resp_1", conversation="conv_1", created_at=T0,
                    inputs=[message("msg_q1", "user", "one"), message("msg_q2", "user", "two")]),
        make_record("resp_elsewhere", created_at=T0 + 1),
    ])  # fmt: skip
    turns = store.thread_turns("acme", "conv_1")
    assert [t.summary.id for t in turns] == ["resp_1", "resp_2"]
    assert [i["id"] for i in turns[0].input_items] == ["msg_q1", "msg_q2"]
    assert [i["id"] for i in turns[0].output_items] == ["msg_resp_1_out"]
    assert [i["id"] for i in turns[1].input_items] == ["msg_resp_2_in"]
    assert [t.summary.id for t in store.thread_turns("acme", "conv_1", limit=1)] == ["resp_1"]
    assert store.thread_turns("acme", "conv_missing") == []


def test_deleted_responses_are_gone_from_the_console_reads(store: Store) -> None:
    _history(store)
    store.delete_response("acme", "resp_a1")
    assert "resp_a1" not in ids_of(store, ResponseFilter())
    assert store.thread_turns("acme", "resp_a1") == []


def test_quantile_interpolates_linearly() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.99) == 3.0
    assert quantile([4.0, 1.0, 2.0, 3.0], 0.5) == 2.5
    assert quantile([1.0, 2.0], 0.99) == pytest.approx(1.99)
