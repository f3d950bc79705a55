"""OutboxStore contract, on SQLite and PostgreSQL (the `store` fixture): idempotent
enqueue (also inside a caller's transaction), per-payment order, leases and token
fencing, retry / dead / redrive, pause and disable, listing and backlog."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from porteiro.config import DestinationConfig
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState
from porteiro.sinks.fanout import outbox_rows
from porteiro.sinks.message_id import message_id
from porteiro.store import open_store
from porteiro.store.base import Store
from porteiro.store.outbox import (
    REDRIVE_BATCH,
    OutboxRow,
    OutboxStatus,
    OutboxStore,
    outbox_store,
)
from porteiro.store.postgres.outbox import insert_outbox_pg
from porteiro.store.sqlite.outbox import insert_outbox_sqlite

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
LEASE = timedelta(seconds=30)
DESTS = {
    "erp": DestinationConfig("erp", url="http://127.0.0.1:1/", secret="whsec_MTIz"),
    "bus": DestinationConfig("bus", rabbitmq_url="amqp://x", kinds=("payment.paid",)),
}


def rows_for(event_id: int, object_id: str, kind: Kind = Kind.PAYMENT_PAID) -> list[OutboxRow]:
    event = ParsedEvent(f"gw_{event_id}", kind, kind.value, object_id, amount=1000, currency="BRL")
    payment = Payment(
        "stripe", object_id, PaymentState.PAID, 1000, "BRL", 0, None, 1, T0, {}
    )  # fmt: skip
    return outbox_rows(event_id, "stripe", event, payment, DESTS)


@pytest.fixture
def outbox(store: Store) -> OutboxStore:
    return outbox_store(store)


async def claim_ids(outbox: OutboxStore, now: datetime = T0, limit: int = 100) -> list[int]:
    return [
        claim.row.event_id for claim in await outbox.claim_outbox("erp", "r", limit, LEASE, now)
    ]


async def test_fanout_and_idempotent_enqueue(outbox: OutboxStore) -> None:
    rows = rows_for(1, "pay_1") + rows_for(2, "pay_1", Kind.PAYMENT_CREATED)
    assert [(row.destination, row.event_id) for row in rows] == [("bus", 1), ("erp", 1), ("erp", 2)]
    assert await outbox.enqueue_outbox(rows, T0) == 3
    assert await outbox.enqueue_outbox(rows, T0) == 0  # a replayed event never enqueues twice
    assert await outbox.outbox_backlog() == {
        "bus": {"pending": 1, "delivering": 0, "done": 0, "dead": 0},
        "erp": {"pending": 2, "delivering": 0, "done": 0, "dead": 0},
    }
    page = await outbox.list_outbox("erp", None, None, 10)
    assert [row.event_id for row in page.items] == [2, 1]
    first = page.items[1]
    assert first.message_id == first.payload["id"] == message_id("stripe", "gw_1")
    assert first.payload["payment"]["state"] == "paid"
    assert first.status is OutboxStatus.PENDING and first.attempts == 0


async def test_per_payment_order_and_fencing(outbox: OutboxStore) -> None:
    await outbox.enqueue_outbox(rows_for(1, "a") + rows_for(2, "b") + rows_for(3, "a"), T0)
    claims = await outbox.claim_outbox("erp", "r", 10, LEASE, T0)
    assert [c.row.event_id for c in claims] == [1, 2]  # 3 waits for 1 (same payment)
    assert all(c.row.attempts == 1 for c in claims)
    assert await claim_ids(outbox) == []  # nothing more while 1 is in flight
    one = claims[0]
    assert await outbox.complete_outbox(one, "200", T0)
    assert not await outbox.complete_outbox(one, "200", T0)  # settled already: fenced
    assert await claim_ids(outbox) == [3]
    done = (await outbox.list_outbox("erp", OutboxStatus.DONE, None, 10)).items
    assert [row.event_id for row in done] == [1]
    assert done[0].last_status == "200" and done[0].delivered_at == T0


async def test_expired_lease_comes_back_and_old_token_is_refused(outbox: OutboxStore) -> None:
    await outbox.enqueue_outbox(rows_for(1, "a"), T0)
    [first] = await outbox.claim_outbox("erp", "dead-relay", 5, LEASE, T0)
    assert await claim_ids(outbox, T0 + LEASE / 2) == []
    [second] = await outbox.claim_outbox("erp", "r2", 5, LEASE, T0 + LEASE * 2)
    assert second.row.id == first.row.id and second.token != first.token
    assert second.row.attempts == 2
    assert not await outbox.retry_outbox(first, "late", "500", T0, T0 + LEASE * 2)
    assert await outbox.complete_outbox(second, "204", T0 + LEASE * 2)


async def test_retry_dead_blocks_payment_and_redrive(outbox: OutboxStore) -> None:
    await outbox.enqueue_outbox(rows_for(1, "a") + rows_for(2, "a") + rows_for(3, "b"), T0)
    claims = await outbox.claim_outbox("erp", "r", 10, LEASE, T0)
    assert [c.row.event_id for c in claims] == [1, 3]
    later = T0 + timedelta(seconds=60)
    assert await outbox.retry_outbox(claims[0], "HTTP 500", "500", later, T0)
    assert await outbox.dead_outbox(claims[1], "HTTP 400", "400", T0)
    assert await claim_ids(outbox, T0) == []  # 1 not due yet; 2 waits for 1
    [again] = await outbox.claim_outbox("erp", "r", 10, LEASE, later)
    assert again.row.event_id == 1 and again.row.last_error == "HTTP 500"
    assert await outbox.dead_outbox(again, "HTTP 500", "500", later)
    assert await claim_ids(outbox, later) == []  # a dead row blocks its payment's later rows
    dead = (await outbox.list_outbox("erp", OutboxStatus.DEAD, None, 10)).items
    assert {row.event_id: row.attempts for row in dead} == {1: 2, 3: 1}
    third = next(row.id for row in dead if row.event_id == 3)
    assert await outbox.redrive_outbox("erp", later, ids=[third]) == 1
    assert await outbox.redrive_outbox("erp", later) == 1
    assert await outbox.redrive_outbox("erp", later) == 0
    redriven = await outbox.claim_outbox("erp", "r", 10, LEASE, later)
    assert [c.row.event_id for c in redriven] == [1, 3]
    assert [c.row.attempts for c in redriven] == [1, 1]


async def test_release_does_not_count_the_attempt(outbox: OutboxStore) -> None:
    await outbox.enqueue_outbox(rows_for(1, "a"), T0)
    [claim] = await outbox.claim_outbox("erp", "r", 1, LEASE, T0)
    assert await outbox.release_outbox(claim, T0)
    [again] = await outbox.claim_outbox("erp", "r", 1, LEASE, T0)
    assert again.row.attempts == 1


async def test_pause_disable_and_circuit_state(outbox: OutboxStore) -> None:
    await outbox.enqueue_outbox(rows_for(1, "a"), T0)
    assert await outbox.destination_states() == {}
    state = await outbox.set_destination_state("erp", T0, paused=True)
    assert state.paused and not state.active
    assert await claim_ids(outbox) == []
    await outbox.set_destination_state("erp", T0, paused=False, disabled_reason="410 Gone")
    assert await claim_ids(outbox) == []
    until = T0 + timedelta(seconds=30)
    state = await outbox.set_destination_state("erp", T0, circuit_open_until=until)
    assert state.disabled_reason == "410 Gone" and state.circuit_open_until == until
    state = await outbox.set_destination_state("erp", T0, enable=True, close_circuit=True)
    assert state.active and state.circuit_open_until is None
    assert (await outbox.destination_states())["erp"] == state
    assert await claim_ids(outbox) == [1]


async def test_list_pages_and_redrive_in_batches(outbox: OutboxStore) -> None:
    count = REDRIVE_BATCH + 20
    rows = [
        row for n in range(1, count + 1) for row in rows_for(n, f"p{n}") if row.destination == "erp"
    ]
    await outbox.enqueue_outbox(rows, T0)
    for claim in await outbox.claim_outbox("erp", "r", count, LEASE, T0):
        await outbox.dead_outbox(claim, "boom", None, T0)
    page = await outbox.list_outbox("erp", OutboxStatus.DEAD, None, 300)
    assert len(page.items) == 300 and page.next is not None
    rest = await outbox.list_outbox("erp", OutboxStatus.DEAD, page.next, 300)
    assert len(rest.items) == count - 300 and rest.next is None
    assert page.items[0].event_id == count and rest.items[-1].event_id == 1
    assert await outbox.redrive_outbox("erp", T0) == REDRIVE_BATCH
    assert await outbox.redrive_outbox("erp", T0) == 20
    assert (await outbox.outbox_backlog())["erp"]["pending"] == count


async def test_redrive_by_more_ids_than_one_in_list_takes_one_batch(outbox: OutboxStore) -> None:
    count = REDRIVE_BATCH + 20
    rows = [
        row for n in range(1, count + 1) for row in rows_for(n, f"p{n}") if row.destination == "erp"
    ]
    await outbox.enqueue_outbox(rows, T0)
    claims = await outbox.claim_outbox("erp", "r", count, LEASE, T0)
    for claim in claims:
        await outbox.dead_outbox(claim, "boom", None, T0)
    ids = [claim.row.id for claim in claims]
    chosen = [*ids[:10], *ids[-(REDRIVE_BATCH + 5) :], 10**9]  # and one that is not there
    assert await outbox.redrive_outbox("erp", T0, ids=chosen) == REDRIVE_BATCH
    assert await outbox.redrive_outbox("erp", T0, ids=chosen) == 15
    assert await outbox.redrive_outbox("erp", T0, ids=chosen) == 0
    assert await outbox.redrive_outbox("erp", T0, ids=[]) == 0
    backlog = (await outbox.outbox_backlog())["erp"]
    assert (backlog["pending"], backlog["dead"]) == (REDRIVE_BATCH + 15, 5)


async def test_insert_inside_the_callers_sqlite_transaction(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.upgrade()
    await store.close()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        assert insert_outbox_sqlite(db, rows_for(1, "a"), T0) == 2
        db.execute("ROLLBACK")
        db.execute("BEGIN IMMEDIATE")
        assert insert_outbox_sqlite(db, rows_for(1, "a"), T0) == 2
        assert insert_outbox_sqlite(db, rows_for(1, "a"), T0) == 0
        db.execute("COMMIT")
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 2
    finally:
        db.close()


@pytest.mark.postgres
async def test_insert_inside_the_callers_pg_transaction(pg_url: str) -> None:
    store = open_store(pg_url)
    await store.open()
    await store.upgrade()
    await store.close()
    async with await psycopg.AsyncConnection.connect(pg_url, row_factory=dict_row) as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                assert await insert_outbox_pg(conn, rows_for(1, "a"), T0) == 2
                raise RuntimeError("the ledger transaction fails")
        async with conn.transaction():
            assert await insert_outbox_pg(conn, rows_for(1, "a"), T0) == 2
            assert await insert_outbox_pg(conn, rows_for(1, "a") + rows_for(2, "a"), T0) == 2
        cursor = await conn.execute("SELECT COUNT(*) AS n FROM outbox")
        assert (await cursor.fetchone()) == {"n": 4}
