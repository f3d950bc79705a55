"""Standard Webhooks event bodies the tests send."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any


def event_body(event_id: str, kind: str = "payment.paid", **fields: Any) -> bytes:
    """One event of payment pay_1 (1000 BRL); `fields` add to or replace its keys."""
    body = {"id": event_id, "type": kind, "object_id": "pay_1", "amount": 1000, "currency": "BRL"}
    body.update(fields)
    return json.dumps(body).encode()


def lifecycle_bodies(payment: int, base: datetime) -> list[bytes]:
    """Four canonical events for one payment, in the order they happened."""
    object_id = f"pay_{payment:05d}"
    kinds = [
        ("payment.created", None),
        ("payment.authorized", None),
        ("payment.paid", None),
        ("payment.partially_refunded", 300),
    ]
    bodies = []
    for step, (kind, refund) in enumerate(kinds):
        event = {
            "id": f"evt_{payment:05d}_{step}",
            "type": kind,
            "object_id": object_id,
            "reference": f"order-{payment}",
            "amount": refund if refund is not None else 1000,
            "currency": "BRL",
            "occurred_at": (base + timedelta(seconds=step)).isoformat(),
        }
        bodies.append(json.dumps(event).encode())
    return bodies


def lifecycles(payments: Iterable[int], base: datetime) -> list[bytes]:
    """The four-event lifecycles of each payment, one payment after the other."""
    return [body for payment in payments for body in lifecycle_bodies(payment, base)]
