"""In-process handlers and the outbox fan-out inside the ledger transaction, on both stores.

The example shop (examples/shop) keeps an `orders` table in the store's own database; its
handlers run on the store's connection, so an order changes exactly once per applied
event, and a handler that raises rolls its event back (no order change, no outbox row)
while the rest of the batch commits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import porteiro
from porteiro.config import (
    Config,
    DestinationConfig,
    HandlersConfig,
    SourceConfig,
    WorkerConfig,
)
from porteiro.config.load import parse_config
from porteiro.errors import ConfigError
from porteiro.handlers import HandlerContext, Handlers, from_module, load_handlers
from porteiro.model import EventStatus, InboundRequest, PaymentState
from porteiro.providers import build_provider
from porteiro.retry import RetryPolicy
from porteiro.runtime import Runtime
from porteiro.store.base import Store
from porteiro.store.sqlite.executor import sqlite_placeholders
from porteiro.worker import Worker
from tests.support.faults import fail_batches

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
RETRY = RetryPolicy(max_attempts=3, base_delay_seconds=10, multiplier=2, jitter=0.0)
DESTINATIONS = {
    "erp": DestinationConfig("erp", url="http://127.0.0.1:1/", secret="whsec_MTIz"),
    "bus": DestinationConfig("bus", rabbitmq_url="amqp://x", kinds=("payment.paid",)),
}


@pytest.fixture
def shop(monkeypatch: pytest.MonkeyPatch) -> Handlers:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return load_handlers("shop.payments")


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now


class Db:
    """Direct SQL on the store's database, outside Porteiro (what the merchant sees)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.url.startswith("sqlite:///"):
            db = sqlite3.connect(self.url.removeprefix("sqlite:///"), isolation_level=None)
            try:
                cursor = db.executescript(sql) if not params and ";" in sql else None
                cursor = cursor or db.execute(sqlite_placeholders(sql), params)
                return list(cursor.fetchall())
            finally:
                db.close()
        with psycopg.connect(self.url, autocommit=True) as conn:
            pg_cursor = conn.execute(sql.encode(), params)
            return list(pg_cursor.fetchall()) if pg_cursor.description else []

    def order(self, reference: str) -> tuple[Any, ...]:
        (row,) = self.run(
            "SELECT status, paid_events, last_event FROM orders WHERE reference = %s",
            (reference,),
        )
        return row

    def outbox(self) -> list[tuple[str, int]]:
        return [
            (str(d), int(e))
            for d, e in self.run("SELECT destination, event_id FROM outbox ORDER BY 2, 1")
        ]


@pytest.fixture
def db(store: Store, store_url: str) -> Db:
    found = Db(store_url)
    found.run((EXAMPLES / "shop" / "schema.sql").read_text())
    for n in range(1, 4):
        found.run(
            "INSERT INTO orders (reference, amount) VALUES (%s, %s)", (f"order-{n}", 1000 * n)
        )
    return found


@pytest.fixture
async def runtime(store: Store) -> AsyncIterator[Runtime]:
    sources = {"std": SourceConfig(name="std", provider="standard", secrets=(SECRET,))}
    config = Config(
        sources=sources,
        worker=WorkerConfig(batch_size=32, lease_seconds=30, retry=RETRY, prefetch=False),
        destinations=DESTINATIONS,
    )
    providers = {name: build_provider(source) for name, source in sources.items()}
    async with httpx.AsyncClient() as http:
        yield Runtime(config, store, providers, http, clock=Clock())


def body(event_id: str, kind: str, n: int, second: int = 0) -> bytes:
    occurred = (T0 - timedelta(minutes=10) + timedelta(seconds=second)).isoformat()
    return json.dumps(
        {
            "id": event_id,
            "type": kind,
            "object_id": f"pay_{n}",
            "reference": f"order-{n}",
            "amount": 1000 * n,
            "currency": "BRL",
            "occurred_at": occurred,
        }
    ).encode()


async def deliver(runtime: Runtime, raw: bytes) -> int:
    """What the receiver does: sign, verify, parse, record; returns the event id."""
    provider = runtime.providers["std"]
    signed = provider.sign(raw, runtime.clock())
    request = InboundRequest(
        source="std",
        method="POST",
        path="/webhooks/std",
        query="",
        headers=tuple((name.lower(), value) for name, value in signed.headers.items()),
        body=signed.body,
        peer="127.0.0.1",
        received_at=runtime.clock(),
    )
    provider.verify(request, runtime.clock())
    result = await runtime.store.record_delivery(request, provider.parse(request))
    return result.event_ids[0]


