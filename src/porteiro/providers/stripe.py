"""Stripe: `Stripe-Signature` webhooks carrying v1 snapshot events or v2 thin notifications
(docs.stripe.com/webhooks#verify-manually, docs.stripe.com/event-destinations).

Authentication: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 over
`"{t}.{raw body}"` keyed with the `whsec_...` secret string as UTF-8 bytes (it is NOT
base64-decoded, unlike Standard Webhooks). Any v1 may match any configured secret: Stripe
sends one v1 per live secret while one is being rolled. Other schemes (v0) are ignored and
so is a v1 value that is not hex, as the SDK does; a header left with no usable v1 is a
signature mismatch. `t` must lie within `tolerance_seconds` of now, past or future (the
SDK checks only the past).

Events: one per delivery, de-duplicated on the event `id` (`evt_...`). The payment is the
PaymentIntent, so charge, refund, dispute and Checkout events are filed under their
`payment_intent` (falling back to the charge, or the Checkout Session, when there is none).
Refunds never double count: `charge.refunded` carries the charge's cumulative
`amount_refunded` as `refunded_total` (and no per-refund amount), and a refund's own
amount is counted once, by `refund.created` if it succeeded at once, else by the
`refund.updated` that moved it to `succeeded`.

Thin v2 notifications (event destinations, `"object": "v2.core.event"`, same signature):
a `v1.*` type about a payment object (`related_object.type` payment_intent, charge,
refund, dispute or checkout.session) is stored thin and enriched by GET of the related
object's `url`, then mapped like the snapshot of the same v1 type; any other v2 event
(billing meters, accounts, money management...) is stored and ignored with its reason.

The rule (fields.py): ids, type, status, amounts and the refunded total are read
strictly; an ancillary field that deviates (`created` not unix seconds, an unknown
dispute or Checkout `payment_status`, an unusable `related_object.url`) is read past and
recorded as a `stripe.*` warning on the event.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import (
    ConfigError,
    GatewayError,
    MalformedHeader,
    MissingHeader,
    NonRetryable,
    ParseError,
    SignatureMismatch,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.observability import logger
from porteiro.providers import fields, signing
from porteiro.providers.base import Ack, SamplePayment, SignedRequest

SIGNATURE_HEADER = "stripe-signature"
DEFAULT_API_BASE_URL = "https://api.stripe.com"
DEFAULT_REFERENCE_KEYS = ("order_id", "reference", "order_reference")
API_VERSION = "2024-06-20"  # of the simulated events

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
# Status reads: GET /v1/payment_intents/{id}.
STATUS_KINDS: Mapping[str, Kind] = {
    "succeeded": Kind.PAYMENT_PAID,
    "requires_capture": Kind.PAYMENT_AUTHORIZED,
    "canceled": Kind.PAYMENT_CANCELED,
    "processing": Kind.PAYMENT_CREATED,
    "requires_payment_method": Kind.PAYMENT_CREATED,
    "requires_confirmation": Kind.PAYMENT_CREATED,
    "requires_action": Kind.PAYMENT_CREATED,
}
EVENTS_PAGE = 100  # Stripe's maximum `limit`
MAX_PAGES = 10_000  # a bound on any window listing (a million events)
# Ids of objects that are not PaymentIntents (object-id fallbacks): no status read.
_NOT_INTENTS = ("ch_", "py_", "cs_")
_ID_ALPHABET = string.ascii_letters + string.digits
_CARD_OUTCOME = {"network_status": "approved_by_network", "reason": None,
                 "risk_level": "normal", "seller_message": "Payment complete.",
                 "type": "authorized"}  # fmt: skip
_CARD_DETAILS = {"type": "card", "card": {"brand": "visa", "country": "US", "exp_month": 12,
                 "exp_year": 2030, "funding": "credit", "last4": "4242"}}  # fmt: skip


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


def signature_header(secret: bytes, body: bytes, timestamp: int) -> str:
    digest = signing.hmac_digest(secret, f"{timestamp}.".encode() + body)
    return f"t={timestamp},v1={digest.hex()}"


class StripeProvider:
    """Stripe webhook endpoint (snapshot events) for one source."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = [secret.encode("utf-8") for secret in source.secrets]
        if not self._keys:
            raise ConfigError(f"source {source.name!r}: provider stripe needs secrets (whsec_...)")
        keys = source.options.get("reference_metadata_keys", list(DEFAULT_REFERENCE_KEYS))
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise ConfigError(
                f"source {source.name!r}: reference_metadata_keys must be a list of strings"
            )
        self.reference_keys: tuple[str, ...] = tuple(keys)

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

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        """A thin v2 notification about a payment object: GET the related object (with
        the notification's `Stripe-Context`) and map it like the snapshot event of the same
        v1 type, keeping the notification's id and time. Snapshot events carry the
        object's state and come back as they are."""
        if not event.thin:
            return event
        path = event.data.get("related_path")
        snapshot_type = event.data.get("snapshot_type")
        if not isinstance(path, str) or not isinstance(snapshot_type, str):
            raise NonRetryable("thin Stripe event without a related object to fetch")
        if not self.source.api_key:
            raise GatewayError(
                f"source {self.source.name!r}: no api_key to fetch the thin event's {path}"
            )
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        headers = {
            "authorization": f"Bearer {self.source.api_key}",
            "stripe-request-trigger": f"event={event.dedup_key}",
        }
        context = event.data.get("context")
        if isinstance(context, str) and context:
            headers["stripe-context"] = context
        obj = await _get_json(http, base + path, {}, headers, path)
        if obj.get("id") != event.object_id:
            raise GatewayError(f"stripe GET {path}: the answer is not {event.object_id}")
        snapshot = {"object": "event", "id": event.dedup_key, "type": snapshot_type,
                    "data": {"object": obj}}  # fmt: skip
        warnings: list[dict[str, str]] = []
        try:
            mapped = _snapshot(snapshot, self.reference_keys, warnings)
        except ParseError as exc:
            raise GatewayError(f"stripe GET {path}: {exc}") from None
        data = {**mapped.data, "notification": "thin", "related_path": path}
        enriched = replace(mapped, type=event.type, occurred_at=event.occurred_at, data=data)
        return fields.with_warnings(enriched, [*event.warnings, *warnings])

    async def list_window(
        self, since: datetime, until: datetime, http: httpx.AsyncClient
    ) -> AsyncIterator[ParsedEvent]:
        """Every event of `GET /v1/events` created in [since, until), newest first, as
        the snapshot events the webhooks would have carried (same `evt_` dedup keys).
        Stripe keeps events for 30 days."""
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key to list events")
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        params: dict[str, str | int] = {
            "created[gte]": int(since.timestamp()),
            "created[lt]": -(-int(until.timestamp() * 1_000_000) // 1_000_000),  # ceil
            "limit": EVENTS_PAGE,
        }
        headers = {"authorization": f"Bearer {self.source.api_key}"}
        for _ in range(MAX_PAGES):
            page = await _get_json(http, f"{base}/v1/events", params, headers, "events")
            data = page.get("data")
            if not isinstance(data, list):
                raise GatewayError("stripe GET events: no data list in the answer")
            for body in data:
                try:
                    yield _event(body, self.reference_keys)
                except (ParseError, AttributeError) as exc:
                    logger().warning(
                        "unusable event in the events list", action="reconcile.unusable_event",
                        source=self.source.name, error=str(exc),
                    )  # fmt: skip
            if not page.get("has_more") or not data:
                return
            last = data[-1].get("id") if isinstance(data[-1], dict) else None
            if not isinstance(last, str):
                raise GatewayError("stripe GET events: an event without id")
            params["starting_after"] = last
        raise GatewayError(f"stripe GET events: more than {MAX_PAGES} pages")

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """The PaymentIntent's status (latest charge expanded for refunds); None without
        an api_key or for an object id that is not a PaymentIntent."""
        if not self.source.api_key or object_id.startswith(_NOT_INTENTS):
            return None
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        where = f"payment_intents/{object_id}"
        try:
            response = await http.get(
                f"{base}/v1/payment_intents/{quote(object_id, safe='')}",
                params={"expand[]": "latest_charge"},
                headers={"authorization": f"Bearer {self.source.api_key}"},
            )
            response.raise_for_status()
            intent = response.json()
        except httpx.HTTPError as exc:
            raise GatewayError(f"stripe GET {where} failed: {exc}") from exc
        except ValueError as exc:
            raise GatewayError(f"stripe {where}: not JSON: {exc}") from exc
        if not isinstance(intent, dict) or not isinstance(intent.get("status"), str):
            raise GatewayError(f"stripe {where}: no status in the answer")
        try:
            return _status_event(
                object_id, intent, response.headers.get("date"), self.reference_keys
            )
        except ParseError as exc:
            raise GatewayError(f"stripe {where}: {exc}") from None

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            "Stripe-Signature": signature_header(self._keys[0], body, int(now.timestamp())),
        }
        return SignedRequest(body=body, headers=headers)

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        return _sample_bodies(payment, now, rng)


