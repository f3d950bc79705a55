"""PostgreSQL batch apply: a claimed batch in one transaction (two when another worker's
batch holds some of its payments) of two round trips each.

Round trip 1 (pipelined): BEGIN; the transaction's time limits (below); check every claim
(token and status, without locking the event row); take the payments' advisory locks
without waiting (pg_try_advisory_xact_lock); read and lock the rows of the payments taken.
Then the ledger runs in Python, event after event, each seeing the payment as the previous
one left it. Round trip 2: ONE statement upserts the payments' final states, inserts the
transitions in application order and marks the applied events done (rewriting the parsed
fields of those enriched since stored), sent with its COMMIT in one message.

Why the events' rows are locked only in that last message: a duplicate delivery of an
event updates its row (`duplicates + 1`) in the receivers' ingest statement, so a lock the
worker held across its own round trips (a GC pause, SIGSTOP, a frozen VM between them)
stalled ingest behind the worker. Sent with its COMMIT, the statement leaves nothing for
the server to wait on the worker for. It fails as a whole if any claim was lost since
round trip 1 (`CLAIMS_LOST`): the pass is then done again without it.

Time limits, from the batch's lease (`SET LOCAL`): idle in transaction, a statement and a
lock wait each end the transaction once the lease is gone, so a frozen worker's payment
locks are released by PostgreSQL itself, by the time another worker may take its events
over. Round trip 1 ends with a Sync: the server sees the session idle in transaction
(and applies the idle limit) rather than inside a pipeline it cannot time.

The events of payments another worker's batch holds wait for a second transaction, after
the first commits, which takes their locks waiting, in (source, object_id) order (so two
workers' batches never deadlock), but only briefly (`HELD_WAIT_SECONDS`): past it, those
events are handed back unattempted (`PaymentBusy`), due again a moment later, rather than
queue behind a worker that may be frozen.

An event whose `decide` raises is left out of the writes (no savepoint needed: the ledger
is pure and writes nothing itself), so it stays `processing` under its claim for the
worker to schedule a retry. Parameters are JSON documents read with `json_to_recordset`,
encoded by orjson (as in pg_batch): one parameter per statement, not one per row.

Effects of an applied event: its outbox rows are inserted before round trip 2 (one
statement for the batch, one more round trip), committed with the done marks. Merchant
handlers run right after the event's `decide`, on this connection, each event's in a
SAVEPOINT: one that raises rolls back to it and its event is left out of the writes like
a failed `decide`. Handlers cost extra round trips, but only for events whose kind has
handlers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import fields
from datetime import datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, Final

import orjson
import psycopg
from psycopg import AsyncClientCursor, AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from porteiro.errors import PaymentBusy
from porteiro.model import ParsedEvent, Payment, Transition
from porteiro.store import rows
from porteiro.store.apply import Params, Result
from porteiro.store.postgres.apply_sql import (
    BEGIN,
    CLAIMS_LOST,
    FENCE,
    LIMITS,
    PAYMENTS,
    PAYMENTS_TAKEN,
    RELEASE,
    WRITE_AND_COMMIT,
)
from porteiro.store.postgres.apply_sql import (
    LOCK as LOCK,  # tests take the payment locks as apply does
)
from porteiro.store.postgres.apply_sql import (
    TRY_LOCK as TRY_LOCK,
)
from porteiro.store.postgres.outbox import insert_outbox_pg
from porteiro.store.records import Application, Applied

if TYPE_CHECKING:
    from porteiro.store.outbox import OutboxRow

# How long the second pass waits for the payments another batch holds: another worker's
# batch commits within milliseconds; one frozen holds them until PostgreSQL ends its
# transaction, which nobody should queue behind.
HELD_WAIT_SECONDS: Final = 0.5
# When events handed back that way are due again.
HELD_RETRY_SECONDS: Final = 1.0
# The least time a transaction gets, even for claims whose lease has (nearly) run out.
MIN_BUDGET_SECONDS: Final = 1.0

Key = tuple[str, str]
Connection = AsyncConnection[DictRow]

# Every stored field of a parsed event; a stored event has them all, under the same names
# (`error` is not one: an unreadable item is stored dead, never applied).
_parsed_fields = attrgetter(*(field.name for field in fields(ParsedEvent) if field.name != "error"))


class PgExecutor:
    """`ctx.execute` on the batch's connection, inside the event's savepoint."""

    dialect = "postgresql"

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Params = ()) -> Result:
        # A nested pipeline block syncs on exit: the row count is known after it.
        async with self._conn.pipeline():
            cursor = await self._conn.execute(sql, params)
        found = await cursor.fetchall() if cursor.description else []
        return Result(cursor.rowcount, [dict(row) for row in found])


async def apply_many(
    conn: Connection, batch: Sequence[Application], now: datetime
) -> list[Applied]:
    """Two workers' batches often share a payment (its events straddle the claims): the
    first pass applies the events of the payments free now, without waiting; the events
    of the payments another batch holds follow in a second transaction, which waits for
    them a moment (then hands them back: PaymentBusy). Without the split the second batch
    waited, whole, for the first one's commit. The second pass failing (but for an
    outage) fails its events, not the committed ones."""
    results: list[Applied | None] = [None] * len(batch)
    for index, item in enumerate(batch):
        if item.event.object_id is None:
            message = f"event {item.claim.event.id} has no object_id: nothing to apply"
            results[index] = ValueError(message)
    pending = [index for index, result in enumerate(results) if result is None]
    waiting = await _fenced_pass(conn, batch, pending, results, now, wait=False)
    if waiting:
        try:
            await _fenced_pass(conn, batch, waiting, results, now, wait=True)
        except psycopg.errors.LockNotAvailable:
            await _release(conn, batch, waiting, now)
            busy = PaymentBusy("another worker holds the payment; handed back for later")
            for index in waiting:
                results[index] = busy
        except psycopg.OperationalError:
            raise
        except Exception as exc:
            for index in waiting:
                results[index] = exc
    return [False if result is None else result for result in results]


async def _fenced_pass(
    conn: Connection,
    batch: Sequence[Application],
    indexes: Sequence[int],
    results: list[Applied | None],
    now: datetime,
    *,
    wait: bool,
) -> list[int]:
    """`_apply_pass`, done again (once) when a claim was lost between its round trips:
    the check of round trip 1 then leaves the lost one out."""
    try:
        return await _apply_pass(conn, batch, indexes, results, now, wait=wait)
    except psycopg.errors.InvalidTextRepresentation as exc:
        if CLAIMS_LOST not in str(exc):
            raise
        for index in indexes:
            results[index] = None
        return await _apply_pass(conn, batch, indexes, results, now, wait=wait)


async def _apply_pass(
    conn: Connection,
    batch: Sequence[Application],
    indexes: Sequence[int],
    results: list[Applied | None],
    now: datetime,
    *,
    wait: bool,
) -> list[int]:
    """One transaction over the events at `indexes`; returns the indexes of those left
    for later (their payment's lock was busy: only when not `wait`)."""
    keys: dict[Key, None] = {}
    claims = []
    for index in indexes:
        item = batch[index]
        keys[(item.claim.event.source, item.event.object_id or "")] = None
        claims.append({"id": item.claim.event.id, "token": item.claim.token})
    if not claims:
        return []
    ordered = sorted(keys)
    key_doc = orjson.dumps(
        [{"n": n, "source": s, "object_id": o} for n, (s, o) in enumerate(ordered)]
    ).decode()
    budget = _budget(batch, indexes, now)
    limits = {
        "budget": str(budget),
        "lock": str(min(budget, int(HELD_WAIT_SECONDS * 1000)) if wait else budget),
    }
    async with _transaction(conn):
        async with conn.pipeline() as pipeline:
            await conn.execute(BEGIN)
            await conn.execute(LIMITS, limits)
            fenced_rows = await conn.execute(FENCE, {"claims": orjson.dumps(claims).decode()})
            locked = await conn.execute(LOCK if wait else TRY_LOCK, {"keys": key_doc})
            # Never a cached generic plan: one made while `payments` was new and small
            # keeps scanning the whole table until autovacuum's first ANALYZE (a minute
            # or more of every batch reading every payment on a fresh database).
            found = await conn.execute(
                PAYMENTS if wait else PAYMENTS_TAKEN, {"keys": key_doc}, prepare=False
            )
            # A Sync, not the flush a fetch sends: the server then counts the session
            # idle in transaction while the ledger runs, under the idle limit.
            await pipeline.sync()
            fenced = {row["id"] for row in await fenced_rows.fetchall()}
            busy = set() if wait else {ordered[row["n"]] for row in await locked.fetchall()}
            waiting = [
                index
                for index in indexes
                if (batch[index].claim.event.source, batch[index].event.object_id or "") in busy
            ]
            current = {
                (row["source"], row["object_id"]): rows.payment_from_row(row)
                for row in await found.fetchall()
            }
            writes = await _decide_all(conn, batch, indexes, results, fenced, current, busy)
            await insert_outbox_pg(conn, writes.outbox, now)
        await _commit(conn, writes, now)
    return waiting


def _budget(batch: Sequence[Application], indexes: Sequence[int], now: datetime) -> int:
    """Milliseconds the transaction may last: until the first of its leases ends."""
    ends = min(batch[index].claim.lease_until for index in indexes)
    left = max((ends - now).total_seconds(), MIN_BUDGET_SECONDS)
    return int(left * 1000)


@contextlib.asynccontextmanager
async def _transaction(conn: Connection) -> AsyncIterator[None]:
    """BEGIN and COMMIT are sent by hand (COMMIT rides with the last statement); this
    rolls back whatever is left open by an error or a cancellation."""
    try:
        yield
    except BaseException:
        if conn.info.transaction_status != TransactionStatus.IDLE and not conn.closed:
            with contextlib.suppress(psycopg.Error):
                await conn.execute(b"ROLLBACK")
        raise


async def _commit(conn: Connection, writes: _Writes, now: datetime) -> None:
    """Round trip 2: the writes and COMMIT as one message (the simple query protocol, its
    parameters bound client-side), so the server never holds the events' rows waiting on
    this process between them."""
    if not writes.transitions:
        await conn.execute(b"COMMIT")  # nothing applied: ends the locks' transaction
        return
    params = {
        "payments": _array(list(writes.payments.values())),
        "transitions": _array(writes.transitions),
        "done": _array(writes.done),
        "enriched": _array(writes.enriched),
        "expected": len(writes.done) + len(writes.enriched),
        "now": now,
    }
    cursor = AsyncClientCursor(conn)
    await cursor.execute(WRITE_AND_COMMIT, params)


async def _release(
    conn: Connection, batch: Sequence[Application], indexes: Sequence[int], now: datetime
) -> None:
    claims = [{"id": batch[i].claim.event.id, "token": batch[i].claim.token} for i in indexes]
    at = now + timedelta(seconds=HELD_RETRY_SECONDS)
    await conn.execute(RELEASE, {"claims": orjson.dumps(claims).decode(), "at": at, "now": now})


class _Writes:
    def __init__(self) -> None:
        self.payments: dict[Key, bytes] = {}  # the final state of each, encoded
        self.transitions: list[bytes] = []  # one per applied event
        self.done: list[bytes] = []  # applied events as stored
        self.enriched: list[bytes] = []  # applied events enriched since stored
        self.outbox: list[OutboxRow] = []


async def _decide_all(
    conn: Connection,
    batch: Sequence[Application],
    indexes: Sequence[int],
    results: list[Applied | None],
    fenced: set[int],
    current: dict[Key, Payment],
    busy: set[Key],
) -> _Writes:
    """Run the ledger (and handlers) for each fenced event in batch order, but those of
    `busy` payments; fill `results` (None left for lost claims and busy payments) and
    return what to write."""
    writes = _Writes()
    for index in indexes:
        item = batch[index]
        if item.claim.event.id not in fenced:
            continue
        key = (item.claim.event.source, item.event.object_id or "")
        if key in busy:
            continue
        try:
            outcome = item.decide(current.get(key))
            payment = outcome.payment
            if (payment.source, payment.object_id) != key:
                raise ValueError(f"decide returned payment {payment.object_id!r} for {key!r}")
            transition = _transition_row(len(writes.transitions), payment, outcome.transition)
            as_stored = _as_stored(item)
            event = _claim_row(item) if as_stored else _event_row(item)
            encoded = _payment_row(payment)
            enqueue = [] if item.outbox is None else list(item.outbox(outcome))
            if item.handle is not None:
                async with conn.transaction():
                    await item.handle(outcome, PgExecutor(conn))
        except Exception as exc:
            results[index] = exc
            continue
        writes.outbox.extend(enqueue)
        current[key], writes.payments[key] = payment, encoded
        writes.transitions.append(transition)
        (writes.done if as_stored else writes.enriched).append(event)
        results[index] = True
    return writes


def _array(items: Sequence[bytes]) -> str:
    return (b"[" + b",".join(items) + b"]").decode()


def _transition_row(n: int, payment: Payment, transition: Transition) -> bytes:
    return rows.dump_held(
        {
            "n": n,
            "source": payment.source,
            "object_id": payment.object_id,
            "event_id": transition.event_id,
            "from_state": None if transition.from_state is None else transition.from_state.value,
            "to_state": transition.to_state.value,
            "verdict": transition.verdict.value,
            "note": transition.note,
            "at": transition.at,
        }
    )


def _as_stored(item: Application) -> bool:
    """Whether the event is still as stored (not enriched): rewriting its parsed fields
    would change nothing."""
    return _parsed_fields(item.event) == _parsed_fields(item.claim.event)


def _claim_row(item: Application) -> bytes:
    return rows.dump_held({"id": item.claim.event.id, "token": item.claim.token})


def _event_row(item: Application) -> bytes:
    """The event's parsed fields as enriched (WRITE's `enriched` part stores them)."""
    columns = rows.parsed_event_columns(item.event)
    return rows.dump_held({"id": item.claim.event.id, "token": item.claim.token, **columns})


def _payment_row(payment: Payment) -> bytes:
    return rows.dump_held(rows.payment_columns(payment))
