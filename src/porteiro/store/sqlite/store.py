"""The embedded store: one SQLite file, one connection, one writer.

SQLite allows a single writer anyway, so the store owns one connection on one dedicated
thread, and every operation is ONE hop to that thread running a plain function (not one
hop per statement): the thread's queue serialises them, no lock needed. Writes open
`BEGIN IMMEDIATE` so a competing process fails fast (busy_timeout) instead of deadlocking
on a lock upgrade. WAL with synchronous=FULL: NORMAL would be faster but can lose
acknowledged commits on power loss, and a 2xx to a gateway is a promise that the
delivery is stored. Concurrent ingests share one commit (group commit): one fsync per
batch instead of per request; a batch's statements run on the loop's thread inside a
transaction the store's thread holds (sqlite_held), which spares a GIL handoff per
statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote

from porteiro.errors import ConfigError, StoreUnavailable
from porteiro.model import EventStatus, InboundRequest, ParsedEvent, StoredEvent
from porteiro.store import rows
from porteiro.store.base import Application, Applied, RecordResult, Store
from porteiro.store.group_commit import GroupCommit
from porteiro.store.migrations import load_migrations
from porteiro.store.outbox import OutboxRow
from porteiro.store.port import Params
from porteiro.store.sqlite import queries as q
from porteiro.store.sqlite.apply import apply_many
from porteiro.store.sqlite.held import run_held
from porteiro.store.sqlite.outbox import CLAIM_OUTBOX, insert_outbox_sqlite
from porteiro.store.sqlite.port import SqlitePort

_PREFIX = "sqlite:///"
_OPTIONS = {"quarantine_limit", "busy_timeout", "batch_max", "batch_linger_ms"}
T = TypeVar("T")


@dataclass(slots=True)
class _Ingest:
    """One record_delivery call, its parameters built by the caller (encoding errors stay
    the caller's); the delivery id is filled in by the batch."""

    source: str
    received: str
    delivery: tuple[Any, ...]
    events: list[dict[str, Any]]
    parse_error: str | None


class SqliteStore(Store):
    def __init__(
        self,
        path: str,
        *,
        busy_timeout_seconds: float = 0.5,
        quarantine_limit: int = 10_000,
        batch_max: int = 256,
        batch_linger_seconds: float = 0.0,
    ) -> None:
        if quarantine_limit < 1:
            raise ValueError("quarantine_limit must be at least 1")
        if batch_max < 1 or batch_linger_seconds < 0:
            raise ValueError("batch_max must be at least 1 and batch_linger_ms not negative")
        self.path = path
        self.busy_timeout_seconds = busy_timeout_seconds
        self.quarantine_limit = quarantine_limit
        self.batch_max = batch_max
        self.batch_linger_seconds = batch_linger_seconds
        self._db: sqlite3.Connection | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._ingest: GroupCommit[_Ingest, RecordResult] | None = None
        self._work = asyncio.Event()
        self._port = SqlitePort(self._fetch, self._write, self._work.set)

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        """sqlite:///./relative.db, sqlite:////absolute.db or sqlite:///:memory:.

        Query parameters: `quarantine_limit` (rows kept), `busy_timeout` (seconds),
        `batch_max` (deliveries per group commit), `batch_linger_ms` (wait for more).
        """
        if not url.startswith(_PREFIX):
            raise ConfigError(f"invalid SQLite URL {url!r}: use sqlite:///path/to/file.db")
        path, _, query = url[len(_PREFIX) :].partition("?")
        if not path:
            raise ConfigError(f"SQLite URL {url!r} names no file")
        options = {key: values[-1] for key, values in parse_qs(query).items()}
        unknown = set(options) - _OPTIONS
        if unknown:
            raise ConfigError(f"unknown SQLite URL option(s): {', '.join(sorted(unknown))}")
        try:
            return cls(
                unquote(path),
                busy_timeout_seconds=float(options.get("busy_timeout", 0.5)),
                quarantine_limit=int(options.get("quarantine_limit", 10_000)),
                batch_max=int(options.get("batch_max", 256)),
                batch_linger_seconds=float(options.get("batch_linger_ms", 0)) / 1000,
            )
        except ValueError as exc:
            raise ConfigError(f"invalid SQLite URL {url!r}: {exc}") from exc

    # -- connection and transactions -------------------------------------------------------

    async def open(self) -> None:
        if self._db is not None:
            return
        thread = ThreadPoolExecutor(1, thread_name_prefix="porteiro-sqlite")
        loop = asyncio.get_running_loop()
        try:
            with _unavailable():
                db = await loop.run_in_executor(
                    thread, _connect, self.path, self.busy_timeout_seconds
                )
        except BaseException:
            thread.shutdown(wait=False)
            raise
        self._db, self._thread = db, thread
        self._ingest = GroupCommit(
            self._commit_ingests, max_batch=self.batch_max, linger_seconds=self.batch_linger_seconds
        )

    async def close(self) -> None:
        ingest, self._ingest = self._ingest, None
        if ingest is not None:
            await ingest.close()
        db, thread = self._db, self._thread
        self._db = self._thread = None
        if db is not None and thread is not None:
            # Queued behind whatever the thread still runs, then the thread ends.
            with contextlib.suppress(sqlite3.Error):
                await asyncio.get_running_loop().run_in_executor(thread, db.close)
            thread.shutdown(wait=False)

    def _opened(self) -> tuple[sqlite3.Connection, ThreadPoolExecutor]:
        db, thread = self._db, self._thread
        if db is None or thread is None:
            raise StoreUnavailable("the SQLite store is not open")
        return db, thread

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(connection, *args)` on the store's thread: one hop, however many
        statements. A cancelled caller does not cancel the work already queued."""
        db, thread = self._opened()
        with _unavailable():
            return await asyncio.get_running_loop().run_in_executor(thread, fn, db, *args)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(connection, *args)` in ONE IMMEDIATE transaction, committed on success."""
        return await self._call(_transaction, fn, *args)

    async def _lease(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(connection, *args)` in ONE transaction whose commit skips the fsync: for
        claims (events and outbox rows), which a crash may lose harmlessly
        (_lease_transaction)."""
        return await self._call(_lease_transaction, fn, *args)

    async def _fetch(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return await self._call(_fetchall, sql, params)

    async def upgrade(self) -> Sequence[str]:
        applied_now: list[str] = []
        for migration in load_migrations("sqlite"):
            if await self._write(_migrate, migration.version, migration.sql):
                applied_now.append(migration.version)
        return applied_now

    async def schema_versions(self) -> frozenset[str]:
        return await self._call(_schema_versions)

    async def pragma(self, name: str) -> object:
        """One PRAGMA value of the store's own connection (diagnostics and tests)."""
        if not name.isidentifier():
            raise ValueError(f"invalid pragma name {name!r}")
        found = await self._fetch(f"PRAGMA {name}")
        return found[0][0] if found else None

    async def ping(self) -> None:
        await self._fetch("SELECT 1")

    # -- ingest --------------------------------------------------------------------------

    def _ingest_item(
        self, request: InboundRequest, events: Sequence[ParsedEvent], parse_error: str | None
    ) -> _Ingest:
        received = rows.encode_time(request.received_at)
        return _Ingest(
            source=request.source,
            received=received,
            delivery=q.delivery_params(request, received, parse_error),
            events=[]
            if parse_error
            else [q.event_params(e, request.source, 0, received) for e in events],
            parse_error=parse_error,
        )

    def _ingested(self) -> None:
        self._work.set()

    async def _commit_ingests(self, items: Sequence[_Ingest]) -> Sequence[RecordResult]:
        # The batch's statements run on the loop's thread, BEGIN and COMMIT on the
        # store's (sqlite_held says why); every other write runs wholly on the store's.
        db, thread = self._opened()
        with _unavailable():
            return await run_held(db, thread, _record_batch, items)

    # -- work queue ----------------------------------------------------------------------

    async def _claim_events(self, params: dict[str, Any]) -> Sequence[StoredEvent]:
        claimed = await self._lease(_fetchall, q.CLAIM, params)
        return [rows.event_from_row(row) for row in claimed]

    async def wait_for_work(self, timeout: float) -> None:  # noqa: ASYNC109 (protocol)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._work.wait(), timeout)
        self._work.clear()

    async def _apply_many(self, batch: Sequence[Application], now: datetime) -> Sequence[Applied]:
        return await self._write(apply_many, batch, rows.encode_time(now))

    # -- outbox (the others: store/outbox.py) --------------------------------------------

    async def enqueue_outbox(self, rows: Sequence[OutboxRow], now: datetime) -> int:
        return await self._write(insert_outbox_sqlite, rows, now) if rows else 0

    async def _claim_outbox_rows(self, params: Params) -> Sequence[Any]:
        return await self._lease(_fetchall, CLAIM_OUTBOX, params)  # a lease: no fsync

    # -- reads (the others: read_verbs) -------------------------------------------------

    async def status_counts(self, statuses: Sequence[EventStatus] | None = None) -> dict[str, int]:
        if statuses is None:
            found = await self._fetch(q.STATUS_COUNTS)
        else:
            found = await self._fetch(
                q.status_counts_of(len(statuses)), [s.value for s in statuses]
            )
        return rows.status_counts(found, statuses)


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """Driver failures that mean "the database is not there right now" become 503s;
    constraint and programming errors stay bugs."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise StoreUnavailable(f"SQLite: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        if type(exc) is not sqlite3.DatabaseError:
            raise
        raise StoreUnavailable(f"SQLite: {exc}") from exc


# -- on the store's thread: plain functions of the connection ----------------------------


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    # check_same_thread off: ingest batches run their statements on the loop's thread
    # while the store's thread holds their transaction (sqlite_held); never both at once.
    db = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        db.close()
        raise
    return db


def _transaction(db: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
    db.execute("BEGIN IMMEDIATE")
    try:
        result = fn(db, *args)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise
    return result


def _lease_transaction(db: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
    """A transaction committed without its own fsync (`synchronous = NORMAL` for it alone).

    For claims: a claim that a power cut loses (a process crash loses nothing) leaves its
    rows due again, as an expired lease does, and every fenced write after it (apply,
    settle) commits with `synchronous = FULL`, whose fsync of the WAL covers the claim's
    frames before it. On the one store thread, each claim's fsync was a disk flush that
    the receivers' group commits queued behind: with the in-process worker, one per ingest
    batch."""
    db.execute("PRAGMA synchronous = NORMAL")
    try:
        return _transaction(db, fn, *args)
    finally:
        db.execute("PRAGMA synchronous = FULL")


def _fetchall(
    db: sqlite3.Connection, sql: str, params: Sequence[Any] | dict[str, Any]
) -> list[Any]:
    return db.execute(sql, params).fetchall()


def _rowcount(db: sqlite3.Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> int:
    return db.execute(sql, params).rowcount


def _one(db: sqlite3.Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> Any:
    row = db.execute(sql, params).fetchone()
    if row is None:
        raise StoreUnavailable("SQLite returned no row")
    return row


def _migrate(db: sqlite3.Connection, version: str, script: str) -> bool:
    db.execute(q.BOOTSTRAP)
    if version in {row[0] for row in db.execute(q.APPLIED_VERSIONS)}:
        return False
    for statement in q.statements(script):
        db.execute(statement)
    db.execute(q.MARK_APPLIED, (version, rows.encode_time(datetime.now(UTC))))
    return True


def _schema_versions(db: sqlite3.Connection) -> frozenset[str]:
    # A never-migrated file has no schema_migrations table: version 0, not an error.
    if db.execute(_HAS_MIGRATIONS_TABLE).fetchone() is None:
        return frozenset()
    return frozenset(row[0] for row in db.execute(q.APPLIED_VERSIONS))


_HAS_MIGRATIONS_TABLE = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
)


def _record_batch(db: sqlite3.Connection, items: Sequence[_Ingest]) -> list[RecordResult]:
    """Every delivery of the batch and its events; a repeated event, even within the
    batch, upserts onto the first one's row and counts as a duplicate."""
    results = []
    for item in items:
        cursor = db.execute(q.INSERT_DELIVERY, item.delivery)
        delivery_id = cursor.lastrowid
        if delivery_id is None:
            raise StoreUnavailable("SQLite returned no row id")
        events = item.events
        if item.parse_error is not None:
            events = [
                q.placeholder_params(item.source, delivery_id, item.received, item.parse_error)
            ]
        event_ids: list[int] = []
        new = 0
        for params in events:
            params["delivery_id"] = delivery_id
            inserted = db.execute(q.INSERT_EVENT, params)
            if inserted.rowcount == 1 and inserted.lastrowid is not None:
                event_ids.append(inserted.lastrowid)
                new += 1  # its first delivery: first_delivery_id, no link row
            else:
                event_id = int(_one(db, q.COUNT_DUPLICATE, params)["id"])
                event_ids.append(event_id)
                db.execute(q.LINK, (event_id, delivery_id))
        results.append(RecordResult(delivery_id, event_ids, new, len(event_ids) - new))
    return results
