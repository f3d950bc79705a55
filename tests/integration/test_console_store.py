"""The console's reads (store/console_verbs.py), on SQLite and PostgreSQL (the `store`
fixture): payment search by each filter and its keyset pages, dead letters and refused
requests grouped by reason, deliveries per minute, a payment's forwards and its
reconciliation check; and, on PostgreSQL, that the first page and the reference search
walk the indexes of migration 0010.

Payments are written as the worker writes them (a delivery, a claim, the real ledger),
so each one's `created_at` is the `now` it was applied at.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from porteiro import ledger
from porteiro.model import Kind, Outcome, ParsedEvent, Payment, PaymentState
from porteiro.store import open_store
from porteiro.store.base import Application, Claim, EventFilter, RecordResult, Store
from porteiro.store.console_verbs import (
    Forward,
    ListedPayment,
    MinuteCount,
    PaymentFilter,
    ReasonCount,
    ReconcileCheck,
)
from porteiro.store.outbox import OutboxRow, outbox_store
from porteiro.store.port import Params, Port
from porteiro.store.reconcile import reconcile_store
from tests.support.inbound import inbound

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def event(key: str, object_id: str, kind: Kind = Kind.PAYMENT_PAID, **extra: Any) -> ParsedEvent:
    fields: dict[str, Any] = {"amount": 1000, "currency": "BRL", **extra}
    return ParsedEvent(key, kind, kind.value, object_id, **fields)


async def claims(store: Store, now: datetime) -> Sequence[Claim]:
    return await store.claim("w", 100, LEASE, now)


async def pay(
    store: Store,
    object_id: str,
    at: datetime,
    *,
    source: str = "stripe",
    kind: Kind = Kind.PAYMENT_PAID,
    **extra: Any,
) -> None:
    """One payment of one event, received and applied at `at` (its `created_at`)."""
    parsed = event(f"evt_{source}_{object_id}", object_id, kind, **extra)
    await store.record_delivery(inbound(source, b"{}", received_at=at), [parsed])
    [claim] = await claims(store, at)
    stored = claim.event.parsed()

    def decide(current: Payment | None) -> Outcome:
        return ledger.apply(
            current, source=claim.event.source, event_id=claim.event.id, event=stored, at=at
        )

    assert await store.apply_many([Application(claim, stored, decide)], at) == [True]


async def listed(store: Store, filter: PaymentFilter, limit: int = 50) -> list[str]:
    page = await store.list_payments(filter, None, limit)
    assert page.next is None
    return [item.payment.object_id for item in page.items]


async def all_pages(store: Store, filter: PaymentFilter, limit: int) -> list[list[ListedPayment]]:
    pages: list[list[ListedPayment]] = []
    cursor: str | None = None
    while True:
        page = await store.list_payments(filter, cursor, limit)
        pages.append(list(page.items))
        if page.next is None:
            return pages
        assert len(pages) < 20, "the pages never end"
        cursor = page.next


async def test_each_payment_filter_alone(store: Store) -> None:
    at = [T0 + timedelta(minutes=n) for n in range(6)]
    await pay(store, "p0", at[0])
    await pay(store, "p1", at[1], source="pix")
    await pay(store, "p2", at[2], kind=Kind.PAYMENT_CREATED)
    await pay(store, "p3", at[3], reference="order-7")
    await pay(store, "p4", at[4], amount=2500)
    await pay(store, "p5", at[5], data={"anomaly": "underpaid"})
    # A reference longer than a btree entry takes (PostgreSQL's hash index holds it).
    long = "r" * 3000
    await pay(store, "old", T0 - timedelta(days=1), reference=long)
    everything = ["p5", "p4", "p3", "p2", "p1", "p0", "old"]
    assert await listed(store, PaymentFilter()) == everything  # newest first
    assert await listed(store, PaymentFilter(source="pix")) == ["p1"]
    assert await listed(store, PaymentFilter(source="stripe")) == [
        "p5", "p4", "p3", "p2", "p0", "old",
    ]  # fmt: skip
    assert await listed(store, PaymentFilter(state=PaymentState.PENDING)) == ["p2"]
    assert await listed(store, PaymentFilter(reference="order-7")) == ["p3"]
    assert await listed(store, PaymentFilter(reference="order-8")) == []
    assert await listed(store, PaymentFilter(reference=long)) == ["old"]
    assert await listed(store, PaymentFilter(object_id="p4")) == ["p4"]
    assert await listed(store, PaymentFilter(amount=2500)) == ["p4"]
    assert await listed(store, PaymentFilter(anomalous=True)) == ["p5"]
    # since is inclusive, until exclusive, both on created_at.
    assert await listed(store, PaymentFilter(since=at[4])) == ["p5", "p4"]
    assert await listed(store, PaymentFilter(until=at[1])) == ["p0", "old"]
    assert await listed(store, PaymentFilter(since=at[1], until=at[3])) == ["p2", "p1"]
    first = (await store.list_payments(PaymentFilter(object_id="p3"), None, 10)).items[0]
    assert (first.created_at, first.updated_at) == (at[3], at[3])
    assert first.payment.reference == "order-7" and first.payment.state is PaymentState.PAID


async def test_pages_return_every_payment_once_newest_first(store: Store) -> None:
    for n in range(5):
        await pay(store, f"p{n}", T0 + timedelta(seconds=n))
    pages = await all_pages(store, PaymentFilter(), 2)
    assert [[item.payment.object_id for item in page] for page in pages] == [
        ["p4", "p3"], ["p2", "p1"], ["p0"],
    ]  # fmt: skip
    # A limit the rows fill exactly: the last full page says there is no more.
    exact = await store.list_payments(PaymentFilter(), None, 5)
    assert len(exact.items) == 5 and exact.next is None
    # The cursor of a filtered page pages on within that filter only.
    recent = await all_pages(store, PaymentFilter(since=T0 + timedelta(seconds=1)), 3)
    assert [[item.payment.object_id for item in page] for page in recent] == [
        ["p4", "p3", "p2"], ["p1"],
    ]  # fmt: skip


async def test_payments_created_together_both_come_across_a_page_boundary(store: Store) -> None:
    await pay(store, "old", T0)
    same = T0 + timedelta(seconds=1)
    await pay(store, "a", same)
    await pay(store, "b", same)
    await pay(store, "b", same, source="pix")  # same object id too, another source
    pages = await all_pages(store, PaymentFilter(), 1)
    found = [(item.payment.source, item.payment.object_id) for page in pages for item in page]
    # Ties broken by (source, object_id), descending.
    assert found == [("stripe", "b"), ("stripe", "a"), ("pix", "b"), ("stripe", "old")]
    two = await all_pages(store, PaymentFilter(), 2)
    assert [len(page) for page in two] == [2, 2]
    assert [(i.payment.source, i.payment.object_id) for page in two for i in page] == found


@pytest.mark.parametrize("cursor", ["not a cursor!", "bm9wZQ", "WzEsMiwzXQ", "WyJ4IiwiYSIsImIiXQ"])
async def test_an_invalid_cursor_is_refused(store: Store, cursor: str) -> None:
    # Not base64; JSON of "nope"; [1, 2, 3]; ["x", "a", "b"] (not a time).
    with pytest.raises(ValueError):
        await store.list_payments(PaymentFilter(), cursor, 10)


async def test_dead_events_grouped_by_source_and_reason(store: Store) -> None:
    long = "É" * 200  # cut at 200 characters, not bytes, on both stores
    errors = {
        ("stripe", "a"): f"{long} first tail",
        ("stripe", "b"): f"{long} another tail",  # the same first 200 characters
        ("stripe", "c"): "HTTP 500",
        ("pix", "d"): "HTTP 500",
    }
    for n, (source, object_id) in enumerate(errors):
        at = T0 + timedelta(seconds=n)
        await store.record_delivery(
            inbound(source, b"{}", received_at=at), [event(f"evt_{object_id}", object_id)]
        )
    # An ignored event, with its reason in last_error too, is no dead letter.
    await store.record_delivery(inbound("stripe", b"{}", received_at=T0), [event("ok", "e")])
    dead_at = {key[1]: T0 + timedelta(minutes=1, seconds=n) for n, key in enumerate(errors)}
    for claim in await claims(store, T0 + timedelta(minutes=1)):
        key = (claim.event.source, claim.event.object_id or "")
        if key in errors:
            assert await store.dead_letter(claim, errors[key], dead_at[key[1]])
        else:
            assert await store.ignore(claim, "HTTP 500", T0)
    found = {(r.source, r.reason): r for r in await store.dead_reasons()}
    assert set(found) == {("stripe", long), ("stripe", "HTTP 500"), ("pix", "HTTP 500")}
    grouped = found[("stripe", long)]
    assert grouped == ReasonCount("stripe", long, 2, dead_at["b"])  # the newest of the two
    assert found[("pix", "HTTP 500")].count == found[("stripe", "HTTP 500")].count == 1
    assert (await store.dead_reasons())[0] == grouped  # the biggest group first


async def test_refused_requests_grouped_by_source_and_reason(store: Store) -> None:
    refusals = [
        ("stripe", "bad signature", T0),
        ("stripe", "bad signature", T0 + timedelta(seconds=5)),
        ("stripe", "body too large", T0 + timedelta(seconds=1)),
        ("pix", "bad signature", T0 + timedelta(seconds=2)),
    ]
    for source, reason, at in refusals:
        await store.quarantine(inbound(source, b"{}", received_at=at), reason, "detail")
    assert list(await store.quarantine_reasons()) == [
        ReasonCount("stripe", "bad signature", 2, T0 + timedelta(seconds=5)),
        ReasonCount("pix", "bad signature", 1, T0 + timedelta(seconds=2)),
        ReasonCount("stripe", "body too large", 1, T0 + timedelta(seconds=1)),
    ]


async def test_deliveries_per_source_and_utc_minute(store: Store) -> None:
    minute = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    brt = timezone(timedelta(hours=-3))  # handed over in another offset: counted in UTC
    arrivals = [
        ("stripe", minute - timedelta(seconds=1)),  # before `since`: not counted
        ("stripe", minute),
        ("stripe", minute + timedelta(seconds=59, microseconds=999999)),
        ("stripe", minute + timedelta(minutes=1, seconds=30)),
        ("pix", minute + timedelta(seconds=10)),
    ]
    for source, at in arrivals:
        await store.record_delivery(inbound(source, b"{}", received_at=at.astimezone(brt)), [])
    rate = list(await store.delivery_rate(minute))
    assert rate == [
        MinuteCount("pix", minute, 1),
        MinuteCount("stripe", minute, 2),
        MinuteCount("stripe", minute + timedelta(minutes=1), 1),
    ]
    for counted in rate:
        assert counted.minute.utcoffset() == timedelta(0) and counted.minute.second == 0
    assert await store.delivery_rate(minute + timedelta(minutes=2)) == []


async def test_a_payments_forwards_to_the_listed_destinations(store: Store) -> None:
    outbox = outbox_store(store)

    def row(destination: str, event_id: int, object_id: str = "pay_1") -> OutboxRow:
        return OutboxRow(
            destination, event_id, f"msg_{event_id}", "stripe", object_id, "payment.paid",
            {"id": f"msg_{event_id}"},
        )  # fmt: skip

    await outbox.enqueue_outbox(
        [row("erp", 1), row("bus", 1), row("erp", 2), row("old", 2), row("erp", 3, "pay_2")], T0
    )
    [claim] = await outbox.claim_outbox("erp", "r", 1, LEASE, T0)
    assert claim.row.event_id == 1
    done = T0 + timedelta(seconds=1)
    assert await outbox.complete_outbox(claim, "204", done)
    found = await store.payment_forwards("stripe", "pay_1", ["erp", "bus"])
    assert [(f.destination, f.event_id) for f in found] == [("erp", 1), ("bus", 1), ("erp", 2)]
    assert [f.id for f in found] == sorted(f.id for f in found)
    assert found[0] == Forward(
        id=claim.row.id, destination="erp", event_id=1, status="done", attempts=1,
        last_error=None, last_status="204", created_at=T0, delivered_at=done,
    )  # fmt: skip
    assert (found[1].status, found[1].attempts, found[1].delivered_at) == ("pending", 0, None)
    assert await store.payment_forwards("stripe", "pay_1", []) == []
    assert await store.payment_forwards("stripe", "pay_1", ["nowhere"]) == []
    assert await store.payment_forwards("pix", "pay_1", ["erp"]) == []


async def test_a_payments_reconcile_check(store: Store) -> None:
    assert await store.reconcile_check("pix", "tx") is None
    rs = reconcile_store(store)
    await rs.mark_checked("pix", ["tx"], T0, T0 + timedelta(minutes=5), "timeout")
    assert await store.reconcile_check("pix", "tx") == ReconcileCheck(
        1, T0, T0 + timedelta(minutes=5), "timeout"
    )
    later = T0 + timedelta(minutes=6)
    await rs.mark_checked("pix", ["tx"], later, later + timedelta(minutes=10))
    assert await store.reconcile_check("pix", "tx") == ReconcileCheck(
        2, later, later + timedelta(minutes=10), None
    )
    assert await store.reconcile_check("stripe", "tx") is None


async def test_the_deliveries_of_several_events_in_one_read(store: Store) -> None:
    async def received(body: bytes, key: str) -> RecordResult:
        parsed = [event(key, f"pay_{key}")]
        return await store.record_delivery(inbound("stripe", body, received_at=T0), parsed)

    first = await received(b"1", "a")
    repeat = await received(b"2", "a")  # the gateway's retry of the same event
    other = await received(b"3", "b")
    a, b = first.event_ids[0], other.event_ids[0]
    found = await store.events_deliveries([b, a, a, 987_654])  # a repeated id, an unknown one
    assert {key: [d.id for d in ds] for key, ds in found.items()} == {
        a: [first.delivery_id, repeat.delivery_id],
        b: [other.delivery_id],
    }
    assert [d.body for d in found[a]] == [b"1", b"2"]
    assert await store.event_deliveries(a) == found[a]
    assert await store.event_deliveries(987_654) == []
    assert await store.events_deliveries([]) == {}


# A few thousand payments, one statement: enough for the planner to prefer the indexes.
_MANY_PAYMENTS = """
INSERT INTO payments (source, object_id, state, amount, currency, refunded_amount, reference,
                      version, last_event_at, facts, anomalies, created_at, updated_at)
