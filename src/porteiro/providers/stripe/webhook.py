"""Stripe's webhook dialect: the mapping of v1 snapshot events to canonical events.

The signature scheme is in signature.py, the kinds by event type in kinds.py, the v2
thin notifications in thin.py; the names they define are importable from here too.
Pure: no I/O. The scheme and the mapping are described in the package docstring and
docs/gateways/stripe.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from porteiro.config import SourceConfig
from porteiro.errors import ParseError
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields
from porteiro.providers.base import Ack
from porteiro.providers.stripe.kinds import (
    CHECKOUT_KINDS,
    DISPUTE_EVENTS,
    DISPUTE_KINDS,
    KINDS,
    RULE_CHECKOUT_STATUS,
    RULE_DISPUTE_STATUS,
    event_kind,
)
from porteiro.providers.stripe.signature import (
    SIGNATURE_HEADER,
    parse_signature_header,
    verify_signature,
)
from porteiro.providers.stripe.thin import (
    RELATED_PATHS,
    RULE_CREATED,
    RULE_RELATED,
    THIN_PREFIX,
    related_context,
    thin_event,
)

__all__ = [
    "CHECKOUT_KINDS",
    "DISPUTE_EVENTS",
    "DISPUTE_KINDS",
    "KINDS",
    "PAYMENT_OBJECTS",
    "RELATED_PATHS",
    "RULE_CHECKOUT_STATUS",
    "RULE_CREATED",
    "RULE_DISPUTE_STATUS",
    "RULE_RELATED",
    "SIGNATURE_HEADER",
    "THIN_PREFIX",
    "StripeWebhook",
    "parse_signature_header",
    "related_context",
]

# Objects whose amount is the whole payment's (not a refund's or a dispute's).
PAYMENT_OBJECTS = ("payment_intent", "charge", "checkout.session")


class StripeWebhook:
    """Verify and parse deliveries: pure, on the raw request only."""

    source: SourceConfig
    reference_keys: tuple[str, ...]
    _keys: list[bytes]

    def verify(self, request: InboundRequest, now: datetime) -> None:
        verify_signature(request, now, self._keys, self.source.tolerance_seconds)

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        return [_event(fields.load_object(request.body), self.reference_keys)]

    def ack(self) -> Ack:
        return Ack()


def _event(body: Mapping[str, Any], reference_keys: Sequence[str]) -> ParsedEvent:
    """One delivery's event: a v1 snapshot event, or a v2 thin notification."""
    if body.get("object") == "v2.core.event":
        return thin_event(body)
    if body.get("object") != "event":
        raise ParseError(
            'object must be "event" (a Stripe snapshot event) or "v2.core.event" (thin)'
        )
    warnings: list[dict[str, str]] = []
    event = _snapshot(body, reference_keys, warnings)
    return fields.with_warnings(replace(event, occurred_at=_created(body, warnings)), warnings)


def _snapshot(
    body: Mapping[str, Any], reference_keys: Sequence[str], warnings: list[dict[str, str]]
) -> ParsedEvent:
    """A snapshot event's mapping (its `occurred_at` left to the caller)."""
    event_id = fields.req_str(body, "id")
    event_type = fields.req_str(body, "type")
    data = body.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(obj, dict):
        raise ParseError("data.object must be a JSON object")
    previous = data.get("previous_attributes")
    kind = event_kind(event_type, obj, previous if isinstance(previous, dict) else {}, warnings)
    object_type = _object_type(event_type, obj)
    object_id = _object_id(object_type, obj)
    if object_id is None and kind is not Kind.OTHER:
        raise ParseError(f"{event_type}: data.object has no id")
    amount = fields.opt_int(obj, "amount_total" if object_type == "checkout.session" else "amount")
    refunded_total = None
    if event_type == "charge.refunded":
        refunded_total, amount = fields.opt_int(obj, "amount_refunded"), None
    currency = fields.opt_str(obj, "currency", where="data.object")
    details: dict[str, Any] = {
        "object": object_type,
        "stripe_id": obj.get("id"),
        "status": obj.get("status"),
        "api_version": body.get("api_version"),
    }
    if object_type == "checkout.session":
        details["payment_status"] = obj.get("payment_status")
    data = {key: value for key, value in details.items() if isinstance(value, str) and value}
    whole = fields.opt_int(obj, "amount") if object_type == "charge" else amount
    if object_type in PAYMENT_OBJECTS and whole is not None:
        # The whole payment's amount, which the ledger keeps even for a payment that
        # failed or was canceled (its facts of those kinds carry no amount of their own).
        data["payment_amount"] = whole
    return ParsedEvent(
        dedup_key=event_id,
        kind=kind,
        type=event_type,
        object_id=object_id,
        reference=_reference(obj, reference_keys),
        amount=amount,
        currency=currency.upper() if currency else None,
        refunded_total=refunded_total,
        data=data,
    )


def _created(body: Mapping[str, Any], warnings: list[dict[str, str]]) -> datetime | None:
    """A snapshot event's `created` (unix seconds). It only orders the facts, so anything
    else is read past with a warning: a float or a digit string as those seconds, any
    other value (or one out of range) as no time."""
    value = body.get("created")
    if value is None:
        return None
    exact = isinstance(value, int) and not isinstance(value, bool)
    seconds: int | None = value if exact else None
    if isinstance(value, float) and value.is_integer():
        seconds = int(value)
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        seconds = int(value.strip())
    moment = None
    if seconds is not None and seconds >= 0:
        try:
            moment = datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            moment = None
    if moment is None:
        warnings.append(fields.warning(RULE_CREATED, "created is not unix seconds: ignored"))
    elif not exact:
        detail = f"created is a {type(value).__name__}, not an integer: read as unix seconds"
        warnings.append(fields.warning(RULE_CREATED, detail))
    return moment


def _object_type(event_type: str, obj: Mapping[str, Any]) -> str:
    declared = obj.get("object")
    if isinstance(declared, str) and declared:
        return declared
    for prefix, name in (("charge.dispute.", "dispute"), ("charge.refund.", "refund")):
        if event_type.startswith(prefix):
            return name
    return event_type.rpartition(".")[0]


def _object_id(object_type: str, obj: Mapping[str, Any]) -> str | None:
    """The PaymentIntent the object belongs to, else the most stable id it has."""
    own = fields.opt_str(obj, "id", where="data.object")
    intent = _ref(obj, "payment_intent")
    if object_type in ("charge", "checkout.session"):
        return intent or own
    if object_type in ("refund", "dispute"):
        return intent or _ref(obj, "charge") or own
    return own


def _reference(obj: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        for key in keys:
            value = metadata.get(key)
            if isinstance(value, str) and value:
                return value
    client_reference = obj.get("client_reference_id")
    return client_reference if isinstance(client_reference, str) and client_reference else None


def _ref(obj: Mapping[str, Any], key: str) -> str | None:
    """An expandable field: an id string or the expanded object."""
    value = obj.get(key)
    if isinstance(value, dict):
        value = value.get("id")
    if value is not None and not isinstance(value, str):
        raise ParseError(f"data.object.{key} must be an id or an object with one")
    return value or None
