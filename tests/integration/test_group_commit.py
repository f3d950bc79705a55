"""Group commit on both real stores: concurrent record_delivery calls share transactions,
yet each caller gets exactly its own result, duplicates inside one batch count as if the
deliveries had been committed one after the other, and a failed batch fails every caller
in it and stores none of them."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
import uvloop

from porteiro.config import ServerConfig
from porteiro.errors import StoreUnavailable
from porteiro.http.app import create_app
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.runtime import Runtime
from porteiro.store import open_store
from porteiro.store.base import EventFilter, RecordResult, Store
from porteiro.store.group_commit import GroupCommit
from tests.support.app import MAX_BODY, SOURCE, asgi_client, make_config, post_signed
from tests.support.events import event_body, lifecycle_bodies
from tests.support.processes import post_all, run_porteiro, serving, write_config
from tests.support.servers import free_port

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def request(tag: str, at: datetime = T0) -> InboundRequest:
    return InboundRequest(
        source="stripe",
        method="POST",
        path="/webhooks/stripe",
        query=f"tag={tag}",
        headers=(("content-type", "application/json"), ("x-tag", tag)),
        body=f'{{"delivery": "{tag}"}}'.encode(),
        peer="203.0.113.9",
        received_at=at,
    )


def event(key: str, amount: int = 1000) -> ParsedEvent:
    return ParsedEvent(
        dedup_key=key, kind=Kind.PAYMENT_PAID, type="x", object_id=f"pi_{key}", amount=amount
    )


def with_options(url: str, **options: object) -> str:
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return url + ("&" if "?" in url else "?") + query


@pytest.fixture
async def lingering(store_url: str) -> AsyncIterator[Store]:
    """A store whose batches wait 50 ms for company: concurrent calls surely share one."""
    # One committer on PostgreSQL too, so the batch is whatever waited 50 ms.
    single = {"batch_concurrency": 1} if store_url.startswith("postgresql") else {}
    store = open_store(with_options(store_url, batch_linger_ms=50, **single))
    await store.open()
    await store.upgrade()
    try:
        yield store
    finally:
        await store.close()


async def count_deliveries(store: Store, key: str) -> int:
    [stored] = (await store.list_events(EventFilter(dedup_key=key), None, 10)).items
    return len(await store.event_deliveries(stored.id))


# -- every caller gets its own result -------------------------------------------------------


async def test_200_concurrent_deliveries_each_get_their_own_result(store: Store) -> None:
    tags = [f"d{n:03}" for n in range(200)]
    results = await asyncio.gather(
        *(store.record_delivery(request(tag), [event(f"evt_{tag}")]) for tag in tags)
    )
    assert len({result.delivery_id for result in results}) == 200
    for tag, result in zip(tags, results, strict=True):
        assert (result.new, result.duplicates) == (1, 0)
        [event_id] = result.event_ids
        stored = await store.get_event(event_id)
        assert stored is not None and stored.dedup_key == f"evt_{tag}"
        assert stored.duplicates == 0
        delivery = await store.get_delivery(result.delivery_id)
        assert delivery is not None
        assert delivery.body == f'{{"delivery": "{tag}"}}'.encode()
        assert ("x-tag", tag) in list(delivery.headers)
        assert [d.id for d in await store.event_deliveries(event_id)] == [result.delivery_id]
    counts = await store.status_counts()
    assert sum(counts.values()) == counts["pending"] == 200


async def test_bodies_of_every_length_in_one_batch_are_stored_byte_for_byte(
    lingering: Store,
) -> None:
    # PostgreSQL sends a batch's bodies joined in one parameter, cut apart by offsets.
    bodies = [
        b"",
        b"x",
        bytes(range(256)) * 3,  # NUL and every other byte, not UTF-8
        b'{"big": "' + b"a" * 100_000 + b'"}',
        '{"nome": "Jo\u00e3o"}'.encode(),
        b"\xff\xfe\x00trailing",
    ]
    requests = [
        replace(request(f"b{n}"), body=body, query=f"n={n}") for n, body in enumerate(bodies)
    ]
    results = await asyncio.gather(
        *(lingering.record_delivery(r, [event(f"evt_body_{n}")]) for n, r in enumerate(requests))
    )
    for body, result in zip(bodies, results, strict=True):
        delivery = await lingering.get_delivery(result.delivery_id)
        assert delivery is not None and delivery.body == body


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_concurrent_postgres_batches_sharing_events_count_each_copy_once(
    store_url: str,
) -> None:
    # Three committers, so batches run at once and upsert the same events: rows are
    # locked in key order, so they queue behind each other instead of deadlocking.
    store = open_store(with_options(store_url, batch_concurrency=3, batch_max=8))
    await store.open()
    await store.upgrade()
    try:
        keys = [f"evt_shared{n % 10}" for n in range(120)]
        results = await asyncio.gather(
            *(
                store.record_delivery(request(f"s{n}"), [event(key), event(f"evt_own{n}")])
                for n, key in enumerate(keys)
            )
        )
        assert sum(r.new for r in results) == 10 + 120
        assert sum(r.duplicates for r in results) == 110
        for n in range(10):
            [stored] = (
                await store.list_events(EventFilter(dedup_key=f"evt_shared{n}"), None, 10)
            ).items
            assert stored.duplicates == 11
            assert len(await store.event_deliveries(stored.id)) == 12
    finally:
        await store.close()


async def test_multi_event_deliveries_keep_their_event_order(lingering: Store) -> None:
    results = await asyncio.gather(
        *(
            lingering.record_delivery(request(f"m{n}"), [event(f"evt_m{n}_{i}") for i in range(3)])
            for n in range(20)
        )
    )
    for n, result in enumerate(results):
        keys = []
        for event_id in result.event_ids:
            stored = await lingering.get_event(event_id)
            assert stored is not None
            keys.append(stored.dedup_key)
        assert keys == [f"evt_m{n}_{i}" for i in range(3)]
        assert (result.new, result.duplicates) == (3, 0)


# -- duplicates inside one batch ------------------------------------------------------------


async def test_same_event_twice_in_one_batch_is_one_new_and_one_duplicate(
    lingering: Store,
) -> None:
    first, second = await asyncio.gather(
        lingering.record_delivery(request("a"), [event("evt_same")]),
        lingering.record_delivery(request("b"), [event("evt_same")]),
    )
    assert (first.new, first.duplicates) == (1, 0)
    assert (second.new, second.duplicates) == (0, 1)
    assert first.event_ids == second.event_ids
    stored = await lingering.get_event(first.event_ids[0])
    assert stored is not None and stored.duplicates == 1
    deliveries = await lingering.event_deliveries(stored.id)
    assert [d.id for d in deliveries] == sorted([first.delivery_id, second.delivery_id])
    counts = await lingering.status_counts()
    assert sum(counts.values()) == 1


async def test_overlapping_deliveries_in_one_batch_count_in_arrival_order(
    lingering: Store,
) -> None:
    a, b, c = await asyncio.gather(
        lingering.record_delivery(request("a"), [event("evt_1")]),
        lingering.record_delivery(request("b"), [event("evt_1"), event("evt_2")]),
        lingering.record_delivery(request("c"), [event("evt_2"), event("evt_2")]),
    )
    assert (a.new, a.duplicates) == (1, 0)
    assert (b.new, b.duplicates) == (1, 1)
    assert (c.new, c.duplicates) == (0, 2)
    assert b.event_ids[0] == a.event_ids[0] and c.event_ids == [b.event_ids[1]] * 2
    one, two = [await lingering.get_event(i) for i in b.event_ids]
    assert one is not None and two is not None
    assert (one.duplicates, two.duplicates) == (1, 2)
    assert await count_deliveries(lingering, "evt_1") == 2
    assert await count_deliveries(lingering, "evt_2") == 2


async def test_batch_of_copies_of_a_stored_event_are_all_duplicates(lingering: Store) -> None:
    original = await lingering.record_delivery(request("o"), [event("evt_old")])
    copies = await asyncio.gather(
        *(lingering.record_delivery(request(f"c{n}"), [event("evt_old")]) for n in range(3))
    )
    assert all((r.new, r.duplicates) == (0, 1) for r in copies)
    assert all(r.event_ids == original.event_ids for r in copies)
    stored = await lingering.get_event(original.event_ids[0])
    assert stored is not None and stored.duplicates == 3


async def test_only_repeat_deliveries_get_a_link_row(lingering: Store, store_url: str) -> None:
    # The first delivery of an event is its first_delivery_id; a link row per new event
    # was a third of PostgreSQL's work per ack. Repeats (in the batch or later) are linked,
    # and every reader still sees all of an event's deliveries, in order.
    first, same_batch, other = await asyncio.gather(
        lingering.record_delivery(request("a"), [event("evt_x"), event("evt_y")]),
        lingering.record_delivery(request("b"), [event("evt_x")]),
        lingering.record_delivery(request("c"), [event("evt_z")]),
    )
    later = await lingering.record_delivery(request("d"), [event("evt_y"), event("evt_z")])
    bad = await lingering.record_delivery(request("e"), [], parse_error="bad json")
    assert link_rows(store_url) == [
        (first.event_ids[0], same_batch.delivery_id),
        (first.event_ids[1], later.delivery_id),
        (other.event_ids[0], later.delivery_id),
    ]
    x, y = first.event_ids
    assert [d.id for d in await lingering.event_deliveries(x)] == [
        first.delivery_id,
        same_batch.delivery_id,
    ]
    assert [d.id for d in await lingering.event_deliveries(y)] == [
        first.delivery_id,
        later.delivery_id,
    ]
    assert [d.id for d in await lingering.event_deliveries(bad.event_ids[0])] == [bad.delivery_id]
    everything = [first, same_batch, other, later, bad]
    assert await lingering.event_delivery_ids(EventFilter()) == sorted(
        r.delivery_id for r in everything
    )
    assert await lingering.event_delivery_ids(EventFilter(dedup_key="evt_z")) == [
        other.delivery_id,
        later.delivery_id,
    ]


def link_rows(store_url: str) -> list[tuple[int, int]]:
    query = "SELECT event_id, delivery_id FROM event_deliveries ORDER BY delivery_id, event_id"
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            return [tuple(row) for row in db.execute(query)]
    with psycopg.connect(store_url) as conn:
        return [tuple(row) for row in conn.execute(query)]


async def test_unparseable_deliveries_in_one_batch_get_their_own_placeholders(
    lingering: Store,
) -> None:
    results = await asyncio.gather(
        lingering.record_delivery(request("p1"), [], parse_error="bad json"),
        lingering.record_delivery(request("ok"), [event("evt_ok")]),
        lingering.record_delivery(request("p2"), [], parse_error="worse json"),
    )
    bad1, good, bad2 = results
    assert (good.new, good.duplicates) == (1, 0)
    for result, reason in ((bad1, "bad json"), (bad2, "worse json")):
        [placeholder_id] = result.event_ids
        stored = await lingering.get_event(placeholder_id)
        assert stored is not None
        assert stored.dedup_key == f"porteiro:unparseable:{result.delivery_id}"
        assert stored.status.value == "dead" and stored.last_error == reason
        assert (result.new, result.duplicates) == (1, 0)


# -- a failed batch fails every caller and stores none of them ---------------------------


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_sqlite_batch_failing_on_a_lock_fails_every_caller(store_url: str) -> None:
    store = open_store(with_options(store_url, busy_timeout=0.3, batch_linger_ms=20))
    await store.open()
    await store.upgrade()
    holder = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process, past the busy timeout
        outcomes = await asyncio.gather(
            *(store.record_delivery(request(f"l{n}"), [event(f"evt_l{n}")]) for n in range(20)),
            return_exceptions=True,
        )
        holder.execute("ROLLBACK")
        assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes), outcomes
        assert sum((await store.status_counts()).values()) == 0
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as check:
            assert check.execute("SELECT count(*) FROM deliveries").fetchone() == (0,)
        recovered = await store.record_delivery(request("after"), [event("evt_l0")])
        assert (recovered.new, recovered.duplicates) == (1, 0)
    finally:
        holder.close()
        await store.close()


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_postgres_batch_whose_connection_is_killed_fails_every_caller(
    store_url: str,
) -> None:
    store = open_store(with_options(store_url, batch_linger_ms=20, batch_concurrency=1))
    await store.open()
    await store.upgrade()
    try:
        async with await psycopg.AsyncConnection.connect(store_url) as blocker:
            await blocker.execute("LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE")
            calls = asyncio.gather(
                *(store.record_delivery(request(f"k{n}"), [event(f"evt_k{n}")]) for n in range(20)),
                return_exceptions=True,
            )
            killed = await _kill_waiting_batch(store_url)
            outcomes = await calls
            await blocker.rollback()
        assert killed == 1
        assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes), outcomes
        async with await psycopg.AsyncConnection.connect(store_url) as check:
            cursor = await check.execute("SELECT count(*) FROM deliveries")
            assert await cursor.fetchone() == (0,)
        recovered = await store.record_delivery(request("after"), [event("evt_k0")])
        assert (recovered.new, recovered.duplicates) == (1, 0)
    finally:
        await store.close()


async def _kill_waiting_batch(url: str) -> int:
    """Terminate the backend whose batch statement waits on the table lock."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        for _ in range(100):
            cursor = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                " AND query LIKE '%%INSERT INTO deliveries%%'"
            )
            killed = len(await cursor.fetchall())
            if killed:
                return killed
            await asyncio.sleep(0.05)
    return 0