# -- payloads ---------------------------------------------------------------------------


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


def _status_event(
    object_id: str, intent: Mapping[str, Any], date: str | None, reference_keys: Sequence[str]
) -> ParsedEvent:
    status = str(intent["status"])
    kind = STATUS_KINDS.get(status, Kind.OTHER)
    amount = fields.opt_int(intent, "amount")
    charge = intent.get("latest_charge")
    refunded = fields.opt_int(charge, "amount_refunded") if isinstance(charge, dict) else None
    dedup_key = f"reconcile:{object_id}:{status}"
    if _failed(intent):
        kind, dedup_key = Kind.PAYMENT_FAILED, f"{dedup_key}:failed"
    if refunded:  # an expanded latest charge with refunds: report the cumulative total
        full = amount is not None and refunded >= amount
        kind = Kind.PAYMENT_REFUNDED if full else Kind.PAYMENT_PARTIALLY_REFUNDED
        dedup_key, amount = f"{dedup_key}:refunded:{refunded}", None
    currency = fields.opt_str(intent, "currency")
    try:  # the state was true when Stripe answered
        read_at = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        read_at = None
    return ParsedEvent(
        dedup_key=dedup_key,
        kind=kind,
        type="payment_intent.payment_failed"
        if kind is Kind.PAYMENT_FAILED
        else f"payment_intent.{status}",
        object_id=object_id,
        reference=_reference(intent, reference_keys),
        amount=amount,
        currency=currency.upper() if currency else None,
        occurred_at=read_at,
        refunded_total=refunded or None,
        data={"origin": "reconcile", "status": status},
    )


