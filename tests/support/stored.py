"""What a store holds, awaited while an in-process worker works through it."""

from __future__ import annotations

from collections.abc import Callable

from porteiro.model import StoredEvent
from porteiro.replay import matching_events
from porteiro.store.base import EventFilter, Store
from tests.support.waiting import wait_until_async


async def stored_events_once(
    store: Store,
    source: str,
    done: Callable[[list[StoredEvent]], bool],
    what: str,
    *,
    within: float = 15.0,
) -> list[StoredEvent]:
    """The events of `source` once `done(events)` holds; on a timeout, the failure names
    `what` and lists each event's key, type, status and last error."""
    events: list[StoredEvent] = []

    async def holds() -> bool:
        nonlocal events
        events = list(await matching_events(store, EventFilter(source=source)))
        return done(events)

    try:
        await wait_until_async(holds, what, within=within)
    except AssertionError as exc:
        rows = [(e.dedup_key, e.type, e.status.value, e.last_error) for e in events]
        raise AssertionError(f"{exc}: {source} holds {rows}") from None
    return events
