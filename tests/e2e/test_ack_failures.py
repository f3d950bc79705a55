"""Every failure on the ack path answers 503 with Retry-After, never a 500 (issue 22).

Each failure class the store can meet while a webhook waits for its durable write: a
commit slower than `store_timeout_seconds`, an exhausted connection pool, the connection
killed mid-batch, PostgreSQL refusing connections, a statement the database refuses.
Real stores, a real uvicorn, on both event loops `porteiro serve` may run (asyncio, and
uvloop when importable), and one real `porteiro serve` process. Each test also checks
that the loop reported nothing (no "Future exception was never retrieved"), that the
next delivery after the fault is stored, and that every delivery acknowledged was.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Coroutine, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvloop

from porteiro.config import ServerConfig
from porteiro.http.app import create_app
from porteiro.runtime import Runtime
from porteiro.store.base import EventFilter
from porteiro.store.postgres.store import PostgresStore
from tests.support.app import MAX_BODY, make_config, post_signed
from tests.support.database import execute, query, sqlite_path
from tests.support.events import event_body
from tests.support.processes import post_all, run_porteiro, serving, write_config
from tests.support.servers import free_port, live_server
from tests.support.services import PG_ADMIN_URL
from tests.support.signing import standard_headers

RETRY_AFTER = 7
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
postgres_only = pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
Scenario = Coroutine[Any, Any, None]


@pytest.fixture(params=list(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Scenario], None]:
    """Runs a scenario on a fresh event loop of the kind the test is parametrized with."""
    factory = LOOPS[request.param]

    def runner(scenario: Scenario) -> None:
        with asyncio.Runner(loop_factory=factory) as loop_runner:
            loop_runner.run(scenario)

    return runner


@pytest.fixture
def errors_logged(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """Lines at ERROR from the server or the loop (uvicorn's "Exception in ASGI
    application" is one; served with log_config=None so they reach the root logger)."""
    caplog.set_level(logging.WARNING)
    return lambda: [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@dataclass
class Ingest:
    """A served app and what it acknowledged."""

    http: httpx.AsyncClient
    runtime: Runtime
    acked: list[str] = field(default_factory=list)  # event ids answered 2xx

    async def post(self, event_id: str) -> httpx.Response:
        response = await post_signed(self.http, event_body(event_id), f"msg_{event_id}")
        if response.is_success:
            self.acked.append(event_id)
        return response

    async def burst(self, prefix: str, count: int = 20) -> list[httpx.Response]:
        return list(await asyncio.gather(*(self.post(f"{prefix}{n}") for n in range(count))))


def assert_unavailable(responses: list[httpx.Response]) -> None:
    assert [r.status_code for r in responses] == [503] * len(responses)
    for response in responses:
        assert response.headers["retry-after"] == str(RETRY_AFTER)
        assert response.json() == {"error": "store unavailable"}


@asynccontextmanager
async def served(
    store_url: str, store_timeout: float = 0.3, *, after_the_fault: bool = True
) -> AsyncIterator[Ingest]:
    """The app on a real uvicorn on the running loop. On exit: the next delivery is
    stored, the loop reported nothing (after a collection: an unretrieved future is
    reported when it is collected), and every delivery acknowledged is stored."""
    server = ServerConfig(
        max_body_bytes=MAX_BODY,
        store_timeout_seconds=store_timeout,
        retry_after_seconds=RETRY_AFTER,
    )
    runtime = Runtime.build(make_config(store_url, server=server))
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context))
    app = create_app(runtime, migrate=True)
    async with (
        live_server(app, log_config=None) as url,
        httpx.AsyncClient(base_url=url, timeout=15) as http,
    ):
        yield (ingest := Ingest(http, runtime))
        if after_the_fault:
            after = await ingest.post("evt_after_the_fault")
            assert after.status_code == 200, after.text
    gc.collect()
    assert [context.get("message") for context in reported] == []
    assert set(ingest.acked) <= stored_event_keys(store_url)


def stored_event_keys(store_url: str) -> set[str]:
    return {key for (key,) in query(store_url, "SELECT dedup_key FROM events")}


# -- a commit slower than store_timeout_seconds ------------------------------------------------


def test_a_commit_past_the_store_timeout_is_503(
    run: Callable[[Scenario], None], store_url: str, errors_logged: Callable[[], list[str]]
) -> None:
    async def scenario() -> None:
        # SQLite waits on the lock up to busy_timeout: longer than the store timeout.
        url = f"{store_url}?busy_timeout=3" if store_url.startswith("sqlite") else store_url
        async with served(url) as ingest:
            async with _table_locked(url):
                # Waves: deadlines expire while new ones arrive (the watchdog re-arms).
                waves = []
                for wave in range(4):
                    waves.append(asyncio.ensure_future(ingest.burst(f"evt_slow{wave}_", 10)))
                    await asyncio.sleep(0.05)
                for responses in await asyncio.gather(*waves):
                    assert_unavailable(responses)
            retried = await ingest.burst("evt_slow0_", 10)
            assert [r.status_code for r in retried] == [200] * 10

    run(scenario())
    assert errors_logged() == []


