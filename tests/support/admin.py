"""The admin API of a served `porteiro`, over HTTP, as an operator's script reads it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx

from tests.support.app import admin_headers
from tests.support.waiting import wait_until


def admin_get(base: str, path: str, **params: Any) -> Any:
    response = httpx.get(base + path, params=params, headers=admin_headers())
    response.raise_for_status()
    return response.json()


def all_events(base: str, source: str) -> list[dict[str, Any]]:
    """Every event of `source`, page after page."""
    events: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        more = {"cursor": cursor} if cursor else {}
        page = admin_get(base, "/api/events", source=source, limit=500, **more)
        events += page["items"]
        cursor = page["next"]
        if cursor is None:
            return events


def wait_processed(base: str, source: str, within: float = 30.0) -> list[dict[str, Any]]:
    """The events of `source` once there are some and each is done or ignored."""
    events: list[dict[str, Any]] = []

    def processed() -> bool:
        nonlocal events
        events = all_events(base, source)
        return bool(events) and all(e["status"] in ("done", "ignored") for e in events)

    try:
        wait_until(processed, f"the events of {source} processed", within=within, every=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {Counter(e['status'] for e in events)}") from None
    return events
