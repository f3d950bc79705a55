"""GET a gateway's API and read its JSON answer: every failure is a GatewayError that
names the call (`what`, e.g. "stripe GET events"), so the worker retries it and the
operator sees which read broke.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def listed(body: Mapping[str, Any], key: str, *, error: str) -> list[Any]:
    """`body[key]`, one page of a listing, which must be a list; else GatewayError(error)."""
    items = body.get(key)
    if not isinstance(items, list):
        raise GatewayError(error)
    return items


def with_status(item: object, *, error: str) -> dict[str, Any]:
    """A listed object, which must carry a string `status` (what a status read maps);
    else GatewayError(error)."""
    if not isinstance(item, dict) or not isinstance(item.get("status"), str):
        raise GatewayError(error)
    return item
