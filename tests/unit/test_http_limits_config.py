"""[server]'s HTTP door keys (porteiro.http.limits): defaults, overrides, refusals."""

from __future__ import annotations

import pytest

from porteiro.config.load import parse_config
from porteiro.errors import ConfigError
from porteiro.http.limits import ConnectionLimits


def test_the_door_has_bounded_defaults() -> None:
    limits = ConnectionLimits.of(parse_config({}, {}).server)
    assert limits == ConnectionLimits(
        header_seconds=10.0, body_seconds=30.0, linger_seconds=5.0, linger_max_bytes=16 << 20
    )


def test_the_door_keys_are_read() -> None:
    server = {"header_timeout_seconds": 2, "body_timeout_seconds": 3.5, "linger_seconds": 1,
              "linger_max_bytes": 0}  # fmt: skip
    limits = ConnectionLimits.of(parse_config({"server": server}, {}).server)
    assert limits == ConnectionLimits(2.0, 3.5, 1.0, 0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("header_timeout_seconds", 0, r"\[server\] header_timeout_seconds must be a number > 0"),
        ("body_timeout_seconds", -1, r"\[server\] body_timeout_seconds must be a number > 0"),
        ("linger_seconds", "soon", r"\[server\] linger_seconds must be a number"),
        ("linger_max_bytes", -1, r"\[server\] linger_max_bytes must be a whole number >= 0"),
        ("linger_max_bytes", 1.5, r"\[server\] linger_max_bytes must be a whole number"),
    ],
)
def test_a_wrong_door_key_is_refused(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"server": {key: value}}, {})
