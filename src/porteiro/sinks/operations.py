"""What operators do with destinations, shared by the CLI and the admin API: an overview
(configuration, state, backlog), pause / resume, and redrive of dead letters."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from porteiro.config import DestinationConfig
from porteiro.errors import ConfigError
from porteiro.store.outbox import (
    DestinationState,
    OutboxStore,
    StoredOutboxRow,
    empty_counts,
)


@dataclass(frozen=True, slots=True)
class DestinationView:
    config: DestinationConfig
    state: DestinationState
    backlog: Mapping[str, int]

    @property
    def status(self) -> str:
        if self.state.disabled_reason is not None:
            return "disabled"
        if self.state.paused:
            return "paused"
        if self.state.circuit_open_until is not None:
            return "circuit_open"
        return "active"

    @property
    def target(self) -> str:
        if self.config.url is not None:
            return self.config.url
        return (
            f"{_without_password(self.config.rabbitmq_url or '')} exchange={self.config.exchange}"
        )


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


def configured(destinations: Mapping[str, DestinationConfig], name: str) -> DestinationConfig:
    try:
        return destinations[name]
    except KeyError:
        known = ", ".join(sorted(destinations)) or "none configured"
        raise ConfigError(f"unknown destination {name!r} ({known})") from None


async def overview(
    store: OutboxStore, destinations: Mapping[str, DestinationConfig]
) -> list[DestinationView]:
    states = await store.destination_states()
    backlog = await store.outbox_backlog()
    return [
        DestinationView(
            config, states.get(name, DestinationState(name)), backlog.get(name, empty_counts())
        )
        for name, config in sorted(destinations.items())
    ]


async def pause(store: OutboxStore, name: str, now: datetime) -> DestinationState:
    return await store.set_destination_state(name, now, paused=True)


async def resume(store: OutboxStore, name: str, now: datetime) -> DestinationState:
    """Active again: unpaused, re-enabled (after a 410) and the circuit closed."""
    return await store.set_destination_state(
        name, now, paused=False, enable=True, close_circuit=True
    )


async def redrive(
    store: OutboxStore,
    name: str,
    now: datetime,
    *,
    ids: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Dead rows back to pending, batch after batch; `progress(done, total)` after each."""
    total = (
        len(set(ids))
        if ids is not None
        else (await store.outbox_backlog()).get(name, empty_counts())["dead"]
    )
    done = 0
    while True:
        moved = await store.redrive_outbox(name, now, ids=ids)
        done += moved
        if progress is not None:
            progress(done, max(total, done))
        if moved == 0:
            return done


def view_to_json(view: DestinationView) -> dict[str, Any]:
    state = view.state
    return {
        "name": view.config.name,
        "transport": view.config.transport,
        "target": view.target,
        "kinds": list(view.config.kinds),
        "status": view.status,
        "paused": state.paused,
        "disabled_reason": state.disabled_reason,
        "circuit_open_until": _time(state.circuit_open_until),
        "backlog": dict(view.backlog),
    }


def row_to_json(row: StoredOutboxRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "destination": row.destination,
        "event_id": row.event_id,
        "message_id": row.message_id,
        "source": row.source,
        "object_id": row.object_id,
        "kind": row.kind,
        "status": row.status.value,
        "attempts": row.attempts,
        "next_attempt_at": _time(row.next_attempt_at),
        "last_error": row.last_error,
        "last_status": row.last_status,
        "created_at": _time(row.created_at),
        "updated_at": _time(row.updated_at),
        "delivered_at": _time(row.delivered_at),
        "payload": dict(row.payload),
    }


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
