"""Stripe's webhook dialect: the `Stripe-Signature` check and the event mapping.

Pure: no I/O. The scheme and the mapping are described in the package docstring and
docs/gateways/stripe.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from porteiro.config import SourceConfig
from porteiro.errors import MalformedHeader, MissingHeader, ParseError, SignatureMismatch
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields, signing
from porteiro.providers.base import Ack

SIGNATURE_HEADER = "stripe-signature"
KINDS: Mapping[str, Kind] = {
    "payment_intent.created": Kind.PAYMENT_CREATED,
    "payment_intent.processing": Kind.PAYMENT_CREATED,
    "payment_intent.requires_action": Kind.PAYMENT_CREATED,
    "payment_intent.partially_funded": Kind.PAYMENT_CREATED,
    "charge.pending": Kind.PAYMENT_CREATED,
    "payment_intent.amount_capturable_updated": Kind.PAYMENT_AUTHORIZED,
    "payment_intent.succeeded": Kind.PAYMENT_PAID,
    "charge.succeeded": Kind.PAYMENT_PAID,
    "charge.captured": Kind.PAYMENT_PAID,
    "checkout.session.async_payment_succeeded": Kind.PAYMENT_PAID,
    "payment_intent.payment_failed": Kind.PAYMENT_FAILED,
    "charge.failed": Kind.PAYMENT_FAILED,
    "checkout.session.async_payment_failed": Kind.PAYMENT_FAILED,
    "payment_intent.canceled": Kind.PAYMENT_CANCELED,
    "checkout.session.expired": Kind.PAYMENT_EXPIRED,
}
# `checkout.session.completed` by `payment_status` (`no_payment_required`: no payment).
CHECKOUT_KINDS: Mapping[str, Kind] = {
    "paid": Kind.PAYMENT_PAID,
    "unpaid": Kind.PAYMENT_CREATED,
    "no_payment_required": Kind.OTHER,
}
# Every `charge.dispute.*` event by the dispute's `status`: a chargeback (funds withdrawn)
# opens, `won` / `lost` close it. An inquiry (`warning_*`) withdraws no funds, and
# `prevented` / `charge_refunded` never became one: no money moved, `other`.
DISPUTE_EVENTS = ("charge.dispute.created", "charge.dispute.updated", "charge.dispute.closed",
                  "charge.dispute.funds_withdrawn", "charge.dispute.funds_reinstated")  # fmt: skip
DISPUTE_KINDS: Mapping[str, Kind] = {
    "needs_response": Kind.DISPUTE_OPENED,
    "under_review": Kind.DISPUTE_OPENED,
    "won": Kind.DISPUTE_WON,
    "lost": Kind.DISPUTE_LOST,
    "warning_needs_response": Kind.OTHER,
    "warning_under_review": Kind.OTHER,
    "warning_closed": Kind.OTHER,
    "prevented": Kind.OTHER,
    "charge_refunded": Kind.OTHER,
}
# Objects whose amount is the whole payment's (not a refund's or a dispute's).
PAYMENT_OBJECTS = ("payment_intent", "charge", "checkout.session")
# Thin v2 notifications: the v1 objects a `v1.*` event may be about that are payments (or
# belong to one), and where the API serves each (the SDKs' `related_object.url`).
THIN_PREFIX = "v1."
RELATED_PATHS: Mapping[str, str] = {
    "payment_intent": "/v1/payment_intents/",
    "charge": "/v1/charges/",
    "refund": "/v1/refunds/",
    "dispute": "/v1/disputes/",
    "checkout.session": "/v1/checkout/sessions/",
}
_PAYMENT_TYPES = ("payment_intent.", "charge.", "refund.", "checkout.session.")
# The object a `v1.*` payment type is about, when `related_object.type` is absent.
_RELATED_BY_TYPE = (
    ("charge.dispute.", "dispute"),
    ("charge.refund.", "refund"),
    ("payment_intent.", "payment_intent"),
    ("charge.", "charge"),
    ("refund.", "refund"),
    ("checkout.session.", "checkout.session"),
)
_SAFE_PATH = re.compile(r"/v1/[A-Za-z0-9_./-]+")
# Warning rules (metric labels of porteiro_event_warnings_total): a fixed set.
RULE_CREATED = "stripe.created"
RULE_DISPUTE_STATUS = "stripe.dispute_status"
RULE_CHECKOUT_STATUS = "stripe.checkout_payment_status"
RULE_RELATED = "stripe.related_object"


def parse_signature_header(value: str) -> tuple[int, list[bytes]]:
    """(t, decoded v1 signatures) of a `Stripe-Signature` value; exactly one `t`."""
    pairs = signing.parse_pairs(value)
    stamps = [item for key, item in pairs if key == "t"]
    if len(stamps) != 1:
        raise MalformedHeader("Stripe-Signature needs exactly one t=<unix seconds>")
    timestamp = signing.parse_timestamp(stamps[0], what="Stripe-Signature t")
    signatures = []
    for key, item in pairs:
        if key != "v1" or not item:
            continue
        try:
            signatures.append(signing.decode_hex(item, what="Stripe-Signature v1"))
        except MalformedHeader:
            continue  # can never match; must not spoil a good v1 beside it (SDK behaviour)
    return timestamp, signatures


class StripeWebhook:
    """Verify and parse deliveries: pure, on the raw request only."""

    source: SourceConfig
    reference_keys: tuple[str, ...]
    _keys: list[bytes]

    def verify(self, request: InboundRequest, now: datetime) -> None:
        header = request.header(SIGNATURE_HEADER)
        if header is None or not header.strip():
            raise MissingHeader("Stripe-Signature header is missing")
        timestamp, signatures = parse_signature_header(header)
        signing.check_timestamp(timestamp, now, self.source.tolerance_seconds)
        if not signatures:
            raise SignatureMismatch("Stripe-Signature carries no v1 signature")
        signing.verify_hmac(f"{timestamp}.".encode() + request.body, self._keys, signatures)

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        return [_event(fields.load_object(request.body), self.reference_keys)]

    def ack(self) -> Ack:
        return Ack()


def _event(body: Mapping[str, Any], reference_keys: Sequence[str]) -> ParsedEvent:
    """One delivery's event: a v1 snapshot event, or a v2 thin notification."""
    if body.get("object") == "v2.core.event":
        return _thin_event(body)
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
    kind = _kind(event_type, obj, previous if isinstance(previous, dict) else {}, warnings)
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


