"""SQLite-only behaviour: URL parsing, pragmas, durability, failing (not waiting) when locked."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from porteiro.errors import ConfigError, StoreUnavailable
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.store import open_store
from porteiro.store.base import OPEN_STATUSES
from porteiro.store.migrations import load_migrations
from porteiro.store.sqlite import queries as q
from porteiro.store.sqlite.store import SqliteStore, _lease_transaction

T0 = datetime(2026, 11, 30, 6, 45, 33, 123456, tzinfo=UTC)
# Past this, a wait is failed as hung (never as slow): the store's busy_timeout is 0.5 s.
HANG_GUARD_SECONDS = 30.0


def request(at: datetime = T0) -> InboundRequest:
    return InboundRequest(
        source="stripe",
        method="POST",
        path="/webhooks/stripe",
        query="",
        headers=(("content-type", "application/json"),),
        body=b'{"id": "evt_1"}',
        peer=None,
        received_at=at,
    )


def event(key: str = "evt_1") -> ParsedEvent:
    return ParsedEvent(dedup_key=key, kind=Kind.PAYMENT_PAID, type="x", object_id="pi_1")


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(str(tmp_path / "porteiro.db"))
    await store.open()
    await store.upgrade()
    try:
        yield store
    finally:
        await store.close()


# -- URLs ------------------------------------------------------------------------------


def test_from_url_paths_and_options() -> None:
    relative = SqliteStore.from_url("sqlite:///./data/porteiro.db")
    assert relative.path == "./data/porteiro.db"
    assert (relative.busy_timeout_seconds, relative.quarantine_limit) == (0.5, 10_000)
    absolute = SqliteStore.from_url("sqlite:////var/lib/porteiro.db?quarantine_limit=3")
    assert (absolute.path, absolute.quarantine_limit) == ("/var/lib/porteiro.db", 3)
    tuned = SqliteStore.from_url("sqlite:///x.db?busy_timeout=2.5&quarantine_limit=7")
    assert (tuned.busy_timeout_seconds, tuned.quarantine_limit) == (2.5, 7)
    assert SqliteStore.from_url("sqlite:///:memory:").path == ":memory:"
    assert isinstance(open_store("sqlite:///./x.db"), SqliteStore)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/x.db",
        "sqlite:///",
        "sqlite:///x.db?colour=blue",
        "sqlite:///x.db?quarantine_limit=many",
        "sqlite:///x.db?quarantine_limit=0",
    ],
)
def test_from_url_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        SqliteStore.from_url(url)


async def test_memory_database_works() -> None:
    store = SqliteStore.from_url("sqlite:///:memory:")
    await store.open()
    try:
        shipped = [migration.version for migration in load_migrations("sqlite")]
        assert list(await store.upgrade()) == shipped
        result = await store.record_delivery(request(), [event()])
        assert result.new == 1
    finally:
        await store.close()


# -- pragmas and schema ----------------------------------------------------------------


async def test_connection_pragmas(sqlite_store: SqliteStore) -> None:
    assert await sqlite_store.pragma("journal_mode") == "wal"
    # 2 = FULL: with WAL, NORMAL may lose acknowledged commits on power loss.
    assert await sqlite_store.pragma("synchronous") == 2
    assert await sqlite_store.pragma("foreign_keys") == 1
    assert await sqlite_store.pragma("busy_timeout") == 500
    with pytest.raises(ValueError):
        await sqlite_store.pragma("synchronous; DROP TABLE events")


def test_migrations_are_numbered_and_ordered() -> None:
    migrations = load_migrations("sqlite")
    assert migrations[0].version == "0001"
    assert [int(m.version) for m in migrations] == sorted(int(m.version) for m in migrations)
    assert all(m.sql.strip() and m.name for m in migrations)
    with pytest.raises(ValueError):
        load_migrations("oracle")


async def test_upgrade_creates_schema_and_records_versions(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        assert list(await store.upgrade()) == [m.version for m in load_migrations("sqlite")]
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
    expected = {"deliveries", "events", "event_deliveries", "payments", "transitions", "quarantine"}
    assert expected <= tables
    assert versions == [m.version for m in load_migrations("sqlite")]


async def test_naive_datetimes_are_refused(sqlite_store: SqliteStore) -> None:
    with pytest.raises(ValueError, match="naive"):
        await sqlite_store.record_delivery(request(at=datetime(2026, 1, 1)), [event()])
    assert await sqlite_store.status_counts() == dict.fromkeys(
        ["pending", "processing", "done", "retrying", "dead", "ignored"], 0
    )


async def test_datetimes_are_stored_as_sortable_utc_text(sqlite_store: SqliteStore) -> None:
    brasilia = T0.astimezone(timezone(timedelta(hours=-3)))
    await sqlite_store.record_delivery(request(at=brasilia), [event()])
    with sqlite3.connect(sqlite_store.path) as conn:
        (received,) = conn.execute("SELECT received_at FROM deliveries").fetchone()
    assert received == "2026-11-30T06:45:33.123456+00:00"


# -- durability and availability -------------------------------------------------------


def _commit_modes(statements: list[str]) -> list[tuple[str, str]]:
    """(synchronous mode, first statement) of each transaction the statements commit."""
    mode, first, commits = "FULL", "", []
    for statement in (s.strip() for s in statements):
        if statement.startswith("PRAGMA synchronous = "):
            mode = statement.rpartition(" ")[2]
        elif statement == "BEGIN IMMEDIATE":
            first = ""
        elif statement == "COMMIT":
            commits.append((mode, first))
        elif not first:
            first = " ".join(statement.split()[:4])
    return commits


async def test_claims_commit_without_an_fsync_and_everything_else_with_one(
    sqlite_store: SqliteStore,
) -> None:
    """Claims are leases (a power cut that loses one leaves its rows due again), so their
    commit skips the fsync; the delivery, and the write that settles the claim, keep it."""
    db = sqlite_store._db
    assert db is not None
    traced: list[str] = []
    db.set_trace_callback(traced.append)
    await sqlite_store.record_delivery(request(), [event()])
    (claim,) = await sqlite_store.claim("w1", 10, timedelta(seconds=30), T0)
    await sqlite_store.retry_later(claim, "later", T0 + timedelta(minutes=1), T0)
    await sqlite_store.claim_outbox("merchant", "relay-1", 10, timedelta(seconds=30), T0)
    db.set_trace_callback(None)

    assert _commit_modes(traced) == [
        ("FULL", "INSERT INTO deliveries (source,"),
        ("NORMAL", "UPDATE events SET status"),
        ("FULL", "UPDATE events SET status"),
        ("NORMAL", "UPDATE outbox SET status"),
    ]
    assert await sqlite_store.pragma("synchronous") == 2  # FULL again


def test_a_failed_lease_transaction_rolls_back_and_restores_full(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "lease.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE claims (id INTEGER)")

    def claim_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO claims VALUES (1)")
        raise RuntimeError("claim failed")

    with pytest.raises(RuntimeError, match="claim failed"):
        _lease_transaction(db, claim_then_fail)
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert db.execute("SELECT count(*) FROM claims").fetchone()[0] == 0
    assert not db.in_transaction
    db.close()


async def test_commit_is_visible_to_another_connection_on_return(
    sqlite_store: SqliteStore,
) -> None:
    result = await sqlite_store.record_delivery(request(), [event()])
    with sqlite3.connect(sqlite_store.path) as conn:
        rows = conn.execute("SELECT id, body FROM deliveries").fetchall()
    assert rows == [(result.delivery_id, b'{"id": "evt_1"}')]


async def test_data_survives_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    store = open_store(url)
    await store.open()
    await store.upgrade()
    result = await store.record_delivery(request(), [event()])
    await store.close()

    reopened = open_store(url)
    await reopened.open()
    try:
        assert list(await reopened.upgrade()) == []
        stored = await reopened.get_event(result.event_ids[0])
        assert stored is not None and stored.dedup_key == "evt_1"
    finally:
        await reopened.close()


async def test_locked_database_fails_while_locked_then_recovers(
    sqlite_store: SqliteStore,
) -> None:
    holder = sqlite3.connect(sqlite_store.path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        # Both answer while the lock is still held (released only after them): the write
        # gives up (busy_timeout) rather than waiting for the holder, the read never waits
        # (WAL: readers are not blocked by the writer). The limit only fails a hang.
        with pytest.raises(StoreUnavailable, match="locked"):
            await asyncio.wait_for(
                sqlite_store.record_delivery(request(), [event()]), HANG_GUARD_SECONDS
            )
        await asyncio.wait_for(sqlite_store.ping(), HANG_GUARD_SECONDS)
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    result = await sqlite_store.record_delivery(request(), [event()])
    assert result.new == 1


async def test_unopenable_file_is_unavailable(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "missing-dir" / "p.db"))
    with pytest.raises(StoreUnavailable):
        await store.open()


async def test_corrupt_file_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database file at all" * 200)
    store = SqliteStore(str(path))
    with pytest.raises(StoreUnavailable):
        await store.open()
        await store.upgrade()
    await store.close()


async def test_closed_store_is_unavailable(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "p.db"))
    with pytest.raises(StoreUnavailable):
        await store.ping()
    await store.open()
    await store.ping()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.ping()


async def test_counting_the_open_statuses_searches_an_index(sqlite_store: SqliteStore) -> None:
    """/metrics counts them on every scrape: never a scan of every stored event."""
    statuses = [s.value for s in OPEN_STATUSES]
    found = await sqlite_store._fetch(
        "EXPLAIN QUERY PLAN " + q.status_counts_of(len(statuses)), statuses
    )
    details = [row["detail"] for row in found]
    assert any("USING COVERING INDEX events_due" in d for d in details), details
    assert not any(d.startswith("SCAN") for d in details), details
