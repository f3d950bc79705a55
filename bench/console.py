"""The console's pages with a big store: each page of /ui (and its API twin where the page
is a search) fetched a few times from a running `porteiro serve` whose store holds the
scale phase's preload, one request at a time, as an operator clicks. The figure is the
server's answer time as the client sees it (median and worst of the tries); the target
is 200 ms a page with 1 M stored events (docs/performance.md)."""

from __future__ import annotations

import re
import statistics
import time
from typing import Any
from urllib.parse import quote

import httpx

ADMIN_TOKEN = "bench-console-token"
TRIES = 5
TARGET_MS = 200.0


def pages(object_id: str | None, reference: str | None, event_id: int) -> dict[str, str]:
    """Name -> path of each page measured; the searches ask for rows the preload holds."""
    found = {
        "overview": "/ui/",
        "overview (live part)": "/ui/live",
        "payments": "/ui/payments",
        "payments, anomalous": "/ui/payments?anomalous=1",
        "payments, paid": "/ui/payments?state=paid",
        "events": "/ui/events",
        "events, dead": "/ui/events?status=dead",
        "events, a kind none has": "/ui/events?kind=dispute.opened",
        "event": f"/ui/events/{event_id}",
        "dead letters": "/ui/dlq",
        "destinations": "/ui/destinations",
        "reconciliation": "/ui/reconciliation",
        "quarantine": "/ui/quarantine",
        "audit": "/ui/audit",
        "api payments": "/api/payments?limit=50",
    }
    if reference is not None:
        found["payments, by order number"] = f"/ui/payments?reference={quote(reference)}"
        found["events, by order number"] = f"/ui/events?reference={quote(reference)}"
    if object_id is not None:
        found["payment timeline"] = f"/ui/payments/stripe/{quote(object_id)}"
    return found


def time_pages(base: str, paths: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Log in, then each page TRIES times (after one untimed warm-up): ms per page."""
    results: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=base, timeout=30.0) as client:
        login = client.get("/ui/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', login.text)
        if nonce is None:
            raise RuntimeError("the console's login form has no nonce")
        done = client.post(
            "/ui/login",
            data={"nonce": nonce.group(1), "token": ADMIN_TOKEN},
            headers={"origin": base},
        )
        if done.status_code != 303:
            raise RuntimeError(f"console login answered {done.status_code}")
        api = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        for name, path in paths.items():
            headers = api if path.startswith("/api/") else {}
            client.get(path, headers=headers)  # warm-up: caches, the plan, the pool
            times, statuses = [], set()
            for _ in range(TRIES):
                started = time.perf_counter()
                answer = client.get(path, headers=headers)
                times.append((time.perf_counter() - started) * 1000)
                statuses.add(answer.status_code)
            results[name] = {
                "path": path,
                "median_ms": round(statistics.median(times), 1),
                "max_ms": round(max(times), 1),
                "statuses": sorted(statuses),
            }
    return results
