"""Signed HTTP forwarding end to end: outbox rows -> relay -> a real merchant server.

The merchant (Starlette on a real uvicorn) verifies every request with the OFFICIAL
`standardwebhooks` library and de-duplicates on `webhook-id`, like a merchant should. The
big run uses the real `porteiro relay` command in a subprocess, SIGKILLed halfway.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import signal
import sqlite3
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro.config import DestinationConfig
from porteiro.config.load import parse_config
from porteiro.http.app import create_app
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState
from porteiro.retry import RetryPolicy
from porteiro.runtime import Runtime, utc_now
from porteiro.sinks.fanout import outbox_rows
from porteiro.sinks.http_relay import HttpSender
from porteiro.sinks.message_id import message_id
from porteiro.sinks.relay import Relay
from porteiro.store import open_store
from porteiro.store.outbox import OutboxRow, OutboxStatus, OutboxStore, outbox_store
from tests.support.processes import porteiro, run_porteiro
from tests.support.servers import live_server
from tests.support.waiting import wait_until_async

SECRET = "whsec_" + base64.b64encode(b"merchant-secret-for-the-relay-01").decode()
ADMIN = {"authorization": "Bearer relay-admin"}
FAST_RETRY = RetryPolicy(
    max_attempts=50, base_delay_seconds=0.05, multiplier=2.0, max_delay_seconds=0.5, jitter=0.2
)
KINDS = (Kind.PAYMENT_CREATED, Kind.PAYMENT_PAID, Kind.PAYMENT_REFUNDED)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=5)


@dataclass
class Merchant:
    """A merchant endpoint: verifies, de-duplicates on webhook-id, records effects in the
    order it first saw them. `mode` scripts its answers."""

    mode: str = "ok"  # ok | chaos | fail | gone | down
    seed: int = 7
    hang_seconds: float = 1.0
    effects: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    seen: set[str] = field(default_factory=set)
    requests: int = 0
    bad_signatures: int = 0
    inflight: int = 0
    max_inflight: int = 0
    starts: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._webhook = Webhook(SECRET)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hooks", self.handle, methods=["POST"])])

    async def handle(self, request: Request) -> Response:
        self.requests += 1
        self.starts.append(time.monotonic())
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            return await self._answer(request)
        finally:
            self.inflight -= 1

    async def _answer(self, request: Request) -> Response:
        body = await request.body()
        try:
            payload = self._webhook.verify(body, dict(request.headers))
        except WebhookVerificationError:
            self.bad_signatures += 1
            return Response(status_code=400)
        if payload["id"] != request.headers["webhook-id"]:
            self.bad_signatures += 1
            return Response(status_code=400)
        if self.mode == "gone":
            return Response(status_code=410)
        if self.mode == "fail":
            return Response("boom", status_code=500)
        if self.mode == "down":
            return Response(status_code=503, headers={"retry-after": "0"})
        roll = self._rng.random() if self.mode == "chaos" else 1.0
        if roll < 0.3:
            return Response("flaky", status_code=500)
        self._effect(request.headers["webhook-id"], payload)
        if roll < 0.4:
            await asyncio.sleep(self.hang_seconds)  # applied, but the answer comes too late
        return Response(status_code=204)

    def _effect(self, msg_id: str, payload: dict[str, object]) -> None:
        if msg_id in self.seen:
            return  # the merchant's own de-duplication: one effect per event
        self.seen.add(msg_id)
        gateway_id = str(payload["gateway_event_id"])  # the plan's `gw_<event id>`
        self.effects[str(payload["object_id"])].append(int(gateway_id.removeprefix("gw_")))


@pytest.fixture
async def merchant() -> AsyncIterator[tuple[Merchant, str]]:
    shop = Merchant()
    async with live_server(shop.app(), lifespan="off") as url:
        yield shop, f"{url}/hooks"


def plan(
    payments: int, destinations: dict[str, DestinationConfig], kinds: tuple[Kind, ...] = KINDS
) -> list[OutboxRow]:
    """Outbox rows for `payments` payments of len(kinds) events each; event ids interleave
    payments (payment p's events are p, payments + p, ...) as concurrent traffic would."""
    rows: list[OutboxRow] = []
    for step, kind in enumerate(kinds):
        for p in range(1, payments + 1):
            event_id = step * payments + p
            object_id = f"pay_{p:05d}"
            event = ParsedEvent(f"gw_{event_id}", kind, kind.value, object_id, amount=1000)
            payment = Payment("shop", object_id, PaymentState.PAID, 1000, "BRL", 0, None, 1, T0, {})
            rows += outbox_rows(event_id, "shop", event, payment, destinations)
    return rows


def destination(url: str, **overrides: object) -> DestinationConfig:
    base = DestinationConfig(
        "merchant", url=url, secret=SECRET, concurrency=8, timeout_seconds=0.3,
        lease_seconds=2.0, circuit_failures=50, circuit_cooldown_seconds=0.3, retry=FAST_RETRY,
    )  # fmt: skip
    return replace(base, **overrides)  # type: ignore[arg-type]


async def opened(url: str) -> OutboxStore:
    store = open_store(url)
    await store.open()
    await store.upgrade()
    return outbox_store(store)


def assert_in_order(shop: Merchant, payments: int, events: int = len(KINDS)) -> None:
    for p in range(1, payments + 1):
        expected = [step * payments + p for step in range(events)]
        assert shop.effects[f"pay_{p:05d}"] == expected, f"payment {p} out of order"


# -- the acceptance run: 1,000 payments, a flaky merchant, a SIGKILLed relay ---------------


def _done(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
        return int(db.execute("SELECT COUNT(*) FROM outbox WHERE status = 'done'").fetchone()[0])


@pytest.mark.slow
async def test_every_event_arrives_once_in_order_despite_chaos_and_sigkill(
    tmp_path: Path, merchant: tuple[Merchant, str]
) -> None:
    shop, url = merchant
    shop.mode = "chaos"
    payments = 1000
    db_path = tmp_path / "porteiro.db"
    store = await opened(f"sqlite:///{db_path}")
    # Two events a payment (created, then paid) keep the run short on a shared machine.
    rows = plan(payments, {"merchant": destination(url)}, KINDS[:2])
    assert await store.enqueue_outbox(rows, utc_now()) == len(rows) == 2000
    await store.close()  # type: ignore[attr-defined]
    config = tmp_path / "porteiro.toml"
    config.write_text(f"""
[store]
url = "sqlite:///{db_path}"

[destinations.merchant]
url = "{url}"
secret = "{SECRET}"
concurrency = 32
timeout_seconds = 0.3
lease_seconds = 2
circuit_failures = 50
circuit_cooldown_seconds = 0.3

[destinations.merchant.retry]
max_attempts = 50
base_delay_seconds = 0.05
multiplier = 2.0
max_delay_seconds = 0.5
""")
    log = tmp_path / "relay.log"
    args = ("relay", "--poll-interval", "0.05")
    first = porteiro(config, *args, log=log)
    try:
        await wait_until_async(lambda: _done(db_path) >= 700, "a third delivered", within=60)
    finally:
        first.kill(signal.SIGKILL)  # mid-run: rows in flight stay `delivering` until the lease ends
    killed_at = _done(db_path)
    assert killed_at < len(rows), "the relay finished before it could be killed"
    second = porteiro(config, *args, log=log)
    try:
        await wait_until_async(
            lambda: _done(db_path) == len(rows),
            f"all delivered\n{log.read_text()[-3000:]}",
            within=75,
        )
    finally:
        second.kill(signal.SIGTERM)
    assert shop.bad_signatures == 0
    assert len(shop.seen) == len(rows)  # every event arrived...
    # ...under its stable id (of its source and key), not a row number.
    assert shop.seen == {message_id("shop", f"gw_{row.event_id}") for row in rows}
    assert sum(len(ids) for ids in shop.effects.values()) == len(rows)  # ...with one effect
    assert shop.requests > len(rows)  # failures and timeouts made the relay retry
    assert_in_order(shop, payments, 2)


# -- in-process relays: the rules one at a time ---------------------------------------------


@dataclass
class JumpingClock:
    """Wall-clock time plus an offset a test moves forward: a cool-down far longer than
    any test runs ends exactly when the test says so, not after a real-time window."""

    offset: timedelta = timedelta(0)

    def __call__(self) -> datetime:
        return utc_now() + self.offset

    def jump(self, by: timedelta) -> None:
        self.offset += by


@asynccontextmanager
async def relaying(
    store: OutboxStore, dest: DestinationConfig, clock: Callable[[], datetime] = utc_now
) -> AsyncIterator[None]:
    """A relay for `dest` running in the background of the block."""
    relay = Relay(store, dest, HttpSender(dest, clock=clock), clock=clock, poll_interval=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


@pytest.fixture
async def outbox(store_url: str) -> AsyncIterator[OutboxStore]:
    """A migrated store, SQLite and PostgreSQL in turn."""
    store = await opened(store_url)
    try:
        yield store
    finally:
        await store.close()  # type: ignore[attr-defined]


async def backlog(store: OutboxStore) -> dict[str, int]:
    return (await store.outbox_backlog()).get("merchant", {})


async def test_410_disables_until_resumed_and_pause_accumulates(
    outbox: OutboxStore, merchant: tuple[Merchant, str]
) -> None:
    shop, url = merchant
    dest = destination(url)
    shop.mode = "gone"
    async with relaying(outbox, dest):
        await outbox.enqueue_outbox(plan(3, {"merchant": dest}), utc_now())
        await wait_until_async(
            lambda: _disabled(outbox), "the destination to be disabled", within=5
        )
        reason = (await outbox.destination_states())["merchant"].disabled_reason
        assert reason is not None and "410" in reason
        tried = shop.requests
        await asyncio.sleep(0.3)
        assert shop.requests == tried, "a disabled destination got more requests"
        assert (await backlog(outbox))["dead"] == 0  # nothing dropped, nothing dead
        shop.mode = "ok"
        await outbox.set_destination_state("merchant", utc_now(), paused=True, enable=True)
        await asyncio.sleep(0.3)
        assert shop.requests == tried, "a paused destination got requests"
        await outbox.set_destination_state("merchant", utc_now(), paused=False)
        await wait_until_async(
            lambda: len(shop.seen) == 9, "the backlog to flow on resume", within=10
        )
    assert_in_order(shop, 3)


async def _disabled(store: OutboxStore) -> bool:
    state = (await store.destination_states()).get("merchant")
    return state is not None and state.disabled_reason is not None


async def test_dead_rows_block_their_payment_until_redriven(
    outbox: OutboxStore, merchant: tuple[Merchant, str]
) -> None:
    shop, url = merchant
    dest = destination(url, retry=replace(FAST_RETRY, max_attempts=2))
    shop.mode = "fail"
    async with relaying(outbox, dest):
        await outbox.enqueue_outbox(plan(4, {"merchant": dest}), utc_now())
        await wait_until_async(
            lambda: _count(outbox, "dead", 4), "each payment's first row dead", within=10
        )
        dead = (await outbox.list_outbox("merchant", OutboxStatus.DEAD, None, 50)).items
        assert {row.event_id for row in dead} == {1, 2, 3, 4}
        assert all(row.last_status == "500" for row in dead)
        assert all("HTTP 500" in (row.last_error or "") for row in dead)
        await asyncio.sleep(0.2)
        assert (await backlog(outbox))["pending"] == 8  # the later rows wait behind them
        shop.mode = "ok"
        assert await outbox.redrive_outbox("merchant", utc_now()) == 4
        await wait_until_async(
            lambda: len(shop.seen) == 12, "everything after the redrive", within=10
        )
    assert_in_order(shop, 4)


async def _count(store: OutboxStore, status: str, expected: int) -> bool:
    return (await backlog(store)).get(status, 0) == expected


async def test_circuit_breaker_stops_hammering_then_probes(
    outbox: OutboxStore, merchant: tuple[Merchant, str]
) -> None:
    shop, url = merchant
    quick = replace(FAST_RETRY, base_delay_seconds=0.01, max_delay_seconds=0.01)
    # A 60 s cool-down that only the clock's jumps end (signatures stay inside the
    # merchant's 5-minute tolerance: two jumps of 61 s).
    cooldown = timedelta(seconds=60)
    dest = destination(
        url, circuit_failures=3, circuit_cooldown_seconds=cooldown.total_seconds(), retry=quick
    )
    clock = JumpingClock()
    shop.mode = "fail"
    async with relaying(outbox, dest, clock):
        await outbox.enqueue_outbox(plan(20, {"merchant": dest}), utc_now())
        await wait_until_async(lambda: _circuit_open(outbox), "the circuit to open", within=5)
        # Requests sent before it opened may still be landing (each within the sender's
        # 0.3 s timeout): let them, then count.
        await _polled(outbox)
        opened_at = shop.requests
        await _polled(outbox)  # the relay looked again, and sent nothing
        assert shop.requests == opened_at
        clock.jump(cooldown + timedelta(seconds=1))  # past it: one probe, which fails
        await wait_until_async(lambda: shop.requests == opened_at + 1, "one probe", within=5)
        await wait_until_async(lambda: _circuit_open(outbox), "the circuit to reopen", within=5)
        await _polled(outbox)
        assert shop.requests == opened_at + 1  # reopened for another cool-down
        shop.mode = "ok"
        clock.jump(cooldown + timedelta(seconds=1))
        await wait_until_async(
            lambda: len(shop.seen) == 60, "recovery after a good probe", within=15
        )
        assert (await outbox.destination_states())["merchant"].circuit_open_until is None


async def _polled(store: OutboxStore) -> None:
    """Long enough for the relay (polling every 0.05 s) to have looked several times: an
    absence is only shown by letting it look."""
    for _ in range(10):
        await backlog(store)
        await asyncio.sleep(0.05)


async def _circuit_open(store: OutboxStore) -> bool:
    state = (await store.destination_states()).get("merchant")
    return state is not None and state.circuit_open_until is not None


async def test_rate_and_concurrency_limits(
    outbox: OutboxStore, merchant: tuple[Merchant, str]
) -> None:
    shop, url = merchant
    shop.hang_seconds = 0.2
    shop.mode = "chaos"  # some answers hang 0.2 s: requests overlap
    dest = destination(url, concurrency=3, rate_per_second=20.0, timeout_seconds=1.0)
    async with relaying(outbox, dest):
        await outbox.enqueue_outbox(plan(10, {"merchant": dest}), utc_now())
        await wait_until_async(lambda: len(shop.seen) == 30, "all rows", within=20)
    assert shop.max_inflight <= 3
    # 20/s: a lower bound on the whole run only (load can only make it slower); the even
    # spacing itself is the gateway RateLimiter's, checked with a fake clock.
    assert shop.starts[-1] - shop.starts[0] >= (len(shop.starts) - 1) / 20 * 0.9


async def test_retry_after_is_honoured(outbox: OutboxStore) -> None:
    starts: list[float] = []

    async def answer_503_then_ok(request: Request) -> Response:
        starts.append(time.monotonic())
        if len(starts) == 1:
            return Response(status_code=503, headers={"retry-after": "1"})
        return Response(status_code=200)

    app = Starlette(routes=[Route("/hooks", answer_503_then_ok, methods=["POST"])])
    async with live_server(app, lifespan="off") as base:
        dest = destination(f"{base}/hooks")
        async with relaying(outbox, dest):
            await outbox.enqueue_outbox(plan(1, {"merchant": dest})[:1], utc_now())
            await wait_until_async(lambda: _count(outbox, "done", 1), "the retried row", within=5)
    assert len(starts) == 2 and starts[1] - starts[0] >= 0.95


# -- operating it: CLI and admin API ---------------------------------------------------------


def _config_file(tmp_path: Path, store_url: str, url: str) -> Path:
    path = tmp_path / "ops.toml"
    path.write_text(f"""
[store]
url = "{store_url}"

[admin]
token = "relay-admin"

[destinations.merchant]
url = "{url}"
secret = "{SECRET}"
kinds = ["payment.created", "payment.paid", "payment.refunded"]
""")
    return path


async def test_cli_lists_pauses_resumes_and_redrives(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'ops.db'}"
    store = await opened(store_url)
    dest = destination("http://127.0.0.1:9/hooks")
    await store.enqueue_outbox(plan(2, {"merchant": dest}), utc_now())
    claims = await store.claim_outbox("merchant", "r", 10, LEASE, utc_now())
    for claim in claims:
        await store.dead_outbox(claim, "HTTP 500: boom", "500", utc_now())
    await store.close()  # type: ignore[attr-defined]
    config = _config_file(tmp_path, store_url, "http://127.0.0.1:9/hooks")
    [listed] = [
        json.loads(line)
        for line in run_porteiro(config, "destinations", "list", "--json").splitlines()
    ]
    assert listed["name"] == "merchant" and listed["status"] == "active"
    assert listed["backlog"] == {"pending": 4, "delivering": 0, "done": 0, "dead": 2}
    assert "paused" in run_porteiro(config, "destinations", "pause", "merchant")
    [listed] = [
        json.loads(line)
        for line in run_porteiro(config, "destinations", "list", "--json").splitlines()
    ]
    assert listed["status"] == "paused"
    dead = [
        json.loads(line)
        for line in run_porteiro(
            config, "destinations", "outbox", "merchant", "--status", "dead", "--json"
        ).splitlines()
    ]
    assert [row["event_id"] for row in dead] == [2, 1] and dead[0]["last_error"] == "HTTP 500: boom"
    assert "2 dead row(s)" in run_porteiro(config, "destinations", "redrive", "merchant")
    assert "active" in run_porteiro(config, "destinations", "resume", "merchant")
    [listed] = [
        json.loads(line)
        for line in run_porteiro(config, "destinations", "list", "--json").splitlines()
    ]
    assert listed["status"] == "active" and listed["backlog"]["dead"] == 0


async def test_admin_api(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'api.db'}"
    config = parse_config(
        {
            "store": {"url": store_url},
            "admin": {"token": "relay-admin"},
            "destinations": {"merchant": {"url": "http://127.0.0.1:9/hooks", "secret": SECRET}},
        },
        {},
    )
    runtime = Runtime.build(config)
    app = create_app(runtime, migrate=True)
    async with app.router.lifespan_context(app):
        store = outbox_store(runtime.store)
        dest = config.destinations["merchant"]
        await store.enqueue_outbox(plan(3, {"merchant": dest}), utc_now())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://p.test") as http:
            assert (await http.get("/api/destinations")).status_code == 401
            found = (await http.get("/api/destinations", headers=ADMIN)).json()["items"]
            assert [d["name"] for d in found] == ["merchant"]
            assert found[0]["backlog"]["pending"] == 9
            paused = await http.post("/api/destinations/merchant/pause", headers=ADMIN)
            assert paused.json()["status"] == "paused"
            assert (
                await http.post("/api/destinations/nope/pause", headers=ADMIN)
            ).status_code == 404
            resumed = await http.post("/api/destinations/merchant/resume", headers=ADMIN)
            assert resumed.json()["status"] == "active"
            page = (
                await http.get("/api/destinations/merchant/outbox?limit=4", headers=ADMIN)
            ).json()
            assert [row["event_id"] for row in page["items"]] == [9, 8, 7, 6]
            assert page["items"][0]["message_id"] == message_id("shop", "gw_9")
            rest = await http.get(
                f"/api/destinations/merchant/outbox?cursor={page['next']}", headers=ADMIN
            )
            assert [row["event_id"] for row in rest.json()["items"]] == [5, 4, 3, 2, 1]
            bad = await http.get("/api/destinations/merchant/outbox?status=lost", headers=ADMIN)
            assert bad.status_code == 400
            claims = await store.claim_outbox("merchant", "r", 2, LEASE, utc_now())
            for claim in claims:
                await store.dead_outbox(claim, "boom", None, utc_now())
            one = await http.post(
                "/api/destinations/merchant/redrive",
                json={"ids": [claims[0].row.id]},
                headers=ADMIN,
            )
            assert one.json() == {"redriven": 1}
            rest_dead = await http.post("/api/destinations/merchant/redrive", headers=ADMIN)
            assert rest_dead.json() == {"redriven": 1}
            wrong = await http.post(
                "/api/destinations/merchant/redrive", json={"id": 1}, headers=ADMIN
            )
            assert wrong.status_code == 400
