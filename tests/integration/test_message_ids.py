"""The forwarded id means one event everywhere.

The same deliveries into two SQLite stores and a PostgreSQL one give each event the same
id whatever row numbers each store gave it, and no id names two events; replays and
redrives keep it; a row enqueued before migration 0006 keeps the `evt_<event id>` it was
sent with, on the wire too. Deliveries are signed by the real `standard` adapter, parsed
and recorded as the receiver does, applied by the real worker.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro import replay
from porteiro.config import Config, DestinationConfig, SourceConfig, WorkerConfig
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState
from porteiro.providers import build_provider
from porteiro.runtime import Runtime, utc_now
from porteiro.sinks.fanout import outbox_rows
from porteiro.sinks.http_relay import HttpSender
from porteiro.sinks.message_id import message_id
from porteiro.store import open_store
from porteiro.store.base import Store
from porteiro.store.migrations import load_migrations
from porteiro.store.outbox import StoredOutboxRow, outbox_store
from porteiro.store.postgres import queries as pg_queries
from porteiro.store.sqlite import queries as sqlite_queries
from porteiro.worker import Worker
from tests.support.database import execute, sqlite_path
from tests.support.events import event_body, lifecycle_bodies
from tests.support.inbound import inbound
from tests.support.servers import live_server

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
LEASE = timedelta(seconds=30)
SOURCES = {"std": SourceConfig(name="std", provider="standard", secrets=(SECRET,))}
ERP = DestinationConfig("erp", url="http://127.0.0.1:9/hooks", secret=SECRET)


async def opened(url: str) -> Store:
    store = open_store(url)
    await store.open()
    await store.upgrade()
    return store


@asynccontextmanager
async def running(store: Store) -> AsyncIterator[Runtime]:
    config = Config(
        sources=SOURCES, destinations={"erp": ERP}, worker=WorkerConfig(batch_size=16)
    )  # fmt: skip
    async with httpx.AsyncClient() as http:
        yield Runtime(config, store, {"std": build_provider(SOURCES["std"])}, http, clock=utc_now)


async def deliver(runtime: Runtime, bodies: Sequence[bytes]) -> None:
    """Record each body as the receiver would, then let the worker apply everything."""
    provider = runtime.providers["std"]
    for raw in bodies:
        signed = provider.sign(raw, utc_now())
        request = inbound("std", signed.body, signed.headers, received_at=utc_now())
        provider.verify(request, utc_now())
        await runtime.store.record_delivery(request, provider.parse(request))
    worker = Worker(runtime)
    while await worker.run_once():
        pass


async def forwarded(store: Store) -> dict[str, StoredOutboxRow]:
    """The destination's outbox rows by the gateway's event id (the dedup key)."""
    page = await outbox_store(store).list_outbox("erp", None, None, 1000)
    return {str(row.payload["gateway_event_id"]): row for row in page.items}


async def forwarded_after(url: str, bodies: Sequence[bytes]) -> dict[str, StoredOutboxRow]:
    store = await opened(url)
    try:
        async with running(store) as runtime:
            await deliver(runtime, bodies)
        return await forwarded(store)
    finally:
        await store.close()


async def test_the_same_deliveries_get_the_same_ids_on_every_store(
    sqlite_url: str, pg_url: str, tmp_path: Path
) -> None:
    payments = range(1, 6)
    traffic = [body for p in payments for body in lifecycle_bodies(p, T0)]
    # The second SQLite store took other traffic first, then this one, payments in the
    # opposite order: it numbers the same events otherwise.
    other = [event_body(f"evt_other_{n}", object_id=f"pay_other_{n}") for n in range(7)]
    later = [body for p in reversed(payments) for body in lifecycle_bodies(p, T0)]
    first = await forwarded_after(sqlite_url, traffic)
    moved = await forwarded_after(pg_url, traffic)
    second_all = await forwarded_after(f"sqlite:///{tmp_path / 'second.db'}", other + later)
    second = {key: row for key, row in second_all.items() if not key.startswith("evt_other")}

    assert len(first) == 4 * len(payments)
    assert set(first) == set(moved) == set(second)
    for key, row in first.items():
        expected = message_id("std", key)
        assert row.message_id == moved[key].message_id == second[key].message_id == expected
        assert row.payload["id"] == moved[key].payload["id"] == expected
    assert any(first[key].event_id != second[key].event_id for key in first)

    # No id names two events, across the stores as within each, although the second
    # store gave its other events row numbers the first store gave to these.
    others = [row for key, row in second_all.items() if key.startswith("evt_other")]
    assert {row.event_id for row in others} & {row.event_id for row in first.values()}
    named: dict[str, str] = {}
    for rows in (first, moved, second_all):
        for key, row in rows.items():
            assert named.setdefault(row.message_id, key) == key, "one id for two events"
    assert len(named) == len(first) + len(others)


async def test_replays_and_redrives_keep_the_id(store: Store) -> None:
    async with running(store) as runtime:
        await deliver(runtime, [lifecycle_bodies(p, T0)[0] for p in (1, 2)])
        before = await forwarded(store)
        assert {key: row.message_id for key, row in before.items()} == {
            key: message_id("std", key) for key in ("evt_00001_0", "evt_00002_0")
        }
        # Re-parsed and requeued, the events are applied again: the outbox keeps its rows.
        event_ids = [row.event_id for row in before.values()]
        assert (await replay.reparse(runtime, event_ids, dry_run=False)).event_ids
        await deliver(runtime, [])
        assert (await replay.requeue(runtime, event_ids, dry_run=False)).event_ids
        await deliver(runtime, [])
        assert await forwarded(store) == before

    # Dead-lettered, then redriven: the next claim carries the same ids.
    outbox = outbox_store(store)
    claims = await outbox.claim_outbox("erp", "relay", 10, LEASE, utc_now())
    assert len(claims) == 2
    for claim in claims:
        assert await outbox.dead_outbox(claim, "HTTP 500: boom", "500", utc_now())
    assert await outbox.redrive_outbox("erp", utc_now()) == 2
    again = await outbox.claim_outbox("erp", "relay", 10, LEASE, utc_now())
    assert sorted(claim.row.message_id for claim in again) == sorted(
        row.message_id for row in before.values()
    )


# -- rows enqueued before migration 0006 ----------------------------------------------------

OLD_PAYLOAD = {"id": "evt_7", "type": "payment.paid", "source": "std", "object_id": "pay_old"}
OLD_ROW = f"""
INSERT INTO outbox (destination, event_id, source, object_id, kind, payload,
                    next_attempt_at, created_at, updated_at)
