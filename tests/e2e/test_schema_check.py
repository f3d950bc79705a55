"""Issue 22, finding 16: no process runs on a schema other than the one its code needs.

Real `porteiro` subprocesses on a real PostgreSQL and SQLite: `serve`, `worker`, `relay`
and `reconcile --loop` refuse a database that was never migrated (or that a newer release
migrated) with one line and exit 2, and start once `db upgrade` ran; an app already
running answers /readyz 503 while its schema is behind or ahead.
"""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from porteiro.config.load import load_config
from porteiro.http.app import create_app
from porteiro.runtime import Runtime
from porteiro.store.migrations import load_migrations, schema_mismatch
from tests.support.database import execute, query
from tests.support.events import lifecycle_bodies
from tests.support.processes import (
    completed_porteiro,
    porteiro,
    post_all,
    run_porteiro,
    serving,
    write_config,
)
from tests.support.servers import free_port, live_server
from tests.support.waiting import wait_until

# Both dialects ship the same numbered migrations; the newest is the version code needs.
NEEDS = int(load_migrations("postgres")[-1].version)
BEHIND = (
    "porteiro: error: the database schema is at version {at}; this Porteiro needs "
    f"{NEEDS}: run `porteiro db upgrade`"
)
AHEAD = (
    "porteiro: error: the database schema is at version 9999; this Porteiro needs "
    f"{NEEDS} and does not know version 9999: run the Porteiro release that migrated it"
)
NEWER_ROW = (
    "INSERT INTO schema_migrations (version, applied_at) "
    "VALUES ('9999', '2026-12-02T00:00:00+00:00')"
)


def with_destination(config: Path) -> Path:
    """The e2e config plus one destination, so `porteiro relay` has something to run
    (nothing listens on port 9: the relay never gets that far here)."""
    config.write_text(
        config.read_text()
        + """
[destinations.shop]
url = "http://127.0.0.1:9/hooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
"""
    )
    return config


def refused(config: Path, *args: str, line: str) -> None:
    """`porteiro ARGS` exits 2 at once, saying `line` and nothing else that is not a JSON
    log line; a command that starts instead is killed after 30 s and fails the test."""
    try:
        done = completed_porteiro(config, *args, timeout=30)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"porteiro {' '.join(args)} started on a schema it cannot use: {exc}")
    assert done.returncode == 2, f"porteiro {args}: {done.stdout}\n{done.stderr}"
    prose = [text for text in done.stderr.splitlines() if not _json_object(text)]
    assert prose == [line], done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def test_never_migrated_postgres_refuses_serve_worker_relay_until_db_upgrade(
    pg_url: str, tmp_path: Path
) -> None:
    config = with_destination(write_config(tmp_path, pg_url))
    commands = (
        ("serve", "--port", "0"),
        ("serve", "--port", "0", "--receivers", "2"),  # checked once, before the fork
        ("worker",),
        ("relay",),
        ("reconcile", "--loop"),
    )
    for command in commands:
        refused(config, *command, line=BEHIND.format(at=0))

    run_porteiro(config, "db", "upgrade")

    port = free_port()
    with serving(config, port, tmp_path / "serve.log", "--no-worker"):
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
        assert post_all(port, lifecycle_bodies(1, datetime.now(UTC))[:1]) == [200]
        worker = porteiro(config, "worker", log=tmp_path / "worker.log")
        try:
            wait_until(lambda: _statuses(pg_url) == ["done"], "the worker applying the event")
        finally:
            worker.kill(signal.SIGTERM)
    relay = porteiro(config, "relay", log=tmp_path / "relay.log")
    try:
        wait_until(lambda: "relaying to shop" in relay.output(), "the relay starting")
    finally:
        relay.kill(signal.SIGTERM)


def _statuses(pg_url: str) -> list[str]:
    return [row[0] for row in query(pg_url, "SELECT status FROM events")]


def test_a_database_newer_than_the_code_refuses_to_start(store_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, store_url)
    run_porteiro(config, "db", "upgrade")
    execute(store_url, NEWER_ROW)
    refused(config, "serve", "--port", "0", line=AHEAD)
    refused(config, "worker", line=AHEAD)
    # Nothing to apply, and still not "up to date" for this code.
    refused(config, "db", "upgrade", line=AHEAD)


def test_sqlite_serve_migrates_a_fresh_database_unless_told_not_to(tmp_path: Path) -> None:
    # `make run` is `porteiro serve` on a fresh SQLite file: it must still come up.
    config = write_config(tmp_path, f"sqlite:///{tmp_path / 'porteiro.db'}")
    refused(config, "serve", "--port", "0", "--no-migrate", line=BEHIND.format(at=0))
    port = free_port()
    with serving(config, port, tmp_path / "serve.log"):
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200


def test_postgres_serve_migrate_is_the_opt_in_for_one_process(pg_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, pg_url)
    port = free_port()
    with serving(config, port, tmp_path / "serve.log", "--migrate"):
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200


async def test_readyz_is_503_while_the_schema_is_not_the_one_the_code_needs(
    store_url: str, tmp_path: Path
) -> None:
    # create_app checks nothing at start (that is the commands' job): an app started on
    # a never-migrated database is the in-process bypass.
    runtime = Runtime.build(load_config(write_config(tmp_path, store_url), {}))
    newest = load_migrations("postgres")[-1].version
    async with live_server(create_app(runtime)) as url, httpx.AsyncClient(base_url=url) as http:
        never = await http.get("/readyz")
        assert never.status_code == 503
        assert never.headers["retry-after"] == "5"
        await runtime.store.upgrade()
        assert (await http.get("/readyz")).status_code == 200

        execute(store_url, f"DELETE FROM schema_migrations WHERE version = '{newest}'")
        behind = await http.get("/readyz")
        assert behind.status_code == 503
        assert "retry-after" in behind.headers

        execute(
            store_url,
            "INSERT INTO schema_migrations (version, applied_at) "
            f"VALUES ('{newest}', '2026-12-02T00:00:00+00:00')",
        )
        assert (await http.get("/readyz")).status_code == 200
        execute(store_url, NEWER_ROW)
        assert (await http.get("/readyz")).status_code == 503
        execute(store_url, "DELETE FROM schema_migrations WHERE version = '9999'")
        assert (await http.get("/readyz")).status_code == 200


@pytest.mark.parametrize(
    ("applied", "line"),
    [
        ({"0001", "0002", "0003"}, None),
        (set(), "at version 0; this Porteiro needs 3: run `porteiro db upgrade`"),
        # A row lost in the middle: the schema is at the last version before the gap.
        ({"0001", "0003"}, "at version 1; this Porteiro needs 3: run `porteiro db upgrade`"),
        ({"0001", "0002", "0003", "0010", "v7"}, "at version 10; this Porteiro needs 3 and"),
        ({"0001", "bogus"}, "at version bogus; this Porteiro needs 3 and does not know"),
    ],
)
def test_the_verdict_names_the_version_found_and_the_one_needed(
    applied: set[str], line: str | None
) -> None:
    verdict = schema_mismatch(applied, ("0001", "0002", "0003"))
    if line is None:
        assert verdict is None
    else:
        assert verdict is not None
        assert verdict.startswith(f"the database schema is {line}")
