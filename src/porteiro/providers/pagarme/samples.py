"""Deliveries as Pagar.me sends them, for `porteiro simulate`, the fakes and the tests:
RS256 or `X-Hub-Signature` signed v5 events of a payment's realistic lifecycle.
"""

from __future__ import annotations

import json
import random
import string
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers import signing
from porteiro.providers.base import SamplePayment, SignedRequest
from porteiro.providers.pagarme.signature import ASYMMETRIC_HEADER, HUB_HEADER

_ID_ALPHABET = string.ascii_letters + string.digits


def _sample_bodies(payment: SamplePayment, now: datetime, rng: random.Random) -> list[bytes]:
    order = {"id": payment.object_id, "code": payment.reference}
    charge = {
        "id": "ch_" + _random_id(rng),
        "code": payment.reference,
        "amount": payment.amount,
        "currency": payment.currency,
        "payment_method": "credit_card",
        "order": order,
    }
    total = {"amount": payment.amount, "currency": payment.currency}
    steps: list[tuple[str, dict[str, Any]]] = [
        ("order.created", {**order, **total, "status": "pending"}),
        (
            "charge.paid",
            {
                **charge,
                "status": "paid",
                "paid_amount": payment.amount,
                "last_transaction": _transaction(rng, "captured", payment.amount),
            },
        ),
        ("order.paid", {**order, **total, "status": "paid"}),
    ]
    if payment.refund:
        part = max(1, payment.amount // 3)
        for event_type, status, canceled, refunded in (
            ("charge.partial_canceled", "paid", part, part),
            ("charge.refunded", "canceled", payment.amount, payment.amount - part),
        ):
            refund = _transaction(rng, "refunded", refunded)
            data = {**charge, "status": status, "canceled_amount": canceled}
            steps.append((event_type, {**data, "last_transaction": refund}))
    account = {"id": "acc_" + _random_id(rng), "name": "Porteiro simulate"}
    start = now.astimezone(UTC) - timedelta(seconds=len(steps))
    bodies = []
    for index, (event_type, data) in enumerate(steps):
        at = (start + timedelta(seconds=index)).isoformat(timespec="milliseconds")
        hook = {
            "id": "hook_" + _random_id(rng),
            "account": account,
            "type": event_type,
            "created_at": at.replace("+00:00", "Z"),
            "data": data,
        }
        bodies.append(json.dumps(hook, separators=(",", ":")).encode())
    return bodies


def _transaction(rng: random.Random, status: str, amount: int) -> dict[str, Any]:
    return {"id": "tran_" + _random_id(rng), "status": status, "success": True, "amount": amount}


def _random_id(rng: random.Random) -> str:
    return "".join(rng.choice(_ID_ALPHABET) for _ in range(16))


class PagarmeSamples:
    """Signed deliveries and payment lifecycles, as Pagar.me sends them."""

    source: SourceConfig
    _signing_hub: str
    _secrets: list[bytes]
    _signing_key: RSAPrivateKey | None
    _signing_kid: str

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        headers = {"content-type": "application/json"}
        if self._signing_key is not None:
            raw = self._signing_key.sign(body, padding.PKCS1v15(), hashes.SHA256())
            headers[ASYMMETRIC_HEADER] = (
                f"alg=RS256; kid={self._signing_kid}; signature={signing.encode_base64url(raw)}"
            )
        elif self._secrets:
            digest = signing.hmac_digest(self._secrets[0], body, self._signing_hub)
            headers[HUB_HEADER] = f"{self._signing_hub}=" + digest.hex()
        else:
            raise ConfigError(
                f"source {self.source.name!r}: signing needs signing_key_file or secrets"
            )
        return SignedRequest(body=body, headers=headers)

    # A lifecycle's bodies depend on the payment alone (`sign` adds the source's keys).
    sample_lifecycle = staticmethod(_sample_bodies)
