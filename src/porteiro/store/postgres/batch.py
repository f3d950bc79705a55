"""PostgreSQL group commit: a batch of deliveries and their events in ONE statement.

One statement in autocommit is one implicit transaction: one round trip, one WAL flush,
and the server answers (ReadyForQuery, which psycopg waits for) only after the commit is
durable (`synchronous_commit` on). The parameters are three JSON documents read with
`json_to_recordset`, each request's part encoded by orjson in its own caller: a profile
showed psycopg's per-element array dumping at ~13 us per request. The bodies are the
exception: all of them joined in ONE bytea parameter, sent in binary, each delivery's
JSON giving where its body starts and how long it is. Inside the JSON (as base64) they
were most of PostgreSQL's work on the batch: its JSON lexer took ~20 us per delivery
with them, ~7 us without; as a bytea array, psycopg's per-element dumping cost the
receiver ~2 us per delivery, which one joined bytes object does not.

Within the statement, deliveries are inserted in batch order (`ORDER BY ord`), so their
identity values rise in that order and `row_number() OVER (ORDER BY id)` maps each back
to its position. Events are de-duplicated in Python first (ON CONFLICT cannot touch one
row twice per statement): an event carried twice in the batch is one row whose
`duplicates` starts at copies - 1, so results equal committing the deliveries one after
the other. Events go in key order, so concurrent batches lock rows in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from psycopg.types.json import Json

from porteiro import jsontext
from porteiro.model import EventStatus, InboundRequest, Kind, ParsedEvent
from porteiro.store import rows
from porteiro.store.records import UNPARSEABLE_TYPE, RecordResult, unparseable_dedup_key

# A duplicate counts and links; it revives a failed event (dead or retrying) by making it
# due now, but never the unparseable placeholder (NULL key in the arrays: its key is made
# from its delivery id), which only `reparsed` settles. `xmax = 0` marks a fresh insert.
# Only repeat deliveries get a link row: the first one is the event's first_delivery_id
# (a link per new event was a third of PostgreSQL's work per ack). `carried` is
# MATERIALIZED so the link join is on both key columns of one relation: inlined, the
# planner once joined on `source` alone, 64 x 64 rows per batch.
_RECORD_BATCH = """
WITH d AS (
    INSERT INTO deliveries
        (source, received_at, method, path, query, headers, body, peer,
         client_cert_subject, parse_error)
    SELECT t.source, t.received_at, t.method, t.path, t.query, t.headers,
           substring(%(bodies)b::bytea FROM t.body_at FOR t.body_length), t.peer,
           t.client_cert_subject, t.parse_error
    FROM json_to_recordset(%(deliveries)s::json)
        AS t(ord bigint, body_at integer, body_length integer, source text,
             received_at timestamptz, method text, path text, query text, headers jsonb,
             peer text, client_cert_subject text, parse_error text)
    ORDER BY t.ord
    RETURNING id
), ds AS (
    SELECT id, row_number() OVER (ORDER BY id) AS ord FROM d
), input AS (
    SELECT t.source, COALESCE(t.dedup_key, 'porteiro:unparseable:' || f.id) AS dedup_key,
           t.kind, t.type, t.object_id, t.reference, t.amount, t.currency, t.occurred_at,
           t.refunded_total, t.thin, t.data, t.status, t.next_attempt_at, t.last_error,
           f.id AS first_delivery_id, l.id AS last_delivery_id, t.received_at,
           t.updated_at, t.duplicates
    FROM json_to_recordset(%(events)s::json)
        AS t(first_ord bigint, last_ord bigint, received_at timestamptz,
             updated_at timestamptz, duplicates integer, source text, dedup_key text,
             kind text, type text, object_id text, reference text, amount bigint,
             currency text, occurred_at timestamptz, refunded_total bigint, thin boolean,
             data jsonb, status text, next_attempt_at timestamptz, last_error text)
    JOIN ds AS f ON f.ord = t.first_ord
    JOIN ds AS l ON l.ord = t.last_ord
), e AS (
    INSERT INTO events
        (source, dedup_key, kind, type, object_id, reference, amount, currency,
         occurred_at, refunded_total, thin, data, status, next_attempt_at, last_error,
         first_delivery_id, last_delivery_id, received_at, updated_at, duplicates)
    SELECT * FROM input
    ORDER BY source, dedup_key
    ON CONFLICT (source, dedup_key) DO UPDATE SET
        duplicates = events.duplicates + EXCLUDED.duplicates + 1,
        last_delivery_id = EXCLUDED.last_delivery_id,
        status = CASE WHEN events.status IN ('dead', 'retrying')
                           AND events.type <> 'porteiro.unparseable'
                      THEN 'pending' ELSE events.status END,
        next_attempt_at = CASE WHEN events.status IN ('dead', 'retrying')
                                    AND events.type <> 'porteiro.unparseable'
                               THEN EXCLUDED.updated_at ELSE events.next_attempt_at END,
        updated_at = EXCLUDED.updated_at
    RETURNING id, source, dedup_key, (xmax = 0) AS inserted, status, first_delivery_id
), carried AS MATERIALIZED (
    SELECT k.source, COALESCE(k.dedup_key, 'porteiro:unparseable:' || ds.id) AS dedup_key,
           ds.id AS delivery_id
    FROM json_to_recordset(%(links)s::json) AS k(source text, dedup_key text, ord bigint)
    JOIN ds ON ds.ord = k.ord
), link AS (
    INSERT INTO event_deliveries (event_id, delivery_id)
    SELECT e.id, c.delivery_id
    FROM carried AS c JOIN e ON e.source = c.source AND e.dedup_key = c.dedup_key
    WHERE e.first_delivery_id IS DISTINCT FROM c.delivery_id
    ON CONFLICT DO NOTHING
), wake AS (
    SELECT pg_notify('porteiro_events', '') FROM e WHERE e.status = 'pending' LIMIT 1
)
SELECT ds.id, ds.ord, NULL::text AS source, NULL::text AS dedup_key,
       NULL::boolean AS inserted
