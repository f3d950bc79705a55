"""A 413 reaches a sender still writing its body, and what is read after it is bounded
(issue 22, finding 7), against a real `porteiro serve` (uvloop, httptools)."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.processes import serving, write_config
from tests.support.servers import free_port

BODY = b"x" * (3 * 1024 * 1024)  # over the default 1 MiB cap
LINGER_MAX = 16 * 1024 * 1024  # [server] linger_max_bytes, by default


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    directory = tmp_path_factory.mktemp("oversized")
    config = write_config(directory, f"sqlite:///{directory / 'porteiro.db'}")  # defaults
    chosen = free_port()
    with serving(config, chosen, directory / "serve.log"):
        yield chosen


def _post_whole_body_then_read(port: int, close: bool) -> int | str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    headers = {"content-type": "application/json"}
    if close:
        headers["connection"] = "close"  # as urllib sends it
    try:
        connection.request("POST", "/webhooks/std", body=BODY, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError as exc:  # broken pipe, connection reset
        return type(exc).__name__
    finally:
        connection.close()


@pytest.mark.parametrize("close", [True, False], ids=["connection-close", "keep-alive"])
def test_a_blocking_client_that_writes_the_whole_body_reads_its_413(port: int, close: bool) -> None:
    outcomes = [_post_whole_body_then_read(port, close) for _ in range(100)]
    assert outcomes.count(413) >= 99, {outcome: outcomes.count(outcome) for outcome in outcomes}


def test_urllib_reads_its_413(port: int) -> None:
    statuses: list[int | str] = []
    for _ in range(10):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/webhooks/std", data=BODY)
        try:
            urllib.request.urlopen(request, timeout=20)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
        except urllib.error.URLError as exc:
            statuses.append(str(exc.reason))
    assert statuses.count(413) >= 9, statuses


def test_what_is_read_after_the_413_is_bounded(port: int) -> None:
    # A sender that announces a huge body and keeps writing gets its 413, and then the
    # connection is cut once about linger_max_bytes more have come, not read for ever.
    chunk = b"y" * 65536
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(
            b"POST /webhooks/std HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n"
        )
        # Refused on its Content-Length, before a byte of the body.
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
        with pytest.raises(OSError):  # the cut comes at some write
            while sent < 64 * LINGER_MAX:
                sock.sendall(chunk)
                sent += len(chunk)
    # Kernel buffers on both sides hold some megabytes beyond what the server read.
    assert sent < 4 * LINGER_MAX
