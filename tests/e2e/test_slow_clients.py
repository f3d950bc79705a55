"""Slow clients neither starve signed deliveries nor hold their connections for ever
(issue 22, finding 6), against a real `porteiro serve` on both stores."""

from __future__ import annotations

import resource
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.e2e.processes import (
    free_port,
    lifecycle_bodies,
    post_all,
    run_porteiro,
    serving,
    write_config,
)

STALLED = 1000
HEADER_SECONDS = 2.0
BODY_SECONDS = 3.0
# The signed deliveries below are never more than 16 in flight; the stalled ones alone
# are far over this cap, so they must not count toward it.
MAX_INFLIGHT = 64


@pytest.fixture(autouse=True)
def _enough_open_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = STALLED + 512
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.fail(f"RLIMIT_NOFILE hard limit {hard} < {wanted}: raise it to run this test")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _open(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(data)
    return sock


def _closed_by_server(sock: socket.socket, deadline: float) -> bytes | None:
    """What the server sent before closing (b"" for a bare close); None if it was still
    open at `deadline`."""
    received = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        sock.settimeout(remaining)
        try:
            piece = sock.recv(4096)
        except TimeoutError:
            return None
        except ConnectionResetError:
            return received
        if not piece:
            return received
        received += piece


def _drip(port: int, result: dict[str, float]) -> None:
    # Slowloris: one header byte every 0.2 s, never the end of the headers.
    sock = _open(port, b"POST /webhooks/std HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    started = time.monotonic()
    try:
        for _ in range(150):  # 30 s, far past the header deadline
            time.sleep(0.2)
            sock.sendall(b"a")
    except OSError:
        result["cut_after"] = time.monotonic() - started
    finally:
        sock.close()


def test_stalled_connections_neither_starve_deliveries_nor_stay_open(
    store_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, store_url)
    with config.open("a") as toml:
        toml.write(
            f"\n[server]\nmax_inflight = {MAX_INFLIGHT}\nheader_timeout_seconds = "
            f"{HEADER_SECONDS}\nbody_timeout_seconds = {BODY_SECONDS}\n"
        )
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    with serving(config, port, tmp_path / "serve.log"):
        head = (
            b"POST /webhooks/std HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        bodies = [_open(port, head + b"0123456789") for _ in range(STALLED)]
        lines = [_open(port, b"POST /webhooks/st") for _ in range(10)]
        headers = [_open(port, b"POST /webhooks/std HTTP/1.1\r\nHost: 1") for _ in range(10)]
        silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(10)]
        drip: dict[str, float] = {}
        dripper = threading.Thread(target=_drip, args=(port, drip))
        dripper.start()
        try:
            time.sleep(0.5)  # the server has read every stalled request by now
            now = datetime.now(UTC)
            signed = [body for payment in range(5) for body in lifecycle_bodies(payment, now)]
            statuses = post_all(port, signed)
            assert all(200 <= status < 300 for status in statuses), statuses

            # Every stalled connection is cut: a body too slow gets 408 first.
            deadline = time.monotonic() + BODY_SECONDS + 20
            for sock in bodies:
                answer = _closed_by_server(sock, deadline)
                assert answer is not None, "a connection stalled mid-body is still open"
                assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer
            for sock in [*lines, *headers, *silent]:
                answer = _closed_by_server(sock, deadline)
                assert answer is not None, "a connection stalled before its body is still open"
            dripper.join(timeout=40)
            # Cut at the header deadline although it never stopped sending.
            assert HEADER_SECONDS * 0.9 <= drip.get("cut_after", 1e9) <= HEADER_SECONDS + 20
            # And the server still serves.
            later = post_all(port, lifecycle_bodies(9, datetime.now(UTC)))
            assert all(200 <= status < 300 for status in later), later
        finally:
            for sock in [*bodies, *lines, *headers, *silent]:
                sock.close()
            dripper.join(timeout=40)
