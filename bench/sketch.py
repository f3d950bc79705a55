"""A reference, not a contender: the lean sketch of a durable webhook ack that issue 4
sizes at "about a third of the ceiling". Stripe's HMAC over `t.body` with a 5-minute
tolerance, the event id read from the JSON, and a group commit: every request waiting
goes into ONE `INSERT ... ON CONFLICT DO NOTHING` of (id, body) on one connection
(`synchronous_commit` on); 200 once its batch committed, 401 on a bad signature.

Nothing else: no headers kept, no parsed columns, no duplicate counts, no timeouts, no
metrics, no outage handling. `--scenarios sketch` runs it beside the others (not in the
default run), so the distance from Porteiro to the sketch is measured on one machine.
Served like bench/hello.py; the table is made by the benchmark (phases.start_sketch).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
import psycopg

from bench.hello import BODY, HEADERS, Message
from bench.requests import STRIPE_SECRET

TABLE = "sketch_events"
INSERT = (
    f"INSERT INTO {TABLE} (id, body) SELECT * FROM unnest(%s::text[], %s::bytea[])"
    " ON CONFLICT DO NOTHING"
)
_KEY = STRIPE_SECRET.encode()
_waiting: list[tuple[str, bytes, asyncio.Future[None]]] = []
_ready = asyncio.Event()


async def _commit_forever(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            if not _waiting:
                _ready.clear()
                await _ready.wait()
                continue
            batch = _waiting[:]
            _waiting.clear()
            try:
                await conn.execute(INSERT, ([b[0] for b in batch], [b[1] for b in batch]))
            except psycopg.Error as exc:
                for _, _, future in batch:
                    future.set_exception(exc)
                continue
            for _, _, future in batch:
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
                tasks.append(asyncio.create_task(_commit_forever(url)))
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
            _waiting.append((orjson.loads(body)["id"], body, future))
            _ready.set()
            await future
            status = 200
    await send({"type": "http.response.start", "status": status, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
