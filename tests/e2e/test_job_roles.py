"""Roles across real processes on PostgreSQL: a receiver-only `serve --no-worker` and
three `porteiro worker` processes. Each singleton job (the reconciler's stale cycle, the
destination's relay) runs in exactly one worker; SIGKILL its holder and it moves to a
survivor; every event still reaches the merchant exactly once. And a deployment that
forgot the relays, or the workers, says so in /readyz's body while it stays ready."""

from __future__ import annotations

import base64
import json
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.database import execute, query
from tests.support.events import event_body
from tests.support.processes import (
    Proc,
    local_url,
    porteiro,
    post_all,
    run_porteiro,
    wait_healthy,
    write_config,
)
from tests.support.servers import free_port, live_server_thread
from tests.support.waiting import wait_until

MERCHANT_SECRET = "whsec_" + base64.b64encode(b"merchant-secret-for-the-roles-01").decode()
JOBS = ("reconcile", "relay:shop")
LEASE = "1.5"  # seconds: a dead holder's job moves within about that


class Merchant:
    """Counts each webhook-id it is sent."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    async def handle(self, request: Request) -> Response:
        with self._lock:
            self.seen[request.headers["webhook-id"]] += 1
        return Response(status_code=204)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hooks", self.handle, methods=["POST"])])


@contextmanager
def merchant() -> Iterator[tuple[Merchant, str]]:
    shop = Merchant()
    with live_server_thread(shop.app()) as url:
        yield shop, f"{url}/hooks"


def configure(tmp_path: Path, pg_url: str, merchant_url: str) -> Path:
    config = write_config(tmp_path, pg_url)
    with config.open("a") as text:
        text.write(
            f"""
[reconcile]
interval_seconds = 0.5

[destinations.shop]
url = "{merchant_url}"
secret = "{MERCHANT_SECRET}"
"""
        )
    run_porteiro(config, "db", "upgrade")
    return config


def actions(proc: Proc) -> list[dict[str, Any]]:
    lines = []
    for line in proc.output().splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def holders(pg_url: str) -> dict[str, int]:
    """Each singleton job's live lease holder, by pid (holder ids are host:pid:random);
    not the workers' presences."""
    found = query(
        pg_url,
        "SELECT job, holder FROM job_leases WHERE lease_until > now() AND job NOT LIKE 'worker:%'",
    )
    return {job: int(holder.split(":")[-2]) for job, holder in found}


def running(proc: Proc) -> set[str]:
    """The singleton jobs the process's log says it runs now: started and not stopped
    (the relay's and the reconciler's own log lines, not the lease's)."""
    count: Counter[str] = Counter()
    for line in actions(proc):
        action = line.get("action")
        if action == "relay.started":
            count["relay:shop"] += 1
        elif action == "relay.stopped":
            count["relay:shop"] -= 1
        elif action == "reconcile.started":
            count["reconcile"] += 1
        elif action == "reconcile.stopped":
            count["reconcile"] -= 1
    return {job for job, n in count.items() if n > 0}


def test_each_job_runs_once_and_moves_when_its_holder_is_killed(
    tmp_path: Path, pg_url: str
) -> None:
    with merchant() as (shop, merchant_url):
        config = configure(tmp_path, pg_url, merchant_url)
        port = free_port()
        receiver = porteiro(
            config, "serve", "--no-worker", "--port", str(port), log=tmp_path / "serve.log"
        )
        workers = [
            porteiro(config, "worker", "--lease-seconds", LEASE, log=tmp_path / f"w{n}.log")
            for n in range(3)
        ]
        alive = {proc.popen.pid: proc for proc in workers}
        try:
            wait_healthy(receiver, local_url(port))

            def settled() -> bool:
                held = holders(pg_url)
                if set(held) != set(JOBS) or not set(held.values()) <= set(alive):
                    return False
                return all(
                    running(proc) == {job for job, pid in held.items() if pid == proc.popen.pid}
                    for proc in alive.values()
                )

            def deliver(prefix: str, count: int, before: int) -> int:
                bodies = [
                    event_body(f"{prefix}_{n}", object_id=f"pay_{prefix}_{n}") for n in range(count)
                ]
                assert set(post_all(port, bodies)) == {200}
                wait_until(lambda: len(shop.seen) >= before + count, f"{prefix}: delivered")
                return before + count

            wait_until(settled, "both jobs held, each run by its holder only", within=30)
            delivered = deliver("before", 20, 0)
            assert receiver_runs_nothing(receiver)

            for job in JOBS:
                victim = alive.pop(holders(pg_url)[job])
                victim.kill(signal.SIGKILL)
                wait_until(settled, f"{job} moved to a surviving worker", within=30)
                assert holders(pg_url)[job] in alive
                delivered = deliver(f"after_{job}", 10, delivered)

            assert len(shop.seen) == delivered
            assert set(shop.seen.values()) == {1}, "an event was sent more than once"
            # Every job in exactly one live process, the one its lease names.
            runners = Counter(job for proc in alive.values() for job in running(proc))
            assert runners == Counter(JOBS)
        finally:
            for proc in [receiver, *workers]:
                proc.kill(signal.SIGTERM)


