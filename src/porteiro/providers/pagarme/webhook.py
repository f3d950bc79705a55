"""Pagar.me's webhook dialect: the mapping of v5 events and legacy v4 postbacks.

The RS256 and `X-Hub-Signature` checks are in signature.py, the kind tables in kinds.py,
the ancillary field readers in ancillary.py; the names they define are importable from
here too. Pure: no I/O (the JWKS is loaded beforehand, by `prepare` in api.py). The
schemes and the mapping are described in the package docstring and
docs/gateways/pagarme.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from porteiro.config import SourceConfig
from porteiro.errors import ParseError
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields
from porteiro.providers.base import Ack
from porteiro.providers.pagarme.ancillary import ancillary_str, read_time, sub_object
from porteiro.providers.pagarme.kinds import (
    AMOUNT_MISMATCH,
    LEGACY_KINDS,
    MONEY_BACK_TRANSACTIONS,
    REFUND_TRANSACTIONS,
    RULE_BAD_TIME,
    RULE_FIELD,
    RULE_LIST,
    RULE_NAIVE_TIME,
    RULE_STATUS_AHEAD,
    RULE_STATUS_BEHIND,
    RULES,
    STATUS_ENTITIES,
    STATUS_KINDS,
    V5_KINDS,
    v5_kind,
)
from porteiro.providers.pagarme.signature import (
    ASYMMETRIC_HEADER,
    HUB_HEADER,
    parse_asymmetric_header,
    parse_hub_header,
    verify_delivery,
)

if TYPE_CHECKING:  # the cache fetches keys (api.py); verify only reads it
    from porteiro.providers.jwks import JwksCache

__all__ = [
    "AMOUNT_MISMATCH",
    "ASYMMETRIC_HEADER",
    "HUB_HEADER",
    "LEGACY_KINDS",
    "RULES",
    "RULE_BAD_TIME",
    "RULE_FIELD",
    "RULE_LIST",
    "RULE_NAIVE_TIME",
    "RULE_STATUS_AHEAD",
    "RULE_STATUS_BEHIND",
    "STATUS_KINDS",
    "V5_KINDS",
    "PagarmeWebhook",
    "parse_asymmetric_header",
    "parse_hub_header",
]


class PagarmeWebhook:
    """Verify and parse deliveries: pure, against the keys `prepare` loaded."""

    source: SourceConfig
    require_asymmetric: bool
    keys: JwksCache
    _secrets: list[bytes]

    def verify(self, request: InboundRequest, now: datetime) -> None:
        verify_delivery(
            request, self.keys, self._secrets, require_asymmetric=self.require_asymmetric
        )

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
    order = sub_object(data, "order", "data", warnings) if is_charge else {}
    object_id = _order_first(order, data, "id")
    # An order's or a charge's status can decide the kind: strict there, only kept elsewhere.
    has_status = event_type.startswith(STATUS_ENTITIES)
    raw_status = data.get("status")
    status = fields.opt_str(data, "status", where="data") if has_status else None
    amount = fields.opt_int(data, "amount", where="data")
    named = V5_KINDS.get(event_type, Kind.OTHER)
    kind = v5_kind(event_type, named, status, warnings)
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
    currency = ancillary_str(data, "currency", "data", warnings, digits=False)
    event = ParsedEvent(
        dedup_key=hook_id,
        kind=kind,
        type=event_type,
        object_id=object_id,
        reference=_reference(order, data, warnings),
        amount=amount,
        currency=currency.upper() if currency else None,
        occurred_at=read_time(body.get("created_at"), "created_at", warnings),
        refunded_total=refunded_total,
        data=kept,
    )
    return fields.with_warnings(event, warnings)


def _refund_amount(data: Mapping[str, Any], warnings: list[dict[str, str]]) -> int | None:
    """This refund's own amount: `last_transaction.amount` when the last transaction is
    the refund (its status says so, or it names none); else None (the cumulative
    `canceled_amount` still counts)."""
    last = sub_object(data, "last_transaction", "data", warnings)
    amount = fields.opt_int(last, "amount", where="data.last_transaction")
    status = last.get("status")
    if (
        amount is None
        or status is None
        or (isinstance(status, str) and status in REFUND_TRANSACTIONS)
    ):
        return amount
    detail = f"data.last_transaction.status {str(status)[:32]!r} is not a refund: amount unused"
    warnings.append(fields.warning(RULE_FIELD, detail))
    return None


def _order_first(order: Mapping[str, Any], data: Mapping[str, Any], key: str) -> str | None:
    """`key` of the charge's order when the event names one, else of `data` itself."""
    return fields.opt_str(order, key, where="data.order") or fields.opt_str(data, key, where="data")


def _reference(
    order: Mapping[str, Any], data: Mapping[str, Any], warnings: list[dict[str, str]]
) -> str | None:
    """The merchant's `code` (of the order first): ancillary, so a number is read as its
    digits and another type ignored, with a warning."""
    where = "data.order" if order.get("code") is not None else "data"
    return ancillary_str(order if where == "data.order" else data, "code", where, warnings)


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
        occurred_at=read_time(updated, "transaction.date_updated", warnings),
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
        refund = isinstance(status, str) and status in MONEY_BACK_TRANSACTIONS
        # A refunded card charge may come without paid_amount or paid_at (only status
        # canceled, canceled_amount, canceled_at): its refund transaction says it.
        if canceled and (paid or charge.get("paid_at") or refund):
            total += canceled
    return total
