"""`serve --receivers N` without `--no-worker`: its processes run the worker too.

Each receiver process builds its background work from the roles `serve` chose; once it
looked for a variable nothing set, and N receivers stored every delivery and applied none.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.admin import wait_processed
from tests.support.events import lifecycle_bodies
from tests.support.processes import PROCESS_SOURCE, post_all, run_porteiro, serving, write_config
from tests.support.servers import free_port


@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_two_receivers_apply_what_they_receive(store_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, store_url)
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    with serving(config, port, tmp_path / "serve.log", "--receivers", "2"):
        bodies = [body for n in range(5) for body in lifecycle_bodies(n, datetime.now(UTC))]
        assert post_all(port, bodies) == [200] * len(bodies)
        events = wait_processed(f"http://127.0.0.1:{port}", PROCESS_SOURCE)
    assert len(events) == len(bodies)
    assert {event["status"] for event in events} == {"done"}
