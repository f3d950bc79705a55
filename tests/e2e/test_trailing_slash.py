"""A stray trailing slash is a 404, never a redirect built from the Host header (issue 22,
finding 10): Starlette's redirect_slashes answered 307 to http://<Host>/<path>."""

from __future__ import annotations

import httpx
import pytest

from porteiro.http.app import create_app
from porteiro.runtime import Runtime
from tests.support.app import ADMIN_TOKEN, SOURCE, make_config
from tests.support.events import event_body
from tests.support.servers import live_server
from tests.support.signing import standard_headers


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", f"/webhooks/{SOURCE}/"),
        ("POST", f"/webhooks/{SOURCE}/pix/"),
        ("POST", "/webhooks/unknown/"),
        ("GET", "/api/events/"),
        ("POST", "/api/replay/"),
        ("GET", "/api/destinations/"),
        ("GET", "/healthz/"),
        ("GET", "/metrics/"),
    ],
)
async def test_a_trailing_slash_is_not_redirected(sqlite_url: str, method: str, path: str) -> None:
    runtime = Runtime.build(make_config(sqlite_url))
    async with (
        live_server(create_app(runtime, migrate=True)) as url,
        httpx.AsyncClient(base_url=url, follow_redirects=False) as client,
    ):
        body = event_body("evt_slash")
        headers = {
            **standard_headers(body, "msg_slash"),
            "authorization": f"Bearer {ADMIN_TOKEN}",
            "host": "attacker.example",
        }
        response = await client.request(method, path, content=body, headers=headers)
        assert response.status_code == 404, (response.status_code, response.headers)
        assert "location" not in response.headers
        # The slash-less spelling is served as before.
        fine = await client.post(
            f"/webhooks/{SOURCE}", content=body, headers=standard_headers(body, "msg_slash")
        )
        assert fine.status_code == 200
