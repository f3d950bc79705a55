"""The PostgreSQL store's queries and their parameters, in one place (the schema lives in
migrations/postgres).

Parameters are named (`%(name)s`); every time comes from the caller, never SQL `now()`,
so tests control the clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from psycopg.types.json import Jsonb

from porteiro.model import ParsedEvent
from porteiro.store import rows

# Channel record_delivery, requeue and reparsed notify; idle workers LISTEN on it.
CHANNEL: Final = "porteiro_events"

# Session-level advisory lock key serialising `upgrade` across processes.
MIGRATION_LOCK: Final = 7_135_290_114_508_312_401

BOOTSTRAP: Final = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()
)"""

LOCK_MIGRATIONS: Final = "SELECT pg_advisory_lock(%s)"
UNLOCK_MIGRATIONS: Final = "SELECT pg_advisory_unlock(%s)"
APPLIED_VERSIONS: Final = "SELECT version FROM schema_migrations"
MARK_APPLIED: Final = "INSERT INTO schema_migrations (version) VALUES (%s)"

NOTIFY: Final = "SELECT pg_notify('porteiro_events', '')"


# Expired leases and due events are picked by two ordered scans of their partial indexes
# (an OR of both would sort every due row on each claim). SKIP LOCKED keeps concurrent
# claimers apart; MATERIALIZED keeps each locking scan evaluated exactly once.
CLAIM: Final = """
WITH expired AS MATERIALIZED (
    SELECT id, next_attempt_at FROM events
    WHERE status = 'processing' AND lease_until < %(now)s
    ORDER BY lease_until, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT id, next_attempt_at FROM events
    WHERE status IN ('pending', 'retrying') AND next_attempt_at <= %(now)s
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id FROM (SELECT * FROM expired UNION ALL SELECT * FROM due) AS candidates
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
)
UPDATE events SET status = 'processing', attempts = attempts + 1,
    claim_token = %(token)s, claimed_by = %(worker)s, lease_until = %(lease_until)s,
    updated_at = %(now)s
FROM picked
WHERE events.id = picked.id
RETURNING events.*"""

GET_DELIVERY: Final = "SELECT * FROM deliveries WHERE id = %s"

# Replay with current code: the parsed fields are overwritten and the event made due.
UPSERT_REPARSED: Final = """
WITH e AS (
    INSERT INTO events
        (source, dedup_key, kind, type, object_id, reference, amount, currency,
         occurred_at, refunded_total, thin, data, status, next_attempt_at, last_error,
         first_delivery_id, last_delivery_id, received_at, updated_at)
    VALUES (%(source)s, %(dedup_key)s, %(kind)s, %(type)s, %(object_id)s, %(reference)s,
            %(amount)s, %(currency)s, %(occurred_at)s, %(refunded_total)s, %(thin)s,
            %(data)s, %(status)s, %(next_attempt_at)s, %(last_error)s, %(delivery_id)s,
            %(delivery_id)s, %(received_at)s, %(now)s)
    ON CONFLICT (source, dedup_key) DO UPDATE SET
        kind = EXCLUDED.kind, type = EXCLUDED.type, object_id = EXCLUDED.object_id,
        reference = EXCLUDED.reference, amount = EXCLUDED.amount,
        currency = EXCLUDED.currency, occurred_at = EXCLUDED.occurred_at,
        refunded_total = EXCLUDED.refunded_total, thin = EXCLUDED.thin,
        data = EXCLUDED.data, status = EXCLUDED.status,
        last_error = COALESCE(EXCLUDED.last_error, events.last_error),
        next_attempt_at = EXCLUDED.next_attempt_at, attempts = 0, claim_token = NULL,
        claimed_by = NULL, lease_until = NULL, updated_at = EXCLUDED.updated_at
    RETURNING id
), link AS (
    INSERT INTO event_deliveries (event_id, delivery_id)
    SELECT id, %(delivery_id)s FROM e
    ON CONFLICT DO NOTHING
)
SELECT id FROM e"""

CLEAR_PARSE_ERROR: Final = "UPDATE deliveries SET parse_error = NULL WHERE id = %s"

SETTLE_PLACEHOLDER: Final = """
UPDATE events SET status = 'ignored', claim_token = NULL, claimed_by = NULL,
    lease_until = NULL, updated_at = %s
WHERE source = %s AND first_delivery_id = %s AND type = 'porteiro.unparseable'"""

STATUS_COUNTS: Final = "SELECT status, count(*) AS n FROM events GROUP BY status"
# Index-only on events_status (status, id) for the statuses asked.
STATUS_COUNTS_OF: Final = """
SELECT status, count(*) AS n FROM events WHERE status = ANY(%s) GROUP BY status"""

PING: Final = "SELECT 1"


# -- parameters ------------------------------------------------------------------------


def json_param(value: Any) -> Jsonb:
    return Jsonb(value, dumps=rows.dump_json)


def event_params(
    event: ParsedEvent, source: str, delivery_id: int, now: datetime
) -> dict[str, Any]:
    columns = rows.new_event_columns(event, source, now)
    columns.update(data=json_param(columns["data"]), delivery_id=delivery_id, now=now)
    return columns
