"""The real `porteiro` console script in subprocesses: db upgrade, serve, simulate, then the
operator commands (events, payments, dlq, replay) against what the server stored."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import porteiro
from porteiro.config import SourceConfig
from porteiro.providers import build_provider

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FORGED_SECRET = "whsec_DWn+aYYze9MYgeZDUxzzW/SkFmkxH0Kj"


def _command() -> list[str]:
    script = Path(sys.executable).with_name("porteiro")
    return [str(script)] if script.exists() else [sys.executable, "-m", "porteiro"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PORTEIRO_")}


def write_config(path: Path, store: Path, port: int, secret: str = SECRET) -> Path:
    path.write_text(
        f"""
[store]
url = "sqlite:///{store}"

[admin]
token = "cli-admin-token"

[server]
port = {port}

[worker]
poll_interval_seconds = 0.1

[sources.std]
provider = "standard"
secrets = ["{secret}"]
"""
    )
    return path


@dataclass
class Cli:
    config: Path

    def run(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*_command(), "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
            check=False,
        )
        assert done.returncode == expect, f"porteiro {args}: {done.stdout}\n{done.stderr}"
        return done

    def json_lines(self, *args: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.run(*args, "--json").stdout.splitlines()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:
    directory = tmp_path_factory.mktemp("cli")
    port = _free_port()
    cli = Cli(write_config(directory / "porteiro.toml", directory / "porteiro.db", port))
    migrations = sorted(
        path.name.split("_")[0]
        for path in (Path(porteiro.__file__).parent / "store" / "migrations" / "sqlite").glob(
            "*.sql"
        )
    )
    assert cli.run("db", "upgrade").stdout.strip() == "applied " + ", ".join(migrations)
    assert cli.run("db", "upgrade").stdout.strip() == "database is up to date"
    log_path = directory / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [*_command(), "--config", str(cli.config), "serve"], stdout=log, stderr=log, env=_env()
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc, log_path)
            yield cli, url
        finally:
            proc.send_signal(signal.SIGTERM)
            # uvicorn re-raises SIGTERM once it has shut down gracefully.
            assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
    output = log_path.read_text()
    assert f"porteiro listening on {url}" in output
    assert "Application shutdown complete" in output and "worker.stopped" in output


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(log.read_text())


def _wait_all_done(cli: Cli, expected: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15
    while True:
        events = cli.json_lines("events", "list", "--source", "std", "--limit", "1000")
        if len(events) >= expected and all(e["status"] in ("done", "dead") for e in events):
            return events
        assert time.monotonic() < deadline, events
        time.sleep(0.3)


def test_simulate_then_inspect_and_replay(server: tuple[Cli, str], tmp_path: Path) -> None:
    cli, url = server
    sent = cli.run(
        "simulate", "--url", url, "--source", "std", "--count", "20", "--duplicates", "0.3",
        "--shuffle", "--concurrency", "8", "--seed", "3",
    )  # fmt: skip
    # 20 lifecycles of 3 events; 30 % of the 60 deliveries sent twice.
    assert "sent 78 (duplicates 18): 2xx 78, 4xx 0, 5xx 0, errors 0" in sent.stdout

    events = _wait_all_done(cli, 60)
    assert len(events) == 60
    assert {e["status"] for e in events} == {"done"}
    assert sum(e["duplicates"] for e in events) == 18
    assert cli.json_lines("dlq", "list") == []

    object_id = events[0]["object_id"]
    (payment,) = cli.json_lines("payments", "show", "std", object_id)
    assert payment["state"] == "paid"
    history_ids = [entry["event_id"] for entry in payment["history"]]
    ours = sorted(e["id"] for e in events if e["object_id"] == object_id)
    assert sorted(history_ids) == ours  # each of its three events applied exactly once
    assert object_id in cli.run("payments", "show", "std", object_id).stdout

    shown = cli.json_lines("events", "show", str(ours[0]))[0]
    assert shown["id"] == ours[0] and shown["deliveries"]
    assert json.loads(shown["deliveries"][0]["body"])["object_id"] == object_id

    # Dry run: the ledger already has every event, so each would be a duplicate.
    planned = cli.json_lines("replay", "--dry-run", "--source", "std")
    assert len(planned) == 60 and {p["verdict"] for p in planned} == {"duplicate"}
    assert "give event ids or at least one filter" in cli.run("replay", expect=2).stderr
    assert (
        "dry run: 60 events, nothing changed"
        in cli.run("replay", "--dry-run", "--source", "std").stdout
    )
    assert [e["status"] for e in cli.json_lines("events", "list", "--limit", "1000")] == [
        "done"
    ] * 60

    # Replaying one event re-parses its raw delivery; the worker runs it again, harmlessly.
    replayed = cli.run("replay", str(ours[0]))
    assert "1 events due again" in replayed.stdout
    _wait_all_done(cli, 60)
    (after,) = cli.json_lines("payments", "show", "std", object_id)
    assert after["state"] == "paid" and after["version"] == payment["version"]


def test_unparseable_delivery_is_dead_and_stays_dead_on_replay(server: tuple[Cli, str]) -> None:
    cli, url = server
    provider = build_provider(SourceConfig(name="std", provider="standard", secrets=(SECRET,)))
    signed = provider.sign(b'{"id": "evt_broken", "type": "payment.paid"}', datetime.now(UTC))
    response = httpx.post(f"{url}/webhooks/std", content=signed.body, headers=dict(signed.headers))
    assert response.status_code == 200  # authenticated: stored and acknowledged
    (dead,) = cli.json_lines("dlq", "list", "--source", "std")
    assert dead["status"] == "dead" and "object_id is required" in dead["last_error"]
    failed = cli.run("replay", str(dead["id"]))
    assert "still fails to parse" in failed.stderr
    assert [e["id"] for e in cli.json_lines("dlq", "list")] == [dead["id"]]
    assert "0 events due again" in cli.run("dlq", "replay", "--id", str(dead["id"])).stdout
    # A redrive of the whole DLQ is said: no filter is a usage error (exit 2), not "all".
    assert "--all" in cli.run("dlq", "replay", expect=2).stderr
    assert (
        "cannot be combined"
        in cli.run("dlq", "replay", "--all", "--source", "std", expect=2).stderr
    )
    assert "0 events due again" in cli.run("dlq", "replay", "--all").stdout


def test_simulate_reports_refusals_with_a_failing_exit_code(
    server: tuple[Cli, str], tmp_path: Path
) -> None:
    _, url = server
    port = int(url.rsplit(":", 1)[1])
    forger = Cli(
        write_config(tmp_path / "forged.toml", tmp_path / "unused.db", port, FORGED_SECRET)
    )
    refused = forger.run("simulate", "--source", "std", "--count", "1", expect=1)
    assert "2xx 0, 4xx 3" in refused.stdout


def test_configuration_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = Cli(tmp_path / "absent.toml")
    done = missing.run("events", "list", expect=2)
    assert "configuration file not found" in done.stderr
    assert "Traceback" not in done.stderr
    unknown = Cli(write_config(tmp_path / "p.toml", tmp_path / "p.db", 1))
    assert "unknown source 'nope'" in unknown.run("simulate", "--source", "nope", expect=2).stderr