async def test_a_delivery_the_database_refuses_fails_alone(lingering: Store) -> None:
    # An amount no integer column holds: a value error, not an outage. Its batch is
    # retried one delivery at a time, so only that caller fails.
    outcomes = await asyncio.gather(
        lingering.record_delivery(request("good1"), [event("evt_good1")]),
        lingering.record_delivery(request("bad"), [event("evt_bad", amount=2**70)]),
        lingering.record_delivery(request("good2"), [event("evt_good2")]),
        return_exceptions=True,
    )
    good1, bad, good2 = outcomes
    assert isinstance(good1, RecordResult) and isinstance(good2, RecordResult)
    assert isinstance(bad, Exception) and not isinstance(bad, StoreUnavailable)
    assert (good1.new, good2.new) == (1, 1)
    assert sum((await lingering.status_counts()).values()) == 2


# -- the batcher itself ---------------------------------------------------------------------


async def test_concurrent_submits_share_batches_bounded_by_max_batch() -> None:
    sizes: list[int] = []

    async def commit(items: Sequence[int]) -> list[int]:
        sizes.append(len(items))
        await asyncio.sleep(0.01)  # a commit takes time; callers queue meanwhile
        return [item * 2 for item in items]

    batcher: GroupCommit[int, int] = GroupCommit(commit, max_batch=16)
    results = await asyncio.gather(*(batcher.submit(n) for n in range(100)))
    await batcher.close()
    assert results == [n * 2 for n in range(100)]
    assert max(sizes) == 16 and len(sizes) < 100 and sum(sizes) == 100


