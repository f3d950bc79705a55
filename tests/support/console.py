"""The console's tests' shared pieces: a configuration with a `read` and an `operate`
token and one destination, the hidden fields of a page, and a login."""

from __future__ import annotations

import re
from dataclasses import replace

import httpx

from porteiro.config import AdminConfig, AdminToken, Config, DestinationConfig, UiConfig
from tests.support.signing import SECRET

DESTINATION = "erp"


def console_config(
    config: Config, reader: tuple[str, str], operator: tuple[str, str], ui: UiConfig
) -> Config:
    """`config` with only the named tokens (name, token) of each role, the destination
    DESTINATION (nothing listens at its URL) and `ui`."""
    tokens = {
        reader[0]: AdminToken(reader[0], reader[1], "read"),
        operator[0]: AdminToken(operator[0], operator[1], "operate"),
    }
    erp = DestinationConfig(name=DESTINATION, url="http://127.0.0.1:9/hooks", secret=SECRET)
    return replace(
        config,
        admin_token=None,
        admin=AdminConfig(tokens=tokens),
        destinations={DESTINATION: erp},
        ui=ui,
    )


def hidden(html: str, name: str) -> str:
    """The value of the page's hidden field `name` (the login nonce, a CSRF token)."""
    found = re.search(rf'name="{name}" value="([^"]+)"', html)
    assert found is not None, f"no hidden {name} in the page"
    return found.group(1)


async def log_in(http: httpx.AsyncClient, token: str) -> httpx.Response:
    """The login form fetched and posted back with `token`, as a browser does."""
    form = await http.get("/ui/login")
    return await http.post("/ui/login", data={"nonce": hidden(form.text, "nonce"), "token": token})
