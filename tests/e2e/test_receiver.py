"""The receiver over real HTTP with real stores and real signatures: every "Bad input" case
of the core issue, the fast 503 on an outage, duplicates, raw bytes, probes and metrics."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from porteiro import replay
from porteiro.config import Config, SourceConfig
from porteiro.http.app import create_app
from porteiro.model import EventStatus, InboundRequest, ParsedEvent
from porteiro.providers.jwks import jwk_from_public_key
from porteiro.providers.standard import StandardProvider
from porteiro.runtime import Runtime
from porteiro.store.base import UNPARSEABLE_TYPE, EventFilter
from tests.support.app import MAX_BODY, PEER, SOURCE, asgi_client, make_config, post_signed
from tests.support.events import event_body
from tests.support.processes import Proc, local_url, porteiro_env, wait_healthy
from tests.support.servers import free_port
from tests.support.signing import SECRET, standard_headers

sqlite_only = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


# Only a hang guard: an answer that takes this long never came ([server]
# store_timeout_seconds, which bounds a held store's 503, is under a second).
HANG_GUARD_SECONDS = 30.0


async def answered(request: Awaitable[httpx.Response], what: str) -> httpx.Response:
    """The answer to `request`, or a failure saying it hung."""
    try:
        return await asyncio.wait_for(request, HANG_GUARD_SECONDS)
    except TimeoutError:
        pytest.fail(f"{what} hung: no answer in {HANG_GUARD_SECONDS}s")


def sample(runtime: Runtime, name: str, **labels: str) -> float:
    value = runtime.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


# -- accepted -------------------------------------------------------------------------------


async def test_accepted_delivery_stores_raw_bytes_exactly(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    # Odd spacing, key order and non-ASCII text: any re-serialisation would change them.
    body = (
        '{ "type":"payment.paid",  "id":"evt_raw", "object_id":"pay_1",\n'
        ' "amount":1000, "data":{"nome":"João ✓"} }'
    ).encode()
    response = await client.post(
        f"/webhooks/{SOURCE}?attempt=1",
        content=body,
        headers={**standard_headers(body, "msg_raw"), "x-extra": "one"},
    )
    assert response.status_code == 200
    [event] = (await runtime.store.list_events(EventFilter(dedup_key="evt_raw"), None, 10)).items
    assert event.status is EventStatus.PENDING
    assert (event.object_id, event.amount) == ("pay_1", 1000)
    [delivery] = await runtime.store.event_deliveries(event.id)
    assert delivery.body == body
    assert delivery.peer == PEER
    assert delivery.path == f"/webhooks/{SOURCE}"
    assert delivery.query == "attempt=1"
    assert ("webhook-id", "msg_raw") in list(delivery.headers)
    assert ("x-extra", "one") in list(delivery.headers)
    assert delivery.parse_error is None
    assert sample(runtime, "porteiro_deliveries_total", source=SOURCE, outcome="accepted") == 1
    assert sample(runtime, "porteiro_events_recorded_total", source=SOURCE, result="new") == 1
    assert sample(runtime, "porteiro_ack_seconds_count", source=SOURCE) == 1


async def test_duplicate_delivery_is_acknowledged_and_counted(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = event_body("evt_dup")
    first = await post_signed(client, body, "msg_dup")
    second = await post_signed(client, body, "msg_dup")
    assert (first.status_code, second.status_code) == (200, 200)
    [event] = (await runtime.store.list_events(EventFilter(source=SOURCE), None, 10)).items
    assert event.duplicates == 1
    assert len(await runtime.store.event_deliveries(event.id)) == 2
    assert sample(runtime, "porteiro_deliveries_total", source=SOURCE, outcome="duplicate") == 1
    assert sample(runtime, "porteiro_events_recorded_total", source=SOURCE, result="duplicate") == 1


async def test_pix_suffix_route_receives(client: httpx.AsyncClient, runtime: Runtime) -> None:
    body = event_body("evt_pix")
    response = await post_signed(client, body, "msg_pix", path=f"/webhooks/{SOURCE}/pix")
    assert response.status_code == 200
    [event] = (await runtime.store.list_events(EventFilter(dedup_key="evt_pix"), None, 10)).items
    [delivery] = await runtime.store.event_deliveries(event.id)
    assert delivery.path == f"/webhooks/{SOURCE}/pix"


async def test_unknown_event_type_is_stored_ignored_and_acknowledged(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = event_body("evt_other", kind="customer.updated")
    response = await post_signed(client, body, "msg_other")
    assert response.status_code == 200
    [event] = (await runtime.store.list_events(EventFilter(dedup_key="evt_other"), None, 10)).items
    assert event.status is EventStatus.IGNORED
    assert event.type == "customer.updated"


async def test_invalid_json_with_valid_signature_is_stored_and_dead_lettered(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = b'{"id": "evt_broken", "type": "payment.paid",'
    response = await post_signed(client, body, "msg_broken")
    assert response.status_code == 200
    [event] = (await runtime.store.list_events(EventFilter(source=SOURCE), None, 10)).items
    assert event.type == UNPARSEABLE_TYPE
    assert event.status is EventStatus.DEAD
    assert event.last_error is not None and "JSON" in event.last_error
    [delivery] = await runtime.store.event_deliveries(event.id)
    assert delivery.body == body
    assert delivery.parse_error == event.last_error
    assert sample(runtime, "porteiro_deliveries_total", source=SOURCE, outcome="unparseable") == 1


# -- refused --------------------------------------------------------------------------------


async def test_wrong_signature_is_401_and_quarantined_only(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = event_body("evt_forged")
    other = "whsec_" + "b3RoZXItc2VjcmV0LW5vdC1vdXJzLTEyMzQ1Njc4OQ=="
    response = await client.post(
        f"/webhooks/{SOURCE}", content=body, headers=standard_headers(body, "m", secret=other)
    )
    assert response.status_code == 401
    assert response.json() == {"error": "bad_signature"}
    assert (await runtime.store.list_events(EventFilter(), None, 10)).items == []
    [refused] = await runtime.store.list_quarantine(10)
    assert (refused.source, refused.reason, refused.body) == (SOURCE, "bad_signature", body)
    assert refused.peer == PEER
    assert sample(runtime, "porteiro_deliveries_total", source=SOURCE, outcome="unauthorized") == 1


def _without(headers: dict[str, str], name: str) -> dict[str, str]:
    return {key: value for key, value in headers.items() if key != name}


@sqlite_only
@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("missing_signature", "missing_header"),
        ("missing_timestamp", "missing_header"),
        ("malformed_signature", "malformed_header"),
        ("malformed_timestamp", "malformed_header"),
        ("stale", "stale_timestamp"),
        ("future", "stale_timestamp"),
    ],
)
async def test_bad_authentication_headers_are_401(
    client: httpx.AsyncClient, runtime: Runtime, case: str, reason: str
) -> None:
    body = event_body("evt_bad")
    now = datetime.now(UTC)
    headers = standard_headers(body, "msg_bad", at=now)
    if case == "missing_signature":
        headers = _without(headers, "webhook-signature")
    elif case == "missing_timestamp":
        headers = _without(headers, "webhook-timestamp")
    elif case == "malformed_signature":
        headers["webhook-signature"] = "v1,%%%not-base64%%%"
    elif case == "malformed_timestamp":
        headers["webhook-timestamp"] = "yesterday"
    elif case == "stale":
        headers = standard_headers(body, "msg_bad", at=now - timedelta(minutes=10))
    else:
        headers = standard_headers(body, "msg_bad", at=now + timedelta(minutes=10))
    response = await client.post(f"/webhooks/{SOURCE}", content=body, headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": reason}
    assert (await runtime.store.list_events(EventFilter(), None, 10)).items == []
    assert [item.reason for item in await runtime.store.list_quarantine(10)] == [reason]


async def test_unknown_source_is_404_without_a_label_per_name(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = event_body("evt_x")
    response = await post_signed(client, body, "m", path="/webhooks/no-such-source")
    assert response.status_code == 404
    assert response.json() == {"error": "unknown source"}
    assert (
        sample(runtime, "porteiro_deliveries_total", source="_unknown", outcome="unknown_source")
        == 1
    )
    exposition = (await client.get("/metrics")).text
    assert "no-such-source" not in exposition


async def _chunks(total: int, size: int = 4096) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        chunk = b"x" * min(size, total - sent)
        sent += len(chunk)
        yield chunk


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_body_over_the_cap_is_413_with_and_without_content_length(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = b"x" * (MAX_BODY + 1)
    declared = await post_signed(client, body, "msg_big")
    assert declared.status_code == 413
    streamed = await client.post(f"/webhooks/{SOURCE}", content=_chunks(MAX_BODY + 10_000))
    assert streamed.status_code == 413
    assert (await runtime.store.list_events(EventFilter(), None, 10)).items == []
    assert await runtime.store.list_quarantine(10) == []
    assert sample(runtime, "porteiro_deliveries_total", source=SOURCE, outcome="too_large") == 2
    exactly = b"{" + b" " * (MAX_BODY - 2) + b"}"
    assert (await post_signed(client, exactly, "msg_cap")).status_code == 200


async def test_a_body_in_several_messages_is_stored_byte_for_byte(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = event_body("evt_in_pieces")

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 7):  # each piece its own ASGI message
            yield body[start : start + 7]

    headers = standard_headers(body, "msg_pieces")
    response = await client.post(f"/webhooks/{SOURCE}", content=pieces(), headers=headers)
    assert response.status_code == 200
    [event] = (await runtime.store.list_events(EventFilter(source=SOURCE), None, 10)).items
    [delivery] = await runtime.store.event_deliveries(event.id)
    assert delivery.body == body


# -- real uvicorn -----------------------------------------------------------------------------


@sqlite_only
async def test_real_server_accepts_and_caps_streamed_bodies(
    server_url: str, runtime: Runtime
) -> None:
    async with httpx.AsyncClient(base_url=server_url, timeout=5) as http:
        body = event_body("evt_uvicorn")
        accepted = await http.post(
            f"/webhooks/{SOURCE}", content=body, headers=standard_headers(body, "msg_uv")
        )
        assert accepted.status_code == 200
        declared = await http.post(f"/webhooks/{SOURCE}", content=b"y" * (MAX_BODY + 1))
        assert declared.status_code == 413
        chunked = await http.post(f"/webhooks/{SOURCE}", content=_chunks(MAX_BODY + 20_000))
        assert chunked.status_code == 413
        assert "chunked" in chunked.request.headers.get("transfer-encoding", "")
        assert (await http.get("/readyz")).json() == {"status": "ready", "warnings": []}
    [event] = (await runtime.store.list_events(EventFilter(source=SOURCE), None, 10)).items
    [delivery] = await runtime.store.event_deliveries(event.id)
    assert delivery.body == body
    assert delivery.peer == "127.0.0.1"


# -- store outages ----------------------------------------------------------------------------


@sqlite_only
async def test_sqlite_locked_store_gives_fast_503_with_retry_after(
    client: httpx.AsyncClient, runtime: Runtime, config: Config
) -> None:
    path = config.store_url.removeprefix("sqlite:///")
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        body = event_body("evt_locked")
        # Answered while the blocker still holds the database (it lets go only in the
        # `finally` below): the 503 does not wait for the lock to be released.
        response = await answered(post_signed(client, body, "msg_locked"), "the locked 503")
        assert response.status_code == 503
        assert response.headers["retry-after"] == str(config.server.retry_after_seconds)
        assert response.json() == {"error": "store unavailable"}
        # Quarantine is best effort: a refused request is still answered 401 during the
        # outage, the lock still held, its quarantine row given up.
        forged = await answered(
            client.post(f"/webhooks/{SOURCE}", content=body, headers={}), "the locked 401"
        )
        assert forged.status_code == 401
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert sample(runtime, "porteiro_deliveries_total", source=SOURCE, outcome="unavailable") == 1
    retried = await post_signed(client, event_body("evt_locked"), "msg_locked")
    assert retried.status_code == 200


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_postgres_locked_table_gives_fast_503(
    client: httpx.AsyncClient, runtime: Runtime, store_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(store_url) as blocker:
        await blocker.execute("LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE")
        # The lock is released only after the answer: a 503 that waited for it would
        # never come (the hang guard fails it), one answered after it would be a 200.
        response = await answered(
            post_signed(client, event_body("evt_pg_locked"), "msg_pg_locked"), "the locked 503"
        )
        await blocker.rollback()
    assert response.status_code == 503
    assert "retry-after" in response.headers
    retried = await post_signed(client, event_body("evt_pg_locked"), "msg_pg_locked")
    assert retried.status_code == 200


async def test_postgres_unreachable_gives_fast_503_and_unready() -> None:
    runtime = Runtime.build(make_config("postgresql://postgres@127.0.0.1:1/porteiro"))
    application = create_app(runtime)
    async with application.router.lifespan_context(application), asgi_client(application) as http:
        response = await answered(
            post_signed(http, event_body("evt_down"), "msg_down"), "the unreachable 503"
        )
        assert response.status_code == 503
        assert response.headers["retry-after"] == "5"
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"status": "unavailable"}
        assert "retry-after" in ready.headers
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        metrics = await http.get("/metrics")
        assert metrics.status_code == 200
        assert 'porteiro_deliveries_total{outcome="unavailable",source="shop"} 1.0' in metrics.text


# -- probes and metrics -------------------------------------------------------------------------


async def test_probes_and_metrics(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "warnings": []})
    assert (await post_signed(client, event_body("evt_m"), "msg_m")).status_code == 200
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=")
    text = metrics.text
    assert 'porteiro_deliveries_total{outcome="accepted",source="shop"} 1.0' in text
    assert 'porteiro_events_by_status{status="pending"} 1.0' in text
    assert 'porteiro_events_by_status{status="dead"} 0.0' in text
    assert 'status="done"' not in text  # counting it would read every stored event


# -- adapter failures ---------------------------------------------------------------------------


class _CrashingParser(StandardProvider):
    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        raise KeyError("adapter bug")


@sqlite_only
async def test_adapter_crash_still_stores_the_authenticated_body(config: Config) -> None:
    source = config.sources[SOURCE]
    runtime = replace(Runtime.build(config), providers={SOURCE: _CrashingParser(source)})
    application = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application), asgi_client(application) as http:
        body = event_body("evt_crash")
        assert (await post_signed(http, body, "msg_crash")).status_code == 200
        [event] = (await runtime.store.list_events(EventFilter(), None, 10)).items
        assert event.status is EventStatus.DEAD
        assert event.last_error is not None and "KeyError" in event.last_error
        [delivery] = await runtime.store.event_deliveries(event.id)
        assert delivery.body == body
        # A replay with the adapter still crashing reports the delivery, and ends.
        report = await replay.reparse(runtime, [event.id], dry_run=False)
        assert [reason for _, reason in report.failures] == [
            "adapter error: KeyError: 'adapter bug'"
        ]


# -- Pagar.me RS256 with a JWKS refreshed on the receiver path -------------------------------------


def _write_jwks(path: Path, keys: dict[str, rsa.RSAPrivateKey]) -> None:
    document = {"keys": [jwk_from_public_key(kid, key.public_key()) for kid, key in keys.items()]}
    path.write_text(json.dumps(document))


async def test_pagarme_rs256_refreshes_jwks_for_a_new_kid(tmp_path: Path, sqlite_url: str) -> None:
    old = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    new = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    _write_jwks(jwks, {"old": old})
    pem = tmp_path / "signing.pem"
    pem.write_bytes(
        new.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    source = SourceConfig(
        name="pagarme",
        provider="pagarme",
        options={
            "jwks_file": str(jwks),
            "jwks_refetch_seconds": 0,
            "signing_key_file": str(pem),
            "signing_kid": "new",
        },
    )
    runtime = Runtime.build(make_config(sqlite_url, sources={"pagarme": source}))
    body = json.dumps(
        {
            "id": "hook_RyEKQO789TRpZjv5",
            "type": "charge.paid",
            "created_at": "2024-11-28T16:37:11.65Z",
            "data": {
                "id": "ch_d22356Jf4WuGr8no",
                "amount": 12356,
                "currency": "BRL",
                "status": "paid",
                "order": {"id": "or_ZdnB5BBCmYhk534R", "code": "1303724"},
            },
        }
    ).encode()
    signed = runtime.providers["pagarme"].sign(body, datetime.now(UTC))
    application = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application), asgi_client(application) as http:
        before = await http.post("/webhooks/pagarme", content=body, headers=dict(signed.headers))
        assert before.status_code == 401
        assert before.json() == {"error": "unknown_key"}
        _write_jwks(jwks, {"old": old, "new": new})  # the gateway rotated its keys
        after = await http.post("/webhooks/pagarme", content=body, headers=dict(signed.headers))
        assert after.status_code == 200
        [event] = (await runtime.store.list_events(EventFilter(source="pagarme"), None, 10)).items
    assert event.dedup_key == "hook_RyEKQO789TRpZjv5"
    assert event.object_id == "or_ZdnB5BBCmYhk534R"


async def test_concurrent_deliveries_of_one_event_record_it_once(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = event_body("evt_race")
    responses = await asyncio.gather(*(post_signed(client, body, "msg_race") for _ in range(8)))
    assert [r.status_code for r in responses] == [200] * 8
    [event] = (await runtime.store.list_events(EventFilter(source=SOURCE), None, 10)).items
    assert event.duplicates == 7


# -- the uvicorn factory entry point ----------------------------------------------------------


def test_uvicorn_factory_without_any_config_refuses_and_creates_nothing(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "uvicorn", "porteiro.http.app:asgi_app", "--factory",
        "--host", "127.0.0.1", "--port", str(free_port()),
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=tmp_path, env=porteiro_env(), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "no configuration: pass --config FILE" in done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []  # no ./porteiro.db


def test_uvicorn_factory_reads_config_from_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "porteiro.toml"
    config.write_text(
        f"""
[store]
url = "sqlite:///{tmp_path / "factory.db"}"

[sources.{SOURCE}]
provider = "standard"
secrets = ["${{SHOP_SECRET}}"]
"""
    )
    port = free_port()
    env = {"PORTEIRO_CONFIG": str(config), "SHOP_SECRET": SECRET}
    command = [
        sys.executable, "-m", "uvicorn", "porteiro.http.app:asgi_app", "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    process = Proc.start(command, tmp_path / "uvicorn.log", env, cwd=tmp_path)
    try:
        base = local_url(port)
        wait_healthy(process, base, within=15)
        body = event_body("evt_factory")
        response = httpx.post(
            f"{base}/webhooks/{SOURCE}", content=body, headers=standard_headers(body, "m_f")
        )
        assert response.status_code == 200
        assert httpx.get(f"{base}/readyz").json() == {"status": "ready", "warnings": []}
        # No [admin] token configured: the admin API stays closed.
        assert httpx.get(f"{base}/api/events").status_code == 503
    finally:
        process.kill(signal.SIGTERM)
    with sqlite3.connect(tmp_path / "factory.db") as db:
        assert db.execute("SELECT body FROM deliveries").fetchall() == [(body,)]
