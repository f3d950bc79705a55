"""Forwarding end to end with real processes: `porteiro simulate standard --lifecycle
--duplicates 1 --shuffle` against a running `porteiro serve` whose worker feeds the
transactional outbox, and whose relay POSTs to a real merchant HTTP server.

The merchant answers 500 to the first request of a few payments, so those rows go through
the relay's retry path. Checked against the ledger (the admin API's payment histories):
every event that changed a payment (verdict applied or anomalous) reaches the merchant
under exactly one stable `webhook-id`, every request's signature verifies with the
official `standardwebhooks` library, and per payment the events arrive in applied order.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro.sinks.message_id import message_id
from tests.support.admin import admin_get, wait_processed
from tests.support.app import ADMIN_TOKEN
from tests.support.processes import run_porteiro, serving
from tests.support.servers import free_port, live_server_thread

pytestmark = pytest.mark.slow

SOURCE_SECRET = "whsec_" + base64.b64encode(b"porteiro-forward-source-secret!!").decode()
MERCHANT_SECRET = "whsec_" + base64.b64encode(b"porteiro-forward-merchant-key-01").decode()
COUNT, SEED = 20, 3
FAILING_PAYMENTS = 3  # payments whose first request the merchant answers with a 500
DEADLINE_SECONDS = 25.0


@dataclass(frozen=True)
class Received:
    body: bytes
    headers: dict[str, str]
    status: int


class Merchant:
    """Records every request; answers 500 to the first request of the first few payments
    it hears about, 200 otherwise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[Received] = []
        self._failed: set[str] = set()

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hooks", self._hook, methods=["POST"])])

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        object_id = json.loads(body)["object_id"]
        with self._lock:
            fail = object_id not in self._failed and len(self._failed) < FAILING_PAYMENTS
            if fail:
                self._failed.add(object_id)
            status = 500 if fail else 200
            self._requests.append(Received(body, dict(request.headers), status))
        return Response(status_code=status)

    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._requests)

    def failed(self) -> set[str]:
        with self._lock:
            return set(self._failed)


def write_config(directory: Path, merchant_url: str) -> Path:
    path = directory / "porteiro.toml"
    path.write_text(
        f"""
[store]
url = "sqlite:///{directory / "porteiro.db"}"

[admin]
token = "{ADMIN_TOKEN}"

[worker]
poll_interval_seconds = 0.1

[sources.standard]
provider = "standard"
secrets = ["{SOURCE_SECRET}"]

[destinations.shop]
url = "{merchant_url}/hooks"
secret = "{MERCHANT_SECRET}"
kinds = []
timeout_seconds = 5

[destinations.shop.retry]
base_delay_seconds = 0.2
max_delay_seconds = 1
max_attempts = 10
"""
    )
    return path


def expected_per_payment(base: str, events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per payment, the webhook-ids the merchant must get, in applied order: each event's
    stable id, of its source and key."""
    ids = {e["id"]: message_id(e["source"], e["dedup_key"]) for e in events}
    expected: dict[str, list[str]] = {}
    for object_id in sorted({e["object_id"] for e in events if e["object_id"]}):
        payment = admin_get(base, f"/api/payments/standard/{object_id}")
        expected[object_id] = [
            ids[entry["event_id"]]
            for entry in payment["history"]
            if entry["verdict"] in ("applied", "anomalous")
        ]
    return expected


def delivered_per_payment(requests: list[Received]) -> dict[str, list[str]]:
    """Per payment, the webhook-ids the merchant accepted (2xx), first acceptance only,
    in arrival order: what a merchant de-duplicating on webhook-id acts on."""
    seen: set[str] = set()
    delivered: dict[str, list[str]] = defaultdict(list)
    for request in requests:
        msg_id = request.headers["webhook-id"]
        if request.status == 200 and msg_id not in seen:
            seen.add(msg_id)
            delivered[json.loads(request.body)["object_id"]].append(msg_id)
    return dict(delivered)


def wait_delivered(
    merchant: Merchant, expected: dict[str, list[str]], deadline: float
) -> list[Received]:
    wanted = {msg_id for ids in expected.values() for msg_id in ids}
    requests = merchant.requests()
    while time.monotonic() < deadline:
        requests = merchant.requests()
        accepted = {r.headers["webhook-id"] for r in requests if r.status == 200}
        if wanted <= accepted:
            return requests
        time.sleep(0.1)
    missing = wanted - {r.headers["webhook-id"] for r in requests if r.status == 200}
    raise AssertionError(f"{len(missing)} events never reached the merchant: {sorted(missing)}")


def test_applied_events_reach_the_merchant_once_signed_and_in_order(tmp_path: Path) -> None:
    merchant = Merchant()
    deadline = time.monotonic() + DEADLINE_SECONDS  # a hang guard, not a speed check
    with live_server_thread(merchant.app(), lifespan="off") as merchant_url:
        config = write_config(tmp_path, merchant_url)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with serving(config, port, tmp_path / "serve.log"):
            output = run_porteiro(
                config, "simulate", "standard", "--url", base, "--count", str(COUNT),
                "--lifecycle", "--duplicates", "1", "--shuffle", "--seed", str(SEED),
            )  # fmt: skip
            assert "5xx 0" in output and "4xx 0" in output, output
            events = wait_processed(base, "standard", within=deadline - time.monotonic())
            expected = expected_per_payment(base, events)
            requests = wait_delivered(merchant, expected, deadline)
            # Nothing beyond the applied events trickles in afterwards.
            time.sleep(1.0)
            requests = merchant.requests()

    assert len(expected) == COUNT
    assert all(expected.values()), "a payment with no applied event"
    every_id = [msg_id for ids in expected.values() for msg_id in ids]
    assert len(every_id) == len(set(every_id)), "one event in two payments' histories"

    # Every request (retries included) is signed for the merchant's secret, the official
    # library accepts it, and the body's own id is the stable webhook-id.
    verifier = Webhook(MERCHANT_SECRET)
    for request in requests:
        verified = verifier.verify(request.body, request.headers)
        assert verified["id"] == request.headers["webhook-id"]
        assert verified["source"] == "standard"

    # De-duplicated on webhook-id: exactly the applied events, per payment, in applied
    # order; payment versions only grow along the way.
    assert delivered_per_payment(requests) == expected
    versions: dict[str, list[int]] = defaultdict(list)
    accepted: set[str] = set()
    for request in requests:
        msg_id = request.headers["webhook-id"]
        if request.status == 200 and msg_id not in accepted:
            accepted.add(msg_id)
            body = json.loads(request.body)
            versions[body["object_id"]].append(body["payment"]["version"])
    assert all(v == sorted(set(v)) for v in versions.values()), versions

    # The refused first requests were retried under the same id, and nothing of that
    # payment overtook them: per-payment order held across the retry.
    failed = merchant.failed()
    assert len(failed) == FAILING_PAYMENTS
    for object_id in failed:
        mine = [r for r in requests if json.loads(r.body)["object_id"] == object_id]
        first = mine[0]
        assert first.status == 500
        assert first.headers["webhook-id"] == expected[object_id][0]
        assert mine[1].headers["webhook-id"] == first.headers["webhook-id"]
        assert mine[1].status == 200
    retried = [r for r in requests if r.status == 500]
    assert len(retried) == FAILING_PAYMENTS

    # Every 500 aside, each event was delivered once: no spurious re-sends.
    assert len(requests) == len(every_id) + FAILING_PAYMENTS
