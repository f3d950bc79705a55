"""`[admin] listen`: the real `porteiro serve` with a second listener. /api, /ui and
/metrics answer there only (404 on the webhook port); webhooks answer on the webhook port
only."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.support.app import ADMIN_TOKEN
from tests.support.processes import (
    PROCESS_SOURCE,
    Cli,
    local_url,
    serving,
    write_config,
)
from tests.support.servers import free_port
from tests.support.waiting import wait_until

sqlite_only = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
AUTH = {"authorization": f"Bearer {ADMIN_TOKEN}"}


@sqlite_only
def test_the_admin_api_is_served_on_its_own_listener_only(tmp_path: Path, store_url: str) -> None:
    admin_port, port = free_port(), free_port()
    config = write_config(tmp_path, store_url)
    text = config.read_text().replace(
        "[admin]\n", f'[admin]\nlisten = "127.0.0.1:{admin_port}"\n', 1
    )
    config.write_text(text)
    Cli(config).run("db", "upgrade")
    with serving(config, port, tmp_path / "serve.log") as proc:
        public, admin = local_url(port), local_url(admin_port)
        wait_until(lambda: _answers(f"{admin}/healthz"), "the admin listener", within=20)
        assert httpx.get(f"{public}/api/events", headers=AUTH).status_code == 404
        assert httpx.get(f"{public}/metrics").status_code == 404
        assert httpx.get(f"{admin}/api/events", headers=AUTH).status_code == 200
        assert httpx.get(f"{admin}/metrics").status_code == 200
        # The console goes where the admin API goes.
        assert httpx.get(f"{public}/ui/login").status_code == 404
        assert httpx.get(f"{admin}/ui/login").status_code == 200
        webhook = f"/webhooks/{PROCESS_SOURCE}"
        assert httpx.post(f"{admin}{webhook}", content=b"{}").status_code == 404
        assert httpx.post(f"{public}{webhook}", content=b"{}").status_code == 401  # unsigned
        proc.kill(signal.SIGTERM)
        wait_until(lambda: not _answers(f"{admin}/healthz"), "the admin listener to stop")


def test_several_receivers_refuse_the_admin_listener(tmp_path: Path, sqlite_url: str) -> None:
    config = write_config(tmp_path, sqlite_url)
    config.write_text(config.read_text().replace("[admin]\n", '[admin]\nlisten = "127.0.0.1:9"\n'))
    done = Cli(config).run("serve", "--receivers", "2", expect=2)
    assert "[admin] listen needs one receiver process" in done.stderr


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
