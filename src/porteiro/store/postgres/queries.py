"""The PostgreSQL store's own queries (migrations, claim, status counts) and its JSON
parameter. The schema lives in migrations/postgres; the queries both stores share, in
store/base.py's parts.

Parameters are named (`%(name)s`); every time comes from the caller, never SQL `now()`,
so tests control the clock.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg.types.json import Jsonb

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

STATUS_COUNTS: Final = "SELECT status, count(*) AS n FROM events GROUP BY status"
# Index-only on events_status (status, id) for the statuses asked.
STATUS_COUNTS_OF: Final = """
SELECT status, count(*) AS n FROM events WHERE status = ANY(%s) GROUP BY status"""

PING: Final = "SELECT 1"


# -- parameters ------------------------------------------------------------------------


def json_param(value: Any) -> Jsonb:
    return Jsonb(value, dumps=rows.dump_json)