VALUES ('erp', 7, 'std', 'pay_old', 'payment.paid', '{json.dumps(OLD_PAYLOAD)}',
        '2026-03-01T12:00:00.000000+00:00', '2026-03-01T12:00:00.000000+00:00',
        '2026-03-01T12:00:00.000000+00:00')"""


def migrate_up_to(store_url: str, last: int) -> None:
    """The schema an older release left: its migrations applied and recorded, no more."""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgres"
    wanted = [m for m in load_migrations(dialect) if int(m.version) <= last]
    if dialect == "sqlite":
        with closing(sqlite3.connect(sqlite_path(store_url))) as db, db:
            db.execute(sqlite_queries.BOOTSTRAP)
            for migration in wanted:
                for statement in sqlite_queries.statements(migration.sql):
                    db.execute(statement)
                db.execute(sqlite_queries.MARK_APPLIED, (migration.version, T0.isoformat()))
        return
    with psycopg.connect(store_url) as conn:
        conn.execute(pg_queries.BOOTSTRAP)
        for migration in wanted:
            conn.execute(migration.sql.encode())
            conn.execute(pg_queries.MARK_APPLIED, (migration.version,))


async def test_a_row_enqueued_before_0006_keeps_its_id_on_the_wire(store_url: str) -> None:
    migrate_up_to(store_url, 5)
    execute(store_url, OLD_ROW)
    received: list[tuple[dict[str, str], bytes]] = []

    async def hooks(request: Request) -> Response:
        received.append((dict(request.headers), await request.body()))
        return Response(status_code=204)

    store = open_store(store_url)
    await store.open()
    try:
        assert "0006" in await store.upgrade()
        async with live_server(Starlette(routes=[Route("/hooks", hooks, methods=["POST"])]),
                               lifespan="off") as url:  # fmt: skip
            erp = DestinationConfig("erp", url=f"{url}/hooks", secret=SECRET)
            outbox = outbox_store(store)
            event = ParsedEvent("gw_8", Kind.PAYMENT_PAID, "payment.paid", "pay_new")
            payment = Payment("std", "pay_new", PaymentState.PAID, 1000, "BRL", 0, None, 1, T0, {})
            assert (
                await outbox.enqueue_outbox(outbox_rows(8, "std", event, payment, {"erp": erp}), T0)
                == 1
            )
            page = await outbox.list_outbox("erp", None, None, 10)
            assert [(row.event_id, row.message_id) for row in page.items] == [
                (8, message_id("std", "gw_8")),
                (7, "evt_7"),  # what it was, or would have been, sent with before
            ]
            sender = HttpSender(erp, clock=utc_now)
            try:
                for claim in await outbox.claim_outbox("erp", "relay", 10, LEASE, utc_now()):
                    assert (await sender.send(claim.row)).ok
            finally:
                await sender.aclose()
    finally:
        await store.close()
    verifier = Webhook(SECRET)
    sent = {}
    for headers, body in received:
        verified = verifier.verify(body, headers)
        assert verified["id"] == headers["webhook-id"]
        sent[verified["object_id"]] = headers["webhook-id"]
    assert sent == {"pay_old": "evt_7", "pay_new": message_id("std", "gw_8")}