def _thin_event(body: Mapping[str, Any]) -> ParsedEvent:
    """A v2 thin notification: `{id, object: "v2.core.event", type, created (RFC 3339),
    livemode, context?, related_object: {id, type, url}?}`. About a payment object (a
    `v1.*` type whose related object is one of RELATED_PATHS): thin, enriched later.
    Anything else: kind other with no payment object (stored, ignored)."""
    event_id = fields.req_str(body, "id")
    event_type = fields.req_str(body, "type")
    warnings: list[dict[str, str]] = []
    occurred = fields.lenient_time(
        body.get("created"), field="created", rule=RULE_CREATED, warnings=warnings
    )
    related = body.get("related_object")
    snapshot_type = event_type.removeprefix(THIN_PREFIX)
    related_type = _related_type(snapshot_type, related, warnings)
    payment_type = event_type.startswith(THIN_PREFIX) and snapshot_type.startswith(_PAYMENT_TYPES)
    if payment_type and not isinstance(related, dict):
        raise ParseError(f"{event_type}: related_object must name the payment object")
    if (
        not payment_type
        or not isinstance(related, dict)
        or related_type is None
        or related_type not in RELATED_PATHS
    ):
        what = related_type[:60] if related_type else "no related object"
        ignored = ParsedEvent(
            dedup_key=event_id,
            kind=Kind.OTHER,
            type=event_type,
            object_id=None,
            occurred_at=occurred,
            data={"notification": "thin", "ignored": f"v2 event not about a payment ({what})"},
        )
        return fields.with_warnings(ignored, warnings)
    related_id = fields.req_str(related, "id", where="related_object")
    context = related_context(body)
    thin = ParsedEvent(
        dedup_key=event_id,
        kind=Kind.OTHER,
        type=event_type,
        object_id=related_id,
        occurred_at=occurred,
        thin=True,
        data={
            "notification": "thin",
            "snapshot_type": snapshot_type,
            "related_type": related_type,
            "related_path": _related_path(related_type, related_id, related, warnings),
            **({"context": context} if context else {}),
        },
    )
    return fields.with_warnings(thin, warnings)


