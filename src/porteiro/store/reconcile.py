"""The reconciler's storage verbs ("malha fina"), part of the Store (store/base.py).

Expected payments (registered by the outgoing client with their expiry), the stale
pending payments to ask the gateway about, synthetic events that enter the SAME inbox
and worker path as webhooks (origin `reconcile`, no delivery), and saved reports.
Written once for both stores over the connection port (store/port.py). Synthetic events
go in through an upsert with the ingest's conflict rules (a duplicate counts, and revives
a dead or retrying event but never the unparseable placeholder), with the origin and
without a delivery row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from porteiro.model import ParsedEvent, Payment, PaymentState
from porteiro.store import rows
from porteiro.store.dialect import Dialect, event_params
from porteiro.store.port import Params, Port
from porteiro.store.records import RecordResult

# Payment states the stale cycle asks the gateway about: nothing final happened yet.
OPEN_STATES: tuple[PaymentState, ...] = (PaymentState.PENDING, PaymentState.AUTHORIZED)
# record_synthetic's batches: bounded statements, one transaction each.
SYNTHETIC_BATCH = 500


@dataclass(frozen=True, slots=True)
class Expectation:
    """A payment Porteiro expects to hear about (created through porteiro.client)."""

    source: str
    object_id: str
    reference: str | None
    amount: int | None
    currency: str | None
    expires_at: datetime | None
    created_at: datetime
    origin: str = "client"


@dataclass(frozen=True, slots=True)
class StaleItem:
    """An open payment (or an expectation never heard of) due for a status read.

    `state` is None for an expectation with no payment yet; `since` is when Porteiro
    first knew of it (the payment row, or the expectation); `checks` how often it was
    asked about already."""

    source: str
    object_id: str
    state: PaymentState | None
    expires_at: datetime | None
    since: datetime
    checks: int


@dataclass(frozen=True, slots=True)
class WindowPayment:
    """A stored payment whose first event happened in an audit window."""

    payment: Payment
    first_event_at: datetime


@dataclass(frozen=True, slots=True)
class StoredReport:
    id: int
    source: str
    kind: str  # "audit" | "stale"
    created_at: datetime
    since: datetime | None
    until: datetime | None
    summary: Mapping[str, Any]
    body: Mapping[str, Any]


UPSERT_EXPECTATION: Final = """
INSERT INTO expectations
    (source, object_id, reference, amount, currency, expires_at, created_at, origin)
VALUES (%(source)s, %(object_id)s, %(reference)s, %(amount)s, %(currency)s,
        %(expires_at)s, %(now)s, %(origin)s)
ON CONFLICT (source, object_id) DO UPDATE SET
    reference = excluded.reference, amount = excluded.amount,
    currency = excluded.currency, expires_at = excluded.expires_at, origin = excluded.origin"""

GET_EXPECTATION: Final = """
SELECT * FROM expectations WHERE source = %(source)s AND object_id = %(object_id)s"""


def stale_query(open_state: str) -> str:
    """Open payments (`open_state`: the condition on p.state) with their expectation if
    any, and expectations never heard of, minus those whose next check is not due."""
    return f"""
SELECT c.*, COALESCE(k.checks, 0) AS checks FROM (
    SELECT p.source, p.object_id, p.state, e.expires_at,
           COALESCE(e.created_at, p.created_at) AS since
    FROM payments AS p
    LEFT JOIN expectations AS e ON e.source = p.source AND e.object_id = p.object_id
    WHERE p.source = %(source)s AND {open_state}
    UNION ALL
    SELECT e.source, e.object_id, NULL AS state, e.expires_at, e.created_at AS since
    FROM expectations AS e
    WHERE e.source = %(source)s AND NOT EXISTS (
        SELECT 1 FROM payments AS p WHERE p.source = e.source AND p.object_id = e.object_id)
) AS c
LEFT JOIN reconcile_checks AS k ON k.source = c.source AND k.object_id = c.object_id
WHERE (k.next_check_at IS NULL OR k.next_check_at <= %(now)s)
  AND ((c.expires_at IS NOT NULL AND c.expires_at < %(expired_before)s)
       OR c.since < %(born_before)s)
