"""The statements of PostgreSQL batch apply (store/postgres/apply.py, whose docstring
tells the round trips they make up), compacted once at import."""

from __future__ import annotations

from typing import Final

# The claims still ours. Read, not locked: a lock held over the worker's round trips
# would stall a duplicate delivery's ingest (store/postgres/apply.py says why).
_FENCE = """
SELECT e.id FROM events AS e
JOIN json_to_recordset(%(claims)s::json) AS c(id bigint, token text)
    ON e.id = c.id AND e.claim_token = c.token
WHERE e.status = 'processing'
ORDER BY e.id"""

# The transaction's limits, in milliseconds, for this transaction only.
_LIMITS = """
SELECT set_config('idle_in_transaction_session_timeout', %(budget)s, true),
       set_config('statement_timeout', %(budget)s, true),
       set_config('lock_timeout', %(lock)s, true)"""

# A payment's advisory lock key, for the key `k`: all events of one payment serialise on
# it, taken before the payment row is read (a new payment has no row to lock yet). A hash
# collision only serialises two payments. The one definition: every statement taking a
# payment's lock (TRY_LOCK, LOCK, PAYMENTS_TAKEN) is built on it, and apply_many is the
# store's only path that writes payments.
_KEY = "hashtextextended(k.source || ':' || k.object_id, 0)"

# The keys taken without waiting: those another worker's batch holds come back (the
# events of those payments wait for a second pass).
_TRY_LOCK = f"""
SELECT k.n FROM json_to_recordset(%(keys)s::json) AS k(n integer, source text, object_id text)
WHERE NOT pg_try_advisory_xact_lock({_KEY})"""

# The keys taken waiting, in the order of `n` (sorted keys).
_LOCK = f"""
SELECT count(pg_advisory_xact_lock({_KEY})) AS locked
FROM (SELECT source, object_id
      FROM json_to_recordset(%(keys)s::json) AS t(n integer, source text, object_id text)
      ORDER BY n) AS k"""


def _payments(where: str) -> str:
    return f"""
SELECT p.source, p.object_id, p.state, p.amount, p.currency, p.refunded_amount,
       p.reference, p.version, p.last_event_at, p.facts::text AS facts, p.anomalies
FROM payments AS p
JOIN json_to_recordset(%(keys)s::json) AS k(n integer, source text, object_id text)
    ON p.source = k.source AND p.object_id = k.object_id
{where}
ORDER BY k.n
FOR UPDATE OF p"""


_PAYMENTS = _payments("")
# The payments whose lock TRY_LOCK took (asking again is free: the lock is this
# transaction's); never waits on the row of a payment another batch holds.
_PAYMENTS_TAKEN = _payments(f"WHERE pg_try_advisory_xact_lock({_KEY})")

# Round trip 2 in one statement, sent with its COMMIT (its parts touch different rows,
# so their order does not matter): the payments' final states; the transitions (ORDER BY
# n: identity values rise in application order, which history reads by); the done marks
# of the events applied, as stored or enriched. If a claim was lost since round trip 1,
# fewer events are marked than were applied: the cast fails the statement, so nothing
# of the batch is written (CLAIMS_LOST names the error).
_WRITE = """
WITH upserted AS (
    INSERT INTO payments
        (source, object_id, state, amount, currency, refunded_amount, reference, version,
         last_event_at, facts, anomalies, created_at, updated_at)
    SELECT source, object_id, state, amount, currency, refunded_amount, reference, version,
           last_event_at, facts, anomalies, %(now)s, %(now)s
    FROM json_to_recordset(%(payments)s::json)
        AS t(source text, object_id text, state text, amount bigint, currency text,
             refunded_amount bigint, reference text, version integer,
             last_event_at timestamptz, facts jsonb, anomalies integer)
    ON CONFLICT (source, object_id) DO UPDATE SET
        state = EXCLUDED.state, amount = EXCLUDED.amount, currency = EXCLUDED.currency,
        refunded_amount = EXCLUDED.refunded_amount, reference = EXCLUDED.reference,
        version = EXCLUDED.version, last_event_at = EXCLUDED.last_event_at,
        facts = EXCLUDED.facts, anomalies = EXCLUDED.anomalies,
        updated_at = EXCLUDED.updated_at
), recorded AS (
    INSERT INTO transitions
        (source, object_id, event_id, from_state, to_state, verdict, note, at)
    SELECT source, object_id, event_id, from_state, to_state, verdict, note, at
    FROM json_to_recordset(%(transitions)s::json)
        AS t(n integer, source text, object_id text, event_id bigint, from_state text,
             to_state text, verdict text, note text, at timestamptz)
    ORDER BY n
), marked AS (
    UPDATE events SET status = 'done', claim_token = NULL, claimed_by = NULL,
        lease_until = NULL, last_error = NULL, updated_at = %(now)s
    FROM json_to_recordset(%(done)s::json) AS t(id bigint, token text)
    WHERE events.id = t.id AND events.claim_token = t.token
        AND events.status = 'processing'
    RETURNING events.id
), enriched AS (
    UPDATE events SET status = 'done', claim_token = NULL, claimed_by = NULL,
        lease_until = NULL, last_error = NULL, kind = t.kind, type = t.type,
        object_id = t.object_id, reference = t.reference, amount = t.amount,
        currency = t.currency, occurred_at = t.occurred_at,
        refunded_total = t.refunded_total, thin = t.thin, data = t.data,
        updated_at = %(now)s
    FROM json_to_recordset(%(enriched)s::json)
        AS t(id bigint, token text, kind text, type text, object_id text, reference text,
             amount bigint, currency text, occurred_at timestamptz, refunded_total bigint,
             thin boolean, data jsonb)
    WHERE events.id = t.id AND events.claim_token = t.token
        AND events.status = 'processing'
    RETURNING events.id
), settled AS (
    SELECT count(*) AS n FROM (SELECT id FROM marked UNION ALL SELECT id FROM enriched) AS s
)
SELECT CASE WHEN n = %(expected)s THEN n
            ELSE CAST('porteiro: claims lost, ' || n || ' of ' || %(expected)s AS integer)
       END AS settled
FROM settled"""

# The error _WRITE raises on purpose (in its message).
CLAIMS_LOST: Final = "porteiro: claims lost"

# Hand back, unattempted, the claims of payments another worker still holds: due again
# shortly, their attempt not counted, as they were (failed ones stay `retrying`).
_RELEASE = """
UPDATE events SET status = CASE WHEN last_error IS NULL THEN 'pending' ELSE 'retrying' END,
    attempts = GREATEST(attempts - 1, 0), next_attempt_at = %(at)s, claim_token = NULL,
    claimed_by = NULL, lease_until = NULL, updated_at = %(now)s
FROM json_to_recordset(%(claims)s::json) AS t(id bigint, token text)
WHERE events.id = t.id AND events.claim_token = t.token AND events.status = 'processing'"""


def _compact(query: str) -> str:
    # psycopg caches the parsing of statements up to 4,096 characters.
    return " ".join(query.split())


FENCE: Final = _compact(_FENCE)
LIMITS: Final = _compact(_LIMITS)
RELEASE: Final = _compact(_RELEASE)
TRY_LOCK: Final = _compact(_TRY_LOCK)
LOCK: Final = _compact(_LOCK)
PAYMENTS: Final = _compact(_PAYMENTS)
PAYMENTS_TAKEN: Final = _compact(_PAYMENTS_TAKEN)
WRITE: Final = _compact(_WRITE)
WRITE_AND_COMMIT: Final = WRITE + "; COMMIT"

BEGIN: Final = "BEGIN"