@asynccontextmanager
async def _table_locked(store_url: str) -> AsyncIterator[None]:
    """Another client holds the write lock the batch needs until the block ends."""
    if store_url.startswith("sqlite"):
        holder = sqlite3.connect(sqlite_path(store_url), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    async with await psycopg.AsyncConnection.connect(store_url) as blocker:
        await blocker.execute("LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE")
        yield
        await blocker.rollback()


# -- PostgreSQL: pool exhausted, connection killed, connections refused -----------------------


@postgres_only
def test_an_exhausted_pool_is_503(
    run: Callable[[Scenario], None], store_url: str, errors_logged: Callable[[], list[str]]
) -> None:
    async def scenario() -> None:
        # A store timeout past the pool's acquire timeout: the pool gives up first.
        async with served(store_url, store_timeout=3.0) as ingest:
            store = ingest.runtime.store
            assert isinstance(store, PostgresStore)
            pool = store._pool  # the real pool: every connection it may open, taken
            assert pool is not None
            taken = [await pool.getconn(timeout=10) for _ in range(pool.max_size)]
            try:
                assert_unavailable(await ingest.burst("evt_pool"))
            finally:
                for conn in taken:
                    await pool.putconn(conn)

    run(scenario())
    assert errors_logged() == []


@postgres_only
def test_a_connection_killed_mid_batch_is_503(
    run: Callable[[Scenario], None], store_url: str, errors_logged: Callable[[], list[str]]
) -> None:
    async def scenario() -> None:
        async with served(store_url, store_timeout=5.0) as ingest, _table_locked(store_url):
            calls = asyncio.ensure_future(ingest.burst("evt_killed"))
            killed = 0
            while not calls.done():  # each batch that reaches the lock, killed there
                killed += await _terminate(store_url, "wait_event_type = 'Lock'")
                await asyncio.sleep(0.05)
            assert killed >= 1
            assert_unavailable(await calls)

    run(scenario())
    assert errors_logged() == []


@postgres_only
def test_postgres_refusing_connections_is_503(
    run: Callable[[Scenario], None], store_url: str, errors_logged: Callable[[], list[str]]
) -> None:
    database = store_url.rpartition("/")[2]

    async def scenario() -> None:
        async with served(store_url) as ingest:
            assert (await ingest.post("evt_before")).status_code == 200
            _allow_connections(database, False)
            try:
                assert await _terminate(store_url, "true") >= 1
                assert_unavailable(await ingest.burst("evt_refused"))
            finally:
                _allow_connections(database, True)
            # The pool reconnects with a backoff: 503s until it is back, never a 500.
            statuses: list[int] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and 200 not in statuses:
                statuses.append((await ingest.post("evt_back")).status_code)
                await asyncio.sleep(0.2)
            assert statuses[-1] == 200 and set(statuses) <= {200, 503}, statuses

    run(scenario())
    assert errors_logged() == []


def _allow_connections(database: str, allow: bool) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allow).lower()}')


async def _terminate(store_url: str, condition: str) -> int:
    """Terminate the store's backends matching `condition` now; how many. From the admin
    database: the store's own may be refusing connections."""
    database = store_url.rpartition("/")[2]
    statement = (
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND {condition}"
    )
    async with await psycopg.AsyncConnection.connect(PG_ADMIN_URL, autocommit=True) as admin:
        return len(await (await admin.execute(statement, (database,))).fetchall())


# -- a statement the database refuses ----------------------------------------------------------

# A trigger that raises on every new delivery: an error that is not an outage.
REFUSE = {
    "postgresql": (
        "CREATE FUNCTION refuse_delivery() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;"
        " CREATE TRIGGER refuse_delivery BEFORE INSERT ON deliveries"
        " FOR EACH ROW EXECUTE FUNCTION refuse_delivery();",
        "DROP TRIGGER refuse_delivery ON deliveries",
    ),
    "sqlite": (
        "CREATE TRIGGER refuse_delivery BEFORE INSERT ON deliveries"
        " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
        "DROP TRIGGER refuse_delivery",
    ),
}


def test_a_statement_the_database_refuses_is_503(
    run: Callable[[Scenario], None], store_url: str, errors_logged: Callable[[], list[str]]
) -> None:
    async def scenario() -> None:
        create, drop = REFUSE[store_url.partition(":")[0]]
        async with served(store_url) as ingest:
            execute(store_url, create)
            try:
                assert_unavailable(await ingest.burst("evt_refused"))
            finally:
                execute(store_url, drop)

    run(scenario())
    assert errors_logged() == []


# -- the real `porteiro serve` process (uvloop when importable) ------------------------------


