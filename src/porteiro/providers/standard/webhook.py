"""The Standard Webhooks dialect: the `webhook-signature` scheme, and Porteiro's
normalised event format both ways (`parse` and `event_body`, which forwarding emits).

Pure: no I/O. The scheme and the format are described in the package docstring.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

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
from porteiro.providers.base import Ack

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


class StandardWebhook:
    """Verify and parse deliveries: pure, on the raw request only."""

    source: SourceConfig
    _keys: list[bytes]

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


def _required(request: InboundRequest, name: str) -> str:
    value = request.header(name)
    if value is None or not value.strip():
        raise MissingHeader(f"{name} header is missing")
    return value


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