async def status(store: Store, event_id: int) -> tuple[EventStatus, str | None]:
    found = await store.get_event(event_id)
    assert found is not None
    return found.status, found.last_error


async def test_paid_runs_the_handler_once_atomically(
    runtime: Runtime, db: Db, shop: Handlers
) -> None:
    created = await deliver(runtime, body("gw_c1", "payment.created", 1))
    paid = await deliver(runtime, body("gw_p1", "payment.paid", 1, second=5))
    # The worker loads the module `[handlers] module` names.
    runtime.config = dataclasses.replace(runtime.config, handlers=HandlersConfig("shop.payments"))
    worker = Worker(runtime)
    assert worker.handlers is not None and len(worker.handlers) == len(shop)
    assert await worker.run_once() == 2
    assert db.order("order-1") == ("paid", 1, f"evt_{paid}")
    assert db.order("order-2") == ("pending", 0, None)
    # Fan-out: `erp` wants every kind, `bus` only payment.paid.
    assert db.outbox() == [("erp", created), ("bus", paid), ("erp", paid)]
    # A gateway retry of the same event is a duplicate: nothing runs.
    assert await deliver(runtime, body("gw_p1", "payment.paid", 1, second=5)) == paid
    assert await worker.run_once() == 0
    # A replay re-applies it: the ledger says duplicate, so no handler, no new outbox row.
    assert await runtime.store.requeue([created, paid], runtime.clock()) == 2
    assert await worker.run_once() == 2
    assert await status(runtime.store, paid) == (EventStatus.DONE, None)
    assert db.order("order-1") == ("paid", 1, f"evt_{paid}")
    assert db.outbox() == [("erp", created), ("bus", paid), ("erp", paid)]
    # A second, different paid event for the payment changes nothing: no effect, no run.
    await deliver(runtime, body("gw_p1b", "payment.paid", 1, second=9))
    assert await worker.run_once() == 1
    assert db.order("order-1") == ("paid", 1, f"evt_{paid}")
    assert len(db.outbox()) == 3


async def test_raising_handler_retries_then_dead_letters_alone(
    runtime: Runtime, db: Db, shop: Handlers
) -> None:
    broken = Handlers()

    @broken.on("payment.paid")
    async def paid(ctx: HandlerContext) -> None:
        await shop.dispatch(ctx)  # the order update runs, then is rolled back
        if ctx.reference == "order-2":
            raise RuntimeError("ERP rejected order-2")

    ids = [await deliver(runtime, body(f"gw_p{n}", "payment.paid", n)) for n in (1, 2, 3)]
    bad = ids[1]
    clock = runtime.clock
    assert isinstance(clock, Clock)
    worker = Worker(runtime, handlers=broken)
    assert await worker.run_once() == 3
    error = "<locals>.paid: RuntimeError: ERP rejected order-2"  # after HandlerFailed: module.
    assert (await status(runtime.store, bad))[0] is EventStatus.RETRYING
    assert str((await status(runtime.store, bad))[1]).startswith("HandlerFailed: tests.")
    assert error in str((await status(runtime.store, bad))[1])
    for good in (ids[0], ids[2]):
        assert await status(runtime.store, good) == (EventStatus.DONE, None)
    assert db.order("order-1")[:2] == ("paid", 1)
    assert db.order("order-3")[:2] == ("paid", 1)
    assert db.order("order-2") == ("pending", 0, None)  # rolled back with its event
    assert await runtime.store.get_payment("std", "pay_2") is None
    assert all(event != bad for _, event in db.outbox())  # no outbox row either
    for delay in (10, 20):
        clock.now += timedelta(seconds=delay)
        assert await worker.run_once() == 1
    stored = await runtime.store.get_event(bad)
    assert stored is not None and stored.status is EventStatus.DEAD and stored.attempts == 3
    assert error in str(stored.last_error)
    assert db.order("order-2") == ("pending", 0, None)
    # Fixed handler (the shop's own), then a redrive: applied exactly once.
    assert await runtime.store.requeue([bad], runtime.clock()) == 1
    fixed = Worker(runtime, handlers=shop)
    assert await fixed.run_once() == 1
    assert await status(runtime.store, bad) == (EventStatus.DONE, None)
    assert db.order("order-2") == ("paid", 1, f"evt_{bad}")
    assert sorted(e for d, e in db.outbox() if d == "erp") == sorted(ids)
    assert await fixed.run_once() == 0
    payment = await runtime.store.get_payment("std", "pay_2")
    assert payment is not None and payment.state is PaymentState.PAID