ORDER BY COALESCE(c.expires_at, c.since), c.object_id
LIMIT %(limit)s"""


MARK_CHECKED: Final = """
INSERT INTO reconcile_checks (source, object_id, checks, checked_at, next_check_at, last_error)
VALUES (%(source)s, %(object_id)s, 1, %(now)s, %(due)s, %(error)s)
ON CONFLICT (source, object_id) DO UPDATE SET
    checks = reconcile_checks.checks + 1, checked_at = excluded.checked_at,
    next_check_at = excluded.next_check_at, last_error = excluded.last_error"""

# A new row has no duplicates yet: `duplicates = 0` in what it returns means inserted.
UPSERT_SYNTHETIC: Final = """
INSERT INTO events
    (source, dedup_key, kind, type, object_id, reference, amount, currency, occurred_at,
     refunded_total, thin, data, status, next_attempt_at, last_error, received_at,
     updated_at, origin)
VALUES (%(source)s, %(dedup_key)s, %(kind)s, %(type)s, %(object_id)s, %(reference)s,
        %(amount)s, %(currency)s, %(occurred_at)s, %(refunded_total)s, %(thin)s, %(data)s,
        %(status)s, %(next_attempt_at)s, %(last_error)s, %(now)s, %(now)s, %(origin)s)
ON CONFLICT (source, dedup_key) DO UPDATE SET
    duplicates = events.duplicates + 1,
    status = CASE WHEN events.status IN ('dead', 'retrying')
                       AND events.type <> %(placeholder)s
                  THEN 'pending' ELSE events.status END,
    next_attempt_at = CASE WHEN events.status IN ('dead', 'retrying')
                                AND events.type <> %(placeholder)s
                           THEN excluded.updated_at ELSE events.next_attempt_at END,
    updated_at = excluded.updated_at
RETURNING id, duplicates"""


def known_keys_query(key_in: str) -> str:
    return f"SELECT dedup_key FROM events WHERE source = %(source)s AND {key_in}"


def payments_by_id_query(id_in: str) -> str:
    return f"SELECT * FROM payments WHERE source = %(source)s AND {id_in}"


PAYMENTS_IN_WINDOW: Final = """
SELECT p.*, w.first_at FROM payments AS p
JOIN (SELECT object_id, MIN(occurred_at) AS first_at FROM events
      WHERE source = %(source)s AND object_id IS NOT NULL AND occurred_at IS NOT NULL
      GROUP BY object_id) AS w ON w.object_id = p.object_id
