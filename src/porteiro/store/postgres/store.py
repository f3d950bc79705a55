"""The PostgreSQL store: psycopg 3 async with a connection pool.

Many receivers and workers share one database. Claims use `FOR UPDATE SKIP LOCKED` with a
lease; every write made under a claim is fenced by its token. Idle workers LISTEN on
`porteiro_events` and fall back to polling. An outage surfaces fast as StoreUnavailable:
a request waits at most `acquire_timeout` (0.5 s) for a pooled connection, and opening
never waits for the server.

Events of one payment are serialised by a transaction-level advisory lock on the hash of
(source, object_id), taken before the payment row is read: a new payment has no row to
lock yet, and the lock makes "read, decide, write" atomic without retry loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, RowMaker, dict_row, no_result, tuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from porteiro import jsontext
from porteiro.errors import ConfigError, StoreUnavailable
from porteiro.model import EventStatus, InboundRequest, ParsedEvent, StoredEvent
from porteiro.store import rows
from porteiro.store.base import Application, Applied, RecordResult, Store
from porteiro.store.group_commit import GroupCommit
from porteiro.store.migrations import load_migrations
from porteiro.store.outbox import OutboxRow
from porteiro.store.port import Params
from porteiro.store.postgres import apply as pg_apply
from porteiro.store.postgres import batch as pg_batch
from porteiro.store.postgres import commit_probe as pg_commit_probe
from porteiro.store.postgres import queries as q
from porteiro.store.postgres.outbox import CLAIM_OUTBOX, insert_outbox_pg
from porteiro.store.postgres.port import PgPort

Connection = AsyncConnection[DictRow]
BATCH_TIMEOUT_SECONDS = 5.0
# URL query parameters read by Porteiro, not passed to libpq.
_OPTIONS = {"quarantine_limit", "batch_max", "batch_linger_ms", "batch_concurrency"}


class PostgresStore(Store):
    def __init__(
        self,
        conninfo: str,
        *,
        quarantine_limit: int = 10_000,
        max_size: int = 10,
        acquire_timeout: float = 0.5,
        connect_timeout: int = 1,
        reconnect_timeout: float = 5.0,
        batch_max: int = 256,
        batch_linger_seconds: float = 0.0,
        batch_concurrency: int | None = None,
    ) -> None:
        """`batch_concurrency`: ingest batches in flight at once; None (`auto`) lets the
        commit probe choose 1 or 2 once connected (pg_commit_probe)."""
        too_few = batch_concurrency is not None and batch_concurrency < 1
        if batch_max < 1 or too_few or batch_linger_seconds < 0:
            raise ValueError("batch_max and batch_concurrency must be at least 1")
        self.conninfo = conninfo
        self.quarantine_limit = quarantine_limit
        self._max_size = max_size
        self._acquire_timeout = acquire_timeout
        self._connect_timeout = connect_timeout
        self._reconnect_timeout = reconnect_timeout
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._listener: Connection | None = None
        self._listener_lock = asyncio.Lock()
        self._batch_max = batch_max
        self._batch_linger = batch_linger_seconds
        self._batch_concurrency = batch_concurrency
        self._ingest: GroupCommit[pg_batch.Ingest, RecordResult] | None = None
        self._probe: asyncio.Task[float | None] | None = None
        self._port = PgPort(self._connection)

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """`postgresql://...[?quarantine_limit=N&batch_max=N&batch_linger_ms=X
        &batch_concurrency=N|auto]`; other parameters go to libpq."""
        parts = urlsplit(url)
        params = parse_qsl(parts.query, keep_blank_values=True)
        ours = {key: value for key, value in params if key in _OPTIONS}
        if not ours:
            return cls(url)
        if ours.get("batch_concurrency") == "auto":  # the default, said out loud
            del ours["batch_concurrency"]
        try:
            options = {key: float(value) for key, value in ours.items()}
        except ValueError as exc:
            raise ConfigError(f"PostgreSQL URL options must be numbers: {exc}") from None
        integral = {"quarantine_limit", "batch_max", "batch_concurrency"}
        if any(
            value < 0 or (key in integral and not value.is_integer())
            for key, value in options.items()
        ):
            raise ConfigError(f"invalid PostgreSQL URL options: {ours}")
        # libpq decodes %XX but not "+": re-encode spaces as %20.
        kept = urlencode([(k, v) for k, v in params if k not in _OPTIONS], quote_via=quote)
        conninfo = urlunsplit(parts._replace(query=kept))
        try:
            return cls(
                conninfo,
                quarantine_limit=int(options.get("quarantine_limit", 10_000)),
                batch_max=int(options.get("batch_max", 256)),
                batch_linger_seconds=options.get("batch_linger_ms", 0.0) / 1000,
                batch_concurrency=(
                    int(options["batch_concurrency"]) if "batch_concurrency" in options else None
                ),
            )
        except ValueError as exc:
            raise ConfigError(f"invalid PostgreSQL URL options: {exc}") from exc

    # -- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            self.conninfo,
            connection_class=AsyncConnection[DictRow],
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": self._connect_timeout,
                **_utc_session(self.conninfo),
            },
            configure=_configure,
            min_size=1,
            max_size=self._max_size,
            timeout=self._acquire_timeout,
            # The pool's reconnection backs off exponentially (1, 2, 4... s) until this
            # gives up; the next request then starts a fresh attempt at once. Kept short
            # so the store is back within seconds of the server, however long the outage.
            reconnect_timeout=self._reconnect_timeout,
            open=False,
            name="porteiro",
        )
        # wait=False: the process starts during an outage; requests get 503 until it ends.
        await pool.open(wait=False)
        self._pool = pool
        fixed = self._batch_concurrency
        self._ingest = GroupCommit(
            self._commit_ingests,
            max_batch=self._batch_max,
            linger_seconds=self._batch_linger,
            concurrency=fixed or pg_commit_probe.MOST_IN_FLIGHT,
            active=fixed or 1,
        )
        if fixed is None:
            self._probe = asyncio.create_task(
                pg_commit_probe.tune(self._connection, self._ingest.activate),
                name="porteiro:commit-probe",
            )

    @property
    def commit_wait_seconds(self) -> float | None:
        """What the commit probe measured (None: fixed concurrency, or not yet)."""
        probe = self._probe
        return probe.result() if probe is not None and probe.done() else None

    @property
    def batches_in_flight(self) -> int | None:
        """Ingest batches in flight at most, as configured or chosen (None: not open)."""
        return None if self._ingest is None else self._ingest.active

    async def close(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
        ingest, self._ingest = self._ingest, None
        if ingest is not None:
            await ingest.close()
        await self._drop_listener()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A pooled connection; driver failures meaning "the database is not there right
        now" become StoreUnavailable, constraint and programming errors stay bugs."""
        if self._pool is None:
            raise StoreUnavailable("PostgreSQL store is not open")
        try:
            async with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise StoreUnavailable(f"PostgreSQL unavailable: {exc}") from exc

    async def upgrade(self) -> Sequence[str]:
        applied: list[str] = []
        async with self._connection() as conn:
            # Session lock: a second process upgrading at once waits, then finds nothing.
            await conn.execute(q.LOCK_MIGRATIONS, (q.MIGRATION_LOCK,))
            try:
                await conn.execute(q.BOOTSTRAP)
                cursor = await conn.execute(q.APPLIED_VERSIONS)
                done = {row["version"] for row in await cursor.fetchall()}
                for migration in load_migrations("postgres"):
                    if migration.version in done:
                        continue
                    async with conn.transaction():
                        await conn.execute(migration.sql.encode())
                        await conn.execute(q.MARK_APPLIED, (migration.version,))
                    applied.append(migration.version)
            finally:
                await conn.execute(q.UNLOCK_MIGRATIONS, (q.MIGRATION_LOCK,))
        return applied

    async def schema_versions(self) -> frozenset[str]:
        async with self._connection() as conn:
            try:
                cursor = await conn.execute(q.APPLIED_VERSIONS)
            except psycopg.errors.UndefinedTable:
                # Never migrated: version 0, not an error. One round trip while the
                # table is there (autocommit: the failed statement leaves no aborted
                # transaction on the pooled connection).
                return frozenset()
            return frozenset(row["version"] for row in await cursor.fetchall())

    async def ping(self) -> None:
        async with self._connection() as conn:
            await conn.execute(q.PING)

    # -- ingest --------------------------------------------------------------------------

    def _ingest_item(
        self, request: InboundRequest, events: Sequence[ParsedEvent], parse_error: str | None
    ) -> pg_batch.Ingest:
        return pg_batch.ingest(request, events, parse_error)

    async def _commit_ingests(self, items: Sequence[pg_batch.Ingest]) -> Sequence[RecordResult]:
        """A batch in ONE statement, so ONE implicit transaction and round trip."""
        batch = pg_batch.IngestBatch(items)
        try:
            # Bounded like a request was: a batch stuck on a lock must not stall ingest
            # forever (its callers have long given up; the retries come in new batches).
            async with asyncio.timeout(BATCH_TIMEOUT_SECONDS), self._connection() as conn:
                cursor = conn.cursor(row_factory=tuple_row)  # no dict per row: hot path
                await cursor.execute(pg_batch.RECORD_BATCH, batch.params)
                found = await cursor.fetchall()
        except TimeoutError as exc:
            raise StoreUnavailable("PostgreSQL: the batch did not commit in time") from exc
        return batch.results(found)

    # -- work queue ----------------------------------------------------------------------

    async def _claim_events(self, params: dict[str, Any]) -> Sequence[StoredEvent]:
        async with self._connection() as conn:
            cursor = conn.cursor(row_factory=_claimed_event)
            await cursor.execute(q.CLAIM, params)
            return await cursor.fetchall()

    async def wait_for_work(self, timeout: float) -> None:  # noqa: ASYNC109 (protocol)
        deadline = time.monotonic() + timeout
        try:
            listener = await self._listen()
            notifies = listener.notifies(timeout=max(timeout, 0.0), stop_after=1)
            async with contextlib.aclosing(notifies):
                async for _ in notifies:
                    pass  # stop_after=1: ends on the first notification or the timeout
            return
        except psycopg.Error:
            # Outage or a broken listener: degrade to polling, reconnect next time.
            await self._drop_listener()
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)

    async def _listen(self) -> Connection:
        async with self._listener_lock:
            if self._listener is None or self._listener.closed:
                listener = await AsyncConnection.connect(
                    self.conninfo,
                    autocommit=True,
                    row_factory=dict_row,
                    connect_timeout=self._connect_timeout,
                )
                try:
                    await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(q.CHANNEL)))
                except BaseException:
                    # Failed, or cancelled (a worker told to stop while it connected):
                    # nothing else holds this connection to close it.
                    await listener.close()
                    raise
                self._listener = listener
            return self._listener

    async def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(psycopg.Error):
                await listener.close()

    async def _apply_many(self, batch: Sequence[Application], now: datetime) -> Sequence[Applied]:
        async with self._connection() as conn:
            return await pg_apply.apply_many(conn, batch, now)

    # -- outbox (the others: store/outbox.py) --------------------------------------------

    async def enqueue_outbox(self, rows: Sequence[OutboxRow], now: datetime) -> int:
        if not rows:
            return 0
        async with self._connection() as conn:
            return await insert_outbox_pg(conn, rows, now)

    async def _claim_outbox_rows(self, params: Params) -> Sequence[DictRow]:
        return await self._fetch(CLAIM_OUTBOX, params)

    # -- reads (the others: read_verbs) -------------------------------------------------

    async def status_counts(self, statuses: Sequence[EventStatus] | None = None) -> dict[str, int]:
        if statuses is None:
            found = await self._fetch(q.STATUS_COUNTS, ())
        else:
            found = await self._fetch(q.STATUS_COUNTS_OF, ([s.value for s in statuses],))
        return rows.status_counts(found, statuses)

    async def _fetch(
        self, query: str | sql.Composed, params: Sequence[Any] | dict[str, Any]
    ) -> list[DictRow]:
        async with self._connection() as conn:
            cursor = await conn.execute(query, params)
            return await cursor.fetchall()


def _utc_session(conninfo: str) -> dict[str, str]:
    """Times come back in UTC, as Porteiro uses them: otherwise psycopg builds zoned
    datetimes (even for Etc/UTC) that every read converts back, a few per claimed event.
    Left alone when the URL sets its own `options`."""
    if "options" in conninfo_to_dict(conninfo):
        return {}
    return {"options": "-c TimeZone=UTC"}


async def _configure(conn: Connection) -> None:
    # json/jsonb columns (a claimed event's data, headers) read by orjson where it agrees
    # with `json`, the default: about twice as fast, and a worker reads one per event.
    set_json_loads(jsontext.loads, conn)


def _claimed_event(cursor: AsyncCursor[Any]) -> RowMaker[StoredEvent]:
    """Row factory: a claimed row straight into its event, with no dict per row."""
    if cursor.description is None:
        return no_result
    names = [column.name for column in cursor.description]
    pick = itemgetter(*(names.index(name) for name in rows.EVENT_COLUMNS))
    return lambda values: rows.event_from_values(pick(values))