def _related_type(
    snapshot_type: str, related: object, warnings: list[dict[str, str]]
) -> str | None:
    """`related_object.type`; when absent, the object a `v1.*` payment type is about."""
    if not isinstance(related, dict):
        return None
    declared = related.get("type")
    if isinstance(declared, str) and declared:
        return declared
    for prefix, name in _RELATED_BY_TYPE:
        if snapshot_type.startswith(prefix):
            warnings.append(fields.warning(RULE_RELATED, f"related_object.type absent: {name}"))
            return name
    return None


def related_context(body: Mapping[str, Any]) -> str | None:
    """The notification's `context` (a connected account, `acct_...`), sent back as
    `Stripe-Context` when fetching; anything but a string is no context."""
    context = body.get("context")
    return context if isinstance(context, str) and context else None


def _related_path(
    related_type: str, related_id: str, related: Mapping[str, Any], warnings: list[dict[str, str]]
) -> str:
    """Where to GET the related object: its `url` when it is a plain path under the one
    Stripe serves that type at, on the configured API (never another host or object),
    else that path built from the id, with a warning."""
    url = related.get("url")
    prefix = RELATED_PATHS[related_type]
    own = prefix + quote(related_id, safe="")
    if (
        isinstance(url, str)
        and url.startswith(prefix)
        and _SAFE_PATH.fullmatch(url)
        and ".." not in url
        and "//" not in url
    ):
        return url
    detail = "absent" if url is None else f"not a path under {prefix}"
    warnings.append(fields.warning(RULE_RELATED, f"related_object.url {detail}: GET {own}"))
    return own


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


def _kind(
    event_type: str,
    obj: Mapping[str, Any],
    previous: Mapping[str, Any],
    warnings: list[dict[str, str]],
) -> Kind:
    fixed = KINDS.get(event_type)
    if fixed is not None:
        return fixed
    status = obj.get("status")
    if event_type == "checkout.session.completed":
        payment_status = obj.get("payment_status")
        found = CHECKOUT_KINDS.get(payment_status) if isinstance(payment_status, str) else None
        if found is None:
            detail = f"payment_status {_shown(payment_status)} is not one Stripe documents"
            warnings.append(fields.warning(RULE_CHECKOUT_STATUS, detail))
            return Kind.OTHER
        return found
    if event_type in DISPUTE_EVENTS:
        found = DISPUTE_KINDS.get(status) if isinstance(status, str) else None
        if found is not None:
            return found
        # An unknown status: a created dispute is still a dispute.
        opened = event_type == "charge.dispute.created"
        detail = (
            f"dispute status {_shown(status)} unknown: read as {'opened' if opened else 'other'}"
        )
        warnings.append(fields.warning(RULE_DISPUTE_STATUS, detail))
        return Kind.DISPUTE_OPENED if opened else Kind.OTHER
    if event_type == "charge.refunded":
        amount, refunded = fields.opt_int(obj, "amount"), fields.opt_int(obj, "amount_refunded")
        if amount is None or refunded is None:
            raise ParseError("charge.refunded: data.object needs amount and amount_refunded")
        return Kind.PAYMENT_REFUNDED if refunded >= amount else Kind.PAYMENT_PARTIALLY_REFUNDED
    # Each refund counts once: when created succeeded, or when an update made it so.
    # (`charge.refund.updated` is the same change as `refund.updated`: never counted.)
    became = "status" in previous and previous["status"] != "succeeded"
    if status == "succeeded" and (
        event_type == "refund.created" or (event_type == "refund.updated" and became)
    ):
        return Kind.PAYMENT_PARTIALLY_REFUNDED
    return Kind.OTHER


def _shown(value: object) -> str:
    """A status value for a warning: a short quoted string, or its JSON type."""
    if isinstance(value, str):
        return repr(value[:40])
    return "null" if value is None else type(value).__name__


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
