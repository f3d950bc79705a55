"""Slow clients neither starve signed deliveries nor hold their connections for ever
(issue 22, finding 6), against a real `porteiro serve` on both stores."""

from __future__ import annotations

import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.support.app import ADMIN_TOKEN
from tests.support.events import lifecycle_bodies
from tests.support.processes import (
    Proc,
    local_url,
    post_all,
    run_porteiro,
    wait_healthy,
    write_config,
)
from tests.support.servers import free_port

STALLED = 1000
HEADER_SECONDS = 2.0
BODY_SECONDS = 3.0
# The server starts with a soft limit on open files under the connections it must hold
# (a stock `ulimit -n` of 1,024 is not far off): `serve` must raise it to the hard limit.
SERVER_SOFT_FILES = 256
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


# Lowers the soft limit, then becomes `python -m porteiro ARGS` (exec keeps the limit).
_WITH_FEW_FILES = f"""
import os, resource, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, ({SERVER_SOFT_FILES}, hard))
os.execv(sys.executable, [sys.executable, "-m", "porteiro", *sys.argv[1:]])
"""


@contextmanager
def _serving(config: Path, port: int, log: Path) -> Iterator[Proc]:
    args = ["--config", str(config), "serve", "--port", str(port)]
    proc = Proc.start([sys.executable, "-c", _WITH_FEW_FILES, *args], log)
    try:
        wait_healthy(proc, local_url(port))
        yield proc
    finally:
        proc.kill(signal.SIGTERM)


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
    with _serving(config, port, tmp_path / "serve.log"):
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
            # Cut although it never stopped sending (it would have for 30 s), and not
            # before the header deadline.
            assert "cut_after" in drip, "the dripping connection was never cut"
            assert drip["cut_after"] >= HEADER_SECONDS * 0.9
            # And the server still serves.
            later = post_all(port, lifecycle_bodies(9, datetime.now(UTC)))
            assert all(200 <= status < 300 for status in later), later
        finally:
            for sock in [*bodies, *lines, *headers, *silent]:
                sock.close()
            dripper.join(timeout=40)


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_an_admin_request_cut_mid_body_is_a_408_and_no_server_error(
    store_url: str, tmp_path: Path
) -> None:
    # The admin API reads its bodies through Starlette: a body cut at the deadline is the
    # client's failure, answered 408, not "Exception in ASGI application" in the log.
    config = write_config(tmp_path, store_url)
    with config.open("a") as toml:
        toml.write(f"\n[server]\nbody_timeout_seconds = {BODY_SECONDS}\n")
    port = free_port()
    log = tmp_path / "serve.log"
    with _serving(config, port, log):
        sock = _open(
            port,
            b"POST /api/replay HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {ADMIN_TOKEN}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        )
        with sock:
            answer = _closed_by_server(sock, time.monotonic() + BODY_SECONDS + 20)
        assert answer is not None and answer.startswith(b"HTTP/1.1 408 "), answer
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    output = log.read_text()
    assert "Exception in ASGI application" not in output
    assert '"level": "error"' not in output
