"""Notifications as Adyen sends them, for `porteiro simulate`, the fakes and the tests:
signed items of a payment's realistic lifecycle, in batches.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from porteiro.errors import ParseError
from porteiro.providers import signing
from porteiro.providers.adyen.notification import Unreadable, load_notification
from porteiro.providers.adyen.signature import AUTHORIZATION_HEADER, signed_message
from porteiro.providers.base import SamplePayment, SignedRequest

_PSP_ALPHABET = string.ascii_uppercase + string.digits
_SAMPLE_ZONE = timezone(timedelta(hours=1))  # Adyen dates carry an offset (CET here)


def item_signature(item: Mapping[str, Any], key: bytes) -> str:
    """The base64 `hmacSignature` Adyen puts in an item, under `key`."""
    return signing.base64_text(signing.hmac_digest(key, signed_message(item)))


class AdyenSamples:
    """Signed notifications and payment lifecycles, as Adyen sends them."""

    manual_capture: bool
    _keys: list[bytes]
    _basic: list[bytes]
    _merchant: str

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        """(Re)sign every item with the first key; the body is re-serialised."""
        try:
            document, items = load_notification(body)
        except Unreadable as exc:
            raise ParseError(f"cannot sign: {exc}") from None
        for item in items:
            _sign_item(item, self._keys[0])
        headers = {"content-type": "application/json"}
        if self._basic:
            headers[AUTHORIZATION_HEADER] = "Basic " + signing.base64_text(self._basic[0])
        return SignedRequest(body=_dump(document), headers=headers)

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        items = _sample_items(payment, self._merchant, self.manual_capture, now, rng)
        for item in items:
            _sign_item(item, self._keys[0])
        return [
            _dump({"live": "false", "notificationItems": batch}) for batch in _batches(items, rng)
        ]


def _dump(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def _sign_item(item: dict[str, Any], key: bytes) -> None:
    extra = item.get("additionalData")
    extra = dict(extra) if isinstance(extra, dict) else {}
    extra["hmacSignature"] = item_signature(item, key)
    item["additionalData"] = extra


def _sample_items(
    payment: SamplePayment, merchant: str, manual: bool, now: datetime, rng: random.Random
) -> list[dict[str, Any]]:
    """AUTHORISATION (+ CAPTURE in manual mode), then a partial refund and the rest."""
    steps: list[tuple[str, int]] = [("AUTHORISATION", payment.amount)]
    if manual:
        steps.append(("CAPTURE", payment.amount))
    if payment.refund:
        part = max(1, payment.amount // 3)
        steps.append(("REFUND", part))
        if payment.amount > part:
            steps.append(("REFUND", payment.amount - part))
    method = rng.choice(("visa", "mc", "amex", "elo"))
    card, auth_code = f"{rng.randrange(10_000):04d}", f"{rng.randrange(1_000_000):06d}"
    start = now.astimezone(_SAMPLE_ZONE) - timedelta(seconds=len(steps))
    items = []
    for index, (code, value) in enumerate(steps):
        item: dict[str, Any] = {
            "additionalData": {},
            "amount": {"currency": payment.currency, "value": value},
            "eventCode": code,
            "eventDate": (start + timedelta(seconds=index)).isoformat(timespec="milliseconds"),
            "merchantAccountCode": merchant,
            "merchantReference": payment.reference,
            "paymentMethod": method,
            "pspReference": payment.object_id,
            "success": "true",
        }
        if code == "AUTHORISATION":
            item["additionalData"] = {"authCode": auth_code, "cardSummary": card}
            item["operations"] = ["CANCEL", "CAPTURE", "REFUND"]
            item["reason"] = f"{auth_code}:{card}:03/2030"
        else:  # a modification: its own reference, the payment's as the original
            item["originalReference"] = payment.object_id
            item["pspReference"] = "".join(rng.choice(_PSP_ALPHABET) for _ in range(16))
        items.append(item)
    return items


def _batches(items: list[dict[str, Any]], rng: random.Random) -> list[list[dict[str, Any]]]:
    """Wrap items, sometimes two per delivery (Adyen batches on its side too)."""
    batches: list[list[dict[str, Any]]] = []
    index = 0
    while index < len(items):
        size = 2 if index + 1 < len(items) and rng.random() < 0.3 else 1
        batches.append([{"NotificationRequestItem": item} for item in items[index : index + size]])
        index += size
    return batches
