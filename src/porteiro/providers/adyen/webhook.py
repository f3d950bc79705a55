"""Adyen's webhook dialect: HTTP Basic, each item's `hmacSignature`, and the mapping of
NotificationRequestItems to events.

Pure: no I/O. The scheme and the mapping are described in the package docstring and
docs/gateways/adyen.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from porteiro.config import SourceConfig
from porteiro.errors import (
    ConfigError,
    MalformedHeader,
    MissingHeader,
    ParseError,
    PorteiroError,
    SignatureMismatch,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields, signing
from porteiro.providers.base import Ack

AUTHORIZATION_HEADER = "authorization"
SIGNED_FIELDS = (
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
    "value",
    "currency",
    "eventCode",
    "success",
)
ACCEPTED = b"[accepted]"
_DIGEST_SIZE = 32  # HMAC-SHA256
# Kinds of items with success "true"; AUTHORISATION and CANCEL_OR_REFUND depend on more
# than the code and are decided in `event_kind`. A modification with success "false" was
# refused by Adyen's validation and changed no money: `other`, kept for review.
SUCCESS_KINDS: Mapping[str, Kind] = {
    "CAPTURE": Kind.PAYMENT_PAID,
    # The card scheme rejected the capture: the money never arrived (a re-capture, a later
    # CAPTURE with reason "Transaction Recaptured", makes it paid again).
    "CAPTURE_FAILED": Kind.PAYMENT_CAPTURE_FAILED,
    "CANCELLATION": Kind.PAYMENT_CANCELED,
    "TECHNICAL_CANCEL": Kind.PAYMENT_CANCELED,
    "REFUND": Kind.PAYMENT_PARTIALLY_REFUNDED,  # the ledger sums refunds up to "refunded"
    # The scheme rejected the refund, or its amount came back to the merchant: that refund
    # (by its pspReference) is taken back.
    "REFUND_FAILED": Kind.PAYMENT_REFUND_REVERSED,
    "REFUNDED_REVERSED": Kind.PAYMENT_REFUND_REVERSED,
    # "The remaining uncaptured amount expired": authorized -> expired, captured stays paid.
    "EXPIRE": Kind.PAYMENT_AUTHORIZATION_EXPIRED,
    "OFFER_CLOSED": Kind.PAYMENT_EXPIRED,
    "PENDING": Kind.PAYMENT_CREATED,  # the payment waits for the shopper or the bank
    "NOTIFICATION_OF_CHARGEBACK": Kind.DISPUTE_OPENED,
    "REQUEST_FOR_INFORMATION": Kind.DISPUTE_OPENED,
    "CHARGEBACK": Kind.DISPUTE_LOST,
    # A CHARGEBACK that came with no NOTIFICATION_OF_CHARGEBACK before it: the money is
    # already debited (defending it can still end in CHARGEBACK_REVERSED).
    "DISPUTE_OPENED_WITH_CHARGEBACK": Kind.DISPUTE_LOST,
    "SECOND_CHARGEBACK": Kind.DISPUTE_LOST,
    "PREARBITRATION_LOST": Kind.DISPUTE_LOST,
    "CHARGEBACK_REVERSED": Kind.DISPUTE_WON,
    "PREARBITRATION_WON": Kind.DISPUTE_WON,
}
# Codes Adyen documents that change no payment's state here, and why (docs/gateways/adyen.md).
# Stored as `other`, kept for review; a code in neither table also gets a warning.
IGNORED_CODES: Mapping[str, str] = {
    "AUTHORISATION_ADJUSTMENT": "a new authorised amount, not money moved",
    "REFUND_WITH_DATA": "an unreferenced refund: no payment of ours to land on",
    "VOID_PENDING_REFUND": "a pending in-person refund voided: no refund was booked",
    "POSTPONED_REFUND": "a refund postponed, not made yet",
    "ORDER_OPENED": "an order of partial payments, not a payment",
    "ORDER_CLOSED": "an order of partial payments, not a payment (each has its own)",
    "NOTIFICATION_OF_FRAUD": "a fraud report: no money moves",
    "ISSUER_COMMENTS": "dispute correspondence: no money moves",
    "DISPUTE_DEFENSE_PERIOD_ENDED": "a dispute deadline: no money moves",
    "INFORMATION_SUPPLIED": "dispute correspondence: no money moves",
    "HANDLED_EXTERNALLY": "handled outside Adyen: no money moves here",
    "MANUAL_REVIEW_ACCEPT": "a risk review outcome; the payment's own events follow",
    "MANUAL_REVIEW_REJECT": "a risk review outcome; the payment's own events follow",
    "RECURRING_CONTRACT": "a stored payment method, not a payment",
    "AUTORESCUE": "a retry scheduled; its AUTHORISATION follows",
    "CANCEL_AUTORESCUE": "a retry called off",
    "PAIDOUT_REVERSED": "a payout returned, not a payment",
    "PAYOUT_THIRDPARTY": "a payout, not a payment",
    "PAYOUT_DECLINE": "a payout, not a payment",
    "PAYOUT_EXPIRE": "a payout, not a payment",
    "REPORT_AVAILABLE": "a report to download, not a payment",
}
KNOWN_CODES = frozenset({"AUTHORISATION", "CANCEL_OR_REFUND", *SUCCESS_KINDS, *IGNORED_CODES})
# Modifications and disputes: their pspReference is their own (the refund's, the dispute's),
# the payment is originalReference. Without it, which payment they concern is unknown.
NEEDS_ORIGINAL = frozenset(
    {
        "CAPTURE",
        "CAPTURE_FAILED",
        "CANCELLATION",
        "TECHNICAL_CANCEL",
        "CANCEL_OR_REFUND",
        "REFUND",
        "REFUND_FAILED",
        "REFUNDED_REVERSED",
        "NOTIFICATION_OF_CHARGEBACK",
        "REQUEST_FOR_INFORMATION",
        "CHARGEBACK",
        "SECOND_CHARGEBACK",
        "PREARBITRATION_LOST",
        "PREARBITRATION_WON",
        "CHARGEBACK_REVERSED",
        "DISPUTE_OPENED_WITH_CHARGEBACK",
    }
)
# Kinds whose `amount` is that of one refund (or its reversal): read as the settlement.
_REFUND_KINDS = frozenset(
    {Kind.PAYMENT_PARTIALLY_REFUNDED, Kind.PAYMENT_REFUNDED, Kind.PAYMENT_REFUND_REVERSED}
)
# Codes whose `amount` is the whole payment's (EXPIRE: "the amount originally authorised"):
# kept as `payment_amount`, so a payment refused or canceled before it was paid keeps it.
_PAYMENT_AMOUNT_CODES = frozenset(
    {"AUTHORISATION", "PENDING", "CANCELLATION", "TECHNICAL_CANCEL", "OFFER_CLOSED", "EXPIRE"}
)
# Warnings (rule -> what it means); a metric label: keep the set small and fixed.
RULES: Mapping[str, str] = {
    "adyen.event_date": "eventDate not RFC 3339 with an offset: read as meant, or ignored",
    "adyen.success_type": "success sent as a JSON boolean or in another case",
    "adyen.merchant_reference": "merchantReference not a string: read as text or ignored",
    "adyen.live": 'live not the string "true" or "false"',
    "adyen.modification_action": "CANCEL_OR_REFUND without modification.action: a cancel",
    "adyen.unknown_event_code": "an eventCode Adyen does not document: kept as other",
    "adyen.notification_items_object": "notificationItems sent as one object, not a list",
}


class _Unreadable(PorteiroError):
    """The body is not a JSON notification: unauthenticatable, or unparseable."""


def decode_key(secret: str) -> bytes:
    """The HMAC key of a Customer Area hex key (64 hex characters in practice)."""
    try:
        key = signing.decode_hex(secret, what="HMAC key")
    except MalformedHeader:
        raise ConfigError(
            "an Adyen HMAC key must be hexadecimal (from the Customer Area)"
        ) from None
    if not key:
        raise ConfigError("an Adyen HMAC key may not be empty")
    return key


def signing_string(item: Mapping[str, Any]) -> str:
    """The 8 signed values of a NotificationRequestItem, joined by ':' (no escaping)."""
    amount = item.get("amount")
    if amount is None:
        amount = {}
    if not isinstance(amount, dict):
        raise MalformedHeader("amount must be an object")
    values = {**item, "value": amount.get("value"), "currency": amount.get("currency")}
    return ":".join(_signed_text(name, values.get(name)) for name in SIGNED_FIELDS)


def event_kind(code: str, success: str, action: str | None, *, manual_capture: bool) -> Kind:
    """The canonical kind of one item (`success` is "true" or "false")."""
    if code == "AUTHORISATION":
        if success != "true":
            return Kind.PAYMENT_FAILED
        return Kind.PAYMENT_AUTHORIZED if manual_capture else Kind.PAYMENT_PAID
    if success != "true":
        return Kind.OTHER
    if code == "CANCEL_OR_REFUND":
        return Kind.PAYMENT_REFUNDED if action == "refund" else Kind.PAYMENT_CANCELED
    return SUCCESS_KINDS.get(code, Kind.OTHER)


class AdyenWebhook:
    """Verify and parse deliveries: pure, on the raw request only."""

    source: SourceConfig
    manual_capture: bool
    _keys: list[bytes]
    _basic: list[bytes]

    def verify(self, request: InboundRequest, now: datetime) -> None:
        if self._basic:
            self._verify_basic(request.header(AUTHORIZATION_HEADER))
        try:
            _, items = _load(request.body)
        except _Unreadable as exc:
            raise MalformedHeader(f"unauthenticatable body: {exc}") from None
        for index, item in enumerate(items):
            self._verify_item(index, item)

    def _verify_basic(self, header: str | None) -> None:
        if header is None:
            raise MissingHeader("Authorization header (HTTP Basic) is missing")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "basic" or not token.strip():
            raise MalformedHeader("Authorization must be Basic <base64>")
        given = signing.decode_base64(token, what="Authorization")
        if not signing.any_match(self._basic, [given]):
            raise SignatureMismatch("HTTP Basic credentials do not match")

    def _verify_item(self, index: int, item: Mapping[str, Any]) -> None:
        extra = item.get("additionalData")
        if extra is not None and not isinstance(extra, dict):
            raise MalformedHeader(f"item {index}: additionalData must be an object")
        given = (extra or {}).get("hmacSignature")
        if given is None or (isinstance(given, str) and not given.strip()):
            raise MissingHeader(f"item {index}: additionalData.hmacSignature is missing")
        if not isinstance(given, str):
            raise MalformedHeader(f"item {index}: hmacSignature must be a string")
        signature = signing.decode_base64(given, what=f"item {index} hmacSignature")
        if len(signature) != _DIGEST_SIZE:
            raise MalformedHeader(f"item {index}: hmacSignature is not a SHA-256 digest")
        message = _message(item)
        expected = [signing.hmac_digest(key, message) for key in self._keys]
        if not signing.any_match(expected, [signature]):
            raise SignatureMismatch(f"item {index}: hmacSignature matches no configured key")

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        try:
            document, items = _load(request.body)
        except _Unreadable as exc:
            raise ParseError(str(exc)) from None
        shared: list[dict[str, str]] = []  # deviations of the notification itself
        if isinstance(document.get("notificationItems"), dict):
            detail = "notificationItems is one object: read as a list of one"
            shared.append(fields.warning("adyen.notification_items_object", detail))
        live = _live(document.get("live"), shared)

        def read(item: dict[str, Any], where: str) -> list[ParsedEvent]:
            return [fields.with_warnings(self._event(where, item, live), shared)]

        return fields.each_item(items, read, where="notificationItems")

    def _event(self, where: str, item: Mapping[str, Any], live: str | None) -> ParsedEvent:
        warnings: list[dict[str, str]] = []
        # Strict: which payment, what happened, how much. One of them unreadable makes
        # this item unreadable (stored dead on its own), never the others.
        psp = fields.req_str(item, "pspReference", where=where, missing="is required")
        code = fields.req_str(item, "eventCode", where=where, missing="is required")
        success = _success(item.get("success"), where, warnings)
        original = fields.opt_str(item, "originalReference", where=where)
        extra = item.get("additionalData")
        extra = extra if isinstance(extra, dict) else {}
        action = extra.get("modification.action")
        action = action if isinstance(action, str) and action else None
        kind = event_kind(code, success, action, manual_capture=self.manual_capture)
        if original is None and kind is not Kind.OTHER and code in NEEDS_ORIGINAL:
            # Its pspReference is its own, not the payment's: filing it there would make
            # a phantom payment while the real one keeps its state.
            raise ParseError(f"{where}.originalReference is required for {code}: which payment?")
        value, currency = _amount(item.get("amount"), where, refund=kind in _REFUND_KINDS)
        if kind is Kind.PAYMENT_PARTIALLY_REFUNDED and value is None:
            raise ParseError(f"{where}.amount.value is required: how much was refunded?")
        if code == "CANCEL_OR_REFUND" and success == "true" and action is None:
            detail = "CANCEL_OR_REFUND has no additionalData.modification.action: a cancel"
            warnings.append(fields.warning("adyen.modification_action", detail))
        if code not in KNOWN_CODES:
            detail = f"eventCode {code[:40]!r} is not one Adyen documents: kept as other"
            warnings.append(fields.warning("adyen.unknown_event_code", detail))
        # Read past: when it happened, the merchant's reference, the rest.
        occurred = _event_date(item.get("eventDate"), f"{where}.eventDate", warnings)
        details = {
            "psp_reference": psp,
            "original_reference": original,
            "success": success,
            "merchant_account": item.get("merchantAccountCode"),
            "payment_method": item.get("paymentMethod"),
            "reason": item.get("reason"),
            "modification_action": action,
            "live": live,
            # The refund's own reference, which REFUND_FAILED / REFUNDED_REVERSED repeat.
            "settlement_id": psp if kind in _REFUND_KINDS else None,
        }
        data: dict[str, Any] = {k: v for k, v in details.items() if isinstance(v, str) and v}
        if value is not None and code in _PAYMENT_AMOUNT_CODES:
            data["payment_amount"] = value
        event = ParsedEvent(
            dedup_key=f"{psp}:{code}:{success}",
            kind=kind,
            type=code,
            object_id=original or psp,
            reference=_merchant_reference(item.get("merchantReference"), where, warnings),
            amount=value,
            currency=currency,
            occurred_at=occurred,
            data=data,
        )
        return fields.with_warnings(event, warnings)

    def ack(self) -> Ack:
        return Ack(status=200, body=ACCEPTED, content_type="text/plain")


def _load(raw: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The notification object and its items (the dicts inside it, not copies)."""
    # Not fields.load_object: verify needs _Unreadable (a 401), not a ParseError.
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _Unreadable(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(document, dict):
        raise _Unreadable("not a JSON object")
    wrappers = document.get("notificationItems")
    if isinstance(wrappers, dict):  # one item sent as an object: read as a list of one
        wrappers = [wrappers]
    if not isinstance(wrappers, list) or not wrappers:
        raise _Unreadable("notificationItems must be a non-empty list")
    items = []
    for index, wrapper in enumerate(wrappers):
        item = wrapper.get("NotificationRequestItem") if isinstance(wrapper, dict) else None
        if not isinstance(item, dict):
            raise _Unreadable(f"notificationItems[{index}] has no NotificationRequestItem object")
        items.append(item)
    return document, items


def _signed_text(name: str, value: object) -> str:
    # The Python SDK applies str(): strings as is, numbers in decimal, booleans "True".
    if value is None:
        return ""
    if isinstance(value, str | int | float):
        return str(value)
    raise MalformedHeader(f"{name} must be a string or a number to be signed")


def _message(item: Mapping[str, Any]) -> bytes:
    try:
        return signing_string(item).encode("utf-8")
    except (UnicodeEncodeError, ValueError):  # lone surrogates; ints past str() limits
        raise MalformedHeader("signed fields are not encodable text") from None


def _success(value: object, where: str, warnings: list[dict[str, str]]) -> str:
    """Did it happen: "true" or "false" (Adyen sends strings); a JSON boolean or another
    case says the same, with a warning; anything else makes the item unreadable."""
    if value in ("true", "false"):
        return str(value)
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str) and value.strip().lower() in ("true", "false"):
        text = value.strip().lower()
    else:
        raise ParseError(f'{where}.success must be "true" or "false"')
    detail = f'{where}.success is {type(value).__name__} {value!r}: read as "{text}"'
    warnings.append(fields.warning("adyen.success_type", detail))
    return text


