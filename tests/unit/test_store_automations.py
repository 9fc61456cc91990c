"""The automations area of the store (troupe.storage.duckdb_store.automations), on DuckDB in
memory and on a file: automations, invocations, and the claim of a due time, which is once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from troupe.protocol.automations import PENDING_DELIVERY_S, automation_object, parse_automation_create
from troupe.storage.contract import Store
from troupe.storage.duckdb_store import DuckDBStore

T0 = 1_800_000_000  # Friday 2027-01-15 08:00:00 UTC
EXISTING = {"type": "existing_session", "session_id": "sess_1", "instructions": "Report."}


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    s: Store = DuckDBStore() if request.param == "memory" else DuckDBStore(tmp_path / "t.duckdb")
    yield s
    s.close()


def automation(automation_id: str, **body: Any) -> dict[str, Any]:
    body = {"type": "periodic", "name": "hourly", "expression": "0 * * * *", "timezone": "UTC", "target": EXISTING,
            **body}  # fmt: skip
    return automation_object(automation_id, parse_automation_create(body, now=T0), created_at=T0)


def once(automation_id: str, run_at: int = T0 + 60) -> dict[str, Any]:
    body = {"type": "once", "name": "once", "run_at": run_at, "target": EXISTING}
    return automation_object(automation_id, parse_automation_create(body, now=T0), created_at=T0)


def test_an_automation_is_created_read_listed_changed_and_deleted(store: Store) -> None:
    made = automation("automation_1", metadata={"team": "a"})
    assert store.create_automation("acme", made, T0 + 3600, None) == made
    assert store.get_automation("acme", "automation_1") == made
    assert store.get_automation("other", "automation_1") is None, "another tenant's"
    other_target = automation("automation_2", target={**EXISTING, "session_id": "sess_2"})
    store.create_automation("acme", other_target, T0 + 3600, None)
    assert [a["id"] for a in store.list_automations("acme", order="asc").data] == ["automation_1", "automation_2"]
    assert [a["id"] for a in store.list_automations("acme", session_id="sess_2").data] == ["automation_2"]
    page = store.list_automations("acme", limit=1, order="asc")
    assert page.has_more and [a["id"] for a in store.list_automations("acme", after=page.last_id).data] == []
    assert [a["id"] for a in store.list_automations("acme", after=page.last_id, order="asc").data] == ["automation_2"]

    updated = store.update_automation("acme", "automation_1", {"name": "daily", "expression": "0 10 * * *"}, T0, None)
    assert (updated["name"], updated["expression"]) == ("daily", "0 10 * * *")
    assert store.next_automation_due() == T0 + 3600, "automation_2's; automation_1 is next due at 10:00"
    assert store.due_automations(T0 + 3600) == [("acme", "automation_2", T0 + 3600)]
    assert store.due_automations(T0 + 7200) == [("acme", "automation_2", T0 + 3600), ("acme", "automation_1", T0 + 7200)]
    paused = store.set_automation_status("acme", "automation_2", "paused", T0, None)
    assert paused["status"] == "paused" and store.next_automation_due() == T0 + 7200
    resumed = store.set_automation_status("acme", "automation_2", "active", T0 + 7200 + 30, None)
    assert resumed["status"] == "active"
    assert store.due_automations(T0 + 3 * 3600)[-1] == ("acme", "automation_2", T0 + 3 * 3600), "the next after now"

    assert store.update_automation("acme", "automation_missing", {"name": "x"}, T0, None) is None
    assert store.delete_automation("acme", "automation_1") is True
    assert store.get_automation("acme", "automation_1") is None
    assert store.delete_automation("acme", "automation_1") is False


def test_a_one_time_automation_is_claimed_once_then_completed(store: Store) -> None:
    store.create_automation("acme", once("automation_1"), T0 + 60, None)
    assert store.due_automations(T0 + 59) == []
    invocation = store.claim_automation_due("acme", "automation_1", T0 + 60, "ainv_1", T0 + 61)
    assert invocation is not None and (invocation["status"], invocation["scheduled_at"]) == ("queued", T0 + 60)
    assert invocation["source"]["automation"]["id"] == "automation_1"
    assert store.claim_automation_due("acme", "automation_1", T0 + 60, "ainv_2", T0 + 61) is None, "claimed"
    assert store.get_automation("acme", "automation_1")["status"] == "completed"
    assert store.next_automation_due() is None and store.due_automations(T0 + 10**6) == []

    finished = store.finish_invocation("acme", "ainv_1", "completed", "sess_9", None)
    assert (finished["status"], finished["session_id"]) == ("completed", "sess_9")
    assert store.get_invocation("acme", "automation_1", "ainv_1") == finished
    assert store.get_invocation("acme", "automation_other", "ainv_1") is None
    assert [i["id"] for i in store.list_invocations("acme", "automation_1").data] == ["ainv_1"]
    manual = store.create_manual_invocation("acme", "automation_1", "ainv_3", T0 + 70)
    assert manual is not None and manual["source"] == {"type": "manual"} and manual["scheduled_at"] is None
    assert store.create_manual_invocation("acme", "automation_1", "ainv_4", T0 + 70) is not None, \
        "manual runs have no due time to collide on"
    assert [i["id"] for i in store.list_invocations("acme", "automation_1", order="asc").data] == [
        "ainv_1", "ainv_3", "ainv_4"]
    assert store.delete_automation("acme", "automation_1")
    assert store.list_invocations("acme", "automation_1").data == [], "deleted with it"


def test_missed_due_times_fire_once_and_the_next_is_after_now(store: Store) -> None:
    store.create_automation("acme", automation("automation_1"), T0 + 3600, None)
    a_day_later = T0 + 86_400 + 1800  # the server was down for 24 due times
    assert store.due_automations(a_day_later) == [("acme", "automation_1", T0 + 3600)]
    claimed = store.claim_automation_due("acme", "automation_1", T0 + 3600, "ainv_1", a_day_later)
    assert claimed is not None
    assert store.next_automation_due() == T0 + 86_400 + 3600, "the first hour after now, not the missed ones"
    assert store.due_automations(a_day_later) == []


def test_a_claim_after_a_change_of_schedule_or_a_pause_fires_nothing(store: Store) -> None:
    store.create_automation("acme", automation("automation_1"), T0 + 3600, None)
    store.set_automation_status("acme", "automation_1", "paused", T0)
    assert store.claim_automation_due("acme", "automation_1", T0 + 3600, "ainv_1", T0 + 3600) is None
    store.set_automation_status("acme", "automation_1", "active", T0)
    store.update_automation("acme", "automation_1", {"expression": "30 * * * *"}, T0, None)
    assert store.claim_automation_due("acme", "automation_1", T0 + 3600, "ainv_1", T0 + 3600) is None
    assert store.claim_automation_due("acme", "automation_1", T0 + 1800, "ainv_1", T0 + 1800) is not None


def test_two_concurrent_claimers_of_one_due_time_fire_it_once(store: Store) -> None:
    for n in range(20):
        store.create_automation("acme", automation(f"automation_{n}"), T0 + 3600, None)
    start = threading.Barrier(2)
    claims: dict[str, list[Any]] = {"a": [], "b": []}

    def claimer(name: str) -> None:
        start.wait()
        for tenant, automation_id, due in store.due_automations(T0 + 3600):
            claims[name].append(store.claim_automation_due(tenant, automation_id, due, f"ainv_{name}_{automation_id}",
                                                           T0 + 3600))  # fmt: skip

    threads = [threading.Thread(target=claimer, args=(name,)) for name in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [c for c in claims["a"] + claims["b"] if c is not None]
    assert len(won) == 20 and len({c["automation_id"] for c in won}) == 20, "each due time once, none lost"
    for n in range(20):
        assert len(store.list_invocations("acme", f"automation_{n}").data) == 1


def test_the_due_time_is_unique_per_automation_in_the_table_itself(store: Store) -> None:
    """A claimer that read the automation before another's claim moved it on (another replica)
    still fails: the invocation row of that due time exists. The check of the next due time is
    put back here by hand to show the constraint alone refuses it."""
    store.create_automation("acme", automation("automation_1"), T0 + 3600, None)
    assert store.claim_automation_due("acme", "automation_1", T0 + 3600, "ainv_1", T0 + 3600) is not None
    with store._transaction() as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE automations SET next_due_at = ? WHERE id = 'automation_1'", [T0 + 3600])
    assert store.claim_automation_due("acme", "automation_1", T0 + 3600, "ainv_2", T0 + 3600) is None
    assert [i["id"] for i in store.list_invocations("acme", "automation_1").data] == ["ainv_1"]
    assert store.get_automation("acme", "automation_1")["status"] == "active", "the failed claim changed nothing"


def test_an_automations_kept_secrets_are_what_the_runtime_gave(store: Store) -> None:
    store.create_automation("acme", automation("automation_1"), None, "fernet:token")
    assert store.automation_secrets("acme", "automation_1") == "fernet:token"
    store.update_automation("acme", "automation_1", {"name": "x"}, T0, None)
    assert store.automation_secrets("acme", "automation_1") == "fernet:token", "no target: kept"
    store.update_automation("acme", "automation_1", {"target": EXISTING}, T0, None)
    assert store.automation_secrets("acme", "automation_1") is None
    assert store.automation_secrets("acme", "automation_missing") is None


def test_a_due_time_while_a_delivery_is_pending_is_skipped(store: Store) -> None:
    store.create_automation("acme", automation("automation_1", expression="* * * * *"), T0 + 60, None)
    first = store.claim_automation_due("acme", "automation_1", T0 + 60, "ainv_1", T0 + 60)
    assert first is not None and first["status"] == "queued"
    second = store.claim_automation_due("acme", "automation_1", T0 + 120, "ainv_2", T0 + 120)
    assert second is not None and (second["status"], second["skip_reason"]) == ("skipped", "pending_delivery")
    assert store.next_automation_due() == T0 + 180, "a skipped time is a claimed time"
    store.finish_invocation("acme", "ainv_1", "completed", "sess_1", None)
    third = store.claim_automation_due("acme", "automation_1", T0 + 180, "ainv_3", T0 + 180)
    assert third is not None and (third["status"], third["skip_reason"]) == ("queued", None)
    # A delivery queued for longer than PENDING_DELIVERY_S went with its process: it holds nothing up.
    later = T0 + 180 + PENDING_DELIVERY_S + 60
    due = store.next_automation_due()
    fourth = store.claim_automation_due("acme", "automation_1", due, "ainv_4", later)
    assert fourth is not None and fourth["status"] == "queued"
    statuses = {i["id"]: i["status"] for i in store.list_invocations("acme", "automation_1").data}
    assert statuses == {"ainv_1": "completed", "ainv_2": "skipped", "ainv_3": "queued", "ainv_4": "queued"}
