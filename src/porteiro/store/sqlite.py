"""The embedded store: one SQLite file, one connection, one writer.

SQLite allows a single writer anyway, so every transaction runs under one asyncio.Lock on
one aiosqlite connection, opened with `BEGIN IMMEDIATE` so a competing process fails fast
(busy_timeout) instead of deadlocking on a lock upgrade. WAL with synchronous=FULL:
NORMAL would be faster but can lose acknowledged commits on power loss, and a 2xx to a
gateway is a promise that the delivery is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote

import aiosqlite

from porteiro.errors import ConfigError, StoreUnavailable
from porteiro.model import (
    EventStatus,
    InboundRequest,
    Kind,
    ParsedEvent,
    Payment,
    QuarantinedRequest,
    StoredDelivery,
    StoredEvent,
    Transition,
)
from porteiro.store import rows
from porteiro.store import sqlite_sql as q
from porteiro.store.base import (
    UNPARSEABLE_TYPE,
    Claim,
    Decide,
    EventFilter,
    Page,
    RecordResult,
    unparseable_dedup_key,
)
from porteiro.store.migrations import load_migrations

_PREFIX = "sqlite:///"


class SqliteStore:
    def __init__(
        self,
        path: str,
        *,
        busy_timeout_seconds: float = 0.5,
        quarantine_limit: int = 10_000,
    ) -> None:
        if quarantine_limit < 1:
            raise ValueError("quarantine_limit must be at least 1")
        self.path = path
        self.busy_timeout_seconds = busy_timeout_seconds
        self.quarantine_limit = quarantine_limit
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._work = asyncio.Event()

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        """sqlite:///./relative.db, sqlite:////absolute.db or sqlite:///:memory:.

        Query parameters: `quarantine_limit` (rows kept) and `busy_timeout` (seconds).
        """
        if not url.startswith(_PREFIX):
            raise ConfigError(f"invalid SQLite URL {url!r}: use sqlite:///path/to/file.db")
        path, _, query = url[len(_PREFIX) :].partition("?")
        if not path:
            raise ConfigError(f"SQLite URL {url!r} names no file")
        options = {key: values[-1] for key, values in parse_qs(query).items()}
        unknown = set(options) - {"quarantine_limit", "busy_timeout"}
        if unknown:
            raise ConfigError(f"unknown SQLite URL option(s): {', '.join(sorted(unknown))}")
        try:
            return cls(
                unquote(path),
                busy_timeout_seconds=float(options.get("busy_timeout", 0.5)),
                quarantine_limit=int(options.get("quarantine_limit", 10_000)),
            )
        except ValueError as exc:
            raise ConfigError(f"invalid SQLite URL {url!r}: {exc}") from exc

    # -- connection and transactions -------------------------------------------------------

    async def open(self) -> None:
        if self._db is not None:
            return
        with _unavailable():
            pending = aiosqlite.connect(
                self.path, timeout=self.busy_timeout_seconds, isolation_level=None
            )
            try:
                db = await pending
            except BaseException:
                # aiosqlite stops its thread on a failed connect without waiting for it;
                # wait, so the thread never calls back into an event loop already closed.
                thread = getattr(pending, "_thread", None)
                if thread is not None and thread.is_alive():
                    await asyncio.to_thread(thread.join, 2.0)
                raise
            try:
                db.row_factory = sqlite3.Row
                await db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
                await db.execute("PRAGMA journal_mode = WAL")
                await db.execute("PRAGMA synchronous = FULL")
                await db.execute("PRAGMA foreign_keys = ON")
            except BaseException:
                await db.close()
                raise
        self._db = db

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            async with self._lock:
                await db.close()

    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreUnavailable("the SQLite store is not open")
        return self._db

    @contextlib.asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            with _unavailable():
                yield self._conn()

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One IMMEDIATE transaction: committed on success, rolled back on any error."""
        async with self._lock:
            db = self._conn()
            with _unavailable():
                await db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    await db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            await db.execute("ROLLBACK")
                    raise

    async def upgrade(self) -> Sequence[str]:
        applied_now: list[str] = []
        for migration in load_migrations("sqlite"):
            async with self._write() as db:
                await db.execute(q.BOOTSTRAP)
                done = {row[0] for row in await db.execute_fetchall(q.APPLIED_VERSIONS)}
                if migration.version in done:
                    continue
                for statement in q.statements(migration.sql):
                    await db.execute(statement)
                await db.execute(q.MARK_APPLIED, (migration.version, _now()))
            applied_now.append(migration.version)
        return applied_now

    async def pragma(self, name: str) -> object:
        """One PRAGMA value of the store's own connection (diagnostics and tests)."""
        if not name.isidentifier():
            raise ValueError(f"invalid pragma name {name!r}")
        async with self._read() as db:
            found = list(await db.execute_fetchall(f"PRAGMA {name}"))
        return found[0][0] if found else None

    async def ping(self) -> None:
        async with self._read() as db:
            await db.execute_fetchall("SELECT 1")

    # -- ingest --------------------------------------------------------------------------

    async def record_delivery(
        self,
        request: InboundRequest,
        events: Sequence[ParsedEvent],
        *,
        parse_error: str | None = None,
    ) -> RecordResult:
        received = rows.encode_time(request.received_at)
        async with self._write() as db:
            cursor = await db.execute(
                q.INSERT_DELIVERY,
                (
                    request.source,
                    received,
                    request.method,
                    request.path,
                    request.query,
                    rows.dump_headers(request.headers),
                    request.body,
                    request.peer,
                    request.client_cert_subject,
                    parse_error,
                ),
            )
            delivery_id = _lastrowid(cursor)
            if parse_error is not None:
                events = [_placeholder(delivery_id)]
            event_ids: list[int] = []
            new = 0
            for event in events:
                params = _event_params(event, request.source, delivery_id, received)
                if parse_error is not None:
                    params.update(status=EventStatus.DEAD.value, next_attempt_at=None)
                    params["last_error"] = parse_error
                row = await _fetch_one(db, q.UPSERT_EVENT, params)
                event_ids.append(int(row["id"]))
                new += int(row["duplicates"] == 0)
                await db.execute(q.LINK, (row["id"], delivery_id))
        self._work.set()
        return RecordResult(delivery_id, event_ids, new, len(event_ids) - new)

    async def quarantine(self, request: InboundRequest, reason: str, detail: str | None) -> None:
        async with self._write() as db:
            await db.execute(
                q.INSERT_QUARANTINE,
                (
                    request.source,
                    rows.encode_time(request.received_at),
                    reason,
                    detail,
                    rows.dump_headers(request.headers),
                    request.body[: rows.QUARANTINE_BODY_LIMIT],
                    request.peer,
                ),
            )
            await db.execute(q.TRIM_QUARANTINE, (self.quarantine_limit,))

    # -- work queue ----------------------------------------------------------------------

    async def claim(
        self, worker_id: str, limit: int, lease: timedelta, now: datetime
    ) -> Sequence[Claim]:
        if limit < 1:
            return []
        token = uuid.uuid4().hex
        lease_until = now + lease
        params = {
            "token": token,
            "worker": worker_id,
            "lease_until": rows.encode_time(lease_until),
            "now": rows.encode_time(now),
            "limit": limit,
        }
        async with self._write() as db:
            claimed = await db.execute_fetchall(q.CLAIM, params)
        events = sorted(
            (rows.event_from_row(row) for row in claimed),
            key=lambda event: (event.next_attempt_at or lease_until, event.id),
        )
        return [Claim(event, token, lease_until.astimezone(UTC)) for event in events]

    async def wait_for_work(self, timeout: float) -> None:  # noqa: ASYNC109 (protocol)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._work.wait(), timeout)
        self._work.clear()

    async def apply(self, claim: Claim, event: ParsedEvent, decide: Decide, now: datetime) -> bool:
        if event.object_id is None:
            raise ValueError(f"event {claim.event.id} has no object_id: nothing to apply")
        key = (claim.event.source, event.object_id)
        stamp = rows.encode_time(now)
        async with self._write() as db:
            params = _event_params(event, claim.event.source, 0, stamp)
            params.update(id=claim.event.id, token=claim.token)
            if (await db.execute(q.APPLY_EVENT, params)).rowcount == 0:
                return False
            current = await db.execute_fetchall(q.GET_PAYMENT, key)
            before = rows.payment_from_row(next(iter(current))) if current else None
            outcome = decide(before)
            payment, transition = outcome.payment, outcome.transition
            if (payment.source, payment.object_id) != key:
                raise ValueError(f"decide returned payment {payment.object_id!r} for {key!r}")
            await db.execute(q.UPSERT_PAYMENT, _payment_params(payment, stamp))
            await db.execute(
                q.INSERT_TRANSITION,
                (
                    *key,
                    transition.event_id,
                    transition.from_state,
                    transition.to_state,
                    transition.verdict,
                    transition.note,
                    rows.encode_time(transition.at),
                ),
            )
        return True

    async def ignore(self, claim: Claim, reason: str, now: datetime) -> bool:
        return await self._settle(claim, EventStatus.IGNORED, reason, None, now)

    async def retry_later(self, claim: Claim, error: str, at: datetime, now: datetime) -> bool:
        return await self._settle(claim, EventStatus.RETRYING, error, at, now)

    async def dead_letter(self, claim: Claim, error: str, now: datetime) -> bool:
        return await self._settle(claim, EventStatus.DEAD, error, None, now)

    async def _settle(
        self, claim: Claim, status: EventStatus, error: str, at: datetime | None, now: datetime
    ) -> bool:
        params = {
            "status": status.value,
            "error": error,
            "at": rows.encode_optional_time(at),
            "now": rows.encode_time(now),
            "id": claim.event.id,
            "token": claim.token,
        }
        async with self._write() as db:
            cursor = await db.execute(q.SETTLE, params)
        return cursor.rowcount > 0

    # -- replay --------------------------------------------------------------------------

    async def requeue(self, event_ids: Sequence[int], now: datetime) -> int:
        ids = sorted(set(event_ids))
        if not ids:
            return 0
        stamp = rows.encode_time(now)
        sql = q.REQUEUE.format(ids=", ".join("?" * len(ids)))
        async with self._write() as db:
            cursor = await db.execute(sql, (stamp, stamp, *ids))
        self._work.set()
        return cursor.rowcount

    async def reparsed(
        self, delivery_id: int, events: Sequence[ParsedEvent], now: datetime
    ) -> Sequence[int]:
        stamp = rows.encode_time(now)
        async with self._write() as db:
            found = await db.execute_fetchall(q.GET_DELIVERY, (delivery_id,))
            if not found:
                raise LookupError(f"no delivery {delivery_id}")
            delivery = rows.delivery_from_row(next(iter(found)))
            received = rows.encode_time(delivery.received_at)
            event_ids: list[int] = []
            for event in events:
                params = _event_params(event, delivery.source, delivery_id, stamp)
                params["received_at"] = received
                row = await _fetch_one(db, q.UPSERT_REPARSED, params)
                event_ids.append(int(row["id"]))
                await db.execute(q.LINK, (row["id"], delivery_id))
            await db.execute(q.CLEAR_PARSE_ERROR, (delivery_id,))
            placeholder = unparseable_dedup_key(delivery_id)
            await db.execute(q.SETTLE_PLACEHOLDER, (stamp, delivery.source, placeholder))
        self._work.set()
        return event_ids

    # -- reads ---------------------------------------------------------------------------

    async def list_events(
        self, filter: EventFilter, cursor: str | None, limit: int
    ) -> Page[StoredEvent]:
        where, params = q.event_filter(filter)
        before = rows.parse_cursor(cursor)
        if before is not None:
            where += " AND id < ?"
            params.append(before)
        async with self._read() as db:
            found = await db.execute_fetchall(
                q.LIST_EVENTS.format(where=where), (*params, max(limit, 0) + 1)
            )
        items = [rows.event_from_row(row) for row in found]
        if len(items) > limit:
            items = items[:limit]
            return Page(items, str(items[-1].id) if items else None)
        return Page(items, None)

    async def get_event(self, event_id: int) -> StoredEvent | None:
        async with self._read() as db:
            found = await db.execute_fetchall(q.GET_EVENT, (event_id,))
        return rows.event_from_row(next(iter(found))) if found else None

    async def event_deliveries(self, event_id: int) -> Sequence[StoredDelivery]:
        async with self._read() as db:
            found = await db.execute_fetchall(q.EVENT_DELIVERIES, (event_id,))
        return [rows.delivery_from_row(row) for row in found]

    async def get_delivery(self, delivery_id: int) -> StoredDelivery | None:
        async with self._read() as db:
            found = await db.execute_fetchall(q.GET_DELIVERY, (delivery_id,))
        return rows.delivery_from_row(next(iter(found))) if found else None

    async def event_delivery_ids(self, filter: EventFilter) -> Sequence[int]:
        where, params = q.event_filter(filter, table="events.")
        async with self._read() as db:
            found = await db.execute_fetchall(q.EVENT_DELIVERY_IDS.format(where=where), params)
        return [int(row[0]) for row in found]

    async def get_payment(self, source: str, object_id: str) -> Payment | None:
        async with self._read() as db:
            found = await db.execute_fetchall(q.GET_PAYMENT, (source, object_id))
        return rows.payment_from_row(next(iter(found))) if found else None

    async def payment_history(self, source: str, object_id: str) -> Sequence[Transition]:
        async with self._read() as db:
            found = await db.execute_fetchall(q.PAYMENT_HISTORY, (source, object_id))
        return [rows.transition_from_row(row) for row in found]

    async def list_quarantine(self, limit: int) -> Sequence[QuarantinedRequest]:
        async with self._read() as db:
            found = await db.execute_fetchall(q.LIST_QUARANTINE, (max(limit, 0),))
        return [rows.quarantined_from_row(row) for row in found]

    async def status_counts(self) -> dict[str, int]:
        async with self._read() as db:
            found = await db.execute_fetchall(q.STATUS_COUNTS)
        counts = {status.value: 0 for status in EventStatus}
        counts.update({row["status"]: int(row["n"]) for row in found})
        return counts


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


