"""A payment's timeline (pure): everything Porteiro knows happened to one payment, in
time order, from the rows the store keeps apart: the deliveries that carried its events
(the first and each repeat), each event's transition (or why it changed nothing), its
forwards to each destination, the expectation the merchant registered and the
reconciler's status reads.

Handlers run inside the transaction that records a transition: an event's transition is
also its handlers' run, and a failed run shows as the event's attempts and last error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from porteiro.model import StoredDelivery, StoredEvent, Transition
from porteiro.store.console_verbs import Forward, ReconcileCheck
from porteiro.store.reconcile import Expectation

# Entry kinds, each with its own look in payment.html.
DELIVERY, REPEAT, TRANSITION, FORWARD, EXPECTED, CHECKED, PENDING = (
    "delivery", "repeat", "transition", "forward", "expected", "checked", "pending",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Entry:
    at: datetime
    kind: str
    event_id: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


def build(
    events: Sequence[StoredEvent],
    deliveries: Mapping[int, Sequence[StoredDelivery]],
    history: Sequence[Transition],
    forwards: Sequence[Forward],
    expectation: Expectation | None,
    check: ReconcileCheck | None,
) -> list[Entry]:
    """The entries, oldest first; ties keep the order of the story (a delivery before
    the transition it caused, the transition before its forwards)."""
    entries: list[tuple[datetime, int, Entry]] = []

    def add(entry: Entry, rank: int) -> None:
        entries.append((entry.at, rank, entry))

    if expectation is not None:
        add(Entry(expectation.created_at, EXPECTED, None, {
            "amount": expectation.amount, "currency": expectation.currency,
            "expires_at": expectation.expires_at, "origin": expectation.origin,
        }), 0)  # fmt: skip
    by_id = {event.id: event for event in events}
    for event in events:
        for index, delivery in enumerate(deliveries.get(event.id, ())):
            kind = DELIVERY if index == 0 else REPEAT
            add(Entry(delivery.received_at, kind, event.id, {
                "delivery_id": delivery.id, "type": event.type, "kind": event.kind.value,
                "parse_error": delivery.parse_error,
            }), 1)  # fmt: skip
        if event.status.value not in ("done", "ignored"):
            # Not applied (yet): pending, retrying, processing or dead, with its error.
            add(Entry(event.updated_at, PENDING, event.id, {
                "status": event.status.value, "attempts": event.attempts,
                "last_error": event.last_error, "type": event.type,
            }), 2)  # fmt: skip
    for transition in history:
        cause = by_id.get(transition.event_id)
        add(Entry(transition.at, TRANSITION, transition.event_id, {
            "from": None if transition.from_state is None else transition.from_state.value,
            "to": transition.to_state.value, "verdict": transition.verdict.value,
            "note": transition.note, "type": None if cause is None else cause.type,
            "amount": None if cause is None else cause.amount,
            "currency": None if cause is None else cause.currency,
        }), 2)  # fmt: skip
    for forward in forwards:
        add(Entry(forward.created_at, FORWARD, forward.event_id, {
            "destination": forward.destination, "status": forward.status,
            "attempts": forward.attempts, "last_error": forward.last_error,
            "last_status": forward.last_status, "delivered_at": forward.delivered_at,
        }), 3)  # fmt: skip
    if check is not None:
        add(Entry(check.checked_at, CHECKED, None, {
            "checks": check.checks, "next_check_at": check.next_check_at,
            "last_error": check.last_error,
        }), 4)  # fmt: skip
    entries.sort(key=lambda item: (item[0], item[1]))
    return [entry for _, _, entry in entries]
