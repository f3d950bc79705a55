"""Fan-out (pure): which destinations get an applied event, and the JSON they get.

The payload is Porteiro's normalised event, the same shape the `standard` adapter parses
(so one Porteiro can forward to another), plus `source`, the gateway's own event id and
the payment's state after the event:

    {"id": "evt_5xkq...", "type": "payment.paid", "source": "stripe", "object_id": "pi_1",
     "reference": "order-7", "amount": 1000, "currency": "BRL",
     "occurred_at": "2024-11-28T16:37:11.650000Z", "refunded_total": 0, "data": {...},
     "gateway_event_id": "evt_1Q...",
     "payment": {"state": "paid", "amount": 1000, "refunded_amount": 0,
                 "currency": "BRL", "version": 3}}

`id` is the event's message id (sinks/message_id.py: a hash of source and de-duplication
key), computed once per event and stored in each of its outbox rows, which the relays send
as the `webhook-id` header and the AMQP `message_id` merchants de-duplicate on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from porteiro.config import DestinationConfig
from porteiro.model import ParsedEvent, Payment
from porteiro.providers.standard.webhook import event_body
from porteiro.sinks.message_id import message_id
from porteiro.store.outbox import OutboxRow


def payload(msg_id: str, source: str, event: ParsedEvent, payment: Payment) -> dict[str, Any]:
    body = event_body(event)
    body["id"] = msg_id
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
    but `other`); none for an event without a payment object. The message id is the
    parsed event's key, the stored one (enrichment never changes an event's key)."""
    if event.object_id is None:
        return []
    wanted = [name for name, dest in destinations.items() if dest.wants(event.kind.value)]
    if not wanted:
        return []
    msg_id = message_id(source, event.dedup_key)
    body = payload(msg_id, source, event, payment)
    return [
        OutboxRow(name, event_id, msg_id, source, event.object_id, event.kind.value, body)
        for name in sorted(wanted)
    ]
