"""Property: whatever JSON a gateway signs, Porteiro stores it and acknowledges it.

Hypothesis builds bodies from each gateway's own fixtures with fields replaced by hostile
values (integers past 64 bits, NUL, lone surrogates, NaN and 1e308, empty strings, deep
nesting, odd types in known fields, duplicate keys) and fully arbitrary JSON, signs them
with the source's own scheme (`Provider.sign`: Adyen re-serialises the body, Mercado
Pago signs the query) and POSTs them to the real app (in-process ASGI, for speed) on
SQLite and on PostgreSQL. A signed body must get a 2xx and be stored byte for byte; no
body may get a 5xx; and the admin API must still list what was stored.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from porteiro.config import Config
from porteiro.config.load import parse_config
from porteiro.errors import AuthenticationError, ParseError
from porteiro.http.app import create_app
from porteiro.runtime import Runtime, utc_now
from tests.support.app import PEER, SOURCE, admin_headers, asgi_client, make_config

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gateways"
# One source per gateway, as its cases.toml configures it, and the bodies mutated.
GATEWAYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "stripe": ("stripe", ("payment-intent-succeeded.json", "charge-refunded-partial.json")),
    "pagarme": ("pagarme", ("charge-paid-card.json", "order-paid-docs-example.json")),
    "mercadopago": ("mercadopago", ("wh-approved.json", "wh-partial.json")),
    "adyen": ("adyen", ("authorisation-success.json", "batch.json")),
    "pix": ("efi", ("mixed-good-and-bad.json", "devolucao-paid.json")),
}
STANDARD_BODY = {
    "id": "evt_fuzz",
    "type": "payment.partially_refunded",
    "object_id": "pay_fuzz",
    "reference": "order-1",
    "amount": 1000,
    "refunded_total": 250,
    "currency": "BRL",
    "occurred_at": "2026-12-01T12:00:00Z",
    "data": {"note": "x", "items": [{"sku": "a", "qty": 1}]},
}
PROVIDERS = ["standard", *GATEWAYS]
SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fuzz_config(store_url: str) -> Config:
    sources: dict[str, Any] = {}
    for gateway, (source, _) in GATEWAYS.items():
        spec = tomllib.loads((FIXTURES / gateway / "cases.toml").read_text())
        sources[source] = dict(spec["sources"][source])
    sources["efi"]["allow_ips"] = [f"{PEER}/32"]  # the in-process client's address
    # No API is reached on the ack path; the worker (which would enrich) does not run.
    parsed = parse_config({"sources": sources}, {"FAKE_API": "http://127.0.0.1:9"})
    config = make_config(store_url)
    return replace(config, sources={**config.sources, **parsed.sources})


def source_of(provider: str) -> str:
    return SOURCE if provider == "standard" else GATEWAYS[provider][0]


def bases(provider: str) -> list[Any]:
    if provider == "standard":
        return [STANDARD_BODY]
    gateway = GATEWAYS[provider]
    return [json.loads((FIXTURES / provider / name).read_text()) for name in gateway[1]]


# -- hostile values ------------------------------------------------------------------------

ODD_TEXT = st.sampled_from(["", "\x00", "a\x00b", "\ud800", "x\udfff", "\U0001f600", " "])
TEXT = st.one_of(ODD_TEXT, st.text(max_size=8), (st.text(max_size=4) | ODD_TEXT).map("".join))
BIG = st.one_of(
    st.integers(min_value=2**63 - 2, max_value=2**63 + 2),
    st.integers(min_value=-(2**63) - 2, max_value=-(2**63) + 2),
    st.sampled_from([2**64, 2**64 - 1, 10**30, -(10**40), 10**200]),
)
FLOATS = st.sampled_from([1e308, -1e308, 1e30, 0.5, -0.0, math.nan, math.inf, -math.inf])
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), BIG, FLOATS, TEXT, ODD_TEXT)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"n": value}
    return value


DEEP = st.sampled_from([60, 130, 300, 900]).map(nested)
ARBITRARY = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
HOSTILE = st.one_of(SCALAR, ARBITRARY, DEEP, st.just({}), st.just([]))
# What the stores refuse, in the type a parser expects there (so it reads it, rather than
# refuse the body as malformed), drawn more often than anything else.
BAD_TEXT = st.sampled_from(["\x00", "\ud800", "\udfff"])


def poison(original: Any) -> st.SearchStrategy[Any]:
    if isinstance(original, str):
        return st.tuples(st.just(original), BAD_TEXT, st.booleans()).map(
            lambda t: t[0] + t[1] if t[2] else t[1] + t[0]
        )
    if isinstance(original, bool) or original is None:
        return HOSTILE
    if isinstance(original, int | float):
        return BIG | st.sampled_from([math.nan, math.inf, 1e308])
    return HOSTILE


# Fields some adapter reads (ids, types, amounts, times, statuses): mutated first.
KNOWN = frozenset(
    [
        "id",
        "type",
        "object_id",
        "reference",
        "amount",
        "refunded_total",
        "currency",
        "occurred_at",
        "created",
        "object",
        "status",
        "amount_refunded",
        "amount_received",
        "payment_intent",
        "charge",
        "code",
        "data",
        "action",
        "date_created",
        "user_id",
        "endToEndId",
        "txid",
        "valor",
        "chave",
        "horario",
        "devolucoes",
        "rtrId",
        "pspReference",
        "originalReference",
        "merchantReference",
        "eventCode",
        "eventDate",
        "success",
        "value",
        "order",
        "charges",
        "last_transaction",
        "paid_amount",
        "current_status",
        "pix",
    ]
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (keys and list indexes), itself included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(paths(item, (*prefix, index)))
    return found


def known(path: tuple[Any, ...]) -> bool:
    return any(step in KNOWN for step in path[-1:])


def value_at(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        root = root[step]
    return root


def put(root: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(root))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copy


@st.composite
def bodies(draw: st.DrawFn, provider: str) -> bytes:
    """A body: a gateway's own with one to three values replaced (sometimes a top-level
    key repeated with a hostile value), or arbitrary JSON; as ASCII JSON with escapes, or
    as raw text (surrogates written through, so not even UTF-8)."""
    if draw(st.integers(0, 4)) == 0:
        document = draw(HOSTILE)
        duplicate = None
    else:
        document = draw(st.sampled_from(bases(provider)))
        for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
            every = paths(document)[1:]
            read = [path for path in every if known(path)] or every
            path = draw(st.sampled_from(read) | st.sampled_from(every))
            original = value_at(document, path)
            document = put(document, path, draw(poison(original) | poison(original) | HOSTILE))
        duplicate = draw(st.none() | st.sampled_from(sorted(document)) | TEXT)
    text = json.dumps(document, ensure_ascii=draw(st.booleans()))
    if duplicate is not None and isinstance(document, dict) and document:
        text = text[:-1] + f", {json.dumps(duplicate)}: {json.dumps(draw(HOSTILE))}" + "}"
    return text.encode("utf-8", "surrogatepass")


# -- the property --------------------------------------------------------------------------


@dataclass
class Served:
    client: httpx.AsyncClient
    runtime: Runtime
    stored: int = 0  # deliveries are numbered from 1 in arrival order, on both stores


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[Served]:
    """One app per test, shared by its examples (a fresh store per example would cost a
    database and its migrations each)."""
    runtime = Runtime.build(fuzz_config(store_url))
    application: Starlette = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application), asgi_client(application) as c:
        yield Served(c, runtime)


@pytest.mark.parametrize("provider", PROVIDERS)
@SETTINGS
@given(data=st.data())
async def test_any_signed_body_is_stored_as_sent_and_acknowledged(
    served: Served, provider: str, data: st.DataObject
) -> None:
    client, source = served.client, source_of(provider)
    body = data.draw(bodies(provider), label="body")
    try:
        signed = served.runtime.providers[source].sign(body, utc_now())
    # Adyen signs only notification items; Mercado Pago signs data.id as sent in the
    # query, which a lone surrogate cannot be: such a body is sent unsigned (refused).
    except (ParseError, AuthenticationError, UnicodeEncodeError):
        response = await client.post(f"/webhooks/{source}", content=body)
        assert response.status_code < 500, response.text
        served.stored += response.status_code // 100 == 2
        return
    # The Standard Webhooks signer sends the body's own id as webhook-id: one with a
    # character no HTTP server takes in a header (uvicorn answers 400 to a NUL, say:
    # test_unstorable_values), or one HTTP trims to nothing, cannot arrive that way.
    assume(
        all(
            v.isascii() and v.isprintable() and v == v.strip() != ""
            for v in signed.headers.values()
        )
    )
    query = f"?{signed.query}" if signed.query else ""
    response = await client.post(
        f"/webhooks/{source}{signed.path_suffix}{query}",
        content=signed.body,
        headers=dict(signed.headers),
    )
    assert response.status_code // 100 == 2, (response.status_code, response.text)
    served.stored += 1
    delivery = await served.runtime.store.get_delivery(served.stored)
    assert delivery is not None and delivery.source == source
    assert delivery.body == signed.body
    # What was stored reads back: the admin API lists it (no value it cannot write out).
    listed = await client.get(
        "/api/events", params={"source": source, "limit": "5"}, headers=admin_headers()
    )
    assert listed.status_code == 200, listed.text
