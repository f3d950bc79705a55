"""The fake gateways' API routes, as `@api` declares them: every path a fake serves,
in the order Starlette tries them, and each one refused without credentials unless it
is public (Pagar.me's JWKS; the Pix token endpoint checks its own)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from porteiro.fakes import Settings, scenario_from
from porteiro.fakes.server import gateway_class

SECRETS = {"stripe": "whsec_test", "adyen": "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C0"}
ROUTES = {
    "stripe": [
        ("GET", "/v1/payment_intents/{id}"),
        ("GET", "/v1/charges/{id}"),
        ("GET", "/v1/events/{id}"),
        ("GET", "/v1/events"),
        ("POST", "/v1/payment_intents"),
    ],
    "pix": [
        ("POST", "/oauth/token"),
        ("GET", "/v2/cob/{txid}"),
        ("PUT", "/v2/cob/{txid}"),
        ("GET", "/v2/pix/{e2eid}"),
        ("GET", "/v2/pix"),
        ("GET", "/v2/pix/{e2eid}/devolucao/{id}"),
        ("PUT", "/v2/pix/{e2eid}/devolucao/{id}"),
    ],
    # search first: /v1/payments/{id} would take "search" for an id
    "mercadopago": [
        ("GET", "/v1/payments/search"),
        ("GET", "/v1/payments/{id}"),
        ("POST", "/v1/payments"),
    ],
    "pagarme": [
        ("GET", "/.well-known/jwks.json"),
        ("GET", "/core/v5/orders/{id}"),
        ("GET", "/core/v5/charges/{id}"),
        ("GET", "/core/v5/charges"),
        ("POST", "/core/v5/orders"),
    ],
    "adyen": [("POST", "/v71/payments")],
}
PUBLIC = {("pagarme", "/.well-known/jwks.json")}


def _routes(name: str) -> list[Route]:
    settings = Settings(webhook_url="http://127.0.0.1:9/", secret=SECRETS.get(name, "s"),
                        api_key="key")  # fmt: skip
    gateway = gateway_class(name)(scenario_from({"payments": 1}), settings, datetime.now(UTC))
    routes = gateway.routes()
    assert all(isinstance(route, Route) for route in routes)
    return [route for route in routes if isinstance(route, Route)]


@pytest.mark.parametrize("name", sorted(ROUTES))
async def test_each_fake_serves_its_declared_routes_behind_its_credential_check(
    name: str,
) -> None:
    routes = _routes(name)
    assert [(min((r.methods or set()) - {"HEAD"}), r.path) for r in routes] == ROUTES[name]
    transport = httpx.ASGITransport(app=Starlette(routes=list(routes)))
    async with httpx.AsyncClient(transport=transport, base_url="http://fake") as client:
        for method, path in ROUTES[name]:
            concrete = path.replace("{txid}", "a" * 30).replace("{e2eid}", "E1")
            answer = await client.request(method, concrete.replace("{id}", "1"))
            expected = 200 if (name, path) in PUBLIC else 401
            assert answer.status_code == expected, (method, path)