FROM ds
UNION ALL
SELECT e.id, NULL, e.source, e.dedup_key, e.inserted FROM e
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL FROM wake"""
# Whitespace collapsed: psycopg caches the parsing of statements up to 4,096 characters,
# and this one runs once per batch. (`wake` is the NOTIFY: delivered on commit.)
RECORD_BATCH: Final = " ".join(_RECORD_BATCH.split())

Key = tuple[str, str | None, int]  # (source, dedup_key, ord of a placeholder's delivery)


@dataclass(slots=True)
class Ingest:
    """One record_delivery call as JSON objects, encoded by the caller (so an encoding
    error stays the caller's): its delivery (but the body), its body, its time, and each
    event with its key. The objects are kept without their opening brace (the batch
    prepends its own fields): slicing also copies them out of orjson's output buffer,
    which they would otherwise hold until their batch is sent (see rows.dump_held)."""

    delivery: bytes
    body: bytes
    received_at: bytes
    events: list[tuple[tuple[str, str | None], bytes]]


def ingest(
    request: InboundRequest, events: Sequence[ParsedEvent], parse_error: str | None
) -> Ingest:
    now = request.received_at
    delivery = orjson.dumps(
        {
            "source": request.source,
            "received_at": now,
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "headers": request.headers,
            "peer": request.peer,
            "client_cert_subject": request.client_cert_subject,
            "parse_error": parse_error,
        }
    )[1:]
    if parse_error is not None:
        # NULL key: the statement names the placeholder after its delivery id.
        placeholder = ParsedEvent("", Kind.OTHER, UNPARSEABLE_TYPE, object_id=None)
        row = rows.new_event_columns(placeholder, request.source, now)
        row.update(dedup_key=None, status=EventStatus.DEAD.value, next_attempt_at=None)
        row["last_error"] = parse_error
        encoded: list[tuple[tuple[str, str | None], bytes]] = [
            ((request.source, None), jsontext.dumps(row)[1:])
        ]
    else:
        encoded = [
            (
                (request.source, event.dedup_key),
                jsontext.dumps(rows.new_event_columns(event, request.source, now))[1:],
            )
            for event in events
        ]
    return Ingest(delivery, request.body, rows.dump_held(now), encoded)


class IngestBatch:
    """RECORD_BATCH's parameters for a batch, and each caller's RecordResult from its rows.

    The JSON documents are joined from the callers' encoded objects; the batch only
    prepends the fields it decides (positions, repeats)."""

    def __init__(self, items: Sequence[Ingest]) -> None:
        self._keys: list[list[Key]] = []  # per item, its events' keys in order
        unique: dict[Key, list[Any]] = {}  # [encoded, first, last, received, updated, dups]
        links: dict[Key, None] = {}
        deliveries = []
        body_at = 1  # where the delivery's body starts in `bodies` (SQL counts from 1)
        for ord_, item in enumerate(items, start=1):
            head = b'{"ord":%d,"body_at":%d,"body_length":%d,' % (ord_, body_at, len(item.body))
            deliveries.append(head + item.delivery)
            body_at += len(item.body)
            keys: list[Key] = []
            for (source, dedup_key), encoded in item.events:
                key = (source, dedup_key, 0 if dedup_key is not None else ord_)
                keys.append(key)
                links[(source, dedup_key, ord_)] = None
                row = unique.get(key)
                if row is None:
                    unique[key] = [encoded, ord_, ord_, item.received_at, item.received_at, 0]
                else:  # a repeat within the batch: last delivery, time, one more duplicate
                    row[2], row[4], row[5] = ord_, item.received_at, row[5] + 1
            self._keys.append(keys)
        events = [
            b'{"first_ord":%d,"last_ord":%d,"received_at":%s,"updated_at":%s,"duplicates":%d,'
            % (first, last, received, updated, dups)
            + encoded
            for encoded, first, last, received, updated, dups in unique.values()
        ]
        link_rows = [{"source": s, "dedup_key": k, "ord": o} for s, k, o in links]
        self.params = {
            "deliveries": _encoded_json(b"[" + b",".join(deliveries) + b"]"),
            "events": _encoded_json(b"[" + b",".join(events) + b"]"),
            "links": _encoded_json(orjson.dumps(link_rows)),
            "bodies": b"".join([item.body for item in items]),
        }

    def results(self, found: Sequence[tuple[Any, ...]]) -> list[RecordResult]:
        """Each caller's result from RECORD_BATCH's rows: (id, ord, NULL x3) per delivery,
        (id, NULL, source, dedup_key, inserted) per event, all NULL for the NOTIFY."""
        deliveries = sorted((ord_, id_) for id_, ord_, *_ in found if ord_ is not None)
        if len(deliveries) != len(self._keys):
            raise RuntimeError("the batch statement returned the wrong number of deliveries")
        stored = {(row[2], row[3]): row for row in found if row[2] is not None}
        counted: set[tuple[str, str]] = set()
        results = []
        for keys, (_, delivery_id) in zip(self._keys, deliveries, strict=True):
            ids: list[int] = []
            new = 0
            for source, dedup_key, _ in keys:
                key = (source, dedup_key or unparseable_dedup_key(delivery_id))
                event_id, _, _, _, inserted = stored[key]
                ids.append(int(event_id))
                new += int(bool(inserted) and key not in counted)
                counted.add(key)
            results.append(RecordResult(delivery_id, ids, new, len(ids) - new))
        return results


def _passthrough(encoded: Any) -> Any:
    return encoded


def _encoded_json(encoded: bytes) -> Json:
    """JSON text already encoded by orjson, sent as it is (not decoded to str for psycopg
    to encode again: about 2 kB per request on every batch)."""
    return Json(encoded, dumps=_passthrough)
