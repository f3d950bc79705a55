"""What a fake gateway run does: payments, their lifecycles, the faults, the pace.

A `Scenario` comes from a TOML file (`--scenario`, top-level keys named as the fields
below) with CLI flags layered on top; `scenario_from` validates the merged mapping so a
typo or an out-of-range rate is a clear error before anything starts.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from porteiro.errors import ConfigError

_RATES = ("duplicate_rate", "drop_rate", "refund_rate", "fail_rate", "cancel_rate", "expire_unpaid")


@dataclass(frozen=True, slots=True)
class Scenario:
    payments: int = 20
    seed: int = 0
    # Faults on the webhooks.
    duplicate_rate: float = 0.0  # share of webhooks sent once more, later
    drop_rate: float = 0.0  # share of webhooks never sent (recorded in /_fake/state)
    reorder: bool = False  # shuffle sends across and within payments
    delay_ms: tuple[int, int] = (0, 0)  # each first attempt waits uniform(MIN, MAX)
    time_factor: float = 1.0  # the retry schedule is divided by this
    # Lifecycles (drawn per payment from the seed).
    refund_rate: float = 0.2  # of paid payments: half partially, half fully refunded
    fail_rate: float = 0.1
    cancel_rate: float = 0.05
    expire_unpaid: float = 0.1  # Pix: cobs never paid, expiring in the truth
    cob_expiration: int = 3600  # Pix: calendario.expiracao of the planned cobs (seconds)
    window_seconds: int = 3600  # payments were created within this long before the start
    currency: str = "BRL"
    amount_min: int = 500
    amount_max: int = 50_000
    # Delivery mechanics.
    concurrency: int = 8
    timeout_seconds: float = 10.0
    create_delay_ms: int = 0  # creates stay "in flight" this long (409 on a concurrent retry)
    lose_create_responses: int = 0  # the next N creates commit, then drop the connection

    def __post_init__(self) -> None:
        for name in _RATES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be between 0 and 1, not {value}")
        if self.payments < 0:
            raise ConfigError("payments must be >= 0")
        low, high = self.delay_ms
        if not 0 <= low <= high:
            raise ConfigError(f"delay_ms must be MIN:MAX with 0 <= MIN <= MAX, not {low}:{high}")
        if self.time_factor <= 0:
            raise ConfigError("time_factor must be > 0")
        if self.fail_rate + self.cancel_rate + self.expire_unpaid > 1.0:
            raise ConfigError("fail_rate + cancel_rate + expire_unpaid must not exceed 1")
        if not 0 < self.amount_min <= self.amount_max:
            raise ConfigError("amounts must satisfy 0 < amount_min <= amount_max")
        if self.concurrency < 1 or self.timeout_seconds <= 0:
            raise ConfigError("concurrency must be >= 1 and timeout_seconds > 0")
        if self.cob_expiration < 1 or self.window_seconds < 0:
            raise ConfigError("cob_expiration must be >= 1 and window_seconds >= 0")


def parse_delay(text: str) -> tuple[int, int]:
    """`"MIN:MAX"` (or a single number) milliseconds."""
    low, _, high = text.partition(":")
    try:
        return int(low), int(high or low)
    except ValueError:
        raise ConfigError(f"delay must be MIN:MAX milliseconds, not {text!r}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"scenario file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def scenario_from(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> Scenario:
    """A Scenario from a file's table with flags (None = not given) layered on top."""
    known = {field.name for field in fields(Scenario)}
    merged = {**raw, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ConfigError(f"unknown scenario keys: {', '.join(unknown)}")
    if isinstance(merged.get("delay_ms"), str):
        merged["delay_ms"] = parse_delay(merged["delay_ms"])
    elif isinstance(merged.get("delay_ms"), list):
        merged["delay_ms"] = tuple(merged["delay_ms"])
    try:
        return replace(Scenario(), **merged)
    except TypeError as exc:
        raise ConfigError(f"scenario: {exc}") from None
