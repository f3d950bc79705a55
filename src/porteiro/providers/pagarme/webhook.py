"""Pagar.me's webhook dialect: the RS256 and `X-Hub-Signature` checks, and the mapping of
v5 events and legacy v4 postbacks.

Pure: no I/O (the JWKS is loaded beforehand, by `prepare` in api.py). The schemes and
the mapping are described in the package docstring and docs/gateways/pagarme.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from porteiro.config import SourceConfig
from porteiro.errors import (
    MalformedHeader,
    MissingHeader,
    ParseError,
    SignatureMismatch,
    UnknownKey,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields, signing
from porteiro.providers.base import Ack

if TYPE_CHECKING:  # the cache fetches keys (api.py); verify only reads it
    from porteiro.providers.jwks import JwksCache

ASYMMETRIC_HEADER = "x-webhook-asymmetric-signature"
HUB_HEADER = "x-hub-signature"
V5_KINDS: Mapping[str, Kind] = {
    "order.created": Kind.PAYMENT_CREATED,
    "order.pending": Kind.PAYMENT_CREATED,
    "charge.created": Kind.PAYMENT_CREATED,
    "charge.pending": Kind.PAYMENT_CREATED,
    "charge.paid": Kind.PAYMENT_PAID,
    "order.paid": Kind.PAYMENT_PAID,
    "charge.payment_failed": Kind.PAYMENT_FAILED,
    "order.payment_failed": Kind.PAYMENT_FAILED,
    "order.canceled": Kind.PAYMENT_CANCELED,
    "charge.refunded": Kind.PAYMENT_REFUNDED,
    "charge.partial_canceled": Kind.PAYMENT_PARTIALLY_REFUNDED,
    "charge.chargedback": Kind.DISPUTE_LOST,
    # Money arrived, more than due: paid, with the excess flagged (money to give back).
    "charge.overpaid": Kind.PAYMENT_PAID,
}
# A Pix/boleto paid with the wrong amount: recorded on the order as an anomaly. Underpaid
# money does not make the order paid.
AMOUNT_MISMATCH = frozenset({"charge.underpaid", "charge.overpaid"})
LEGACY_KINDS: Mapping[str, Kind] = {
    "waiting_payment": Kind.PAYMENT_CREATED,
    "authorized": Kind.PAYMENT_AUTHORIZED,
    "paid": Kind.PAYMENT_PAID,
    "refunded": Kind.PAYMENT_REFUNDED,
    "refused": Kind.PAYMENT_FAILED,
    "chargedback": Kind.DISPUTE_LOST,
}
# Status reads for reconciliation (GET /orders/{id}, /charges/{id}) and v5 events whose
# name is not a money movement: see STATUS_KINDS.
# Where the object's own status decides instead of the event's name: events that name no
# money movement (created, pending, processing, updated, closed, antifraud_*...), whose
# data may already be paid, failed or canceled. Status words, order and charge alike.
STATUS_KINDS: Mapping[str, Kind] = {
    "pending": Kind.PAYMENT_CREATED,
    "processing": Kind.PAYMENT_CREATED,
    "paid": Kind.PAYMENT_PAID,
    "overpaid": Kind.PAYMENT_PAID,
    "failed": Kind.PAYMENT_FAILED,
    "canceled": Kind.PAYMENT_CANCELED,
    "chargedback": Kind.DISPUTE_LOST,
}
# Events named after a money movement or an end: their name decides, whatever the status.
_NAMED_KINDS = frozenset(
    {
        Kind.PAYMENT_PAID,
        Kind.PAYMENT_FAILED,
        Kind.PAYMENT_CANCELED,
        Kind.PAYMENT_REFUNDED,
        Kind.PAYMENT_PARTIALLY_REFUNDED,
        Kind.DISPUTE_LOST,
    }
)
# The entities whose `data.status` is an order's or a charge's.
_STATUS_ENTITIES = ("order.", "charge.")
# Transaction statuses of a refund (card `refunded`/`voided` and their partial forms,
# Pix `refunded`): only then is `last_transaction.amount` the amount given back.
_REFUND_TRANSACTIONS = frozenset(
    {"refunded", "partial_refunded", "voided", "partial_void", "partial_voided"}
)
# Of those, the ones that prove money had been paid (a void of a boleto or of an
# uncaptured card gives nothing back).
_MONEY_BACK_TRANSACTIONS = frozenset({"refunded", "partial_refunded"})
# Warning rules (metric labels: a small fixed set). What each one reads past:
RULE_NAIVE_TIME = "pagarme.timestamp_without_offset"  # read as UTC
RULE_BAD_TIME = "pagarme.timestamp_unreadable"  # ignored (no occurred_at)
RULE_STATUS_AHEAD = "pagarme.status_ahead_of_type"  # the status decided
RULE_STATUS_BEHIND = "pagarme.status_behind_type"  # the event's name decided
RULE_FIELD = "pagarme.ancillary_field"  # code/currency/order/last_transaction: odd type
RULE_LIST = "pagarme.list_as_object"  # `charges` sent as one object: read as a list of one
RULES = (
    RULE_NAIVE_TIME,
    RULE_BAD_TIME,
    RULE_STATUS_AHEAD,
    RULE_STATUS_BEHIND,
    RULE_FIELD,
    RULE_LIST,
)
_HUB_ALGORITHMS = ("sha1", "sha256")


def parse_asymmetric_header(value: str) -> tuple[str, bytes]:
    """(kid, signature) of an `alg=RS256; kid=...; signature=...` header."""
    params = signing.parse_unique_pairs(value, separator=";")
    missing = [key for key in ("alg", "kid", "signature") if not params.get(key)]
    if missing:
        raise MalformedHeader(f"{ASYMMETRIC_HEADER} lacks {', '.join(missing)}")
    if params["alg"].upper() != "RS256":
        raise MalformedHeader(f"{ASYMMETRIC_HEADER}: unsupported alg (only RS256)")
    raw = signing.decode_base64(params["signature"], what="signature", urlsafe=True)
    return params["kid"], raw


def parse_hub_header(value: str) -> tuple[str, bytes]:
    """(algorithm, digest) of a `sha1=<hex>` / `sha256=<hex>` header."""
    algorithm, sep, digest = value.strip().partition("=")
    algorithm = algorithm.strip().lower()
    if not sep or algorithm not in _HUB_ALGORITHMS:
        raise MalformedHeader(f"{HUB_HEADER} must be sha1=<hex> or sha256=<hex>")
    return algorithm, signing.decode_hex(digest, what=HUB_HEADER)


class PagarmeWebhook:
    """Verify and parse deliveries: pure, against the keys `prepare` loaded."""

    source: SourceConfig
    require_asymmetric: bool
    keys: JwksCache
    _secrets: list[bytes]

    def verify(self, request: InboundRequest, now: datetime) -> None:
        asymmetric = request.header(ASYMMETRIC_HEADER)
        if asymmetric is not None:
            self._verify_rs256(asymmetric, request.body)
            return
        if self.require_asymmetric:
            raise MissingHeader(f"{ASYMMETRIC_HEADER} header is missing (required)")
        hub = request.header(HUB_HEADER)
        if hub is None or not hub.strip() or not self._secrets:
            raise MissingHeader(
                f"{ASYMMETRIC_HEADER} header is missing"
                + ("" if self._secrets else f" ({HUB_HEADER} needs secrets configured)")
            )
        algorithm, digest = parse_hub_header(hub)
        signing.verify_hmac(request.body, self._secrets, [digest], algorithm=algorithm)

    def _verify_rs256(self, header: str, body: bytes) -> None:
        kid, signature = parse_asymmetric_header(header)
        key = self.keys.get(kid)
        if key is None:
            raise UnknownKey(f"no JWKS key with kid {kid[:64]!r}")
        try:
            key.verify(signature, body, padding.PKCS1v15(), hashes.SHA256())
        except (InvalidSignature, ValueError):
            raise SignatureMismatch("RS256 signature does not match the body") from None

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        body = _load_body(request.body)
        if body.get("object") == "transaction" or ("current_status" in body and "type" not in body):
            return [_legacy_event(body)]
        return [_v5_event(body)]

    def ack(self) -> Ack:
        return Ack()


def _load_body(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError("body is not UTF-8 text") from None
    if not text.lstrip().startswith("{"):
        # Legacy postbacks may be form-encoded; keep only the flat fields we read.
        try:
            return dict(parse_qsl(text, keep_blank_values=True, strict_parsing=True))
        except ValueError:
            raise ParseError("body is neither JSON nor form-encoded") from None
    return fields.load_object(text)


def _v5_event(body: Mapping[str, Any]) -> ParsedEvent:
    hook_id = fields.req_str(body, "id")
    event_type = fields.req_str(body, "type")
    data = body.get("data")
    if not isinstance(data, dict):
        raise ParseError("data must be a JSON object")
    warnings: list[dict[str, str]] = []
    is_charge = event_type.startswith("charge.")
    order = _object(data, "order", "data", warnings) if is_charge else {}
    object_id = _order_first(order, data, "id")
    # An order's or a charge's status can decide the kind: strict there, only kept elsewhere.
    has_status = event_type.startswith(_STATUS_ENTITIES)
    raw_status = data.get("status")
    status = fields.opt_str(data, "status", where="data") if has_status else None
    amount = fields.opt_int(data, "amount", where="data")
    named = V5_KINDS.get(event_type, Kind.OTHER)
    kind = _v5_kind(event_type, named, status, warnings)
    if object_id is None and kind is not Kind.OTHER:
        raise ParseError(f"{event_type}: data.id is required")
    refunded_total: int | None = None
    payment_amount: int | None = None
    if kind in (Kind.PAYMENT_REFUNDED, Kind.PAYMENT_PARTIALLY_REFUNDED):
        refunded_total = fields.opt_int(data, "canceled_amount", where="data")
        if refunded_total is None and kind is Kind.PAYMENT_REFUNDED:
            refunded_total = amount  # fully refunded: everything charged came back
        payment_amount = amount
        amount = _refund_amount(data, warnings)
    elif kind is Kind.PAYMENT_CANCELED:
        # Pagar.me calls a refund a cancellation: an order.canceled whose charges had
        # been paid gave the money back (the status reads read it the same way).
        refunded = _refunded(data, warnings)
        if refunded:
            full = amount is not None and refunded >= amount
            kind = Kind.PAYMENT_REFUNDED if full else Kind.PAYMENT_PARTIALLY_REFUNDED
            refunded_total, payment_amount, amount = refunded, amount, None
    if kind in (Kind.PAYMENT_FAILED, Kind.PAYMENT_CANCELED, Kind.DISPUTE_LOST):
        payment_amount = amount  # what was due: the ledger keeps it for a payment never paid
    account = body.get("account")
    details: dict[str, Any] = {
        "status": raw_status,
        "charge_id": data.get("id") if is_charge else None,
        "payment_method": data.get("payment_method"),
        "account_id": account.get("id") if isinstance(account, dict) else None,
        "anomaly": _amount_mismatch(event_type, data),
    }
    kept: dict[str, Any] = {k: v for k, v in details.items() if isinstance(v, str)}
    if payment_amount is not None:
        kept["payment_amount"] = payment_amount
    currency = _ancillary_str(data, "currency", "data", warnings, digits=False)
    event = ParsedEvent(
        dedup_key=hook_id,
        kind=kind,
        type=event_type,
        object_id=object_id,
        reference=_reference(order, data, warnings),
        amount=amount,
        currency=currency.upper() if currency else None,
        occurred_at=_time(body.get("created_at"), "created_at", warnings),
        refunded_total=refunded_total,
        data=kept,
    )
    return fields.with_warnings(event, warnings)


def _v5_kind(
    event_type: str, named: Kind, status: str | None, warnings: list[dict[str, str]]
) -> Kind:
    """The event's kind: its name's, unless the name moves no money and the object's own
    status is further along (then the status's, with a warning). A status behind a
    money-moving name (charge.paid still `pending`) leaves the name's kind, warned."""
    if not event_type.startswith(_STATUS_ENTITIES) or status is None:
        return named
    by_status = STATUS_KINDS.get(status)
    if by_status is None:
        return named
    if named in _NAMED_KINDS:
        if by_status is Kind.PAYMENT_CREATED:
            detail = f"{event_type} with data.status {status!r}: read as its name says"
            warnings.append(fields.warning(RULE_STATUS_BEHIND, detail))
        return named
    if named is Kind.OTHER and event_type in AMOUNT_MISMATCH:
        return named  # charge.underpaid: recorded as an anomaly, never as paid
    if by_status is Kind.PAYMENT_CREATED:
        return Kind.PAYMENT_CREATED if named is Kind.OTHER else named
    detail = f"{event_type} with data.status {status!r}: read as {by_status.value}"
    warnings.append(fields.warning(RULE_STATUS_AHEAD, detail))
    return by_status


def _refund_amount(data: Mapping[str, Any], warnings: list[dict[str, str]]) -> int | None:
    """This refund's own amount: `last_transaction.amount` when the last transaction is
    the refund (its status says so, or it names none); else None (the cumulative
    `canceled_amount` still counts)."""
    last = _object(data, "last_transaction", "data", warnings)
    amount = fields.opt_int(last, "amount", where="data.last_transaction")
    status = last.get("status")
    if (
        amount is None
        or status is None
        or (isinstance(status, str) and status in _REFUND_TRANSACTIONS)
    ):
        return amount
    detail = f"data.last_transaction.status {str(status)[:32]!r} is not a refund: amount unused"
    warnings.append(fields.warning(RULE_FIELD, detail))
    return None


def _object(
    data: Mapping[str, Any], key: str, where: str, warnings: list[dict[str, str]]
) -> Mapping[str, Any]:
    """An ancillary sub-object; absent or null is {}, another type {} with a warning."""
    value = data.get(key)
    if value is None or isinstance(value, dict):
        return value or {}
    detail = f"{where}.{key} is a JSON {_json_type(value)}, not an object: ignored"
    warnings.append(fields.warning(RULE_FIELD, detail))
    return {}


def _order_first(order: Mapping[str, Any], data: Mapping[str, Any], key: str) -> str | None:
    """`key` of the charge's order when the event names one, else of `data` itself."""
    return fields.opt_str(order, key, where="data.order") or fields.opt_str(data, key, where="data")


def _reference(
    order: Mapping[str, Any], data: Mapping[str, Any], warnings: list[dict[str, str]]
) -> str | None:
    """The merchant's `code` (of the order first): ancillary, so a number is read as its
    digits and another type ignored, with a warning."""
    where = "data.order" if order.get("code") is not None else "data"
    return _ancillary_str(order if where == "data.order" else data, "code", where, warnings)


def _ancillary_str(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    warnings: list[dict[str, str]],
    *,
    digits: bool = True,
) -> str | None:
    """A string that decides no money; a number is read as its digits when `digits`
    (a code), anything else is ignored, with a warning either way."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value or None
    if digits and isinstance(value, int) and not isinstance(value, bool):
        detail = f"{where}.{key} is a number, not a string: read as its digits"
        warnings.append(fields.warning(RULE_FIELD, detail))
        return str(value)
    detail = f"{where}.{key} is a JSON {_json_type(value)}, not a string: ignored"
    warnings.append(fields.warning(RULE_FIELD, detail))
    return None


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _time(value: object, field: str, warnings: list[dict[str, str]]) -> datetime | None:
    """An ancillary timestamp. Pagar.me writes UTC, sometimes without the offset (its own
    docs' example: `2017-06-29T20:23:47`): read as UTC, with a warning; unreadable, None
    with a warning. Never a reason to dead-letter."""
    seen: list[dict[str, str]] = []
    moment = fields.lenient_time(value, field=field, rule=RULE_NAIVE_TIME, warnings=seen, naive=UTC)
    if moment is None:
        seen = [fields.warning(RULE_BAD_TIME, w["detail"]) for w in seen]
    warnings.extend(seen)
    return moment


def _amount_mismatch(event_type: str, data: Mapping[str, Any]) -> str | None:
    if event_type not in AMOUNT_MISMATCH:
        return None
    paid = fields.opt_int(data, "paid_amount", where="data")
    due = fields.opt_int(data, "amount", where="data")
    return f"{event_type.removeprefix('charge.')}: paid {paid} of {due}"


def _legacy_event(body: Mapping[str, Any]) -> ParsedEvent:
    """A v4 postback: `id`, `current_status` (strict), and the transaction when it comes
    along (`transaction[amount]`... form fields, or a `transaction` object in JSON)."""
    transaction_id = body.get("id")
    if isinstance(transaction_id, bool) or not isinstance(transaction_id, int | str):
        raise ParseError("legacy postback: id must be a number or a string")
    if transaction_id == "":
        raise ParseError("legacy postback: id must be a number or a string")
    status = fields.req_str(body, "current_status")
    event = body.get("event")
    transaction = body.get("transaction")
    nested = transaction if isinstance(transaction, dict) else {}
    warnings: list[dict[str, str]] = []
    kind = LEGACY_KINDS.get(status, Kind.OTHER)
    amount = _legacy_int(body, nested, "amount")
    refunded = _legacy_int(body, nested, "refunded_amount")
    updated = nested.get("date_updated", body.get("transaction[date_updated]"))
    legacy = ParsedEvent(
        dedup_key=f"{transaction_id}:{status}",
        kind=kind,
        type=event if isinstance(event, str) and event else "transaction_status_changed",
        object_id=str(transaction_id),
        amount=amount if kind is not Kind.PAYMENT_REFUNDED else None,
        occurred_at=_time(updated, "transaction.date_updated", warnings),
        refunded_total=refunded if kind is Kind.PAYMENT_REFUNDED and refunded else None,
        data={
            "current_status": status,
            "old_status": str(body.get("old_status", "")),
            **({"payment_amount": amount} if kind is Kind.PAYMENT_REFUNDED and amount else {}),
        },
    )
    return fields.with_warnings(legacy, warnings)


def _legacy_int(body: Mapping[str, Any], nested: Mapping[str, Any], key: str) -> int | None:
    """A v4 amount in centavos: an integer in JSON, digits in a form field."""
    if key in nested:
        return fields.opt_int(nested, key, where="transaction")
    value = body.get(f"transaction[{key}]")
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise ParseError(f"transaction[{key}] must be an integer amount in centavos")


def _refunded(resource: Mapping[str, Any], warnings: list[dict[str, str]]) -> int:
    """Money given back: `canceled_amount` of the charges that were paid (an order's
    `charges`, or the charge itself): `paid_amount`, `paid_at` or a refund as the last
    transaction. Canceling an unpaid charge refunds nothing."""
    charges = resource.get("charges")
    if isinstance(charges, dict):
        detail = "charges is one JSON object, not a list: read as a list of one"
        warnings.append(fields.warning(RULE_LIST, detail))
        charges = [charges]
    items = [c for c in charges if isinstance(c, dict)] if isinstance(charges, list) else [resource]
    total = 0
    for charge in items:
        canceled = fields.opt_int(charge, "canceled_amount") or 0
        paid = fields.opt_int(charge, "paid_amount") or 0
        last = charge.get("last_transaction")
        status = last.get("status") if isinstance(last, dict) else None
        refund = isinstance(status, str) and status in _MONEY_BACK_TRANSACTIONS
        # A refunded card charge may come without paid_amount or paid_at (only status
        # canceled, canceled_amount, canceled_at): its refund transaction says it.
        if canceled and (paid or charge.get("paid_at") or refund):
            total += canceled
    return total