SELECT 'stripe', 'pay_' || n, 'paid', 1000, 'BRL', 0, 'order-' || n, 1, NULL, '{}',
       CASE WHEN n % 500 = 0 THEN 1 ELSE 0 END,
       TIMESTAMPTZ '2026-03-01 12:00:00+00' + n * INTERVAL '1 second',
       TIMESTAMPTZ '2026-03-01 12:00:00+00' + n * INTERVAL '1 second'
FROM generate_series(1, 5000) AS n;
ANALYZE payments;"""


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


async def plan_of(
    store: Store,
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
    read: Callable[[], Awaitable[object]],
) -> list[dict[str, Any]]:
    """The plan of the one query `read` sends (caught on its way to the port)."""
    port: Port = store._port
    sent: list[tuple[str, Params]] = []
    fetch = port.fetch

    async def recording(sql: str, params: Params) -> Any:
        sent.append((sql, params))
        return await fetch(sql, params)

    monkeypatch.setattr(port, "fetch", recording)
    await read()
    monkeypatch.undo()
    [(sql, params)] = sent
    async with await psycopg.AsyncConnection.connect(store_url) as conn:
        cursor = await conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        row = await cursor.fetchone()
    assert row is not None
    raw = row[0]
    [explained] = json.loads(raw) if isinstance(raw, str) else raw
    return plan_nodes(explained["Plan"])


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[Store]:
    """An opened, migrated PostgreSQL store (the plans below are PostgreSQL's)."""
    opened = open_store(pg_url)
    await opened.open()
    await opened.upgrade()
    try:
        yield opened
    finally:
        await opened.close()


async def run_sql(url: str, sql: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(sql.encode())


def assert_uses(nodes: list[dict[str, Any]], index: str) -> None:
    """The plan walks `index` and reads no table whole."""
    assert "Seq Scan" not in [node["Node Type"] for node in nodes], nodes
    assert index in {node.get("Index Name") for node in nodes}, nodes


@pytest.mark.postgres
async def test_the_first_page_and_the_reference_search_use_an_index(
    pg_store: Store, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await run_sql(pg_url, _MANY_PAYMENTS)
    for filter, index in (
        (PaymentFilter(), "payments_created"),
        (PaymentFilter(reference="order-4321"), "payments_reference"),
        (PaymentFilter(anomalous=True), "payments_anomalous"),
    ):
        read = functools.partial(pg_store.list_payments, filter, None, 50)
        assert_uses(await plan_of(pg_store, pg_url, monkeypatch, read), index)
    page = await pg_store.list_payments(PaymentFilter(reference="order-4321"), None, 50)
    assert [item.payment.object_id for item in page.items] == ["pay_4321"]


# Events of one common kind and, one in a thousand, of a rare one (migration 0011).
_MANY_EVENTS = """
INSERT INTO events (source, dedup_key, kind, type, status, received_at, updated_at)
SELECT 'stripe', 'evt_' || n,
       CASE WHEN n % 1000 = 0 THEN 'dispute.opened' ELSE 'payment.paid' END, 't', 'done',
       TIMESTAMPTZ '2026-03-01 12:00:00+00' + n * INTERVAL '1 second',
       TIMESTAMPTZ '2026-03-01 12:00:00+00' + n * INTERVAL '1 second'
FROM generate_series(1, 5000) AS n;
ANALYZE events;"""


@pytest.mark.postgres
async def test_a_rare_kind_is_listed_through_its_index(
    pg_store: Store, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await run_sql(pg_url, _MANY_EVENTS)
    rare = EventFilter(kind=Kind.DISPUTE_OPENED)
    read = functools.partial(pg_store.list_events, rare, None, 50)
    assert_uses(await plan_of(pg_store, pg_url, monkeypatch, read), "events_kind")
    page = await pg_store.list_events(rare, None, 2)
    assert [event.dedup_key for event in page.items] == ["evt_5000", "evt_4000"]
    after = await pg_store.list_events(rare, page.next, 50)
    assert [event.dedup_key for event in after.items] == ["evt_3000", "evt_2000", "evt_1000"]
