"""PostgreSQL for the benchmark: fresh databases, the naive schema, the scale preload, and
the queries behind the end-to-end figures.

Every scenario gets its own database (`porteiro_bench_*`), dropped at the end of the run.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from bench.naive.schema import SCHEMA as NAIVE_SCHEMA

PREFIX = "porteiro_bench_"
PRELOAD_CHUNK = 250_000
PRELOAD_CONNECTIONS = 2
Job = tuple[str, dict[str, Any]]  # a preload query and its parameters
_PLACEHOLDER = "EVT_PRELOAD_ID"

# Old, processed Stripe deliveries: one event each, a realistic raw body and headers.
_PRELOAD_DELIVERIES = """
INSERT INTO deliveries (id, source, received_at, method, path, query, headers, body, peer)
OVERRIDING SYSTEM VALUE
SELECT i, 'stripe', now() - make_interval(days => 30, secs => -i * 0.01), 'POST',
       '/webhooks/stripe', '', %(headers)s::jsonb,
       convert_to(replace(%(body)s, %(placeholder)s, 'evt_preload' || lpad(i::text, 13, '0')),
                  'UTF8'),
       '127.0.0.1'
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i"""
_PRELOAD_EVENTS = """
INSERT INTO events (id, source, dedup_key, kind, type, object_id, reference, amount, currency,
                    occurred_at, data, status, last_error, attempts, first_delivery_id,
                    last_delivery_id, received_at, updated_at)
OVERRIDING SYSTEM VALUE
SELECT i, 'stripe', 'evt_preload' || lpad(i::text, 13, '0'), 'payment.paid',
       'payment_intent.succeeded', 'pi_preload' || lpad((i / 3)::text, 12, '0'),
       'order-p' || (i / 3),
       1000 + i %% 90000, 'BRL', now() - make_interval(days => 30, secs => -i * 0.01),
       '{"object": "payment_intent", "status": "succeeded", "api_version": "2024-06-20"}',
       -- One in 5,000 dead, for the console's DLQ pages (a few reasons).
       CASE WHEN i %% 5000 = 0 THEN 'dead' ELSE 'done' END,
       CASE WHEN i %% 5000 = 0 THEN 'handler: order ' || (i %% 3) || ' not found' END,
       1, i, i, now() - make_interval(days => 30, secs => -i * 0.01),
       now() - make_interval(days => 30, secs => 1 - i * 0.01)
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i"""
# The payments those events made (three events per payment, as the events' object ids),
# for the console's payment pages; one in 997 anomalous. Chunks share a boundary payment.
_PRELOAD_PAYMENTS = """
INSERT INTO payments (source, object_id, state, amount, currency, refunded_amount, reference,
                      version, last_event_at, facts, anomalies, created_at, updated_at)
SELECT 'stripe', 'pi_preload' || lpad(j::text, 12, '0'), 'paid', 1000 + (3 * j) %% 90000,
       'BRL', 0, 'order-p' || j, 3, now() - make_interval(days => 30, secs => -j * 0.03), '{}',
       CASE WHEN j %% 997 = 0 THEN 1 ELSE 0 END,
       now() - make_interval(days => 30, secs => -j * 0.03),
       now() - make_interval(days => 30, secs => -j * 0.03)
FROM generate_series(%(first)s::bigint / 3, %(last)s::bigint / 3) AS j
ON CONFLICT DO NOTHING"""
_PRELOAD_HEADERS = (
    '[["host", "127.0.0.1"], ["content-type", "application/json; charset=utf-8"], '
    '["user-agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)"], '
    '["stripe-signature", "t=1796022727,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff5'
    '36d0ce8e108d8bd"], ["content-length", "1101"]]'
)

BACKLOG = "SELECT count(*) FROM events WHERE status IN ('pending', 'retrying', 'processing')"
# Receipt to done: received_at is stamped by the receiver, updated_at by the worker's
# fenced write that marked the event done.
E2E_LATENCY = """
SELECT count(*),
       percentile_cont(ARRAY[0.5, 0.99, 0.999]) WITHIN GROUP (ORDER BY
           extract(epoch FROM updated_at - received_at)),
       max(extract(epoch FROM updated_at - received_at))