async def test_a_caller_that_gave_up_is_left_out_of_the_next_batch() -> None:
    seen: list[int] = []
    release = asyncio.Event()

    async def commit(items: Sequence[int]) -> list[int]:
        seen.extend(items)
        await release.wait()
        return list(items)

    batcher: GroupCommit[int, int] = GroupCommit(commit)
    first = asyncio.create_task(batcher.submit(1))
    await asyncio.sleep(0.01)  # batch [1] is committing
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await batcher.submit(2)  # queued behind it, then abandoned
    third = asyncio.create_task(batcher.submit(3))
    await asyncio.sleep(0.01)
    release.set()
    assert (await first, await third) == (1, 3)
    await batcher.close()
    assert seen == [1, 3]


async def test_give_up_after_fails_waiting_and_stuck_callers_but_not_the_answered() -> None:
    release = asyncio.Event()
    committed: list[list[int]] = []

    async def commit(items: Sequence[int]) -> list[int]:
        committed.append(list(items))
        if 1 in items:
            await release.wait()  # batch [1] is stuck in the database
        return list(items)

    batcher: GroupCommit[int, int] = GroupCommit(commit)
    assert await batcher.submit(0, give_up_after=0.05) == 0  # answered: never expired
    loop = asyncio.get_running_loop()
    started = loop.time()
    stuck = asyncio.create_task(batcher.submit(1, give_up_after=0.05))
    await asyncio.sleep(0.01)  # batch [1] is committing; the next two queue behind it
    queued = asyncio.create_task(batcher.submit(2, give_up_after=0.1))
    patient = asyncio.create_task(batcher.submit(3))  # no deadline: waits it out
    with pytest.raises(TimeoutError):
        await stuck
    assert loop.time() - started >= 0.05
    with pytest.raises(TimeoutError):
        await queued
    assert loop.time() - started >= 0.1
    assert not patient.done()
    release.set()
    assert await patient == 3
    await batcher.close()
    # The abandoned caller's item was left out of the next batch; the stuck one committed.
    assert committed == [[0], [1], [3]]


