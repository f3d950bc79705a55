"""Deliveries as a Standard Webhooks sender makes them, for `porteiro simulate`, the
fakes and the tests.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from datetime import datetime, timedelta

from porteiro.model import Kind, ParsedEvent
from porteiro.providers.base import SamplePayment, SignedRequest
from porteiro.providers.standard.webhook import event_body, sign_headers


class StandardSamples:
    """Signed deliveries and payment lifecycles in Porteiro's event format."""

    _keys: list[bytes]

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        headers = sign_headers(self._keys[0], _message_id(body), int(now.timestamp()), body)
        headers["content-type"] = "application/json"
        return SignedRequest(body=body, headers=headers)

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        steps: list[tuple[Kind, int, int | None]] = [
            (Kind.PAYMENT_CREATED, payment.amount, None),
            (Kind.PAYMENT_AUTHORIZED, payment.amount, None),
            (Kind.PAYMENT_PAID, payment.amount, None),
        ]
        if payment.refund:
            part = max(1, payment.amount // 3)
            steps.append((Kind.PAYMENT_PARTIALLY_REFUNDED, part, part))
            steps.append((Kind.PAYMENT_REFUNDED, payment.amount - part, payment.amount))
        start = now - timedelta(seconds=len(steps))
        bodies = []
        for index, (kind, amount, refunded_total) in enumerate(steps):
            event = ParsedEvent(
                dedup_key=f"evt_{rng.getrandbits(96):024x}",
                kind=kind,
                type=kind.value,
                object_id=payment.object_id,
                reference=payment.reference,
                amount=amount,
                currency=payment.currency,
                occurred_at=start + timedelta(seconds=index),
                refunded_total=refunded_total,
                data=dict(payment.extra),
            )
            bodies.append(json.dumps(event_body(event), separators=(",", ":")).encode())
        return bodies


def _message_id(body: bytes) -> str:
    # Stable per body, so a re-sent simulation carries the same webhook-id, as a retry would.
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("id"), str) and parsed["id"]:
        return str(parsed["id"])
    return "msg_" + hashlib.sha256(body).hexdigest()[:24]
