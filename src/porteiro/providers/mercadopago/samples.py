"""Notifications as Mercado Pago sends them, for `porteiro simulate`, the fakes and the
tests: signed, with the `data.id` query, for a payment's realistic lifecycle.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode

from porteiro.providers import signing
from porteiro.providers.base import SamplePayment, SignedRequest
from porteiro.providers.mercadopago.webhook import (
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    _id_text,
    manifest,
)


class MercadoPagoSamples:
    """Signed notifications and payment lifecycles, as Mercado Pago sends them."""

    _keys: list[bytes]

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        """Headers and query exactly as Mercado Pago sends a webhook (ts in seconds)."""
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            parsed = None
        data = parsed.get("data") if isinstance(parsed, dict) else None
        data_id = _id_text(data.get("id")) if isinstance(data, dict) else None
        topic = parsed.get("type") if isinstance(parsed, dict) else None
        request_id = str(uuid.uuid4())
        ts = str(int(now.timestamp()))
        digest = signing.hmac_digest(
            self._keys[0], manifest(data_id.lower() if data_id else None, request_id, ts)
        )
        query = [("data.id", data_id)] if data_id else []
        query += [("type", topic)] if isinstance(topic, str) and topic else []
        headers = {
            "content-type": "application/json",
            SIGNATURE_HEADER: f"ts={ts},v1={digest.hex()}",
            REQUEST_ID_HEADER: request_id,
        }
        return SignedRequest(body=body, headers=headers, query=urlencode(query))

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        return sample_notifications(payment, now, rng)


def sample_notifications(payment: SamplePayment, now: datetime, rng: random.Random) -> list[bytes]:
    """Webhook bodies for one payment: created, approved, then (refund) two updates.

    They carry no state; a fake or real API must hold the payment's state for them.
    """
    actions = ["payment.created", "payment.updated"]
    if payment.refund:
        actions += ["payment.updated", "payment.updated"]  # partially, then fully refunded
    user_id = rng.randrange(10**8, 10**9)
    local = timezone(timedelta(hours=-3))
    start = now.astimezone(local) - timedelta(seconds=len(actions))
    bodies = []
    for index, action in enumerate(actions):
        at = (start + timedelta(seconds=index)).isoformat(timespec="milliseconds")
        notification = {
            "id": rng.randrange(10**10, 10**11),
            "live_mode": False,
            "type": "payment",
            "date_created": at,
            "user_id": user_id,
            "api_version": "v1",
            "action": action,
            "data": {"id": payment.object_id},
        }
        bodies.append(json.dumps(notification, separators=(",", ":")).encode())
    return bodies