async def test_deadlines_of_different_lengths_each_fire_on_time() -> None:
    release = asyncio.Event()

    async def commit(items: Sequence[int]) -> list[int]:
        await release.wait()  # stuck until the end of the test
        return list(items)

    batcher: GroupCommit[int, int] = GroupCommit(commit)
    loop = asyncio.get_running_loop()
    started = loop.time()
    slow = asyncio.create_task(batcher.submit(1, give_up_after=5.0))
    fast = asyncio.create_task(batcher.submit(2, give_up_after=0.05))
    with pytest.raises(TimeoutError):
        await fast
    assert not slow.done()  # the shorter deadline, submitted later, did not wait for it
    assert loop.time() - started < 5.0
    slow.cancel()
    release.set()
    await batcher.close()


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_a_deadline_due_at_once_arms_a_watchdog_on_both_loops(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    # uvloop answers `call_at` for a moment under half a millisecond away with a plain
    # Handle (no `when()`): the next submit must still compare deadlines, not crash.
    async def scenario() -> None:
        release = asyncio.Event()

        async def commit(items: Sequence[int]) -> list[int]:
            await release.wait()  # a slow commit: every caller waits on its deadline
            return list(items)

        batcher: GroupCommit[int, int] = GroupCommit(commit)
        due = asyncio.create_task(batcher.submit(1, give_up_after=0.0001))
        later = asyncio.create_task(batcher.submit(2, give_up_after=0.05))
        patient = asyncio.create_task(batcher.submit(3, give_up_after=30.0))
        outcomes = await asyncio.gather(due, later, return_exceptions=True)
        assert [type(outcome) for outcome in outcomes] == [TimeoutError, TimeoutError]
        assert not patient.done()
        release.set()
        assert await patient == 3
        await batcher.close()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(scenario())


async def test_closing_fails_waiting_callers_with_store_unavailable() -> None:
    async def commit(items: Sequence[int]) -> list[int]:
        await asyncio.sleep(0.05)
        return list(items)

    batcher: GroupCommit[int, int] = GroupCommit(commit, max_batch=1)
    calls = [asyncio.create_task(batcher.submit(n)) for n in range(3)]
    await asyncio.sleep(0.01)
    await batcher.close()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert outcomes[0] == 0  # in flight: committed, then answered
    assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes[1:])
    with pytest.raises(StoreUnavailable):
        await batcher.submit(9)


