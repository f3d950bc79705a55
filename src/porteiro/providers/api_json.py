"""GET a gateway's API and read its JSON answer: every failure is a GatewayError that
names the call (`what`, e.g. "stripe GET events"), so the worker retries it and the
operator sees which read broke.
"""

from __future__ import annotations

from typing import Any

import httpx

from porteiro.errors import GatewayError


async def get_json(
    http: httpx.AsyncClient, url: str, *, what: str, **request: Any
) -> tuple[httpx.Response, Any]:
    """The response to `GET url` (`request`: httpx's params, headers, auth, timeout) and
    its decoded JSON; a network error or an error status is "`what` failed", a body that
    is not JSON "`what`: not JSON"."""
    try:
        response = await http.get(url, **request)
        response.raise_for_status()
        return response, response.json()
    except httpx.HTTPError as exc:
        raise GatewayError(f"{what} failed: {exc}") from exc
    except ValueError as exc:
        raise GatewayError(f"{what}: not JSON: {exc}") from exc


async def get_json_object(
    http: httpx.AsyncClient, url: str, *, what: str, **request: Any
) -> dict[str, Any]:
    """`get_json`'s body, which must be a JSON object."""
    _, body = await get_json(http, url, what=what, **request)
    if not isinstance(body, dict):
        raise GatewayError(f"{what}: expected a JSON object")
    return body
