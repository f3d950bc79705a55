"""No credential a gateway sends is ever stored or shown (issue 22, finding 8).

Every kind of credential (Adyen's Basic auth, a bearer token, a cookie, a
Proxy-Authorization, Efí's `?hmac=` Pix token, a source's own secret header and query
parameter) goes through a real Porteiro (uvicorn, receiver, SQLite and PostgreSQL), on
accepted deliveries and on refused (quarantined) ones. Then nothing may hold it: no row
of any table (nor the SQLite files' bytes), no admin API answer, no `porteiro` command's
output. What was redacted is still recognisable (names, order, the scheme word, the rest
of the query) and the body is stored byte for byte. A second test stores credentials the
way older releases did and checks `porteiro db upgrade` redacts them.
"""

from __future__ import annotations

import base64
import json
import random
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from porteiro.config.load import load_config
from porteiro.http.app import create_app
from porteiro.http.jsonview import body_from_json
from porteiro.http.redact import Redaction
from porteiro.model import InboundRequest
from porteiro.providers.base import Provider, SamplePayment
from porteiro.replay import inbound_request
from porteiro.runtime import Runtime, utc_now
from porteiro.store import open_store
from tests.support.processes import completed_porteiro
from tests.support.servers import live_server

ADMIN_TOKEN = "redact-admin-token"
ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
STD_SECRET = "whsec_" + base64.b64encode(b"redact-e2e-secret-0123456789abcd").decode()
CHAVE = "c0ffee00-5b2d-4e8f-9a7c-1d2e3f4a5b6c"

ADYEN_PASSWORD = "Adyen-Pa55word-8f1e"
ADYEN_BASIC = f"ws_redact@Company.Shop:{ADYEN_PASSWORD}"
WRONG_PASSWORD = "Wrong-Pa55word-aa01"
BEARER = "tok-Bearer-5ecret-9a7c"
COOKIE_SECRET = "Cookie-5ecret-77aa"
PROXY_PASSWORD = "Proxy-5ecret-31b0"
PIX_TOKEN = "Pix-Hmac-5ecret-4d2b"
WRONG_PIX_TOKEN = "Pix-Wrong-5ecret-6e3f"
CUSTOM_HEADER_SECRET = "Custom-Header-5ecret-0c1d"
CUSTOM_PARAM_SECRET = "Custom-Param-5ecret-e5f6"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# Each secret as it may appear: as sent, and base64-encoded where it was sent so.
SECRETS = [
    ADYEN_PASSWORD,
    b64(ADYEN_BASIC),
    WRONG_PASSWORD,
    b64(f"ws_redact@Company.Shop:{WRONG_PASSWORD}"),
    BEARER,
    COOKIE_SECRET,
    PROXY_PASSWORD,
    b64(f"proxy-user:{PROXY_PASSWORD}"),
    PIX_TOKEN,
    WRONG_PIX_TOKEN,
    CUSTOM_HEADER_SECRET,
    CUSTOM_PARAM_SECRET,
]
EXTRA_HEADERS = {
    "Cookie": f"session={COOKIE_SECRET}; theme=dark",
    "Proxy-Authorization": "Basic " + b64(f"proxy-user:{PROXY_PASSWORD}"),
}


def leaked(text: str | bytes) -> list[str]:
    """The secrets found in `text` (also hex-encoded: PostgreSQL shows bytea so)."""
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    lowered = data.lower()
    return [
        secret
        for secret in SECRETS
        if secret.encode() in data or secret.encode().hex().encode() in lowered
    ]


def write_config(path: Path, store_url: str) -> Path:
    path.write_text(
        f"""
[store]
url = "{store_url}"

[admin]
token = "{ADMIN_TOKEN}"

[sources.adyen]
provider = "adyen"
secrets = ["{ADYEN_KEY}"]
basic_auth = "{ADYEN_BASIC}"

[sources.efi]
provider = "pix"
keys = ["{CHAVE}"]
hmac_token = "{PIX_TOKEN}"
confirm = false
allow_ips = ["127.0.0.1"]

[sources.std]
provider = "standard"
secrets = ["{STD_SECRET}"]
secret_headers = ["X-Api-Token"]
secret_params = ["api_key"]
"""
    )
    return path


def porteiro(config: Path, *args: str) -> str:
    """Everything a `porteiro` command that must succeed writes, stdout and stderr."""
    done = completed_porteiro(config, *args)
    assert done.returncode == 0, f"porteiro {args}: {done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@dataclass
class Sent:
    source: str
    body: bytes
    query: str


@dataclass
class Served:
    url: str
    runtime: Runtime
    config: Path


