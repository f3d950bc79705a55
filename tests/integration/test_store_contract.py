"""The Store contract: every test runs against SQLite and PostgreSQL (the `store` fixture).

Conventions both stores follow, beyond the docstrings of porteiro.store.base:
- Datetimes go in and come out timezone-aware UTC, microseconds preserved.
- A new pending event is due at its delivery's `received_at`; an `ignored` one has no
  `next_attempt_at`.
- `record_delivery(..., parse_error=...)` returns the placeholder's id in `event_ids` and
  counts it as new; a duplicate leaves the parsed fields and `attempts` untouched.
- `list_events` pages newest first by id; the cursor is the decimal id of the last item
  of the page, `next` is None on the last page.
- `reparsed` of an unknown delivery raises LookupError.
- A store URL accepts `quarantine_limit=N` as a query parameter (rows kept in quarantine).
- `apply_many` gives a ValueError back for an event without object_id, touching nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from porteiro.model import (
    EventStatus,
    InboundRequest,
    Kind,
    Outcome,
    ParsedEvent,
    Payment,
    PaymentState,
    Transition,
    Verdict,
)
from porteiro.providers import fields
from porteiro.store import open_store
from porteiro.store.base import (
    OPEN_STATUSES,
    UNPARSEABLE_TYPE,
    Application,
    Claim,
    Decide,
    EventFilter,
    Store,
    unparseable_dedup_key,
)

T0 = datetime(2026, 11, 30, 6, 45, 33, 123456, tzinfo=UTC)
LEASE = timedelta(seconds=30)
# Past this, a wait is failed as hung (never as slow).
HANG_GUARD_SECONDS = 30.0
RAW = b'{"id": "evt_1",\r\n "note": "caf\xc3\xa9 \xff\xfe\x00 not utf-8"}\r\n'


def request(
    body: bytes = RAW,
    *,
    source: str = "stripe",
    at: datetime = T0,
    headers: Sequence[tuple[str, str]] = (),
) -> InboundRequest:
    return InboundRequest(
        source=source,
        method="POST",
        path=f"/webhooks/{source}",
        query="a=1&b=2",
        headers=tuple(headers) or (("content-type", "application/json"), ("x-sig", "v1=abc")),
        body=body,
        peer="203.0.113.7",
        received_at=at,
    )


def event(
    key: str,
    *,
    kind: Kind = Kind.PAYMENT_PAID,
    object_id: str | None = "pi_1",
    amount: int | None = 1000,
    thin: bool = False,
    data: Mapping[str, Any] | None = None,
    reference: str | None = "order-42",
) -> ParsedEvent:
    return ParsedEvent(
        dedup_key=key,
        kind=kind,
        type=f"gw.{kind.value}",
        object_id=object_id,
        reference=reference,
        amount=amount,
        currency="BRL",
        occurred_at=T0 - timedelta(seconds=5),
        refunded_total=None,
        thin=thin,
        data=data if data is not None else {"key": key},
    )


def paid(claim: Claim, parsed: ParsedEvent, at: datetime, note: str | None = None) -> Decide:
    """A stand-in ledger: appends the event to the facts and marks the payment paid."""

    def decide(current: Payment | None) -> Outcome:
        seen = list(current.facts["events"]) if current is not None else []
        assert parsed.object_id is not None
        payment = Payment(
            source=claim.event.source,
            object_id=parsed.object_id,
            state=PaymentState.PAID,
            amount=parsed.amount,
            currency=parsed.currency,
            refunded_amount=0,
            reference=parsed.reference,
            version=1 if current is None else current.version + 1,
            last_event_at=parsed.occurred_at,
            facts={
                "events": [*seen, claim.event.id],
                "nested": {"ok": True, "none": None, "text": "ação ✓", "n": [1, 2.5]},
            },
            anomalies=0 if current is None else current.anomalies + 1,
        )
        transition = Transition(
            event_id=claim.event.id,
            from_state=None if current is None else current.state,
            to_state=PaymentState.PAID,
            verdict=Verdict.APPLIED if current is None else Verdict.NO_EFFECT,
            at=at,
            note=note,
        )
        return Outcome(payment, transition)

    return decide


def boom(current: Payment | None) -> Outcome:
    raise RuntimeError("ledger bug")


def assert_utc(value: datetime | None) -> None:
    assert value is not None
    assert value.tzinfo is not None
    assert value.utcoffset() == timedelta(0)


async def status_of(store: Store, event_id: int) -> EventStatus:
    stored = await store.get_event(event_id)
    assert stored is not None
    return stored.status


async def claim_one(store: Store, now: datetime = T0, worker: str = "w1") -> Claim:
    claims = await store.claim(worker, 1, LEASE, now)
    assert len(claims) == 1
    return claims[0]


# -- migrations and health -------------------------------------------------------------


async def test_upgrade_is_idempotent(store: Store) -> None:
    assert list(await store.upgrade()) == []
    assert list(await store.upgrade()) == []
    await store.ping()


async def test_fresh_upgrade_reports_versions(store_url: str) -> None:
    fresh = open_store(store_url)
    await fresh.open()
    try:
        applied = list(await fresh.upgrade())
        assert applied and applied[0] == "0001"
        assert applied == sorted(applied)
        assert list(await fresh.upgrade()) == []
    finally:
        await fresh.close()


async def test_lookups_of_missing_rows_return_none(store: Store) -> None:
    assert await store.get_event(999) is None
    assert await store.get_delivery(999) is None
    assert await store.get_payment("stripe", "nope") is None
    assert list(await store.payment_history("stripe", "nope")) == []
    assert list(await store.event_deliveries(999)) == []


# -- ingest ----------------------------------------------------------------------------


async def test_record_delivery_keeps_raw_bytes_and_events(store: Store) -> None:
    headers = (("x-b", "2"), ("x-a", "1"), ("x-b", "3"), ("content-type", "application/json"))
    result = await store.record_delivery(
        request(headers=headers), [event("evt_1"), event("evt_2", object_id="pi_2")]
    )
    assert (result.new, result.duplicates, len(result.event_ids)) == (2, 0, 2)

    delivery = await store.get_delivery(result.delivery_id)
    assert delivery is not None
    assert delivery.body == RAW
    assert tuple(tuple(pair) for pair in delivery.headers) == headers
    assert (delivery.source, delivery.path, delivery.query) == (
        "stripe",
        "/webhooks/stripe",
        "a=1&b=2",
    )
    assert (delivery.peer, delivery.parse_error) == ("203.0.113.7", None)
    assert delivery.received_at == T0
    assert_utc(delivery.received_at)

    for event_id, key, object_id in zip(
        result.event_ids, ["evt_1", "evt_2"], ["pi_1", "pi_2"], strict=True
    ):
        stored = await store.get_event(event_id)
        assert stored is not None
        assert (stored.dedup_key, stored.object_id) == (key, object_id)
        assert stored.status is EventStatus.PENDING
        assert (stored.attempts, stored.duplicates, stored.last_error) == (0, 0, None)
        assert stored.next_attempt_at == T0
        assert stored.received_at == T0
        assert stored.occurred_at == T0 - timedelta(seconds=5)
        assert_utc(stored.updated_at)
        assert stored.parsed() == event(key, object_id=object_id)
        assert stored.origin == "webhook"
        assert [d.id for d in await store.event_deliveries(event_id)] == [result.delivery_id]


async def test_empty_body_and_no_events(store: Store) -> None:
    result = await store.record_delivery(request(b""), [])
    assert (list(result.event_ids), result.new, result.duplicates) == ([], 0, 0)
    delivery = await store.get_delivery(result.delivery_id)
    assert delivery is not None and delivery.body == b""


async def test_duplicate_delivery_counts_and_links(store: Store) -> None:
    first = await store.record_delivery(request(), [event("evt_1")])
    later = T0 + timedelta(minutes=1)
    second = await store.record_delivery(request(at=later), [event("evt_1", amount=999)])
    assert second.delivery_id != first.delivery_id
    assert list(second.event_ids) == list(first.event_ids)
    assert (second.new, second.duplicates) == (0, 1)

    stored = await store.get_event(first.event_ids[0])
    assert stored is not None
    assert stored.duplicates == 1
    assert stored.amount == 1000  # a duplicate never rewrites the first parse
    assert stored.status is EventStatus.PENDING
    assert stored.received_at == T0
    deliveries = await store.event_deliveries(stored.id)
    assert [d.id for d in deliveries] == [first.delivery_id, second.delivery_id]


async def test_duplicate_of_done_event_stays_done(store: Store) -> None:
    first = await store.record_delivery(request(), [event("evt_1")])
    claim = await claim_one(store)
    done = Application(claim, event("evt_1"), paid(claim, event("evt_1"), T0))
    assert await store.apply_many([done], T0) == [True]
    again = await store.record_delivery(request(at=T0 + timedelta(hours=1)), [event("evt_1")])
    assert (again.new, again.duplicates) == (0, 1)
    stored = await store.get_event(first.event_ids[0])
    assert stored is not None
    assert (stored.status, stored.duplicates, stored.attempts) == (EventStatus.DONE, 1, 1)
    assert list(await store.claim("w1", 10, LEASE, T0 + timedelta(days=1))) == []


@pytest.mark.parametrize("failed", [EventStatus.DEAD, EventStatus.RETRYING])
async def test_duplicate_of_failed_event_makes_it_due_now(
    store: Store, failed: EventStatus
) -> None:
    first = await store.record_delivery(request(), [event("evt_1")])
    claim = await claim_one(store)
    if failed is EventStatus.DEAD:
        assert await store.dead_letter(claim, "gave up", T0)
    else:
        assert await store.retry_later(claim, "later", T0 + timedelta(days=2), T0)
    assert await status_of(store, first.event_ids[0]) is failed

    later = T0 + timedelta(minutes=3)
    await store.record_delivery(request(at=later), [event("evt_1")])
    stored = await store.get_event(first.event_ids[0])
    assert stored is not None
    assert stored.status is EventStatus.PENDING
    assert stored.next_attempt_at == later
    assert stored.attempts == 1
    claims = await store.claim("w1", 10, LEASE, later)
    assert [c.event.id for c in claims] == [stored.id]


async def test_events_without_ledger_effect_are_ignored(store: Store) -> None:
    result = await store.record_delivery(
        request(),
        [
            event("other", kind=Kind.OTHER),
            event("no-object", object_id=None),
            event("thin-no-object", object_id=None, thin=True),
            event("thin-other", kind=Kind.OTHER, thin=True),
            event("other-anomaly", kind=Kind.OTHER, data={"anomaly": "underpaid"}),
        ],
    )
    statuses = [await status_of(store, event_id) for event_id in result.event_ids]
    assert statuses == [
        EventStatus.IGNORED,
        EventStatus.IGNORED,
        EventStatus.PENDING,
        EventStatus.PENDING,
        EventStatus.PENDING,  # a reported anomaly goes to the ledger, to be recorded
    ]
    ignored = await store.get_event(result.event_ids[0])
    assert ignored is not None and ignored.next_attempt_at is None
    claims = await store.claim("w1", 10, LEASE, T0 + timedelta(hours=1))
    assert sorted(c.event.id for c in claims) == sorted(result.event_ids[2:])


async def test_parse_error_keeps_delivery_and_dead_placeholder(store: Store) -> None:
    result = await store.record_delivery(request(b"\xffnot json"), [], parse_error="bad json at 0")
    assert (len(result.event_ids), result.new, result.duplicates) == (1, 1, 0)
    delivery = await store.get_delivery(result.delivery_id)
    assert delivery is not None
    assert (delivery.body, delivery.parse_error) == (b"\xffnot json", "bad json at 0")

    placeholder = await store.get_event(result.event_ids[0])
    assert placeholder is not None
    assert placeholder.dedup_key == unparseable_dedup_key(result.delivery_id)
    assert (placeholder.type, placeholder.kind, placeholder.object_id) == (
        UNPARSEABLE_TYPE,
        Kind.OTHER,
        None,
    )
    assert (placeholder.status, placeholder.last_error) == (EventStatus.DEAD, "bad json at 0")
    dead = await store.list_events(EventFilter(status=EventStatus.DEAD), None, 10)
    assert [e.id for e in dead.items] == [placeholder.id]
    assert [d.id for d in await store.event_deliveries(placeholder.id)] == [result.delivery_id]
    assert list(await store.claim("w1", 10, LEASE, T0 + timedelta(days=1))) == []


async def test_wait_for_work_wakes_on_new_delivery(store: Store) -> None:
    # With no work, a wait ends at its timeout. (PostgreSQL: this also connects its
    # listener, so the wait below is listening before the delivery.)
    await asyncio.wait_for(store.wait_for_work(0.05), HANG_GUARD_SECONDS)

    # A wait far longer than the hang guard: if it ends, the delivery ended it.
    waiter = asyncio.create_task(store.wait_for_work(10 * HANG_GUARD_SECONDS))
    await asyncio.sleep(0.1)
    assert not waiter.done()  # nothing to wake it yet
    await store.record_delivery(request(), [event("evt_1")])
    await asyncio.wait_for(waiter, HANG_GUARD_SECONDS)


# -- claiming --------------------------------------------------------------------------


async def test_claim_returns_only_due_events_oldest_first(store: Store) -> None:
    await store.record_delivery(request(at=T0 + timedelta(seconds=2)), [event("late")])
    await store.record_delivery(request(at=T0), [event("early")])
    assert list(await store.claim("w1", 10, LEASE, T0 - timedelta(seconds=1))) == []

    claims = await store.claim("w1", 10, LEASE, T0 + timedelta(seconds=2))
    assert [c.event.dedup_key for c in claims] == ["early", "late"]
    for claim in claims:
        assert claim.event.status is EventStatus.PROCESSING
        assert claim.event.attempts == 1
        assert claim.token
        assert claim.lease_until == T0 + timedelta(seconds=2) + LEASE
        assert_utc(claim.lease_until)
    assert list(await store.claim("w2", 10, LEASE, T0 + timedelta(seconds=3))) == []


async def test_event_data_comes_back_exactly_as_json_reads_it(store: Store) -> None:
    """Numbers beyond 64 bits stay integers (PostgreSQL's jsonb keeps any size; a fast
    parser alone would turn them into floats), floats and text stay as they were."""
    data = {
        "big": 10**30,
        "negative": -(2**70),
        "edge": [2**63 - 1, -(2**63), 2**64],
        "float": 0.1,
        "nested": {"text": "ação ✓", "none": None, "id": "E123456789012345678901234567890"},
    }
    await store.record_delivery(request(), [event("evt_big", data=data)])
    (claim,) = await store.claim("w1", 10, LEASE, T0 + timedelta(seconds=1))
    assert claim.event.data == data
    assert all(type(n) is int for n in (*claim.event.data["edge"], claim.event.data["big"]))
    stored = await store.get_event(claim.event.id)
    assert stored is not None and stored.data == data


async def test_claim_respects_limit(store: Store) -> None:
    await store.record_delivery(request(), [event(f"evt_{i}") for i in range(5)])
    first = await store.claim("w1", 2, LEASE, T0)
    second = await store.claim("w1", 10, LEASE, T0)
    assert (len(first), len(second)) == (2, 3)
    assert {c.event.id for c in first}.isdisjoint({c.event.id for c in second})


async def test_concurrent_claims_never_share_an_event(store: Store) -> None:
    await store.record_delivery(request(), [event(f"evt_{i}") for i in range(20)])
    batches = await asyncio.gather(*(store.claim(f"w{i}", 7, LEASE, T0) for i in range(4)))
    ids = [c.event.id for batch in batches for c in batch]
    assert len(ids) == len(set(ids)) == 20


async def test_expired_lease_is_claimed_again_with_new_token(store: Store) -> None:
    await store.record_delivery(request(), [event("evt_1")])
    first = await claim_one(store)
    assert list(await store.claim("w2", 10, LEASE, T0 + LEASE - timedelta(seconds=1))) == []
    second = await claim_one(store, T0 + LEASE + timedelta(seconds=1), worker="w2")
    assert second.event.id == first.event.id
    assert second.token != first.token
    assert second.event.attempts == 2
    # The first worker's claim is lost: all its writes are fenced off.
    later = T0 + timedelta(minutes=2)
    late = Application(first, event("evt_1"), paid(first, event("evt_1"), later))
    assert await store.apply_many([late], later) == [False]
    assert not await store.dead_letter(first, "late", later)
    assert await status_of(store, first.event.id) is EventStatus.PROCESSING
    assert await store.get_payment("stripe", "pi_1") is None


# -- apply and settlements -------------------------------------------------------------


async def test_apply_with_stale_token_changes_nothing(store: Store) -> None:
    await store.record_delivery(request(), [event("evt_1")])
    claim = await claim_one(store)
    stale = Claim(claim.event, "0" * 32, claim.lease_until)
    enriched = event("evt_1", amount=5)
    assert await store.apply_many(
        [Application(stale, enriched, paid(stale, enriched, T0))], T0
    ) == [False]
    assert not await store.ignore(stale, "x", T0)
    assert not await store.retry_later(stale, "x", T0, T0)
    assert not await store.dead_letter(stale, "x", T0)
    stored = await store.get_event(claim.event.id)
    assert stored is not None
    assert (stored.status, stored.amount, stored.attempts) == (EventStatus.PROCESSING, 1000, 1)
    assert await store.get_payment("stripe", "pi_1") is None
    assert list(await store.payment_history("stripe", "pi_1")) == []


async def test_apply_persists_payment_transition_and_enrichment(store: Store) -> None:
    await store.record_delivery(request(), [event("evt_1", thin=True, amount=None)])
    claim = await claim_one(store)
    enriched = event("evt_1", amount=2500, data={"fetched": {"status": "approved"}})
    applied_at = T0 + timedelta(seconds=1)
    first = Application(claim, enriched, paid(claim, enriched, applied_at, "first"))
    assert await store.apply_many([first], applied_at) == [True]

    stored = await store.get_event(claim.event.id)
    assert stored is not None
    assert stored.status is EventStatus.DONE
    assert (stored.amount, stored.thin, stored.last_error) == (2500, False, None)
    assert stored.data == {"fetched": {"status": "approved"}}
    assert stored.updated_at == applied_at

    payment = await store.get_payment("stripe", "pi_1")
    assert payment is not None
    assert (payment.state, payment.amount, payment.currency) == (PaymentState.PAID, 2500, "BRL")
    assert (payment.version, payment.reference, payment.refunded_amount) == (1, "order-42", 0)
    assert payment.last_event_at == T0 - timedelta(seconds=5)
    assert_utc(payment.last_event_at)
    assert payment.facts == {
        "events": [claim.event.id],
        "nested": {"ok": True, "none": None, "text": "ação ✓", "n": [1, 2.5]},
    }

    # A second event on the same payment sees the first one's result.
    await store.record_delivery(request(at=T0 + timedelta(seconds=2)), [event("evt_2")])
    second = await claim_one(store, T0 + timedelta(seconds=2))
    done_at = T0 + timedelta(seconds=3)
    then = Application(second, event("evt_2"), paid(second, event("evt_2"), done_at))
    assert await store.apply_many([then], done_at) == [True]
    payment = await store.get_payment("stripe", "pi_1")
    assert payment is not None
    assert (payment.version, payment.anomalies) == (2, 1)
    assert payment.facts["events"] == [claim.event.id, second.event.id]

    history = await store.payment_history("stripe", "pi_1")
    assert history == [
        Transition(claim.event.id, None, PaymentState.PAID, Verdict.APPLIED, applied_at, "first"),
        Transition(
            second.event.id, PaymentState.PAID, PaymentState.PAID, Verdict.NO_EFFECT, done_at
        ),
    ]


async def test_apply_rolls_back_when_decide_raises(store: Store) -> None:
    await store.record_delivery(request(), [event("evt_1")])
    claim = await claim_one(store)
    [result] = await store.apply_many([Application(claim, event("evt_1", amount=1), boom)], T0)
    assert isinstance(result, RuntimeError) and "ledger bug" in str(result)
    stored = await store.get_event(claim.event.id)
    assert stored is not None
    assert (stored.status, stored.amount, stored.attempts) == (EventStatus.PROCESSING, 1000, 1)
    assert await store.get_payment("stripe", "pi_1") is None
    assert list(await store.payment_history("stripe", "pi_1")) == []
    # The claim is still held: the worker can settle it.
    assert await store.retry_later(claim, "ledger bug", T0 + timedelta(minutes=1), T0)


async def test_apply_requires_object_id(store: Store) -> None:
    await store.record_delivery(request(), [event("evt_1", thin=True, object_id=None)])
    claim = await claim_one(store)
    [result] = await store.apply_many(
        [Application(claim, event("evt_1", object_id=None), boom)], T0
    )
    assert isinstance(result, ValueError)
    assert await status_of(store, claim.event.id) is EventStatus.PROCESSING


async def test_retry_later_is_due_only_at_its_time(store: Store) -> None:
    await store.record_delivery(request(), [event("evt_1")])
    claim = await claim_one(store)
    at = T0 + timedelta(minutes=5)
    assert await store.retry_later(claim, "gateway 502", at, T0)
    stored = await store.get_event(claim.event.id)
    assert stored is not None
    assert (stored.status, stored.last_error, stored.next_attempt_at) == (
        EventStatus.RETRYING,
        "gateway 502",
        at,
    )
    assert list(await store.claim("w1", 10, LEASE, at - timedelta(microseconds=1))) == []
    again = await claim_one(store, at)
    assert (again.event.id, again.event.attempts) == (claim.event.id, 2)
    assert again.token != claim.token
    assert not await store.retry_later(claim, "old token", at, at)


async def test_dead_letter_and_ignore(store: Store) -> None:
    result = await store.record_delivery(request(), [event("evt_1"), event("evt_2")])
    first, second = await store.claim("w1", 2, LEASE, T0)
    assert await store.dead_letter(first, "exhausted", T0)
    assert await store.ignore(second, "not ours", T0)
    assert not await store.dead_letter(first, "again", T0)  # the claim ended
    dead = await store.get_event(first.event.id)
    ignored = await store.get_event(second.event.id)
    assert dead is not None and ignored is not None
    assert (dead.status, dead.last_error) == (EventStatus.DEAD, "exhausted")
    assert (ignored.status, ignored.last_error) == (EventStatus.IGNORED, "not ours")
    assert sorted([first.event.id, second.event.id]) == sorted(result.event_ids)
    assert list(await store.claim("w1", 10, LEASE, T0 + timedelta(days=9))) == []


# -- replay ----------------------------------------------------------------------------


async def test_requeue_makes_events_due_with_attempts_reset(store: Store) -> None:
    result = await store.record_delivery(request(), [event("evt_1"), event("evt_2")])
    first, second = await store.claim("w1", 2, LEASE, T0)
    assert await store.dead_letter(first, "exhausted", T0)
    later = T0 + timedelta(hours=1)
    assert await store.requeue([*result.event_ids, 424242], later) == 2
    for event_id in result.event_ids:
        stored = await store.get_event(event_id)
        assert stored is not None
        assert (stored.status, stored.attempts, stored.next_attempt_at) == (
            EventStatus.PENDING,
            0,
            later,
        )
    # Requeueing a processing event revokes its claim.
    assert not await store.dead_letter(second, "late", later)
    claims = await store.claim("w1", 10, LEASE, later)
    assert sorted(c.event.id for c in claims) == sorted(result.event_ids)
    assert await store.requeue([], later) == 0


async def test_reparsed_settles_unparseable_delivery(store: Store) -> None:
    bad = await store.record_delivery(request(), [], parse_error="unknown type")
    placeholder_id = bad.event_ids[0]
    later = T0 + timedelta(days=1)
    ids = await store.reparsed(bad.delivery_id, [event("evt_1"), event("evt_2")], later)
    assert len(ids) == 2 and placeholder_id not in ids

    delivery = await store.get_delivery(bad.delivery_id)
    assert delivery is not None and delivery.parse_error is None
    assert await status_of(store, placeholder_id) is EventStatus.IGNORED
    for event_id in ids:
        stored = await store.get_event(event_id)
        assert stored is not None
        assert (stored.status, stored.attempts, stored.next_attempt_at) == (
            EventStatus.PENDING,
            0,
            later,
        )
        assert stored.source == "stripe"
        assert [d.id for d in await store.event_deliveries(event_id)] == [bad.delivery_id]
    claims = await store.claim("w1", 10, LEASE, later)
    assert sorted(c.event.id for c in claims) == sorted(ids)


async def test_reparsed_overwrites_existing_events(store: Store) -> None:
    result = await store.record_delivery(request(), [event("evt_1", kind=Kind.OTHER)])
    assert await status_of(store, result.event_ids[0]) is EventStatus.IGNORED
    later = T0 + timedelta(hours=2)
    reparsed = event("evt_1", kind=Kind.PAYMENT_REFUNDED, amount=300, data={"v": 2})
    ids = await store.reparsed(result.delivery_id, [reparsed], later)
    assert list(ids) == list(result.event_ids)
    stored = await store.get_event(ids[0])
    assert stored is not None
    assert stored.parsed() == reparsed
    assert (stored.status, stored.next_attempt_at, stored.duplicates) == (
        EventStatus.PENDING,
        later,
        0,
    )
    assert [d.id for d in await store.event_deliveries(ids[0])] == [result.delivery_id]


async def test_reparsed_unknown_delivery_raises(store: Store) -> None:
    with pytest.raises(LookupError):
        await store.reparsed(31337, [event("evt_1")], T0)


# -- listing ---------------------------------------------------------------------------


async def _seed_for_listing(store: Store) -> list[int]:
    """Five events over three deliveries, two sources, various kinds and times."""
    ids: list[int] = []
    batches = [
        ("stripe", T0, [event("s1"), event("s2", kind=Kind.PAYMENT_FAILED, object_id="pi_2")]),
        ("mp", T0 + timedelta(minutes=1), [event("m1", object_id="pi_1", reference="order-7")]),
        (
            "stripe",
            T0 + timedelta(minutes=2),
            [event("s3", kind=Kind.OTHER, reference=None), event("s4")],
        ),
    ]
    for source, at, events in batches:
        result = await store.record_delivery(request(source=source, at=at), events)
        ids.extend(result.event_ids)
    return ids


async def _all(store: Store, filter: EventFilter) -> list[str]:
    page = await store.list_events(filter, None, 100)
    assert page.next is None
    return [e.dedup_key for e in page.items]


async def test_list_events_filters(store: Store) -> None:
    await _seed_for_listing(store)
    assert await _all(store, EventFilter()) == ["s4", "s3", "m1", "s2", "s1"]
    assert await _all(store, EventFilter(source="mp")) == ["m1"]
    assert await _all(store, EventFilter(status=EventStatus.IGNORED)) == ["s3"]
    assert await _all(store, EventFilter(kind=Kind.PAYMENT_FAILED)) == ["s2"]
    assert await _all(store, EventFilter(object_id="pi_1")) == ["s4", "s3", "m1", "s1"]
    assert await _all(store, EventFilter(source="stripe", object_id="pi_1")) == ["s4", "s3", "s1"]
    assert await _all(store, EventFilter(dedup_key="s2")) == ["s2"]
    assert await _all(store, EventFilter(reference="order-42")) == ["s4", "s2", "s1"]
    assert await _all(store, EventFilter(source="mp", reference="order-7")) == ["m1"]
    assert await _all(store, EventFilter(source="stripe", reference="order-7")) == []
    assert await _all(store, EventFilter(reference="order")) == []  # exact, not a prefix
    assert await _all(store, EventFilter(since=T0 + timedelta(minutes=1))) == ["s4", "s3", "m1"]
    assert await _all(store, EventFilter(until=T0 + timedelta(minutes=1))) == ["s2", "s1"]
    window = EventFilter(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=2))
    assert await _all(store, window) == ["m1"]
    assert await _all(store, EventFilter(source="nobody")) == []


async def test_a_long_reference_is_stored_and_found(store: Store) -> None:
    # Longer than a PostgreSQL btree entry may be (2704 bytes), and incompressible: the
    # reference index must not make such a delivery fail to be stored.
    long = "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(100))
    await store.record_delivery(request(), [event("evt_long", reference=long)])
    assert await _all(store, EventFilter(reference=long)) == ["evt_long"]


async def test_list_events_pages_with_cursor(store: Store) -> None:
    ids = await _seed_for_listing(store)
    seen: list[int] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await store.list_events(EventFilter(), cursor, 2)
        pages += 1
        seen.extend(e.id for e in page.items)
        if page.next is None:
            break
        assert page.next == str(page.items[-1].id)
        cursor = page.next
    assert seen == sorted(ids, reverse=True)
    assert pages == 3

    filtered = await store.list_events(EventFilter(source="stripe"), None, 2)
    assert [e.dedup_key for e in filtered.items] == ["s4", "s3"]
    rest = await store.list_events(EventFilter(source="stripe"), filtered.next, 2)
    assert ([e.dedup_key for e in rest.items], rest.next) == (["s2", "s1"], None)


async def test_event_delivery_ids_by_filter(store: Store) -> None:
    await _seed_for_listing(store)
    stripe = await store.list_events(EventFilter(source="stripe"), None, 10)
    everything = await store.event_delivery_ids(EventFilter())
    assert len(everything) == 3 and list(everything) == sorted(everything)
    stripe_deliveries = await store.event_delivery_ids(EventFilter(source="stripe"))
    assert len(stripe_deliveries) == 2
    for item in stripe.items:
        linked = [d.id for d in await store.event_deliveries(item.id)]
        assert set(linked) <= set(stripe_deliveries)
    assert list(await store.event_delivery_ids(EventFilter(source="nobody"))) == []
    [mp] = (await store.list_events(EventFilter(source="mp"), None, 10)).items
    by_reference = await store.event_delivery_ids(EventFilter(reference="order-7"))
    assert list(by_reference) == [d.id for d in await store.event_deliveries(mp.id)]


async def test_status_counts_cover_every_status(store: Store) -> None:
    assert await store.status_counts() == {status.value: 0 for status in EventStatus}
    await _seed_for_listing(store)
    claim = await claim_one(store)
    assert await store.dead_letter(claim, "x", T0)
    counts = await store.status_counts()
    assert set(counts) == {status.value for status in EventStatus}
    assert counts == {
        "pending": 3,
        "processing": 0,
        "done": 0,
        "retrying": 0,
        "dead": 1,
        "ignored": 1,
    }


async def test_status_counts_of_the_open_statuses_only(store: Store) -> None:
    await _seed_for_listing(store)
    claim = await claim_one(store)
    assert await store.dead_letter(claim, "x", T0)
    processing = await claim_one(store)
    counts = await store.status_counts(OPEN_STATUSES)
    assert counts == {"pending": 2, "processing": 1, "retrying": 0, "dead": 1}
    assert await store.status_counts([EventStatus.IGNORED]) == {"ignored": 1}
    assert await store.status_counts([]) == {}
    assert await store.retry_later(processing, "later", T0 + LEASE, T0)
    assert (await store.status_counts(OPEN_STATUSES))["retrying"] == 1


# -- quarantine ------------------------------------------------------------------------


@pytest.fixture
async def small_quarantine_store(store_url: str) -> AsyncIterator[Store]:
    """The same store kind, keeping at most three quarantined requests."""
    separator = "&" if "?" in store_url else "?"
    opened = open_store(f"{store_url}{separator}quarantine_limit=3")
    await opened.open()
    await opened.upgrade()
    try:
        yield opened
    finally:
        await opened.close()


async def test_quarantine_is_bounded_newest_first(small_quarantine_store: Store) -> None:
    store = small_quarantine_store
    for i in range(5):
        req = request(f"body {i}\r\n\xff".encode("latin-1"), at=T0 + timedelta(seconds=i))
        await store.quarantine(req, "bad_signature", f"attempt {i}")
    kept = await store.list_quarantine(10)
    assert [q.detail for q in kept] == ["attempt 4", "attempt 3", "attempt 2"]
    newest = kept[0]
    assert newest.body == "body 4\r\n\xff".encode("latin-1")
    assert (newest.source, newest.reason, newest.peer) == ("stripe", "bad_signature", "203.0.113.7")
    assert newest.received_at == T0 + timedelta(seconds=4)
    assert tuple(tuple(pair) for pair in newest.headers) == tuple(request().headers)
    assert [q.detail for q in await store.list_quarantine(1)] == ["attempt 4"]


async def test_quarantine_truncates_huge_bodies(store: Store) -> None:
    await store.quarantine(request(b"\x00" * (200 * 1024)), "bad_signature", None)
    (kept,) = await store.list_quarantine(10)
    assert kept.body == b"\x00" * (64 * 1024)
    assert kept.detail is None


async def test_an_unreadable_item_is_dead_alone_and_a_repeat_does_not_revive_it(
    store: Store,
) -> None:
    bad_item = {"endToEndId": "E1", "valor": "dez reais"}
    unreadable = fields.unreadable(bad_item, where="pix[1]", error="pix[1].valor is no amount")
    first = await store.record_delivery(request(), [event("evt_1"), unreadable])
    assert first.new == 2
    good, dead = [await store.get_event(i) for i in first.event_ids]
    assert good is not None and good.status is EventStatus.PENDING
    assert dead is not None
    assert (dead.status, dead.type, dead.next_attempt_at) == (
        EventStatus.DEAD,
        UNPARSEABLE_TYPE,
        None,
    )
    assert dead.last_error == "pix[1]: pix[1].valor is no amount"

    later = T0 + timedelta(minutes=5)
    again = await store.record_delivery(request(at=later), [event("evt_1"), unreadable])
    assert (again.new, again.duplicates) == (0, 2)
    repeated = await store.get_event(dead.id)
    assert repeated is not None
    assert (repeated.status, repeated.duplicates) == (EventStatus.DEAD, 1)


async def test_reparsed_settles_an_unreadable_item_or_kills_it_again(store: Store) -> None:
    item = {"endToEndId": "E1", "valor": "1.0"}
    unreadable = fields.unreadable(item, where="pix[0]", error="valor")
    recorded = await store.record_delivery(request(), [unreadable])
    placeholder = recorded.event_ids[0]
    later = T0 + timedelta(days=1)

    still = fields.unreadable(item, where="pix[0]", error="valor still unreadable")
    ids = await store.reparsed(recorded.delivery_id, [still], later)
    assert list(ids) == [placeholder]
    dead = await store.get_event(placeholder)
    assert dead is not None
    assert (dead.status, dead.last_error) == (EventStatus.DEAD, "pix[0]: valor still unreadable")
    assert await store.claim("w1", 10, LEASE, later) == []

    ids = await store.reparsed(recorded.delivery_id, [event("E1")], later)
    assert placeholder not in ids
    assert await status_of(store, placeholder) is EventStatus.IGNORED
    assert await status_of(store, ids[0]) is EventStatus.PENDING
