"""The real `porteiro` console script in subprocesses: db upgrade, serve, simulate, then the
operator commands (events, payments, dlq, replay) against what the server stored."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from porteiro import store
from porteiro.config import SourceConfig
from porteiro.providers import build_provider
from tests.support.processes import Cli, local_url, porteiro, wait_healthy, write_config
from tests.support.servers import free_port
from tests.support.signing import SECRET
from tests.support.waiting import wait_until

MIGRATIONS = Path(store.__file__).parent / "migrations"
FORGED_SECRET = "whsec_DWn+aYYze9MYgeZDUxzzW/SkFmkxH0Kj"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:
    directory = tmp_path_factory.mktemp("cli")
    port = free_port()
    cli = Cli(write_config(directory, f"sqlite:///{directory / 'porteiro.db'}", port=port))
    migrations = sorted(path.name.split("_")[0] for path in (MIGRATIONS / "sqlite").glob("*.sql"))
    assert cli.run("db", "upgrade").stdout.strip() == "applied " + ", ".join(migrations)
    assert cli.run("db", "upgrade").stdout.strip() == "database is up to date"
    log_path = directory / "serve.log"
    proc = porteiro(cli.config, "serve", log=log_path)
    url = local_url(port)
    try:
        wait_healthy(proc, url)
        yield cli, url
    finally:
        proc.kill(signal.SIGTERM)
    # uvicorn re-raises SIGTERM once it has shut down gracefully.
    assert proc.popen.returncode in (0, -signal.SIGTERM)
    output = log_path.read_text()
    assert f"porteiro listening on {url}" in output
    assert "Application shutdown complete" in output and "worker.stopped" in output


def _wait_all_done(cli: Cli, expected: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def all_done() -> bool:
        nonlocal events
        events = cli.json_lines("events", "list", "--source", "std", "--limit", "1000")
        return len(events) >= expected and all(e["status"] in ("done", "dead") for e in events)

    wait_until(all_done, f"{expected} events done or dead", within=15, every=0.3)
    return events


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
    # The replay ran and did not do all it was asked: exit 1.
    failed = cli.run("replay", str(dead["id"]), expect=1)
    assert "still fails to parse" in failed.stderr
    assert [e["id"] for e in cli.json_lines("dlq", "list")] == [dead["id"]]
    redrive = cli.run("dlq", "replay", "--id", str(dead["id"]), expect=1)
    assert "0 events due again" in redrive.stdout
    # A redrive of the whole DLQ is said: no filter is a usage error (exit 2), not "all".
    assert "--all" in cli.run("dlq", "replay", expect=2).stderr
    assert (
        "cannot be combined"
        in cli.run("dlq", "replay", "--all", "--source", "std", expect=2).stderr
    )
    assert "0 events due again" in cli.run("dlq", "replay", "--all", expect=1).stdout


def test_an_id_that_does_not_exist_exits_2(server: tuple[Cli, str]) -> None:
    cli, _ = server
    assert (
        cli.run("events", "show", "999999", expect=2).stderr == "porteiro: error: no event 999999\n"
    )
    missing_payment = cli.run("payments", "show", "std", "pay_absent", expect=2).stderr
    assert missing_payment == "porteiro: error: no payment 'pay_absent' from source 'std'\n"
    for replay in (("replay", "999999"), ("replay", "--dry-run", "999999")):
        assert "no such events: 999999" in cli.run(*replay, expect=2).stderr
    # `dlq replay --id` of an event that is not dead leaves it alone; one that does not
    # exist is an error.
    assert "no such events: 999999" in cli.run("dlq", "replay", "--id", "999999", expect=2).stderr


def test_events_list_filters_by_time_and_says_when_more_rows_exist(
    server: tuple[Cli, str],
) -> None:
    cli, url = server
    cli.run("simulate", "--url", url, "--source", "std", "--count", "2", "--seed", "11")
    newest = cli.json_lines("events", "list", "--limit", "1000")
    assert len(newest) >= 6
    assert cli.json_lines("events", "list", "--since", "1h", "--limit", "1000") == newest
    assert cli.json_lines("events", "list", "--until", "1h") == []
    future = "2999-01-01T00:00:00Z"
    assert cli.json_lines("events", "list", "--since", future) == []
    later = newest[0]["received_at"]
    assert all(e["received_at"] < later for e in cli.json_lines("events", "list", "--until", later))

    # A cut at --limit is said on stderr with the next page's cursor; stdout stays events.
    first = cli.run("events", "list", "--limit", "2", "--json")
    assert [json.loads(line) for line in first.stdout.splitlines()] == newest[:2]
    (note,) = first.stderr.splitlines()
    assert note.startswith("more events than the 2 shown: add --cursor ")
    cursor = note.split("--cursor ", 1)[1].split(" ", 1)[0].rstrip(",")
    second = cli.json_lines("events", "list", "--limit", "2", "--cursor", cursor)
    assert second == newest[2:4]
    everything = cli.run("events", "list", "--limit", "1000", "--json")
    assert everything.stderr == ""
    bad = cli.run("events", "list", "--cursor", "not-a-cursor", expect=2).stderr
    assert "Invalid value for --cursor: invalid cursor 'not-a-cursor'" in bad


def test_events_list_and_replay_filter_by_reference(server: tuple[Cli, str]) -> None:
    cli, url = server
    cli.run("simulate", "--url", url, "--source", "std", "--count", "2", "--seed", "12")
    listed = cli.json_lines("events", "list", "--limit", "1000")
    reference = next(e["reference"] for e in listed if e["reference"])
    carrying = [e["id"] for e in listed if e["reference"] == reference]  # newest first
    assert 0 < len(carrying) < len(listed)

    def ids(*options: str) -> list[int]:
        return [e["id"] for e in cli.json_lines("events", "list", *options)]

    assert ids("--reference", reference) == carrying
    assert ids("--reference", reference, "--source", "std") == carrying
    assert ids("--reference", reference, "--source", "elsewhere") == []
    assert ids("--reference", reference[:-1]) == []  # exact, not a prefix
    # The same filter selects what a replay touches.
    dry = cli.run("replay", "--reference", reference, "--dry-run", "--json")
    planned = [json.loads(line)["event_id"] for line in dry.stdout.splitlines()]
    assert sorted(planned) == sorted(carrying)


def test_simulate_reports_refusals_with_a_failing_exit_code(
    server: tuple[Cli, str], tmp_path: Path
) -> None:
    _, url = server
    port = int(url.rsplit(":", 1)[1])
    unused = f"sqlite:///{tmp_path / 'unused.db'}"
    forger = Cli(write_config(tmp_path, unused, port=port, secret=FORGED_SECRET))
    refused = forger.run("simulate", "--source", "std", "--count", "1", expect=1)
    assert "2xx 0, 4xx 3" in refused.stdout


def test_configuration_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = Cli(tmp_path / "absent.toml")
    done = missing.run("events", "list", expect=2)
    assert "configuration file not found" in done.stderr
    assert "Traceback" not in done.stderr
    unknown = Cli(write_config(tmp_path, f"sqlite:///{tmp_path / 'p.db'}", port=1))
    assert "unknown source 'nope'" in unknown.run("simulate", "--source", "nope", expect=2).stderr