@pytest.fixture
async def served(store_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    path = write_config(tmp_path / "porteiro.toml", store_url)
    runtime = Runtime.build(load_config(path, {}))
    async with live_server(create_app(runtime, migrate=True)) as url:
        yield Served(url, runtime, path)


def first_body(provider: Provider, object_id: str) -> bytes:
    payment = SamplePayment(object_id=object_id, reference=f"order-{object_id}", amount=1990)
    return provider.sample_lifecycle(payment, utc_now(), random.Random(22))[0]


async def send_everything(served: Served) -> list[Sent]:
    """Every credential, on accepted and on refused requests; the accepted ones back."""
    providers = served.runtime.providers
    accepted: list[Sent] = []
    async with httpx.AsyncClient(base_url=served.url) as client:

        async def post(source: str, signed_body: bytes, headers: dict[str, str], query: str,
                       suffix: str = "", expect: int = 200) -> None:  # fmt: skip
            response = await client.post(
                f"/webhooks/{source}{suffix}?{query}", content=signed_body, headers=headers
            )
            assert response.status_code == expect, response.text
            if expect == 200:
                accepted.append(Sent(source, signed_body, query))

        adyen = providers["adyen"].sign(first_body(providers["adyen"], "psp-redact-1"), utc_now())
        assert dict(adyen.headers)["authorization"].startswith("Basic ")
        await post("adyen", adyen.body, {**adyen.headers, **EXTRA_HEADERS}, "")
        wrong_basic = "Basic " + b64(f"ws_redact@Company.Shop:{WRONG_PASSWORD}")
        wrong = {**adyen.headers, "authorization": wrong_basic}
        await post("adyen", adyen.body, {**wrong, **EXTRA_HEADERS}, "", expect=401)

        pix = providers["efi"].sign(first_body(providers["efi"], "txid-redact-1"), utc_now())
        assert PIX_TOKEN in pix.query
        await post("efi", pix.body, dict(pix.headers), pix.query, pix.path_suffix)
        wrong_query = pix.query.replace(PIX_TOKEN, WRONG_PIX_TOKEN)
        await post("efi", pix.body, dict(pix.headers), wrong_query, pix.path_suffix, expect=401)

        std = providers["std"].sign(first_body(providers["std"], "pay-redact-1"), utc_now())
        credentials = {
            **std.headers,
            **EXTRA_HEADERS,
            "Authorization": f"Bearer {BEARER}",
            "X-Api-Token": CUSTOM_HEADER_SECRET,
        }
        query = f"keep=1&api_key={CUSTOM_PARAM_SECRET}&also=two"
        await post("std", std.body, credentials, query)
        forged = {**credentials, "webhook-signature": "v1," + b64("x" * 32)}
        await post("std", std.body, forged, query, expect=401)
    return accepted


def store_dump(store_url: str, *, files: bool = True) -> str:
    """Every row of every table as text (and, for SQLite, every byte of its files)."""
    if store_url.startswith("sqlite"):
        path = Path(store_url.removeprefix("sqlite:///"))
        with sqlite3.connect(path) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            rows = [repr(row) for table in tables for row in db.execute(f'SELECT * FROM "{table}"')]
        raw = [p.read_bytes() for p in path.parent.glob(path.name + "*")] if files else []
        return "\n".join(rows) + "\n" + "\n".join(b.decode("latin-1") for b in raw)
    with psycopg.connect(store_url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        ]
        rows = [
            str(row[0])
            for table in tables
            for row in conn.execute(f'SELECT t::text FROM "{table}" t')
        ]
    assert "deliveries" in tables and "quarantine" in tables
    return "\n".join(rows)


async def admin_outputs(served: Served) -> tuple[str, list[dict[str, Any]]]:
    """Every admin answer that shows stored requests, and the event details."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers) as client:
        answers = []
        for path in ("/api/events?limit=500", "/api/quarantine", "/api/dlq"):
            response = await client.get(path)
            assert response.status_code == 200, (path, response.text)
            answers.append(response.text)
        events = json.loads(answers[0])["items"]
        details = []
        for event in events:
            response = await client.get(f"/api/events/{event['id']}")
            assert response.status_code == 200
            answers.append(response.text)
            details.append(response.json())
    return "\n".join(answers), details


async def test_no_credential_is_stored_or_shown(served: Served, store_url: str) -> None:
    accepted = await send_everything(served)
    api_text, details = await admin_outputs(served)
    assert leaked(api_text) == []

    deliveries = {d["id"]: d for event in details for d in event["deliveries"]}
    assert len(deliveries) == len(accepted) == 3
    by_source = {d["source"]: d for d in deliveries.values()}
    # What was redacted is still readable as what it was; the body is the one sent.
    for sent in accepted:
        shown = by_source[sent.source]
        assert body_from_json(shown) == sent.body
    adyen = [tuple(h) for h in by_source["adyen"]["headers"]]
    assert ("authorization", "Basic [redacted]") in adyen
    assert ("cookie", "[redacted]") in adyen
    assert ("proxy-authorization", "Basic [redacted]") in adyen
    std = [tuple(h) for h in by_source["std"]["headers"]]
    assert ("authorization", "Bearer [redacted]") in std
    assert ("x-api-token", "[redacted]") in std
    assert any(name == "webhook-signature" and value.startswith("v1,") for name, value in std)
    assert by_source["std"]["query"] == "keep=1&api_key=[redacted]&also=two"
    assert by_source["efi"]["query"].startswith("hmac=[redacted]&ignorar=")

    quarantined = json.loads(api_text.split("\n")[1])["items"]
    assert {q["source"] for q in quarantined} == {"adyen", "efi", "std"}
    names = {q["source"]: [tuple(h) for h in q["headers"]] for q in quarantined}
    assert ("authorization", "Basic [redacted]") in names["adyen"]
    assert ("authorization", "Bearer [redacted]") in names["std"]

    # `porteiro replay` re-parses what is stored, unverified: the same events come out.
    for delivery in await served.runtime.store.event_deliveries(details[0]["id"]):
        provider = served.runtime.providers[delivery.source]
        original = next(s for s in accepted if s.source == delivery.source)
        stored = inbound_request(delivery)
        as_sent = InboundRequest(delivery.source, "POST", delivery.path, original.query,
                                 [], original.body, None, delivery.received_at)  # fmt: skip
        keys = [event.dedup_key for event in provider.parse(as_sent)]
        assert [event.dedup_key for event in provider.parse(stored)] == keys

    cli = [
        porteiro(served.config, "events", "list", "--json"),
        porteiro(served.config, "dlq", "list", "--json"),
    ]
    shown = set()
    for event in details:
        delivery = event["deliveries"][0]["id"]
        if delivery not in shown:
            shown.add(delivery)
            cli.append(porteiro(served.config, "events", "show", str(event["id"])))
    assert len(shown) == 3
    assert leaked("\n".join(cli)) == []
    assert leaked(store_dump(store_url)) == []


def verbatim(source: str, query: str, headers: list[tuple[str, str]]) -> InboundRequest:
    body = json.dumps({"type": "payment.paid", "data": {"id": "pay-old"}}).encode()
    return InboundRequest(source, "POST", f"/webhooks/{source}", query, headers, body,
                          "127.0.0.1", utc_now())  # fmt: skip


OLD_DELIVERY = verbatim(
    "efi",
    f"hmac={PIX_TOKEN}&ignorar=/pix&HMAC={PIX_TOKEN}&hmac=&x=hmac=plain",
    [
        ("host", "porteiro.example"),
        ("authorization", "Basic " + b64(ADYEN_BASIC)),
        ("cookie", f"session={COOKIE_SECRET}"),
        ("proxy-authorization", f"Digest username=proxy, response={PROXY_PASSWORD}"),
        ("authorization", BEARER),
        ("x-signature", "ts=1,v1=abcdef"),
        ("authorization", ""),
    ],
)
OLD_QUARANTINED = verbatim(
    "std",
    "",
    [("authorization", f"Bearer {BEARER}"), ("cookie", COOKIE_SECRET), ("user-agent", "gw/1")],
)


async def test_db_upgrade_redacts_what_older_releases_stored(
    store_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "porteiro.toml", store_url)
    # The old code path: the store keeps what it is handed, and 0005 not yet applied.
    store = open_store(store_url)
    await store.open()
    await store.upgrade()
    recorded = await store.record_delivery(OLD_DELIVERY, [])
    await store.quarantine(OLD_QUARANTINED, "bad signature", None)
    await store.close()
    forget = "DELETE FROM schema_migrations WHERE version = '0005'"
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            db.execute(forget)
    else:
        with psycopg.connect(store_url) as conn:
            conn.execute(forget)
    assert leaked(store_dump(store_url)) != []

    upgraded = porteiro(config, "db", "upgrade")

    # Rows only: an UPDATE may leave the old bytes in free pages (docs/operations.md says
    # to VACUUM); what the receiver stores now never had them (the test above).
    assert leaked(store_dump(store_url, files=False)) == []
    assert "0005" in upgraded
    store = open_store(store_url)
    await store.open()
    try:
        delivery = await store.get_delivery(recorded.delivery_id)
        [quarantined] = await store.list_quarantine(10)
    finally:
        await store.close()
    # The same redaction as the receiver's, and the body untouched.
    assert delivery is not None
    expected = Redaction().request(OLD_DELIVERY)
    assert expected.query == "hmac=[redacted]&ignorar=/pix&HMAC=[redacted]&hmac=&x=hmac=plain"
    assert (delivery.query, list(delivery.headers)) == (expected.query, list(expected.headers))
    assert delivery.body == OLD_DELIVERY.body
    assert list(quarantined.headers) == list(Redaction().request(OLD_QUARANTINED).headers)