def test_invalid_batch_settings_are_refused() -> None:
    async def commit(items: Sequence[int]) -> list[int]:
        return list(items)

    for kwargs in (
        {"max_batch": 0},
        {"concurrency": 0},
        {"linger_seconds": -1.0},
        {"concurrency": 2, "active": 0},
        {"concurrency": 2, "active": 3},
    ):
        with pytest.raises(ValueError):
            GroupCommit(commit, **kwargs)


async def test_parked_committers_take_batches_only_once_activated() -> None:
    in_flight, most = 0, 0
    release = asyncio.Event()

    async def commit(items: Sequence[int]) -> list[int]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()
        in_flight -= 1
        return list(items)

    batcher: GroupCommit[int, int] = GroupCommit(commit, max_batch=1, concurrency=2, active=1)
    calls = [asyncio.create_task(batcher.submit(n)) for n in range(4)]
    await asyncio.sleep(0.02)
    assert (most, batcher.active) == (1, 1)  # the second committer is parked
    batcher.activate(2)
    await asyncio.sleep(0.02)
    assert (most, batcher.active) == (2, 2)  # now two batches wait at once
    release.set()
    assert await asyncio.gather(*calls) == [0, 1, 2, 3]
    batcher.activate(9)  # never more than its committers
    assert batcher.active == 2
    await batcher.close()


