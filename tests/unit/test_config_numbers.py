"""Every number in porteiro.toml is checked where it is read: a wrong value is a
ConfigError that names its section, key and rule, never a traceback at start-up nor a
worker that claims -5 events or spins with no poll interval."""

from __future__ import annotations

from typing import Any

import pytest

from porteiro.config.load import parse_config
from porteiro.errors import ConfigError


def parsed(raw: dict[str, Any]) -> Any:
    return parse_config(raw, {})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"server": {"port": 70_000}}, r"\[server\] port must be a whole number from 0 to 65535"),
        ({"server": {"port": "80x"}}, r"\[server\] port must be a whole number"),
        ({"server": {"port": "8000.5"}}, r"\[server\] port must be a whole number"),
        ({"server": {"max_body_bytes": 0}}, r"\[server\] max_body_bytes .* >= 1"),
        ({"server": {"store_timeout_seconds": 0}}, r"store_timeout_seconds must be a number > 0"),
        ({"server": {"retry_after_seconds": -1}}, r"retry_after_seconds .* >= 0"),
        ({"server": {"max_inflight": 0}}, r"\[server\] max_inflight must be a whole number >= 1"),
        ({"server": {"receivers": True}}, r"\[server\] receivers must be a whole number >= 1"),
        ({"worker": {"concurrency": 0}}, r"\[worker\] concurrency must be a whole number >= 1"),
        ({"worker": {"concurrency": "x"}}, r"\[worker\] concurrency must be a whole number"),
        ({"worker": {"batch_size": -5}}, r"\[worker\] batch_size must be a whole number >= 1"),
        ({"worker": {"batch_size": 2.5}}, r"\[worker\] batch_size must be a whole number"),
        ({"worker": {"lease_seconds": -1}}, r"\[worker\] lease_seconds must be a number > 0"),
        ({"worker": {"poll_interval_seconds": 0}}, r"poll_interval_seconds must be a number > 0"),
        ({"worker": {"gather_ms": 1001}}, r"\[worker\] gather_ms must be a number from 0 to 1000"),
        ({"worker": {"retry": {"max_attempts": 0}}}, r"\[worker\] retry: max_attempts >= 1"),
        ({"worker": {"retry": {"multiplier": "x"}}}, r"\[worker\] retry: could not convert"),
        ({"worker": {"retry": {"max_delay_seconds": -1}}}, r"\[worker\] retry: .*delays >= 0"),
        ({"reconcile": {"interval_seconds": 0}}, r"\[reconcile\] interval_seconds .* > 0"),
        ({"reconcile": {"batch_size": 0}}, r"\[reconcile\] batch_size must be a whole number >= 1"),
        ({"quarantine": {"limit": 0}}, r"\[quarantine\] limit must be a whole number >= 1"),
        (
            {"sources": {"shop": {"provider": "standard", "tolerance_seconds": -1}}},
            r"\[sources.shop\] tolerance_seconds must be a whole number >= 0",
        ),
    ],
)
def test_a_wrong_number_is_a_config_error_naming_its_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parsed(raw)


def test_numbers_within_their_rules_are_read_as_given() -> None:
    config = parsed(
        {
            "server": {"port": 0, "max_body_bytes": 1, "store_timeout_seconds": 0.25,
                       "retry_after_seconds": 0, "max_inflight": 1, "receivers": 2},
            "worker": {"concurrency": 1, "batch_size": 1, "lease_seconds": 0.5,
                       "poll_interval_seconds": 0.05, "gather_ms": 0,
                       "retry": {"max_attempts": 1, "base_delay_seconds": 0}},
            "reconcile": {"interval_seconds": 1, "batch_size": 1},
            "quarantine": {"limit": 1},
            "sources": {"shop": {"provider": "standard", "tolerance_seconds": 0}},
        }
    )  # fmt: skip
    server, worker = config.server, config.worker
    assert (server.port, server.max_body_bytes, server.store_timeout_seconds) == (0, 1, 0.25)
    assert (server.retry_after_seconds, server.max_inflight, server.receivers) == (0, 1, 2)
    assert (worker.concurrency, worker.batch_size, worker.lease_seconds) == (1, 1, 0.5)
    assert (worker.poll_interval_seconds, worker.gather_ms) == (0.05, 0.0)
    assert (worker.retry.max_attempts, worker.retry.base_delay_seconds) == (1, 0.0)
    assert (config.reconcile.interval_seconds, config.reconcile.batch_size) == (1.0, 1)
    assert config.quarantine_limit == 1
    assert config.sources["shop"].tolerance_seconds == 0
    assert isinstance(worker.batch_size, int) and isinstance(server.port, int)


def test_the_defaults_pass_their_own_rules() -> None:
    config = parsed({})
    assert config.worker.batch_size == 256 and config.server.port == 8000
    assert config.worker.retry.max_attempts == 10 and config.quarantine_limit == 10_000


def test_a_number_from_the_environment_is_read_from_its_text() -> None:
    raw = {"server": {"port": "${PORT}"}, "worker": {"lease_seconds": "${LEASE}"}}
    config = parse_config(raw, {"PORT": "8080", "LEASE": "2.5"})
    assert config.server.port == 8080 and isinstance(config.server.port, int)
    assert config.worker.lease_seconds == 2.5
    with pytest.raises(ConfigError, match=r"\[server\] port must be a whole number"):
        parse_config(raw, {"PORT": "eighty", "LEASE": "1"})
