"""Real `porteiro` processes for end-to-end tests: config files, start, wait, stop."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import httpx
from standardwebhooks.webhooks import Webhook

DEV_SECRET = "whsec_" + base64.b64encode(b"porteiro-e2e-secret-0123456789ab").decode()
ADMIN_TOKEN = "e2e-admin-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(directory: Path, store_url: str, *, lease_seconds: float = 30.0) -> Path:
    path = directory / "porteiro.toml"
    path.write_text(
        f"""
[store]
url = "{store_url}"

[admin]
token = "{ADMIN_TOKEN}"

[worker]
lease_seconds = {lease_seconds}
poll_interval_seconds = 0.2
batch_size = 20

[sources.std]
provider = "standard"
secrets = ["{DEV_SECRET}"]
"""
    )
    return path


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log: Path
    handle: IO[bytes]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.popen.wait(timeout=15)
            self.handle.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def porteiro(config: Path, *args: str, log: Path) -> Proc:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTEIRO_")}
    handle = log.open("ab")
    popen = subprocess.Popen(
        [sys.executable, "-m", "porteiro", "--config", str(config), *args],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env=env,
    )
    return Proc(popen, log, handle)


def run_porteiro(config: Path, *args: str, timeout: float = 60) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTEIRO_")}
    done = subprocess.run(
        [sys.executable, "-m", "porteiro", "--config", str(config), *args],
        capture_output=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"porteiro {args} failed: {done.stdout!r} {done.stderr!r}")
    return done.stdout.decode()


def wait_healthy(port: int, proc: Proc, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise AssertionError(f"server exited early:\n{proc.output()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"server on {port} not healthy in {timeout}s:\n{proc.output()}")


@contextmanager
def serving(config: Path, port: int, log: Path, *extra: str) -> Iterator[Proc]:
    proc = porteiro(config, "serve", "--port", str(port), *extra, log=log)
    try:
        wait_healthy(port, proc)
        yield proc
    finally:
        proc.kill(signal.SIGTERM)


def lifecycle_bodies(payment: int, base: datetime) -> list[bytes]:
    """Four canonical events for one payment, in the order they happened."""
    object_id = f"pay_{payment:05d}"
    kinds = [
        ("payment.created", None),
        ("payment.authorized", None),
        ("payment.paid", None),
        ("payment.partially_refunded", 300),
    ]
    bodies = []
    for step, (kind, refund) in enumerate(kinds):
        event = {
            "id": f"evt_{payment:05d}_{step}",
            "type": kind,
            "object_id": object_id,
            "reference": f"order-{payment}",
            "amount": refund if refund is not None else 1000,
            "currency": "BRL",
            "occurred_at": (base + timedelta(seconds=step)).isoformat(),
        }
        bodies.append(json.dumps(event).encode())
    return bodies


def signed_headers(body: bytes, now: datetime | None = None) -> dict[str, str]:
    """Headers made by the official Standard Webhooks library, as a sender would."""
    event_id = json.loads(body)["id"]
    when = now or datetime.now(UTC)
    signature = Webhook(DEV_SECRET).sign(event_id, when, body.decode())
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


def post_all(port: int, bodies: Sequence[bytes], concurrency: int = 16) -> list[int]:
    """POST each body (signed now) and return the status codes, in order."""
    import asyncio

    async def send() -> list[int]:
        semaphore = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=10) as client:

            async def one(body: bytes) -> int:
                async with semaphore:
                    response = await client.post(
                        f"http://127.0.0.1:{port}/webhooks/std",
                        content=body,
                        headers=signed_headers(body),
                    )
                    return response.status_code

            return list(await asyncio.gather(*(one(body) for body in bodies)))

    return asyncio.run(send())
