"""After an upgrade, the operator's documented commands (docs/operations.md, "After an
upgrade") turn what an older Porteiro dead-lettered into the right payment: the real
`porteiro` console script re-parses the stored raw delivery with the current adapter."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from porteiro.config.load import load_config
from porteiro.runtime import Runtime
from porteiro.worker import Worker
from tests.support.events import event_body
from tests.support.inbound import inbound
from tests.support.processes import Cli, write_config
from tests.support.signing import standard_headers

# What Porteiro before 2026-12 answered a Standard Webhooks body whose occurred_at had no
# UTC offset: the whole delivery unparseable, stored raw and dead-lettered.
OLDER_RULE = "occurred_at is not an RFC 3339 date-time with an offset"


async def store_as_the_older_version_did(config_path: Path, body: bytes) -> None:
    runtime = Runtime.build(load_config(config_path, {}))
    await runtime.start(migrate=False)
    try:
        headers = standard_headers(body, "msg_upgrade")
        request = inbound("std", body, headers, received_at=datetime.now(UTC))
        await runtime.store.record_delivery(request, [], parse_error=OLDER_RULE)
    finally:
        await runtime.stop()


async def drain(config_path: Path) -> None:
    runtime = Runtime.build(load_config(config_path, {}))
    await runtime.start(migrate=False)
    try:
        worker = Worker(runtime)
        while await worker.run_once():
            pass
    finally:
        await runtime.stop()


def test_replay_after_an_upgrade_books_what_an_older_version_dead_lettered(
    tmp_path: Path,
) -> None:
    cli = Cli(write_config(tmp_path, f"sqlite:///{tmp_path / 'porteiro.db'}"))
    cli.run("db", "upgrade")
    body = event_body("evt_upgrade", occurred_at="2024-11-28T16:37:11", reference="order-7")
    asyncio.run(store_as_the_older_version_did(cli.config, body))
    [dead] = cli.json_lines("dlq", "list", "--source", "std")
    assert (dead["type"], dead["last_error"]) == ("porteiro.unparseable", OLDER_RULE)
    cli.run("payments", "show", "std", "pay_1", expect=2)  # nothing booked yet

    planned = cli.json_lines("replay", "--status", "dead", "--source", "std", "--dry-run")
    assert [(p["dedup_key"], p["to"]) for p in planned] == [("evt_upgrade", "paid")]
    [report] = cli.json_lines("replay", "--status", "dead", "--source", "std")
    assert (report["deliveries"], report["failures"]) == (1, [])
    asyncio.run(drain(cli.config))

    [payment] = cli.json_lines("payments", "show", "std", "pay_1")
    assert (payment["state"], payment["amount"], payment["reference"]) == ("paid", 1000, "order-7")
    assert cli.json_lines("dlq", "list", "--source", "std") == []
    [event] = cli.json_lines("events", "list", "--dedup-key", "evt_upgrade")
    assert event["status"] == "done"
    assert [w["rule"] for w in event["warnings"]] == ["standard.occurred_at"]