@postgres_only
def test_serve_answers_store_failures_with_503_and_one_json_line_each(
    store_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, store_url)
    with config.open("a") as extra:
        extra.write(
            f"\n[server]\nstore_timeout_seconds = 0.3\nretry_after_seconds = {RETRY_AFTER}\n"
        )
    payment = {"type": "payment.paid", "object_id": "pay_serve", "amount": 1000}
    email = {"currency": "BRL", "email": "payer@example.com"}
    bodies = [json.dumps({"id": f"evt_serve_{n}", **payment, **email}).encode() for n in range(40)]
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    log = tmp_path / "serve.log"
    with serving(config, port, log, "--no-worker") as proc:
        with psycopg.connect(store_url) as blocker:
            blocker.execute("LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE")
            locked = post_all(port, bodies, concurrency=20)
            blocker.rollback()
        assert locked == [503] * len(bodies)
        assert post_all(port, bodies, concurrency=20) == [200] * len(bodies)
        create, drop = REFUSE["postgresql"]
        execute(store_url, create)
        refused = post_all(port, bodies[:5], concurrency=5)
        execute(store_url, drop)
        assert refused == [503] * 5
        assert post_all(port, bodies[:5], concurrency=5) == [200] * 5
        output = proc.output()
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    # Not JSON: uvicorn's start and stop lines and the "listening" line; none may be about
    # a delivery or a failure (a traceback, "Future exception was never retrieved").
    others = [line for line in output.splitlines() if line and not line.startswith("{")]
    words = ("deliver", "store", "rror", "xception", "Traceback", "never retrieved")
    assert [line for line in others if any(word in line for word in words)] == [], output
    assert any(r.get("action") == "delivery.store_unavailable" for r in records), output
    failed = [r for r in records if r.get("action") == "delivery.store_failed"]
    assert {r["error"] for r in failed} == {"psycopg.errors.RaiseException"}, output
    assert {r["level"] for r in failed} == {"error"}
    # Neither the body nor the driver's message (which may quote the values it refused).
    assert "payer@example.com" not in output and "evt_serve_" not in output
    assert "refused by the test" not in output


def test_a_store_timeout_shorter_than_any_commit_is_503(
    run: Callable[[Scenario], None], store_url: str, errors_logged: Callable[[], list[str]]
) -> None:
    # Every deadline falls due within a millisecond, where uvloop hands the watchdog a
    # Handle without `when()`: each commit is "slow", none may answer 500.
    async def scenario() -> None:
        async with served(store_url, store_timeout=0.0001, after_the_fault=False) as ingest:
            for wave in range(3):
                responses = await ingest.burst(f"evt_instant{wave}_")
                # A commit may still beat its watchdog by a hair: a 200 is fine, a 500 not.
                refused = [r for r in responses if r.status_code != 200]
                assert refused, "every commit beat a 0.1 ms deadline"
                assert_unavailable(refused)

    run(scenario())
    assert errors_logged() == []


# -- what is only forensics, or only odd, never changes the answer -----------------------------


def test_a_quarantine_the_database_refuses_still_answers_401(
    run: Callable[[Scenario], None], store_url: str, errors_logged: Callable[[], list[str]]
) -> None:
    # Any error storing the forensics of a refused request, not only an outage.
    refuse = {
        name: tuple(statement.replace("deliveries", "quarantine") for statement in pair)
        for name, pair in REFUSE.items()
    }

    async def scenario() -> None:
        create, drop = refuse[store_url.partition(":")[0]]
        async with served(store_url) as ingest:
            execute(store_url, create)
            try:
                response = await ingest.http.post(
                    "/webhooks/shop", content=event_body("evt_forged"), headers={"x": "y"}
                )
            finally:
                execute(store_url, drop)
            assert response.status_code == 401

    run(scenario())
    assert errors_logged() == []


def test_a_nul_in_a_header_value_is_stored_escaped(
    run: Callable[[Scenario], None], store_url: str
) -> None:
    # h11 and httptools refuse such a header themselves; a lenient server would pass it
    # through, and PostgreSQL's jsonb refuses a NUL: the delivery must be stored anyway.
    async def scenario() -> None:
        body = event_body("evt_nul_header")
        runtime = Runtime.build(make_config(store_url))
        app = create_app(runtime, migrate=True)
        headers = {**standard_headers(body, "msg_nul"), "x-odd": "a\x00b"}
        sent: list[MutableMapping[str, Any]] = []
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/webhooks/shop", "raw_path": b"",
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "headers": [(k.encode(), v.encode("latin-1")) for k, v in headers.items()],
        }  # fmt: skip

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        await runtime.start(migrate=True)
        try:
            await app(scope, receive, send)
            assert sent[0]["status"] == 200, sent
            (event,) = (await runtime.store.list_events(EventFilter(), None, 10)).items
            (delivery,) = await runtime.store.event_deliveries(event.id)
        finally:
            await runtime.stop()
        assert ("x-odd", "a\\x00b") in delivery.headers

    run(scenario())
