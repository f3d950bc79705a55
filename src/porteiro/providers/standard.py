"""Standard Webhooks (https://www.standardwebhooks.com): Porteiro's generic input.

Authentication: headers `webhook-id`, `webhook-timestamp` (unix seconds of the attempt)
and `webhook-signature` (space-separated `v1,<base64>` items; other versions such as the
asymmetric `v1a` are ignored). The signed content is `{id}.{timestamp}.{raw body}`,
HMAC-SHA256, base64. Secrets are `whsec_<base64>`: the prefix is stripped and the rest
base64-decoded (a secret without the prefix is base64 too). Any configured secret may
match any signature (rotation); the timestamp must be within `tolerance_seconds` of now,
in both directions.

The body is Porteiro's normalised event, one JSON object per delivery, so any system
can feed Porteiro (and Porteiro's own forwarding emits the same shape):

    {
      "id": "evt_01J...",                 # event id, the dedup key (optional: else
                                          #   the webhook-id header is used)
      "type": "payment.paid",             # a canonical kind; anything else is "other"
      "object_id": "pay_123",             # the payment; required unless type is "other"
      "reference": "order-42",            # optional: the merchant's own reference
      "amount": 1000,                     # optional int, minor units; for refund kinds
                                          #   the amount of this one refund
      "currency": "BRL",                  # optional ISO 4217 code
      "occurred_at": "2024-11-28T16:37:11.65Z",  # optional RFC 3339 with an offset
      "refunded_total": 1000,             # optional int, cumulative refunded amount
      "data": {...}                       # optional object, kept as is
    }

Unknown keys are ignored, so the format can grow. A field of the wrong type is a
ParseError naming the field: the delivery is stored and dead-lettered, not dropped. The one
exception is `occurred_at`, which decides no money: without an offset it is read as UTC,
unreadable it is left out, each with a `standard.occurred_at` warning on the event.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import (
    ConfigError,
    MalformedHeader,
    MissingHeader,
    ParseError,
    SignatureMismatch,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields, signing
from porteiro.providers.base import Ack, SamplePayment, SignedRequest

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
SECRET_PREFIX = "whsec_"
OCCURRED_AT_RULE = "standard.occurred_at"

_KINDS = {kind.value: kind for kind in Kind}
_CURRENCY = re.compile(r"[A-Za-z]{3}")


def decode_secret(secret: str) -> bytes:
    """The HMAC key of a `whsec_...` secret (prefix optional)."""
    text = secret.removeprefix(SECRET_PREFIX)
    try:
        key = signing.decode_base64(text, what="secret")
    except MalformedHeader:
        raise ConfigError("a Standard Webhooks secret must be whsec_ + base64") from None
    if not key:
        raise ConfigError("a Standard Webhooks secret may not be empty")
    return key


def signature(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    content = b".".join((signing.header_bytes(msg_id), signing.header_bytes(timestamp), body))
    return signing.hmac_digest(key, content)


def sign_headers(key: bytes, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for `body` (also used for forwarding)."""
    digest = signature(key, msg_id, str(timestamp), body)
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: "v1," + signing.base64_text(digest),
    }


def parse_signatures(value: str) -> list[bytes]:
    """The decoded `v1` signatures of a `webhook-signature` header."""
    found: list[bytes] = []
    for item in value.split():
        version, sep, encoded = item.partition(",")
        if not sep or not version:
            raise MalformedHeader("webhook-signature items must be <version>,<base64>")
        if version == "v1":
            found.append(signing.decode_base64(encoded, what="webhook-signature"))
    return found


def event_body(event: ParsedEvent) -> dict[str, Any]:
    """The normalised JSON object for `event` (the inverse of `parse`)."""
    body: dict[str, Any] = {"id": event.dedup_key, "type": event.kind.value}
    optional = {
        "object_id": event.object_id,
        "reference": event.reference,
        "amount": event.amount,
        "currency": event.currency,
        "occurred_at": _rfc3339(event.occurred_at) if event.occurred_at else None,
        "refunded_total": event.refunded_total,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if event.data:
        body["data"] = dict(event.data)
    return body


class StandardProvider:
    """Standard Webhooks signature over Porteiro's normalised event JSON."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = [decode_secret(secret) for secret in source.secrets]
        if not self._keys:
            raise ConfigError(f"source {source.name!r}: provider standard needs secrets")

    def verify(self, request: InboundRequest, now: datetime) -> None:
        msg_id = _required(request, ID_HEADER)
        timestamp_text = _required(request, TIMESTAMP_HEADER)
        signatures = parse_signatures(_required(request, SIGNATURE_HEADER))
        timestamp = signing.parse_timestamp(timestamp_text, what=TIMESTAMP_HEADER)
        signing.check_timestamp(timestamp, now, self.source.tolerance_seconds)
        if not signatures:
            raise SignatureMismatch("webhook-signature carries no v1 signature")
        content = b".".join(
            (signing.header_bytes(msg_id), signing.header_bytes(timestamp_text.strip()))
        )
        signing.verify_hmac(content + b"." + request.body, self._keys, signatures)

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        body = fields.load_object(request.body)
        return [_event(body, request.header(ID_HEADER))]

    def ack(self) -> Ack:
        return Ack()

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        return event

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        return None

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


def _required(request: InboundRequest, name: str) -> str:
    value = request.header(name)
    if value is None or not value.strip():
        raise MissingHeader(f"{name} header is missing")
    return value


def _message_id(body: bytes) -> str:
    # Stable per body, so a re-sent simulation carries the same webhook-id, as a retry would.
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("id"), str) and parsed["id"]:
        return str(parsed["id"])
    return "msg_" + hashlib.sha256(body).hexdigest()[:24]


def _event(body: Mapping[str, Any], header_id: str | None) -> ParsedEvent:
    event_type = body.get("type")
    if not isinstance(event_type, str) or not event_type:
        raise ParseError("type must be a non-empty string")
    kind = _KINDS.get(event_type, Kind.OTHER)
    dedup_key = fields.opt_str(body, "id") or (header_id.strip() if header_id else None)
    if not dedup_key:
        raise ParseError("no event id: neither the body's id nor a webhook-id header")
    object_id = fields.opt_str(body, "object_id")
    if object_id is None and kind is not Kind.OTHER:
        raise ParseError(f"object_id is required for {kind.value}")
    data = body.get("data", {})
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParseError("data must be a JSON object")
    warnings: list[dict[str, str]] = []
    # Ancillary: the ledger orders by it, nothing more, so a deviation is read past.
    occurred = fields.lenient_time(
        body.get("occurred_at"), field="occurred_at", rule=OCCURRED_AT_RULE, warnings=warnings,
        naive=UTC,
    )  # fmt: skip
    event = ParsedEvent(
        dedup_key=dedup_key,
        kind=kind,
        type=event_type,
        object_id=object_id,
        reference=fields.opt_str(body, "reference"),
        amount=fields.opt_int(body, "amount"),
        currency=_opt_currency(body),
        occurred_at=occurred,
        refunded_total=fields.opt_int(body, "refunded_total"),
        data=data,
    )
    return fields.with_warnings(event, warnings)


def _opt_currency(body: Mapping[str, Any]) -> str | None:
    value = fields.opt_str(body, "currency")
    if value is not None and not _CURRENCY.fullmatch(value):
        raise ParseError("currency must be a three-letter ISO 4217 code")
    return None if value is None else value.upper()


def _rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat().replace("+00:00", "Z")
