"""IdempotencyStore contract, on real SQLite and PostgreSQL: a key is committed when
`begin` returns (another connection sees it), settles once (first writer wins), and the
pending ones come back for a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from porteiro.store import open_store
from porteiro.store.base import Store
from porteiro.store.client import IdempotencyStore, KeyState

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REQUEST = {"amount": 1000, "currency": "BRL", "reference": "order-1", "expires_in": None,
           "extra": {"metadata": {"a": 1}}, "expires_at": None}  # fmt: skip


@pytest.fixture
async def keys(store: Store) -> IdempotencyStore:
    assert isinstance(store, IdempotencyStore)
    return store


@pytest.fixture
async def second(store_url: str, store: Store) -> AsyncIterator[IdempotencyStore]:
    """Another connection (pool) to the same database, as a restarted process has."""
    other = open_store(store_url)
    await other.open()
    try:
        yield cast(IdempotencyStore, other)
    finally:
        await other.close()


async def begin(keys: IdempotencyStore, key: str, **changes: Any) -> Any:
    options: dict[str, Any] = {"operation": "stripe.payment_intents.create",
                               "fingerprint": "f" * 64, "request": REQUEST, "now": T0}  # fmt: skip
    options.update(changes)
    return await keys.begin_idempotency_key("stripe", key, **options)


async def test_begin_commits_a_pending_key_that_another_connection_sees(
    keys: IdempotencyStore, second: IdempotencyStore
) -> None:
    record, new = await begin(keys, "k1")
    assert new and record.state is KeyState.PENDING and record.attempts == 0
    seen = await second.get_idempotency_key("stripe", "k1")
    assert seen is not None and seen == record
    assert seen.request == REQUEST and seen.fingerprint == "f" * 64
    assert seen.created_at == seen.updated_at == T0
    assert seen.response_status is None and seen.object_id is None and seen.expected_at is None
    assert await second.get_idempotency_key("stripe", "other") is None
    assert await second.get_idempotency_key("pix", "k1") is None  # keys are per source


async def test_begin_again_returns_the_first_row_unchanged(keys: IdempotencyStore) -> None:
    first, _ = await begin(keys, "k1")
    again, new = await begin(keys, "k1", fingerprint="0" * 64, request={"amount": 1},
                             now=T0 + timedelta(hours=1))  # fmt: skip
    assert not new and again == first  # the caller compares fingerprints, not the store


async def test_concurrent_begins_insert_once(
    keys: IdempotencyStore, second: IdempotencyStore
) -> None:
    results = await asyncio.gather(*(begin(store, "race") for store in [keys, second] * 5))
    assert sum(1 for _, new in results if new) == 1
    assert {record.key for record, _ in results} == {"race"}


async def test_attempts_count_then_the_first_settlement_wins(
    keys: IdempotencyStore, second: IdempotencyStore
) -> None:
    await begin(keys, "k1")
    first = await keys.start_idempotent_attempt("stripe", "k1", T0 + timedelta(seconds=1))
    await keys.note_idempotent_error("stripe", "k1", "ReadTimeout", T0 + timedelta(seconds=2))
    again = await second.start_idempotent_attempt("stripe", "k1", T0 + timedelta(seconds=3))
    assert (first.attempts, again.attempts) == (1, 2) and again.last_error == "ReadTimeout"

    body = {"id": "pi_1", "status": "requires_payment_method", "nested": {"list": [1, 2]}}
    done = await keys.finish_idempotency_key(
        "stripe", "k1", state=KeyState.SUCCEEDED, status=200, body=body, object_id="pi_1",
        error=None, now=T0 + timedelta(seconds=4),
    )  # fmt: skip
    assert done.state is KeyState.SUCCEEDED and done.response_body == body
    assert done.response_status == 200 and done.object_id == "pi_1" and done.attempts == 2
    late = await second.finish_idempotency_key(
        "stripe", "k1", state=KeyState.FAILED, status=400, body={"error": {}}, object_id=None,
        error="HTTP 400", now=T0 + timedelta(seconds=5),
    )  # fmt: skip
    assert late == done  # a settled key is never rewritten
    after = await keys.start_idempotent_attempt("stripe", "k1", T0 + timedelta(seconds=6))
    assert after == done  # no more attempts are counted on a settled key


async def test_failed_keys_keep_the_refusal(keys: IdempotencyStore) -> None:
    await begin(keys, "bad")
    await keys.start_idempotent_attempt("stripe", "bad", T0)
    failed = await keys.finish_idempotency_key(
        "stripe", "bad", state=KeyState.FAILED, status=400,
        body={"error": {"message": "amount"}}, object_id=None, error="HTTP 400: amount", now=T0,
    )  # fmt: skip
    assert failed.state is KeyState.FAILED and failed.response_status == 400
    assert failed.last_error == "HTTP 400: amount" and failed.object_id is None


async def test_pending_keys_oldest_first_by_source_age_and_limit(
    keys: IdempotencyStore,
) -> None:
    for index, name in enumerate(["a", "b", "c", "d"]):
        await begin(keys, name, now=T0 + timedelta(minutes=index))
    await keys.begin_idempotency_key("pix", "p", operation="pix.cob.put", fingerprint="e" * 64,
                                     request=REQUEST, now=T0)  # fmt: skip
    await keys.finish_idempotency_key(
        "stripe", "b", state=KeyState.SUCCEEDED, status=200, body={"id": "pi"},
        object_id="pi", error=None, now=T0 + timedelta(minutes=1),
    )  # fmt: skip
    # Touching a key (an attempt) moves it to the back: it was worked on recently.
    await keys.start_idempotent_attempt("stripe", "a", T0 + timedelta(minutes=10))

    everything = await keys.pending_idempotency_keys("stripe", updated_before=None, limit=10)
    assert [k.key for k in everything] == ["c", "d", "a"]
    old = await keys.pending_idempotency_keys(
        "stripe", updated_before=T0 + timedelta(minutes=3), limit=10
    )
    assert [k.key for k in old] == ["c"]
    assert [k.key for k in await keys.pending_idempotency_keys(None, updated_before=None,
                                                               limit=2)] == ["p", "c"]  # fmt: skip


async def test_marking_the_payment_expected(keys: IdempotencyStore) -> None:
    await begin(keys, "k1")
    await keys.mark_idempotency_expected("stripe", "k1", T0 + timedelta(seconds=9))
    record = await keys.get_idempotency_key("stripe", "k1")
    assert record is not None and record.expected_at == T0 + timedelta(seconds=9)