FROM events WHERE status = 'done' AND origin = 'webhook' AND received_at >= %s"""
STATUS_COUNTS = "SELECT status, count(*) FROM events GROUP BY status"


@contextmanager
def stock_autovacuum(admin_url: str) -> Iterator[str | None]:
    """PostgreSQL's default `autovacuum = on` for the run, when the server has it off (CI
    machines switch it off). The queue table takes two updates per event (claimed, then
    done): without vacuum its dead rows pile up and every claim wades through them, which
    no deployment sees. Restored afterwards; yields a note when it changed anything."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT setting, coalesce(sourcefile, '') FROM pg_settings WHERE name = 'autovacuum'"
        ).fetchone()
        setting, source = row if row else ("on", "")
        if setting == "on":
            yield None
            return
        conn.execute("ALTER SYSTEM SET autovacuum = on")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield f"autovacuum was off on this server ({source or 'default'}): on for the run"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            if source.endswith("postgresql.auto.conf"):  # it was ALTER SYSTEM's own value
                restore = sql.SQL("ALTER SYSTEM SET autovacuum = {}").format(sql.Literal(setting))
                conn.execute(restore)
            else:
                conn.execute("ALTER SYSTEM RESET autovacuum")
            conn.execute("SELECT pg_reload_conf()")


def database_url(admin_url: str, name: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


# The databases this run made, so that its clean-up drops its own and never those of
# another benchmark run on the same server (two smoke tests run side by side).
_made: set[str] = set()


def fresh_database(admin_url: str, name: str) -> str:
    """Drop and create `porteiro_bench_<name>`; returns its URL."""
    full = PREFIX + name
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(full))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(full)))
    _made.add(full)
    return database_url(admin_url, full)


def drop_database(admin_url: str, url: str) -> None:
    """Drop the database `url` names (its connections, autovacuum's included, end)."""
    name = url.rpartition("/")[2]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        _drop(conn, name)
    _made.discard(name)


def drop_databases(admin_url: str) -> None:
    """Drop every database this run made."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for name in sorted(_made):
            _drop(conn, name)
    _made.clear()


def _drop(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def naive_schema(url: str, orders: int) -> None:
    """The naive app's tables, with `orders` orders named like the requests' references."""
    with psycopg.connect(url) as conn:
        conn.execute(NAIVE_SCHEMA)
        conn.execute(
            "INSERT INTO orders (id) SELECT 'order-' || i FROM generate_series(0, %s) AS i",
            (orders,),
        )


SKETCH_SCHEMA = """
CREATE TABLE sketch_events (id text PRIMARY KEY, body bytea NOT NULL);
CREATE TABLE sketch_deliveries (
    id bigserial PRIMARY KEY, received_at timestamptz NOT NULL, headers jsonb NOT NULL,
    body bytea NOT NULL
);
CREATE TABLE sketch_parsed (
    id bigserial PRIMARY KEY, source text NOT NULL, dedup_key text NOT NULL, type text,
    object_id text, first_delivery_id bigint NOT NULL, status text NOT NULL DEFAULT 'pending',
    duplicates integer NOT NULL, received_at timestamptz NOT NULL,
    UNIQUE (source, dedup_key)
);
CREATE INDEX sketch_parsed_status ON sketch_parsed (status, id);  -- a worker's claims
"""


def sketch_schema(url: str) -> None:
    """bench/sketch.py's tables, for each of its settings: the event id and the raw body
    (`id`); deliveries with their headers (`headers`); and their parsed events (`events`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SKETCH_SCHEMA)