def _now() -> str:
    return rows.encode_time(datetime.now(UTC))


def _lastrowid(cursor: aiosqlite.Cursor) -> int:
    if cursor.lastrowid is None:
        raise StoreUnavailable("SQLite returned no row id")
    return cursor.lastrowid


async def _fetch_one(db: aiosqlite.Connection, sql: str, params: dict[str, Any]) -> sqlite3.Row:
    async with db.execute(sql, params) as cursor:
        row = await cursor.fetchone()
    if row is None:
        raise StoreUnavailable("SQLite returned no row")
    return row


def _placeholder(delivery_id: int) -> ParsedEvent:
    return ParsedEvent(
        dedup_key=unparseable_dedup_key(delivery_id),
        kind=Kind.OTHER,
        type=UNPARSEABLE_TYPE,
        object_id=None,
    )


def _event_params(event: ParsedEvent, source: str, delivery_id: int, now: str) -> dict[str, Any]:
    status = rows.initial_status(event)
    return {
        "source": source,
        "dedup_key": event.dedup_key,
        "kind": Kind(event.kind).value,
        "type": event.type,
        "object_id": event.object_id,
        "reference": event.reference,
        "amount": event.amount,
        "currency": event.currency,
        "occurred_at": rows.encode_optional_time(event.occurred_at),
        "refunded_total": event.refunded_total,
        "thin": int(event.thin),
        "data": rows.dump_json(dict(event.data)),
        "status": status.value,
        "next_attempt_at": now if status is EventStatus.PENDING else None,
        "last_error": None,
        "delivery_id": delivery_id,
        "now": now,
        "placeholder": UNPARSEABLE_TYPE,
    }


def _payment_params(payment: Payment, now: str) -> dict[str, Any]:
    return {
        "source": payment.source,
        "object_id": payment.object_id,
        "state": payment.state.value,
        "amount": payment.amount,
        "currency": payment.currency,
        "refunded_amount": payment.refunded_amount,
        "reference": payment.reference,
        "version": payment.version,
        "last_event_at": rows.encode_optional_time(payment.last_event_at),
        "facts": rows.dump_json(dict(payment.facts)),
        "anomalies": payment.anomalies,
        "now": now,
    }
