"""A reference, not a contender: the lean sketch of a durable webhook ack that issue 4
sizes at "about a third of the ceiling". Stripe's HMAC over `t.body` with a 5-minute
tolerance and a group commit: every request waiting goes into ONE statement on one
connection (`synchronous_commit` on); 200 once its batch committed, 401 on a bad
signature. What the statement keeps is the sketch's one setting (BENCH_SKETCH_KEEPS):

- `id` (scenario `sketch`, the issue's sketch): the event id read from the JSON and the
  body, `INSERT ... ON CONFLICT DO NOTHING`.
- `headers` (`sketch-headers`): the delivery as Porteiro must keep it before acking
  (the body byte for byte, its headers, when it came); nothing parsed, nothing
  de-duplicated.
- `events` (`sketch-events`): that delivery and its parsed event (id, type, object id)
  in one statement, one event row per key with its repeats counted: Porteiro's ingest
  transaction (docs/architecture.md, "What a delivery writes") at its leanest, with only
  the index a worker's claims need.

Nothing else: no parsed amounts or times, no timeouts, no metrics, no outage handling.
`--scenarios sketch,...` runs them beside the others (not in the default run), so the
distance from Porteiro to each is measured on one machine (docs/performance.md).
Served like bench/hello.py; the tables are made by the benchmark (pgdata.sketch_schema).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import orjson
import psycopg

from bench.hello import BODY, HEADERS, Message
from bench.requests import STRIPE_SECRET

KEEPS = ("id", "headers", "events")
# One statement per setting, fed one array per column (a row per request, in order).
STATEMENTS = {
    "id": "INSERT INTO sketch_events (id, body)"
    " SELECT * FROM unnest(%s::text[], %s::bytea[]) ON CONFLICT DO NOTHING",
    "headers": "INSERT INTO sketch_deliveries (received_at, headers, body)"
    " SELECT now(), t.headers::jsonb, t.body FROM unnest(%s::text[], %s::bytea[])"
    " AS t(headers, body)",
    # A key twice in one batch is grouped first: ON CONFLICT touches a row once per
    # statement. Its first delivery is its first in the batch (ids rise in unnest order).
    "events": """WITH input AS MATERIALIZED (
        SELECT nextval('sketch_deliveries_id_seq') AS delivery_id, t.*
        FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bytea[])
            AS t(event_id, type, object_id, headers, body)
    ), d AS (
        INSERT INTO sketch_deliveries (id, received_at, headers, body)
        SELECT delivery_id, now(), headers::jsonb, body FROM input
    )
    INSERT INTO sketch_parsed
        (source, dedup_key, type, object_id, first_delivery_id, received_at, duplicates)
    SELECT 'stripe', event_id, min(type), min(object_id), min(delivery_id), now(),
           count(*) - 1
    FROM input GROUP BY event_id
    ON CONFLICT (source, dedup_key) DO UPDATE
        SET duplicates = sketch_parsed.duplicates + EXCLUDED.duplicates + 1""",
}
_KEY = STRIPE_SECRET.encode()
_KEEPS = os.environ.get("BENCH_SKETCH_KEEPS", "id")  # read once, in the server process
_waiting: list[tuple[tuple[Any, ...], asyncio.Future[None]]] = []
_ready = asyncio.Event()


def row(keeps: str, body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> tuple[Any, ...]:
    """One request's columns for STATEMENTS[keeps]."""
    if keeps == "id":
        return orjson.loads(body)["id"], body
    kept = orjson.dumps([(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers])
    if keeps == "headers":
        return kept.decode(), body
    event = orjson.loads(body)
    found = event.get("data", {}).get("object", {}).get("id")
    return event["id"], event.get("type"), found, kept.decode(), body


def columns(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """The statement's parameters: one array per column, a row per request in order."""
    return [list(column) for column in zip(*rows, strict=True)]


async def _commit_forever(url: str, statement: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            if not _waiting:
                _ready.clear()
                await _ready.wait()
                continue
            batch = _waiting[:]
            _waiting.clear()
            try:
                await conn.execute(statement, columns([request for request, _ in batch]))
            except psycopg.Error as exc:
                for _, future in batch:
                    future.set_exception(exc)
                continue
            for _, future in batch:
                future.set_result(None)


def _signed(body: bytes, header: bytes | None) -> bool:
    if header is None:
        return False
    parts = dict(part.split(b"=", 1) for part in header.split(b",") if b"=" in part)
    stamp = parts.get(b"t", b"")
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > 300:
        return False
    expected = hmac.new(_KEY, stamp + b"." + body, hashlib.sha256).hexdigest().encode()
    return hmac.compare_digest(expected, parts.get(b"v1", b""))


async def app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] == "lifespan":
        tasks = []
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                url = os.environ["BENCH_SKETCH_URL"]
                tasks.append(asyncio.create_task(_commit_forever(url, STATEMENTS[_KEEPS])))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for task in tasks:
                    task.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    status = 200  # GET /healthz (the harness's readiness check)
    if scope["method"] == "POST":
        header = next((v for k, v in scope["headers"] if k == b"stripe-signature"), None)
        status = 401
        if _signed(body, header):
            future = asyncio.get_running_loop().create_future()
            _waiting.append((row(_KEEPS, body, scope["headers"]), future))
            _ready.set()
            await future
            status = 200
    await send({"type": "http.response.start", "status": status, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