def preload(url: str, count: int, body: bytes, event_id: bytes) -> float:
    """Insert `count` stored, done events (and their deliveries and payments, one per
    three events; one event in 5,000 dead); seconds taken. Each event came once, so no
    event_deliveries row (only repeat deliveries get one).

    Server-side generation in chunks: no client round trip per row. PRELOAD_CONNECTIONS
    connections (one PostgreSQL backend per core) take the two tables' chunks from one
    queue, so 5 M rows fit the benchmark's time budget. Object ids are zero-padded, so
    they come in index order as the event ids do: appended to the index's last page
    rather than spread over it (the preload's events part ~20 % faster; ingest then
    probes the same index size). Ids continue above the
    current maximum. Foreign-key triggers are skipped for each session
    (`session_replication_role = replica`, superuser only): the rows are consistent by
    construction, whatever order the chunks land in. ANALYZE, not VACUUM: ingest only
    appends and probes indexes, so the old rows' visibility never matters to it.
    """
    template = body.replace(event_id, _PLACEHOLDER.encode()).decode()
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT greatest((SELECT max(id) FROM deliveries), (SELECT max(id) FROM events))"
        ).fetchone()
        first = int(row[0] or 0) + 1 if row else 1
        last = first + count - 1
        jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        for low in range(first, last + 1, PRELOAD_CHUNK):
            for query in (_PRELOAD_DELIVERIES, _PRELOAD_EVENTS, _PRELOAD_PAYMENTS):
                jobs.put((query, _params(low, min(last, low + PRELOAD_CHUNK - 1), template)))
        with ThreadPoolExecutor(PRELOAD_CONNECTIONS) as pool:
            list(pool.map(_preload_part, [url] * PRELOAD_CONNECTIONS, [jobs] * PRELOAD_CONNECTIONS))
        for table in ("deliveries", "events"):
            conn.execute(
                sql.SQL("SELECT setval(pg_get_serial_sequence({}, 'id'), %s)").format(
                    sql.Literal(table)
                ),
                (last,),
            )
        conn.execute("ANALYZE deliveries, events, event_deliveries, payments")
    return time.monotonic() - started


def _params(first: int, last: int, template: str) -> dict[str, Any]:
    return {
        "first": first,
        "last": last,
        "headers": _PRELOAD_HEADERS,
        "body": template,
        "placeholder": _PLACEHOLDER,
    }


def _preload_part(url: str, jobs: queue.SimpleQueue[Job]) -> None:
    """Take the next chunk until none is left: an events chunk costs more than a
    deliveries chunk, so connections that took fixed shares finished apart."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        while True:
            try:
                query, params = jobs.get_nowait()
            except queue.Empty:
                return
            conn.execute(query, params)


def checkpoint(url: str) -> None:
    """Write every dirty buffer out now, so a measurement that follows does not share the
    machine with the write-back of what came before (a 10 GB preload, the e2e run) nor
    pay the full-page images of a checkpoint that starts during it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def _scalar(url: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the query's row (None without one)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(query, params).fetchone()
    return row[0] if row else None


def latest_event_id(url: str) -> int:
    return int(_scalar(url, "SELECT max(id) FROM events") or 0)


def event_count(url: str) -> int:
    return int(_scalar(url, "SELECT count(*) FROM events") or 0)


def wal_position(url: str) -> str:
    return str(_scalar(url, "SELECT pg_current_wal_lsn()::text") or "0/0")


def wal_since(url: str, position: str) -> int:
    """Bytes of WAL the whole server wrote since `position` (pg_current_wal_lsn)."""
    query = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)"
    return int(_scalar(url, query, (position,)) or 0)


def done_span(url: str) -> float:
    """Seconds from the first event marked done to the last."""
    query = (
        "SELECT extract(epoch FROM max(updated_at) - min(updated_at))"
        " FROM events WHERE status = 'done'"
    )
    return float(_scalar(url, query) or 0.0)


def backlog(url: str) -> int:
    return int(_scalar(url, BACKLOG) or 0)


def e2e_latency(url: str, since: Any) -> dict[str, float | int | None]:
    """Receipt-to-done percentiles (seconds) of the webhook events received since `since`."""
    with psycopg.connect(url) as conn:
        row = conn.execute(E2E_LATENCY, (since,)).fetchone()
        counts: dict[str, int] = dict(conn.execute(STATUS_COUNTS).fetchall())
    done, quantiles, longest = row if row else (0, None, None)
    p50, p99, p999 = quantiles or (None, None, None)
    figures = {"p50_s": p50, "p99_s": p99, "p999_s": p999, "max_s": longest}
    seconds = {key: None if value is None else float(value) for key, value in figures.items()}
    return {"done": int(done), **seconds, **{f"status_{k}": int(v) for k, v in counts.items()}}


def table_size(url: str) -> str:
    return str(_scalar(url, "SELECT pg_size_pretty(pg_database_size(current_database()))") or "?")


def sample_payment(url: str) -> tuple[str, str] | None:
    """(object id, reference) of a preloaded payment from the middle of the table."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT object_id, reference FROM payments WHERE source = 'stripe'"
            " ORDER BY created_at DESC, source DESC, object_id DESC OFFSET 5000 LIMIT 1"
        ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))