def receiver_runs_nothing(proc: Proc) -> bool:
    return running(proc) == set() and not any(
        line.get("action") == "worker.started" for line in actions(proc)
    )


def test_readyz_warns_of_an_unattended_relay_and_stays_ready(tmp_path: Path, pg_url: str) -> None:
    with merchant() as (shop, merchant_url):
        config = configure(tmp_path, pg_url, merchant_url)
        port = free_port()
        # Every role but the relays: events are applied, their outbox rows wait.
        proc = porteiro(config, "serve", "--no-relay", "--port", str(port),
                        log=tmp_path / "serve.log")  # fmt: skip
        try:
            wait_healthy(proc, local_url(port))
            assert set(post_all(port, [event_body("evt_w1")])) == {200}
            wait_until(
                lambda: query(pg_url, "SELECT count(*) FROM outbox") == [(1,)],
                "the event enqueued for the merchant",
            )
            ready = httpx.get(f"{local_url(port)}/readyz").json()
            assert ready == {"status": "ready", "warnings": []}  # not waiting long yet
            # The row has waited longer than a handover could take.
            execute(pg_url, "UPDATE outbox SET next_attempt_at = now() - interval '5 minutes'")
            response = httpx.get(f"{local_url(port)}/readyz")
            assert response.status_code == 200
            body = response.json()
            assert body["status"] == "ready"
            [warning] = body["warnings"]
            assert (warning["role"], warning["job"]) == ("relay", "relay:shop")
            assert "no process runs its relay" in warning["message"]
            assert shop.seen == {}
        finally:
            proc.kill(signal.SIGTERM)


def test_readyz_warns_while_events_wait_for_a_worker(tmp_path: Path, pg_url: str) -> None:
    with merchant() as (shop, merchant_url):
        config = configure(tmp_path, pg_url, merchant_url)
        port = free_port()
        receiver = porteiro(
            config, "serve", "--no-worker", "--port", str(port), log=tmp_path / "serve.log"
        )
        worker: Proc | None = None
        try:
            wait_healthy(receiver, local_url(port))
            assert set(post_all(port, [event_body("evt_alone")])) == {200}
            assert query(pg_url, "SELECT status FROM events") == [("pending",)]
            assert readyz(port) == {"status": "ready", "warnings": []}  # not waiting long yet
            # The event has waited longer than a worker's restart could take.
            execute(pg_url, "UPDATE events SET next_attempt_at = now() - interval '5 minutes'")
            response = httpx.get(f"{local_url(port)}/readyz")
            assert response.status_code == 200
            body = response.json()
            assert body["status"] == "ready"
            [warning] = body["warnings"]
            assert (warning["role"], warning["job"]) == ("worker", "worker")
            assert "no worker runs" in warning["message"]
            assert warning["due_since"] is not None

            worker = porteiro(config, "worker", "--lease-seconds", LEASE, log=tmp_path / "w.log")
            wait_until(
                lambda: query(pg_url, "SELECT status FROM events") == [("done",)],
                "the worker applied the waiting event",
            )
            wait_until(lambda: readyz(port)["warnings"] == [], "the warning gone")
            wait_until(lambda: len(shop.seen) == 1, "the event forwarded")
        finally:
            for proc in [receiver, *([worker] if worker else [])]:
                proc.kill(signal.SIGTERM)


def readyz(port: int) -> Any:
    return httpx.get(f"{local_url(port)}/readyz").json()