async def test_handler_sql_error_fails_only_its_event(runtime: Runtime, db: Db) -> None:
    handlers = Handlers()

    @handlers.on("payment.paid")
    async def paid(ctx: HandlerContext) -> None:
        table = "no_such_table" if ctx.reference == "order-1" else "orders"
        sql = f"UPDATE {table} SET status = 'paid' WHERE reference = %s"
        await ctx.execute(sql, (ctx.reference,))

    one = await deliver(runtime, body("gw_p1", "payment.paid", 1))
    two = await deliver(runtime, body("gw_p2", "payment.paid", 2))
    assert await Worker(runtime, handlers=handlers).run_once() == 2
    assert (await status(runtime.store, one))[0] is EventStatus.RETRYING
    assert await status(runtime.store, two) == (EventStatus.DONE, None)
    assert db.order("order-2")[0] == "paid"
    assert [e for _, e in db.outbox()] == [two, two]


async def test_per_event_fallback_keeps_the_effects(
    runtime: Runtime, db: Db, shop: Handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_batches(runtime, monkeypatch)  # on the real store: the per-event fallback runs
    one = await deliver(runtime, body("gw_p1", "payment.paid", 1))
    two = await deliver(runtime, body("gw_p2", "payment.paid", 2))
    assert await Worker(runtime, handlers=shop).run_once() == 2
    assert db.order("order-1") == ("paid", 1, f"evt_{one}")
    assert db.order("order-2") == ("paid", 1, f"evt_{two}")
    assert db.outbox() == [("bus", one), ("erp", one), ("bus", two), ("erp", two)]


async def test_handlers_read_through_ctx_execute(runtime: Runtime, db: Db) -> None:
    seen: list[Any] = []
    handlers = Handlers()

    @handlers.on("*")
    async def everything(ctx: HandlerContext) -> None:
        result = await ctx.execute(
            "SELECT amount FROM orders WHERE reference = %(ref)s", {"ref": ctx.reference}
        )
        seen.append((ctx.kind, ctx.payment.state.value, result.rows, ctx.dialect))

    await deliver(runtime, body("gw_a1", "payment.authorized", 3))
    assert await Worker(runtime, handlers=handlers).run_once() == 1
    dialect = "sqlite" if db.url.startswith("sqlite") else "postgresql"
    assert seen == [("payment.authorized", "authorized", [{"amount": 3000}], dialect)]


async def test_awaiting_anything_but_execute_fails_on_sqlite(runtime: Runtime, db: Db) -> None:
    handlers = Handlers()

    @handlers.on("payment.paid")
    async def slow(ctx: HandlerContext) -> None:
        await asyncio.sleep(0)
        await ctx.execute("UPDATE orders SET status = 'paid' WHERE reference = %s", ("order-1",))

    one = await deliver(runtime, body("gw_p1", "payment.paid", 1))
    assert await Worker(runtime, handlers=handlers).run_once() == 1
    state, error = await status(runtime.store, one)
    if db.url.startswith("sqlite"):
        # The transaction runs on the store's thread, without an event loop.
        assert state is EventStatus.RETRYING and "awaited something other" in str(error)
        assert db.order("order-1")[0] == "pending"
    else:
        assert (state, error) == (EventStatus.DONE, None)
        assert db.order("order-1")[0] == "paid"


def test_registration_rules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    handlers = Handlers()
    with pytest.raises(ValueError, match="kinds"):
        handlers.on("payment.nope")
    with pytest.raises(TypeError, match="async def"):
        handlers.add("payment.paid", lambda ctx: None)  # type: ignore[arg-type,return-value]
    # `@porteiro.on` marks module functions: the module is the registry.
    (tmp_path / "merchant_mod.py").write_text(
        "import porteiro\n"
        "@porteiro.on('payment.paid', 'payment.refunded')\n"
        "async def paid(ctx):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = load_handlers("merchant_mod")
    assert len(found.for_kind("payment.paid")) == len(found.for_kind("payment.refunded")) == 1
    with pytest.raises(ConfigError, match="cannot be imported"):
        load_handlers("no_such_merchant_module")
    assert len(from_module(porteiro)) == 0


def test_config_names_the_module() -> None:
    config = parse_config({"handlers": {"module": "shop.payments"}}, {})
    assert config.handlers == HandlersConfig("shop.payments")
    with pytest.raises(ConfigError, match="unknown"):
        parse_config({"handlers": {"modul": "x"}}, {})


def test_sqlite_placeholders() -> None:
    assert (
        sqlite_placeholders("a = %s AND b = %(b)s AND c LIKE 'x%%'")
        == "a = ? AND b = :b AND c LIKE 'x%'"
    )