async def _get_json(
    http: httpx.AsyncClient,
    url: str,
    params: Mapping[str, str | int],
    headers: Mapping[str, str],
    what: str,
) -> Mapping[str, Any]:
    try:
        response = await http.get(url, params=params, headers=headers)
        response.raise_for_status()
        body = response.json()
    except httpx.HTTPError as exc:
        raise GatewayError(f"stripe GET {what} failed: {exc}") from exc
    except ValueError as exc:
        raise GatewayError(f"stripe GET {what}: not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise GatewayError(f"stripe GET {what}: expected a JSON object")
    return body


def _failed(intent: Mapping[str, Any]) -> bool:
    """A declined intent goes back to `requires_payment_method`, which alone reads as
    pending: its `last_payment_error` or failed latest charge says it failed."""
    if intent.get("status") != "requires_payment_method":
        return False
    charge = intent.get("latest_charge")
    charge_failed = isinstance(charge, dict) and charge.get("status") == "failed"
    return charge_failed or bool(intent.get("last_payment_error"))


def _ref(obj: Mapping[str, Any], key: str) -> str | None:
    """An expandable field: an id string or the expanded object."""
    value = obj.get(key)
    if isinstance(value, dict):
        value = value.get("id")
    if value is not None and not isinstance(value, str):
        raise ParseError(f"data.object.{key} must be an id or an object with one")
    return value or None


# -- samples ----------------------------------------------------------------------------


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
