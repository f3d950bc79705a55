"""The SQLite store's own SQL (ingest, claim, apply, migrations, status counts): named
queries, their parameters and two builders. The schema lives in migrations; the queries
both stores share, in store/base.py's parts."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any, Final

from porteiro.model import EventStatus, InboundRequest, Kind, ParsedEvent, Payment
from porteiro.store import rows
from porteiro.store.records import UNPARSEABLE_TYPE, unparseable_dedup_key

BOOTSTRAP: Final = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version TEXT PRIMARY KEY, applied_at TEXT NOT NULL
)"""

APPLIED_VERSIONS: Final = "SELECT version FROM schema_migrations"

MARK_APPLIED: Final = "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)"

INSERT_DELIVERY: Final = """
INSERT INTO deliveries
    (source, received_at, method, path, query, headers, body, peer, client_cert_subject,
     parse_error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""

# A new event is a plain insert (its id is the cursor's lastrowid: no RETURNING row to
# build on the hot path); a key already stored inserts nothing, and COUNT_DUPLICATE
# then counts it.
INSERT_EVENT: Final = """
INSERT INTO events
    (source, dedup_key, kind, type, object_id, reference, amount, currency, occurred_at,
     refunded_total, thin, data, status, next_attempt_at, last_error, first_delivery_id,
     last_delivery_id, received_at, updated_at)
VALUES (:source, :dedup_key, :kind, :type, :object_id, :reference, :amount, :currency,
        :occurred_at, :refunded_total, :thin, :data, :status, :next_attempt_at, :last_error,
        :delivery_id, :delivery_id, :now, :now)
ON CONFLICT (source, dedup_key) DO NOTHING"""

# A duplicate counts and links; it revives a failed event (dead or retrying) by making it
# due now, but never the unparseable placeholder, which only `reparsed` settles.
COUNT_DUPLICATE: Final = """
UPDATE events SET
    duplicates = duplicates + 1,
    last_delivery_id = :delivery_id,
    status = CASE WHEN status IN ('dead', 'retrying') AND type != :placeholder
                  THEN 'pending' ELSE status END,
    next_attempt_at = CASE WHEN status IN ('dead', 'retrying') AND type != :placeholder
                           THEN :now ELSE next_attempt_at END,
    updated_at = :now
WHERE source = :source AND dedup_key = :dedup_key
RETURNING id"""

LINK: Final = """
INSERT INTO event_deliveries (event_id, delivery_id) VALUES (?, ?)
ON CONFLICT DO NOTHING"""

CLAIM: Final = """
UPDATE events SET status = 'processing', attempts = attempts + 1, claim_token = :token,
    claimed_by = :worker, lease_until = :lease_until, updated_at = :now
WHERE id IN (
    SELECT id FROM events
    WHERE (status IN ('pending', 'retrying') AND next_attempt_at <= :now)
       OR (status = 'processing' AND lease_until < :now)
    ORDER BY next_attempt_at, id
    LIMIT :limit)
RETURNING *"""

# Every fenced write matches the claim token; a lost claim matches no row.
APPLY_EVENT: Final = """
UPDATE events SET status = 'done', claim_token = NULL, claimed_by = NULL,
    lease_until = NULL, last_error = NULL, kind = :kind, type = :type,
    object_id = :object_id, reference = :reference, amount = :amount,
    currency = :currency, occurred_at = :occurred_at, refunded_total = :refunded_total,
    thin = :thin, data = :data, updated_at = :now
WHERE id = :id AND claim_token = :token"""

# The same for an event applied as it was stored (not enriched): its parsed columns stay
# as they are, and neither they nor the events_object index are written again.
FINISH_EVENT: Final = """
UPDATE events SET status = 'done', claim_token = NULL, claimed_by = NULL,
    lease_until = NULL, last_error = NULL, updated_at = :now
WHERE id = :id AND claim_token = :token"""

GET_PAYMENT: Final = "SELECT * FROM payments WHERE source = ? AND object_id = ?"

UPSERT_PAYMENT: Final = """
INSERT INTO payments
    (source, object_id, state, amount, currency, refunded_amount, reference, version,
     last_event_at, facts, anomalies, created_at, updated_at)
VALUES (:source, :object_id, :state, :amount, :currency, :refunded_amount, :reference,
        :version, :last_event_at, :facts, :anomalies, :now, :now)
ON CONFLICT (source, object_id) DO UPDATE SET
    state = excluded.state, amount = excluded.amount, currency = excluded.currency,
    refunded_amount = excluded.refunded_amount, reference = excluded.reference,
    version = excluded.version, last_event_at = excluded.last_event_at,
    facts = excluded.facts, anomalies = excluded.anomalies, updated_at = excluded.updated_at"""

INSERT_TRANSITION: Final = """
INSERT INTO transitions
    (source, object_id, event_id, from_state, to_state, verdict, note, at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""

STATUS_COUNTS: Final = "SELECT status, count(*) AS n FROM events GROUP BY status"


def status_counts_of(count: int) -> str:
    """Counts of `count` statuses, bound as parameters: a search of the events_due index
    (status, next_attempt_at), which covers it."""
    marks = ", ".join("?" * count)
    return f"SELECT status, count(*) AS n FROM events WHERE status IN ({marks}) GROUP BY status"


def statements(script: str) -> Iterator[str]:
    """Split a migration into statements (sqlite3 runs one per execute)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    if pending.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in pending.splitlines()
    ):
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()[:80]!r}")


# -- parameters ------------------------------------------------------------------------


def delivery_params(
    request: InboundRequest, received: str, parse_error: str | None
) -> tuple[Any, ...]:
    """INSERT_DELIVERY's parameters, in column order."""
    return (
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
    )


def event_params(event: ParsedEvent, source: str, delivery_id: int, now: str) -> dict[str, Any]:
    columns = rows.new_event_columns(event, source, now)
    columns.update(
        occurred_at=rows.encode_optional_time(event.occurred_at),
        thin=int(event.thin),
        data=rows.dump_json(columns["data"]),
        delivery_id=delivery_id,
        now=now,
        placeholder=UNPARSEABLE_TYPE,
    )
    return columns


def placeholder_params(source: str, delivery_id: int, now: str, reason: str) -> dict[str, Any]:
    """The dead event standing for a delivery that could not be parsed."""
    placeholder = ParsedEvent(
        dedup_key=unparseable_dedup_key(delivery_id),
        kind=Kind.OTHER,
        type=UNPARSEABLE_TYPE,
        object_id=None,
    )
    params = event_params(placeholder, source, delivery_id, now)
    params.update(status=EventStatus.DEAD.value, next_attempt_at=None, last_error=reason)
    return params


def payment_params(payment: Payment, now: str) -> dict[str, Any]:
    params = rows.payment_columns(payment)
    params["last_event_at"] = rows.encode_optional_time(payment.last_event_at)
    params["facts"] = rows.dump_json(params["facts"])
    params["now"] = now
    return params
