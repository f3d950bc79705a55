"""Deliveries as Stripe sends them, for `porteiro simulate`, the fakes and the tests:
the `Stripe-Signature` header and a PaymentIntent's realistic event lifecycle.
"""

from __future__ import annotations

import json
import random
import string
from datetime import datetime
from typing import Any

from porteiro.providers import signing
from porteiro.providers.base import SamplePayment, SignedRequest

API_VERSION = "2024-06-20"  # of the simulated events
_ID_ALPHABET = string.ascii_letters + string.digits
_CARD_OUTCOME = {"network_status": "approved_by_network", "reason": None,
                 "risk_level": "normal", "seller_message": "Payment complete.",
                 "type": "authorized"}  # fmt: skip
_CARD_DETAILS = {"type": "card", "card": {"brand": "visa", "country": "US", "exp_month": 12,
                 "exp_year": 2030, "funding": "credit", "last4": "4242"}}  # fmt: skip


def signature_header(secret: bytes, body: bytes, timestamp: int) -> str:
    digest = signing.hmac_digest(secret, f"{timestamp}.".encode() + body)
    return f"t={timestamp},v1={digest.hex()}"


def _sample_bodies(payment: SamplePayment, now: datetime, rng: random.Random) -> list[bytes]:
    intent_id, charge_id = payment.object_id, "ch_" + _random_id(rng)
    currency, amount = payment.currency.lower(), payment.amount
    metadata = {"order_id": payment.reference, **{k: str(v) for k, v in payment.extra.items()}}
    steps = 3 + (4 if payment.refund else 0)
    start = int(now.timestamp()) - steps
    intent: dict[str, Any] = {
        "id": intent_id, "object": "payment_intent", "amount": amount, "amount_capturable": 0,
        "amount_received": 0, "capture_method": "automatic_async",
        "client_secret": f"{intent_id}_secret_{_random_id(rng)}", "confirmation_method":
        "automatic", "created": start, "currency": currency, "customer": None,
        "description": None, "last_payment_error": None, "latest_charge": None,
        "livemode": False, "metadata": metadata, "payment_method": None,
        "payment_method_types": ["card"], "status": "requires_payment_method",
    }  # fmt: skip
    method = "pm_" + _random_id(rng)
    charge: dict[str, Any] = {
        "id": charge_id, "object": "charge", "amount": amount, "amount_captured": amount,
        "amount_refunded": 0, "balance_transaction": "txn_" + _random_id(rng),
        "captured": True, "created": start + 1, "currency": currency, "disputed": False,
        "livemode": False, "metadata": metadata, "outcome": _CARD_OUTCOME, "paid": True,
        "payment_intent": intent_id, "payment_method": method,
        "payment_method_details": _CARD_DETAILS, "refunded": False, "status": "succeeded",
    }  # fmt: skip
    paid = {**intent, "amount_received": amount, "latest_charge": charge_id}
    paid |= {"payment_method": method, "status": "succeeded"}
    create, confirm = _request(rng), _request(rng)
    events: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("payment_intent.created", {"object": intent}, create),
        ("payment_intent.succeeded", {"object": paid}, confirm),
        ("charge.succeeded", {"object": charge}, confirm),
    ]
    if payment.refund:
        part = max(1, amount // 3)
        refunded_so_far = 0
        for share in (part, amount - part):
            refund = {
                "id": "re_" + _random_id(rng), "object": "refund", "amount": share,
                "balance_transaction": "txn_" + _random_id(rng), "charge": charge_id,
                "created": start + len(events), "currency": currency, "metadata": {},
                "payment_intent": intent_id, "reason": "requested_by_customer",
                "receipt_number": None, "status": "succeeded",
            }  # fmt: skip
            before = {"amount_refunded": refunded_so_far, "refunded": False}
            refunded_so_far += share
            after = {**charge, "amount_refunded": refunded_so_far}
            after["refunded"] = refunded_so_far >= amount
            request = _request(rng)
            events.append(("refund.created", {"object": refund}, request))
            events.append(
                ("charge.refunded", {"object": after, "previous_attributes": before}, request)
            )
    bodies = []
    for index, (event_type, data, request) in enumerate(events):
        envelope = {
            "id": "evt_" + _random_id(rng, 24), "object": "event", "api_version": API_VERSION,
            "created": start + index, "data": data, "livemode": False, "pending_webhooks": 1,
            "request": request, "type": event_type,
        }  # fmt: skip
        bodies.append(json.dumps(envelope, indent=2).encode())  # Stripe pretty-prints
    return bodies


def _request(rng: random.Random) -> dict[str, str]:
    return {"id": "req_" + _random_id(rng, 14), "idempotency_key": f"{rng.getrandbits(128):032x}"}


def _random_id(rng: random.Random, length: int = 24) -> str:
    return "".join(rng.choice(_ID_ALPHABET) for _ in range(length))


class StripeSamples:
    """Signed deliveries and event lifecycles, as Stripe sends them."""

    _keys: list[bytes]

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            "Stripe-Signature": signature_header(self._keys[0], body, int(now.timestamp())),
        }
        return SignedRequest(body=body, headers=headers)

    # A lifecycle's bodies depend on the payment alone (`sign` adds the source's keys).
    sample_lifecycle = staticmethod(_sample_bodies)
