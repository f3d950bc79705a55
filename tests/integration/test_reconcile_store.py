"""ReconcileStore contract, on SQLite and PostgreSQL (the `store` fixture): expectations,
stale pending selection with check back-off, synthetic events that de-duplicate exactly
like deliveries and go through the worker's claim, window lookups and reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from porteiro import ledger
from porteiro.model import EventStatus, InboundRequest, Kind, ParsedEvent, PaymentState
from porteiro.store.base import Application, Store
from porteiro.store.reconcile import reconcile_store

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def event(key: str, kind: Kind, object_id: str, at: datetime, **extra: object) -> ParsedEvent:
    return ParsedEvent(
        dedup_key=key, kind=kind, type=kind.value, object_id=object_id, occurred_at=at,
        amount=1000, currency="BRL", **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def delivery(source: str, at: datetime) -> InboundRequest:
    return InboundRequest(source, "POST", f"/webhooks/{source}", "", (), b"{}", None, at)


async def apply_all(store: Store, now: datetime) -> int:
    """Drain the queue through the real ledger, as the worker does."""
    applied = 0
    for _ in range(10):
        claims = await store.claim("w", 100, LEASE, now)
        if not claims:
            return applied
        for claim in claims:
            parsed = claim.event.parsed()

            def decide(current, claim=claim, parsed=parsed):  # type: ignore[no-untyped-def]
                return ledger.apply(
                    current, source=claim.event.source, event_id=claim.event.id,
                    event=parsed, at=now,
                )  # fmt: skip

            assert await store.apply_many([Application(claim, parsed, decide)], now) == [True]
            applied += 1
    return applied


async def test_expectations_upsert_idempotently(store: Store) -> None:
    rs = reconcile_store(store)
    expires = T0 + timedelta(minutes=5)
    for amount in (1000, 1000, 1200):
        await rs.expect_payment("pix", "tx1", reference="order-1", amount=amount,
                                currency="BRL", expires_at=expires, now=T0)  # fmt: skip
    found = await rs.get_expectation("pix", "tx1")
    assert found is not None
    assert (found.amount, found.expires_at, found.created_at) == (1200, expires, T0)
    assert found.origin == "client" and found.reference == "order-1"
    assert await rs.get_expectation("pix", "nope") is None


async def test_stale_pending_finds_expired_and_old_open_payments(store: Store) -> None:
    rs = reconcile_store(store)
    # An expectation never heard of, past expiry; another not yet expired.
    await rs.expect_payment("pix", "lapsed", reference=None, amount=500, currency="BRL",
                            expires_at=T0 + timedelta(seconds=10), now=T0)  # fmt: skip
    await rs.expect_payment("pix", "fresh", reference=None, amount=500, currency="BRL",
                            expires_at=T0 + timedelta(hours=1), now=T0)  # fmt: skip
    # A payment pending (created event applied), one paid; an expectation for the paid one.
    await rs.record_synthetic("pix", [
        event("c1", Kind.PAYMENT_CREATED, "open", T0),
        event("p1", Kind.PAYMENT_PAID, "done", T0),
    ], origin="test", now=T0)  # fmt: skip
    await rs.expect_payment("pix", "done", reference=None, amount=1000, currency="BRL",
                            expires_at=T0 + timedelta(seconds=10), now=T0)  # fmt: skip
    assert await apply_all(store, T0) == 2
    now = T0 + timedelta(seconds=15)
    stale = await rs.stale_pending("pix", now, timedelta(hours=1), 10, grace=timedelta(seconds=2))
    assert [(s.object_id, s.state) for s in stale] == [("lapsed", None)]
    # Within the grace period: not yet.
    early = await rs.stale_pending("pix", T0 + timedelta(seconds=11), timedelta(hours=1), 10,
                                   grace=timedelta(seconds=2))  # fmt: skip
    assert early == []
    # Past max age, the open payment too (the store's own clock stamped its row: use a
    # max age of zero from far in the future).
    later = datetime.now(UTC) + timedelta(days=1)
    old = await rs.stale_pending("pix", later, timedelta(hours=1), 10)
    assert {(s.object_id, s.state) for s in old} == {
        ("lapsed", None), ("fresh", None), ("open", PaymentState.PENDING),
    }  # fmt: skip
    # A check pushes the next one back.
    await rs.mark_checked("pix", ["lapsed", "open"], later, later + timedelta(minutes=5))
    again = await rs.stale_pending("pix", later, timedelta(hours=1), 10)
    assert [s.object_id for s in again] == ["fresh"]
    due = await rs.stale_pending("pix", later + timedelta(minutes=6), timedelta(hours=1), 10)
    assert {s.object_id: s.checks for s in due} == {"lapsed": 1, "fresh": 0, "open": 1}
    assert len(await rs.stale_pending("pix", later, timedelta(hours=1), 1)) == 1


async def test_a_payment_named_twice_in_one_read_counts_one_check(store: Store) -> None:
    rs = reconcile_store(store)
    await rs.expect_payment("pix", "tx", reference=None, amount=None, currency=None,
                            expires_at=T0, now=T0)  # fmt: skip
    await rs.mark_checked("pix", ["tx", "tx"], T0, T0 + timedelta(minutes=1), "timeout")
    await rs.mark_checked("pix", [], T0, T0 + timedelta(minutes=1))
    due = await rs.stale_pending("pix", T0 + timedelta(minutes=1), timedelta(hours=1), 10)
    assert [(s.object_id, s.checks) for s in due] == [("tx", 1)]


async def test_synthetic_events_dedupe_like_deliveries_and_reach_the_worker(store: Store) -> None:
    rs = reconcile_store(store)
    webhook = event("evt_1", Kind.PAYMENT_CREATED, "pi_1", T0)
    await store.record_delivery(delivery("stripe", T0), [webhook])
    first = await rs.record_synthetic("stripe", [
        webhook,  # the webhook already came: counted as a duplicate
        event("evt_2", Kind.PAYMENT_PAID, "pi_1", T0 + timedelta(seconds=1)),
        event("evt_2", Kind.PAYMENT_PAID, "pi_1", T0 + timedelta(seconds=1)),  # twice here
    ], origin="reconcile", now=T0 + timedelta(seconds=5))  # fmt: skip
    assert (first.delivery_id, first.new, first.duplicates) == (0, 1, 2)
    assert first.event_ids[1] == first.event_ids[2]
    stored = await store.get_event(first.event_ids[1])
    assert stored is not None
    assert stored.origin == "reconcile" and stored.status is EventStatus.PENDING
    assert stored.duplicates == 1 and await store.event_deliveries(stored.id) == []
    original = await store.get_event(first.event_ids[0])
    assert original is not None and original.origin == "webhook" and original.duplicates == 1
    assert await apply_all(store, T0 + timedelta(seconds=5)) == 2
    payment = await store.get_payment("stripe", "pi_1")
    assert payment is not None and payment.state is PaymentState.PAID
    # Once done, a synthetic duplicate changes nothing and is not claimed again.
    again = await rs.record_synthetic("stripe", [event("evt_2", Kind.PAYMENT_PAID, "pi_1", T0)],
                                      origin="reconcile", now=T0)  # fmt: skip
    assert (again.new, again.duplicates) == (0, 1)
    assert await store.claim("w", 10, LEASE, T0 + timedelta(seconds=10)) == []
    # The webhook that finally comes is a repeat of the synthetic event (which has no
    # first delivery): linked, so the event lists it as its one delivery.
    late = await store.record_delivery(delivery("stripe", T0 + timedelta(seconds=20)), [
        event("evt_2", Kind.PAYMENT_PAID, "pi_1", T0 + timedelta(seconds=1)),
    ])  # fmt: skip
    assert (late.new, late.duplicates) == (0, 1)
    assert [d.id for d in await store.event_deliveries(stored.id)] == [late.delivery_id]
    assert await rs.known_keys("stripe", ["evt_1", "evt_2", "evt_3"]) == {"evt_1", "evt_2"}
    assert await rs.known_keys("other", ["evt_1"]) == set()
    keys = [f"k{n}" for n in range(1200)]
    await rs.record_synthetic("bulk", [event(k, Kind.OTHER, "x", T0) for k in keys],
                              origin="reconcile", now=T0)  # fmt: skip
    assert len(await rs.known_keys("bulk", [*keys, "missing"])) == 1200


async def test_window_lookups(store: Store) -> None:
    rs = reconcile_store(store)
    events = [
        event("a1", Kind.PAYMENT_CREATED, "early", T0 - timedelta(hours=2)),
        event("a2", Kind.PAYMENT_PAID, "early", T0 + timedelta(minutes=1)),
        event("b1", Kind.PAYMENT_PAID, "inside", T0 + timedelta(minutes=2)),
        event("c1", Kind.PAYMENT_PAID, "late", T0 + timedelta(hours=2)),
    ]
    await rs.record_synthetic("mp", events, origin="reconcile", now=T0)
    await apply_all(store, T0)
    window = await rs.payments_in_window("mp", T0, T0 + timedelta(hours=1))
    assert [(w.payment.object_id, w.first_event_at) for w in window] == [
        ("inside", T0 + timedelta(minutes=2))
    ]
    found = await rs.payments_by_id("mp", ["early", "late", "ghost"])
    assert sorted(found) == ["early", "late"] and found["late"].state is PaymentState.PAID


async def test_reports_round_trip(store: Store) -> None:
    rs = reconcile_store(store)
    body = {"missing": [{"object_id": "pi_1", "dedup_key": "evt_1"}], "note": "café"}
    first = await rs.save_report("stripe", "audit", body, {"missing": 1},
                                 since=T0, until=T0 + timedelta(hours=1), now=T0)  # fmt: skip
    second = await rs.save_report("pix", "stale", {"checked": 2}, {"checked": 2},
                                  since=None, until=None, now=T0)  # fmt: skip
    latest = await rs.latest_reports(None, 10)
    assert [r.id for r in latest] == [second, first]
    only = await rs.latest_reports("stripe", 10)
    assert [r.id for r in only] == [first]
    report = await rs.get_report(first)
    assert report is not None and report.body == body and report.summary == {"missing": 1}
    assert report.kind == "audit" and report.since == T0 and report.created_at == T0
    assert await rs.get_report(second + 100) is None