WHERE p.source = %(source)s AND w.first_at >= %(since)s AND w.first_at < %(until)s
ORDER BY w.first_at, p.object_id"""

INSERT_REPORT: Final = """
INSERT INTO reconcile_reports (source, kind, created_at, since, until, summary, body)
VALUES (%(source)s, %(kind)s, %(now)s, %(since)s, %(until)s, %(summary)s, %(body)s)
RETURNING id"""

LATEST_REPORTS: Final = "SELECT * FROM reconcile_reports ORDER BY id DESC LIMIT %(limit)s"

LATEST_REPORTS_OF: Final = """
SELECT * FROM reconcile_reports WHERE source = %(source)s ORDER BY id DESC LIMIT %(limit)s"""

GET_REPORT: Final = "SELECT * FROM reconcile_reports WHERE id = %(id)s"


class ReconcileStore:
    _port: Port

    async def expect_payment(
        self,
        source: str,
        object_id: str,
        *,
        reference: str | None,
        amount: int | None,
        currency: str | None,
        expires_at: datetime | None,
        now: datetime,
        origin: str = "client",
    ) -> None:
        """Idempotent upsert of an expected payment (the latest call's fields win;
        `created_at` stays the first one's)."""
        d = self._port.dialect
        params = {
            "source": source, "object_id": object_id, "reference": reference,
            "amount": amount, "currency": currency,
            "expires_at": d.optional_time(expires_at), "now": d.time(now), "origin": origin,
        }  # fmt: skip
        await self._port.execute(UPSERT_EXPECTATION, params)

    async def get_expectation(self, source: str, object_id: str) -> Expectation | None:
        found = await self._port.fetch_one(
            GET_EXPECTATION, {"source": source, "object_id": object_id}
        )
        return None if found is None else expectation_from_row(found)

    async def stale_pending(
        self,
        source: str,
        now: datetime,
        max_age: timedelta,
        limit: int,
        *,
        grace: timedelta = timedelta(0),
    ) -> Sequence[StaleItem]:
        """Open payments (OPEN_STATES) and expectations with no payment yet whose
        `expires_at + grace < now` or first known more than `max_age` ago, skipping those
        whose next check (`mark_checked`) is still in the future. Oldest first."""
        d = self._port.dialect
        open_state, params = d.in_list("p.state", "open", [s.value for s in OPEN_STATES])
        params.update(
            source=source,
            now=d.time(now),
            expired_before=d.time(now - grace),
            born_before=d.time(now - max_age),
            limit=max(limit, 0),
        )
        found = await self._port.fetch(stale_query(open_state), params)
        return [stale_from_row(row) for row in found]

    async def mark_checked(
        self,
        source: str,
        object_ids: Sequence[str],
        now: datetime,
        next_check_at: datetime,
        error: str | None = None,
    ) -> None:
        """Record a status read: checks + 1, not due again before `next_check_at`."""
        d = self._port.dialect
        stamp, due = d.time(now), d.time(next_check_at)
        params = [
            {"source": source, "object_id": object_id, "now": stamp, "due": due, "error": error}
            for object_id in sorted(set(object_ids))  # one check per payment and read
        ]
        await self._port.execute_many(MARK_CHECKED, params)

    async def record_synthetic(
        self, source: str, events: Sequence[ParsedEvent], *, origin: str, now: datetime
    ) -> RecordResult:
        """Insert events learnt by asking the gateway, WITHOUT a delivery, de-duplicated
        exactly like `record_delivery` (a duplicate is counted, revives a dead or
        retrying event, and is never applied twice). `origin` is stored on new events;
        `delivery_id` of the result is 0. Wakes the workers."""
        ids: list[int] = []
        new = 0
        for start in range(0, len(events), SYNTHETIC_BATCH):
            params = [
                synthetic_params(self._port.dialect, event, source, origin, now)
                for event in events[start : start + SYNTHETIC_BATCH]
            ]
            found = await self._port.write_returning(UPSERT_SYNTHETIC, params)
            if len(found) != len(params):  # RETURNING yields one row per upsert
                raise RuntimeError("synthetic upsert returned no row")
            inserted = sum(int(row["duplicates"]) == 0 for row in found)
            ids.extend(int(row["id"]) for row in found)
            if inserted:
                await self._port.wake_workers()
            new += inserted
        return RecordResult(0, ids, new, len(ids) - new)

    async def known_keys(self, source: str, keys: Sequence[str]) -> set[str]:
        """Which of these dedup keys the store already holds for `source`."""
        d = self._port.dialect
        found: set[str] = set()
        for chunk in d.chunks(sorted(set(keys))):
            key_in, params = d.in_list("dedup_key", "keys", chunk)
            params["source"] = source
            found.update(
                row["dedup_key"] for row in await self._port.fetch(known_keys_query(key_in), params)
            )
        return found

    async def payments_by_id(self, source: str, object_ids: Sequence[str]) -> dict[str, Payment]:
        """The stored payments among `object_ids` (absent ones are left out)."""
        d = self._port.dialect
        found: dict[str, Payment] = {}
        for chunk in d.chunks(sorted(set(object_ids))):
            id_in, params = d.in_list("object_id", "ids", chunk)
            params["source"] = source
            for row in await self._port.fetch(payments_by_id_query(id_in), params):
                payment = rows.payment_from_row(row)
                found[payment.object_id] = payment
        return found

    async def payments_in_window(
        self, source: str, since: datetime, until: datetime
    ) -> Sequence[WindowPayment]:
        """Payments whose earliest event (occurred_at) is in [since, until)."""
        d = self._port.dialect
        params = {"source": source, "since": d.time(since), "until": d.time(until)}
        found = await self._port.fetch(PAYMENTS_IN_WINDOW, params)
        return [
            WindowPayment(rows.payment_from_row(row), rows.decode_time(row["first_at"]))
            for row in found
        ]

    async def save_report(
        self,
        source: str,
        kind: str,
        body: Mapping[str, Any],
        summary: Mapping[str, Any],
        *,
        since: datetime | None,
        until: datetime | None,
        now: datetime,
    ) -> int:
        """Store a report; returns its id."""
        d = self._port.dialect
        params = {
            "source": source, "kind": kind, "now": d.time(now),
            "since": d.optional_time(since), "until": d.optional_time(until),
            "summary": d.json(dict(summary)), "body": d.json(dict(body)),
        }  # fmt: skip
        (found,) = await self._port.write_returning(INSERT_REPORT, [params])
        return int(found["id"])

    async def latest_reports(self, source: str | None, limit: int) -> Sequence[StoredReport]:
        """Newest first (bodies included)."""
        query = LATEST_REPORTS if source is None else LATEST_REPORTS_OF
        found = await self._port.fetch(query, {"source": source, "limit": max(limit, 0)})
        return [report_from_row(row) for row in found]

    async def get_report(self, report_id: int) -> StoredReport | None:
        found = await self._port.fetch_one(GET_REPORT, {"id": report_id})
        return None if found is None else report_from_row(found)


def reconcile_store(store: object) -> ReconcileStore:
    """`store` as a ReconcileStore (both built-in stores are), or TypeError."""
    if not isinstance(store, ReconcileStore):
        raise TypeError(f"{type(store).__name__} does not implement ReconcileStore")
    return store


def synthetic_params(
    d: Dialect, event: ParsedEvent, source: str, origin: str, now: datetime
) -> Params:
    params = event_params(d, event, source, now)
    params["origin"] = origin
    return params


# -- rows --------------------------------------------------------------------------------


def expectation_from_row(row: rows.Row) -> Expectation:
    return Expectation(
        source=row["source"],
        object_id=row["object_id"],
        reference=row["reference"],
        amount=None if row["amount"] is None else int(row["amount"]),
        currency=row["currency"],
        expires_at=rows.decode_optional_time(row["expires_at"]),
        created_at=rows.decode_time(row["created_at"]),
        origin=row["origin"],
    )


def stale_from_row(row: rows.Row) -> StaleItem:
    state = row["state"]
    return StaleItem(
        source=row["source"],
        object_id=row["object_id"],
        state=None if state is None else PaymentState(state),
        expires_at=rows.decode_optional_time(row["expires_at"]),
        since=rows.decode_time(row["since"]),
        checks=int(row["checks"]),
    )


def report_from_row(row: rows.Row) -> StoredReport:
    summary, body = rows.load_json(row["summary"]), rows.load_json(row["body"])
    return StoredReport(
        id=int(row["id"]),
        source=row["source"],
        kind=row["kind"],
        created_at=rows.decode_time(row["created_at"]),
        since=rows.decode_optional_time(row["since"]),
        until=rows.decode_optional_time(row["until"]),
        summary=summary if isinstance(summary, dict) else {},
        body=body if isinstance(body, dict) else {},
    )