def _amount(value: object, where: str, *, refund: bool) -> tuple[int | None, str | None]:
    """`amount.value` in minor units (an integer, strictly) and `amount.currency`."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise ParseError(f"{where}.amount must be an object")
    minor = fields.opt_int(value, "value", where=f"{where}.amount", non_negative=refund)
    currency = fields.opt_str(value, "currency", where=f"{where}.amount")
    return minor, currency.upper() if currency else None


def _event_date(value: object, field: str, warnings: list[dict[str, str]]) -> datetime | None:
    """When it happened (Adyen: `2021-01-01T01:00:00+01:00`). ISO 8601 with an offset that
    RFC 3339 does not allow (`+0100`) is read with a warning; no offset, as UTC with a
    warning; unreadable, ignored with a warning (the ledger orders by it, nothing more)."""
    try:
        return fields.opt_rfc3339(value, field=field)
    except ParseError:
        pass
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            detail = f"{field} is ISO 8601 but not RFC 3339: read with its offset"
            warnings.append(fields.warning("adyen.event_date", detail))
            return moment
    return fields.lenient_time(
        value, field=field, rule="adyen.event_date", warnings=warnings, naive=UTC
    )


def _merchant_reference(value: object, where: str, warnings: list[dict[str, str]]) -> str | None:
    """The merchant's own reference: ancillary (the payment is the pspReference)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    field = f"{where}.merchantReference"
    if isinstance(value, int | float) and not isinstance(value, bool):
        detail = f"{field} is a number: read as text"
        warnings.append(fields.warning("adyen.merchant_reference", detail))
        return str(value)
    detail = f"{field} is {type(value).__name__}, not text: ignored"
    warnings.append(fields.warning("adyen.merchant_reference", detail))
    return None


def _live(value: object, warnings: list[dict[str, str]]) -> str | None:
    """`live` is the string "true" or "false"; a boolean says the same (with a warning);
    anything else is dropped with a warning. It decides nothing here."""
    if value is None or value in ("true", "false"):
        return None if value is None else str(value)
    if isinstance(value, bool):
        text: str | None = "true" if value else "false"
        detail = f"live is a boolean: read as {text!r}"
    else:
        text = None
        detail = f'live is {type(value).__name__}, not "true"/"false": ignored'
    warnings.append(fields.warning("adyen.live", detail))
    return text