# -- the ingest path under load: saturation guard, several receivers ----------------------


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_past_max_inflight_a_webhook_gets_503_at_once(store_url: str) -> None:
    config = make_config(store_url, server=ServerConfig(max_body_bytes=MAX_BODY, max_inflight=1))
    runtime = Runtime.build(config)
    application = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application), asgi_client(application) as http:
        holder = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the first request now waits on the store
        try:
            stuck = asyncio.create_task(post_signed(http, event_body("evt_a"), "msg_a"))
            await asyncio.sleep(0.1)
            refused = await post_signed(http, event_body("evt_b"), "msg_b")
            # Answered while the first still waits on the store: the 503 waits on nothing.
            assert not stuck.done()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == str(config.server.retry_after_seconds)
        assert refused.json() == {"error": "ingest saturated"}
        assert (await stuck).status_code == 200  # the lock went before the busy timeout
        saturated = runtime.metrics.registry.get_sample_value(
            "porteiro_deliveries_total", {"source": SOURCE, "outcome": "saturated"}
        )
        assert saturated == 1
        # Nothing is left in flight: both are accepted now (evt_a as a duplicate).
        assert (await post_signed(http, event_body("evt_a"), "msg_a")).status_code == 200
        assert (await post_signed(http, event_body("evt_b"), "msg_b")).status_code == 200


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_serve_with_two_receivers_shares_the_port(store_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, store_url)
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    with serving(config, port, tmp_path / "serve.log", "--receivers", "2", "--no-worker") as proc:
        children = _children(proc.popen.pid)
        assert len(children) >= 2, proc.output()
        base = datetime.now(UTC)
        bodies = [body for n in range(50) for body in lifecycle_bodies(n, base)]
        assert post_all(port, bodies, concurrency=32) == [200] * len(bodies)
        assert post_all(port, bodies[:20], concurrency=8) == [200] * 20  # duplicates
    assert f"porteiro listening on http://127.0.0.1:{port} (2 receivers)" in proc.output()
    with psycopg.connect(store_url) as conn:
        totals = conn.execute("SELECT count(*), sum(duplicates) FROM events").fetchone()
        counted = conn.execute("SELECT count(*) FROM deliveries").fetchone()
    assert totals is not None and counted is not None
    (events, duplicates), (deliveries,) = totals, counted
    assert (events, duplicates, deliveries) == (200, 20, 220)


def _children(pid: int) -> list[int]:
    found = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    return [int(child) for child in found]
