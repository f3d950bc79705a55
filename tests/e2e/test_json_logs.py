"""Every line a real `porteiro serve` writes at DEBUG is one JSON object, and none holds a
secret, the admin token, a CPF, an e-mail or a body (issue 22, finding 9)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.app import ADMIN_TOKEN
from tests.support.processes import (
    Proc,
    completed_porteiro,
    local_url,
    porteiro_argv,
    porteiro_env,
    wait_healthy,
)
from tests.support.servers import free_port
from tests.support.signing import SECRET, standard_headers

HMAC_TOKEN = "json-logs-Hmac_Token_4b1d9e"
CPF = "529.982.247-25"
EMAIL = "ana.souza@example.com.br"
MARKER = "body-marker-9d1f3c"
FORBIDDEN = (SECRET, SECRET.removeprefix("whsec_"), ADMIN_TOKEN, HMAC_TOKEN, CPF,
             CPF.replace(".", "").replace("-", ""), EMAIL, MARKER)  # fmt: skip


def _config(directory: Path) -> Path:
    path = directory / "porteiro.toml"
    path.write_text(
        f"""
[store]
url = "sqlite:///{directory / "porteiro.db"}"

[admin]
token = "{ADMIN_TOKEN}"

[server]
max_body_bytes = 4096

[worker]
poll_interval_seconds = 0.2

[sources.std]
provider = "standard"
secrets = ["{SECRET}"]

[sources.efi]
provider = "pix"
keys = ["c0ffee00-5b2d-4e8f-9a7c-1d2e3f4a5b6c"]
hmac_token = "{HMAC_TOKEN}"
allow_ips = ["127.0.0.1"]
confirm = false
"""
    )
    return path


DEBUG = {"PORTEIRO_LOG_LEVEL": "DEBUG"}


def _assert_json_lines(text: str, where: str) -> list[dict[str, object]]:
    lines = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            raise AssertionError(f"{where}: not JSON: {line!r}") from None
        assert isinstance(value, dict), f"{where}: not an object: {line!r}"
        lines.append(value)
    for secret in FORBIDDEN:
        assert secret not in text, f"{where} holds {secret!r}"
    return lines


def _personal_body() -> bytes:
    customer = {"cpf": CPF, "email": EMAIL, "note": MARKER}
    event = {"id": "evt_logs_1", "type": "payment.paid", "object_id": "pay_logs"}
    return json.dumps({**event, "amount": 1000, "currency": "BRL", "customer": customer}).encode()


def _upgrade_request(port: int) -> bytes:
    # A WebSocket upgrade carrying the Pix token in its query and a credential header:
    # the server must neither upgrade it nor log what it carried.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET /webhooks/efi?hmac={HMAC_TOKEN} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Authorization: Bearer {ADMIN_TOKEN}\r\n\r\n".encode()
        )
        return sock.recv(4096)


def test_every_line_of_serve_at_debug_is_json_without_secrets(tmp_path: Path) -> None:
    config = _config(tmp_path)
    port = free_port()
    out_path, err_path = tmp_path / "serve.out", tmp_path / "serve.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        command = porteiro_argv(config, "serve", "--port", str(port))
        popen = subprocess.Popen(command, stdout=out, stderr=err, env=porteiro_env(DEBUG))
        proc = Proc(popen, err_path, err)
        base = local_url(port)
        try:
            wait_healthy(proc, base)
            for source in ("std", "efi"):
                done = completed_porteiro(config, "simulate", "--url", base, "--source", source,
                                          "--count", "3", env=DEBUG)  # fmt: skip
                assert done.returncode == 0, done
                _assert_json_lines(done.stderr, f"simulate {source} stderr")
            body = _personal_body()
            with httpx.Client(base_url=base, timeout=10) as client:
                headers = standard_headers(body)
                assert client.post("/webhooks/std", content=body, headers=headers).is_success
                forged = {**headers, "webhook-signature": "v1,AAAA" + headers["webhook-id"]}
                assert client.post("/webhooks/std", content=body, headers=forged).status_code == 401
                big = body + b" " * 8192
                assert client.post("/webhooks/std", content=big).status_code == 413
                wrong = client.post("/webhooks/efi?hmac=not-it&ignorar=/pix", content=body)
                assert wrong.status_code == 401
                pix = client.post(f"/webhooks/efi?hmac={HMAC_TOKEN}&ignorar=/pix", content=body)
                assert pix.status_code < 500
                admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
                assert client.get("/api/events", headers=admin).status_code == 200
                stranger = {"authorization": "Bearer x"}
                assert client.get("/api/events", headers=stranger).status_code == 401
            assert not _upgrade_request(port).startswith(b"HTTP/1.1 101")
        finally:
            popen.send_signal(signal.SIGTERM)
            popen.wait(timeout=15)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    _assert_json_lines(stdout, "serve stdout")
    lines = _assert_json_lines(stderr, "serve stderr")
    events = [str(line.get("event")) for line in lines]
    # uvicorn's own lines are among them, as JSON (they used to be bare text).
    assert any("Application startup complete" in event for event in events), events
    assert any("Application shutdown complete" in event for event in events), events
    listening = f"porteiro listening on http://127.0.0.1:{port}"
    assert any(event.startswith(listening) for event in events), events


def test_library_lines_and_tracebacks_are_one_json_object_each(tmp_path: Path) -> None:
    # What uvicorn writes when an app raises ("Exception in ASGI application" and a
    # traceback), an asyncio and a psycopg line, and a Python warning: all through the
    # same renderer as Porteiro's own lines, the traceback a field.
    script = """
import logging, warnings
from porteiro.observability import configure_logging, logger
configure_logging("DEBUG")
try:
    raise RuntimeError("boom")
except RuntimeError as exc:
    logging.getLogger("uvicorn.error").error("Exception in ASGI application\\n", exc_info=exc)
logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
logging.getLogger("asyncio").debug("Using selector: %s", "EpollSelector")
logging.getLogger("psycopg").warning("multi\\nline")
warnings.warn("something old", DeprecationWarning, stacklevel=1)
try:
    1 / 0
except ZeroDivisionError:
    logger().exception("porteiro.crashed")
"""
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", script],
        capture_output=True,
        timeout=30,
        check=False,
        env=porteiro_env(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b""
    lines = _assert_json_lines(done.stderr.decode(), "stderr")
    by_event = {str(line["event"]).strip(): line for line in lines}
    crash = by_event["Exception in ASGI application"]
    assert crash["logger"] == "uvicorn.error" and crash["level"] == "error"
    assert "RuntimeError: boom" in str(crash["exception"])
    assert by_event["Started server process [42]"]["level"] == "info"
    assert by_event["Using selector: EpollSelector"]["logger"] == "asyncio"
    assert by_event["multi\nline"]["level"] == "warning"
    assert any("something old" in event for event in by_event)
    assert "ZeroDivisionError" in str(by_event["porteiro.crashed"]["exception"])
