"""Fan-out (pure): which destinations get an applied event, and the JSON they get.

The payload is Porteiro's normalised event, the same shape the `standard` adapter parses
(so one Porteiro can forward to another), plus `source`, the gateway's own event id and
the payment's state after the event:

    {"id": "evt_42", "type": "payment.paid", "source": "stripe", "object_id": "pi_1",
     "reference": "order-7", "amount": 1000, "currency": "BRL",
     "occurred_at": "2024-11-28T16:37:11.650000Z", "refunded_total": 0, "data": {...},
     "gateway_event_id": "evt_1Q...",
     "payment": {"state": "paid", "amount": 1000, "refunded_amount": 0,
                 "currency": "BRL", "version": 3}}

`id` is `evt_<Porteiro event id>`: stable across retries, redrives and replays, so it is
the `webhook-id` header and the AMQP `message_id` merchants de-duplicate on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from porteiro.config import DestinationConfig
from porteiro.model import ParsedEvent, Payment
from porteiro.providers.standard.webhook import event_body
from porteiro.store.outbox import OutboxRow


def message_id(event_id: int) -> str:
    """The stable id merchants see for Porteiro event `event_id`."""
    return f"evt_{event_id}"


def payload(event_id: int, source: str, event: ParsedEvent, payment: Payment) -> dict[str, Any]:
    body = event_body(event)
    body["id"] = message_id(event_id)
    body["source"] = source
    body["gateway_event_id"] = event.dedup_key
    body["payment"] = {
        "state": payment.state.value,
        "amount": payment.amount,
        "refunded_amount": payment.refunded_amount,
        "currency": payment.currency,
        "version": payment.version,
    }
    return body


def outbox_rows(
    event_id: int,
    source: str,
    event: ParsedEvent,
    payment: Payment,
    destinations: Mapping[str, DestinationConfig],
) -> list[OutboxRow]:
    """One row per destination whose `kinds` include the event's kind (empty: all kinds
    but `other`); none for an event without a payment object."""
    if event.object_id is None:
        return []
    wanted = [name for name, dest in destinations.items() if dest.wants(event.kind.value)]
    if not wanted:
        return []
    body = payload(event_id, source, event, payment)
    return [
        OutboxRow(name, event_id, source, event.object_id, event.kind.value, body)
        for name in sorted(wanted)
    ]
