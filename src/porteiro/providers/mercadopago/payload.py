"""Mercado Pago's resources, read the way its documentation describes them (pure: no I/O).

`GET /v1/payments/{id}` (Checkout API / Pro / Bricks) and `GET /v1/orders/{id}` (Orders
API) answers become one canonical event each. The money-deciding fields are read
strictly: the status (with its `status_detail` where the detail changes what happened,
e.g. a `charged_back` the seller won or lost), the amount (a decimal in major units,
scaled exactly by the currency's ISO 4217 exponent; a JSON number or a decimal string,
as the Orders API sends it) and the cumulative refunded amount. Timestamps are ancillary:
one that deviates is read past with a warning (`mercadopago.timestamp`), and a status or
`status_detail` Porteiro does not know is kept as a warning (`mercadopago.status_detail`)
rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from porteiro.errors import NonRetryable
from porteiro.model import Kind, ParsedEvent
from porteiro.providers import fields

TIME_RULE = "mercadopago.timestamp"
DETAIL_RULE = "mercadopago.status_detail"

# https://www.mercadopago.com.br/developers/en/docs/checkout-api/response-handling/query-results
# (the status / status_detail table). `canceled` is how the Uruguayan edition of the same
# table spells `cancelled`: both are read.
STATUS_KINDS: Mapping[str, Kind] = {
    "pending": Kind.PAYMENT_CREATED,
    "in_process": Kind.PAYMENT_CREATED,
    "authorized": Kind.PAYMENT_AUTHORIZED,
    "approved": Kind.PAYMENT_PAID,
    "rejected": Kind.PAYMENT_FAILED,
    "cancelled": Kind.PAYMENT_CANCELED,
    "canceled": Kind.PAYMENT_CANCELED,
    "refunded": Kind.PAYMENT_REFUNDED,
    "charged_back": Kind.DISPUTE_LOST,
    "in_mediation": Kind.DISPUTE_OPENED,
}
# `charged_back` by `status_detail`: "settled: the money was retained after a chargeback
# process" (the seller lost it), "reimbursed: the money was reimbursed after a chargeback
# process" (the seller won it back), "in_process: the payment is in process due to the
# payer disowning it" (still open).
CHARGEBACK_KINDS: Mapping[str, Kind] = {
    "settled": Kind.DISPUTE_LOST,
    "reimbursed": Kind.DISPUTE_WON,
    "in_process": Kind.DISPUTE_OPENED,
}
# https://www.mercadopago.com.br/developers/en/docs/checkout-api-orders/payment-management/status/order-status
ORDER_KINDS: Mapping[str, Kind] = {
    "created": Kind.PAYMENT_CREATED,
    "processing": Kind.PAYMENT_CREATED,
    "at_terminal": Kind.PAYMENT_CREATED,
    "action_required": Kind.PAYMENT_CREATED,
    "processed": Kind.PAYMENT_PAID,
    "failed": Kind.PAYMENT_FAILED,
    "canceled": Kind.PAYMENT_CANCELED,
    "cancelled": Kind.PAYMENT_CANCELED,
    "expired": Kind.PAYMENT_EXPIRED,
    "refunded": Kind.PAYMENT_REFUNDED,
    "charged_back": Kind.DISPUTE_LOST,
}


def payment_kind(status: str, detail: str | None, amount: int | None, refunded: int) -> Kind:
    """The canonical kind of a payment in this `status` / `status_detail`."""
    if status == "approved" and (
        detail == "partially_refunded" or (amount is not None and 0 < refunded < amount)
    ):
        return Kind.PAYMENT_PARTIALLY_REFUNDED
    if status in ("cancelled", "canceled") and detail == "expired":
        return Kind.PAYMENT_EXPIRED
    if status == "charged_back":
        # An undocumented detail: the money is presumed gone (what charged_back means).
        return CHARGEBACK_KINDS.get(detail or "", Kind.DISPUTE_LOST)
    return STATUS_KINDS.get(status, Kind.OTHER)


def order_kind(status: str, detail: str | None, amount: int | None, refunded: int) -> Kind:
    """The canonical kind of an Orders API order in this `status` / `status_detail`."""
    if status == "action_required" and detail == "waiting_capture":
        return Kind.PAYMENT_AUTHORIZED
    if status == "processed" and detail == "refunded":
        return Kind.PAYMENT_REFUNDED  # Checkout Pro orders stay `processed` when refunded
    if status == "processed" and (
        detail == "partially_refunded" or (amount is not None and 0 < refunded < amount)
    ):
        return Kind.PAYMENT_PARTIALLY_REFUNDED
    return ORDER_KINDS.get(status, Kind.OTHER)


def to_minor(value: object, exponent: int, *, field: str) -> int:
    """A decimal amount in major units (JSON number or decimal string) as an exact integer
    of minor units."""
    # Not pix.payload.minor_units: JSON numbers, any exponent, and NonRetryable (an API read).
    if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
        raise NonRetryable(f"{field} is not a number")
    try:
        minor = Decimal(value.strip() if isinstance(value, str) else value).scaleb(exponent)
    except (ArithmeticError, ValueError):  # decimal's InvalidOperation, Overflow...
        raise NonRetryable(f"{field} is not a number") from None
    if not minor.is_finite() or minor < 0 or minor != minor.to_integral_value():
        raise NonRetryable(f"{field} {value} has more decimals than its currency allows")
    return int(minor)


def payment_event(
    resource: Mapping[str, Any], object_id: str, dedup_key: str, exponents: Mapping[str, int]
) -> ParsedEvent:
    """The canonical event for a `GET /v1/payments/{id}` answer."""
    warnings: list[dict[str, str]] = []
    status, detail = str(resource["status"]), opt_text(resource, "status_detail")
    currency, exponent, amount = _priced(resource, "currency_id", "transaction_amount", exponents)
    raw_refunded = resource.get("transaction_amount_refunded") or 0
    refunded = to_minor(raw_refunded, exponent, field="transaction_amount_refunded")
    kind = payment_kind(status, detail, amount, refunded)
    if kind is Kind.OTHER:
        warnings.append(fields.warning(DETAIL_RULE, f"unknown payment status {status[:40]!r}"))
    elif status == "charged_back" and (detail or "") not in CHARGEBACK_KINDS:
        seen = (detail or "")[:40]
        warnings.append(
            fields.warning(DETAIL_RULE, f"charged_back with status_detail {seen!r}: read as lost")
        )
    occurred = _occurred(
        resource,
        ("date_approved",) if kind is Kind.PAYMENT_PAID else (),
        ("date_last_updated", "date_created"),
        warnings,
    )
    details = {key: opt_text(resource, key) for key in ("payment_method_id", "payment_type_id")}
    return _snapshot(
        Snapshot(kind, f"payment.{status}", status, detail, amount, refunded, currency, occurred),
        resource,
        object_id,
        dedup_key,
        {key: value for key, value in details.items() if value},
        warnings,
    )


def _priced(
    resource: Mapping[str, Any], currency_key: str, amount_key: str, exponents: Mapping[str, int]
) -> tuple[str | None, int, int | None]:
    """A status read's currency (upper case), that currency's exponent (2 unless
    configured) and its amount in minor units (None when absent)."""
    currency = (opt_text(resource, currency_key) or "").upper() or None
    exponent = exponents.get(currency or "", 2)
    raw_amount = resource.get(amount_key)
    amount = None if raw_amount is None else to_minor(raw_amount, exponent, field=amount_key)
    return currency, exponent, amount


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a status read (a payment, an order) says, before it becomes an event."""

    kind: Kind
    type: str
    status: str
    detail: str | None
    amount: int | None
    refunded: int
    currency: str | None
    occurred_at: datetime | None


def _snapshot(
    read: Snapshot,
    resource: Mapping[str, Any],
    object_id: str,
    dedup_key: str,
    extra: Mapping[str, Any],
    warnings: Sequence[Mapping[str, str]],
) -> ParsedEvent:
    """The canonical event of a status read: a refund kind carries the cumulative refunded
    total (several notifications re-read the same total) and no amount of its own; the
    whole amount due stays in `data["payment_amount"]` for the ledger."""
    amount, refunded_total = read.amount, None
    if read.kind in (Kind.PAYMENT_REFUNDED, Kind.PAYMENT_PARTIALLY_REFUNDED):
        whole = read.amount if read.kind is Kind.PAYMENT_REFUNDED else None
        amount, refunded_total = None, read.refunded or whole
    event = ParsedEvent(
        dedup_key=dedup_key,
        kind=read.kind,
        type=read.type,
        object_id=object_id,
        reference=opt_text(resource, "external_reference"),
        amount=amount,
        currency=read.currency,
        occurred_at=read.occurred_at,
        refunded_total=refunded_total,
        data={
            "status": read.status,
            "status_detail": read.detail or "",
            "payment_amount": read.amount,
            **extra,
        },
    )
    return fields.with_warnings(event, warnings)


def order_event(
    resource: Mapping[str, Any], object_id: str, dedup_key: str, exponents: Mapping[str, int]
) -> ParsedEvent:
    """The canonical event for a `GET /v1/orders/{id}` answer (Orders API): the order is
    the payment object; `total_amount` (a decimal string) its amount; the refunded total
    the sum of its payments' `refunded_amount`, else of its processed refunds' `amount`."""
    warnings: list[dict[str, str]] = []
    status, detail = str(resource["status"]), opt_text(resource, "status_detail")
    currency, exponent, amount = _priced(resource, "currency", "total_amount", exponents)
    refunded = 0
    transactions = resource.get("transactions")
    payments = transactions.get("payments") if isinstance(transactions, Mapping) else None
    if isinstance(payments, Mapping):  # one object where a list is documented
        warnings.append(fields.warning("mercadopago.order_payments", "payments is not a list"))
        payments = [payments]
    methods = []
    for index, item in enumerate(payments if isinstance(payments, list) else []):
        if not isinstance(item, Mapping):
            continue
        value = item.get("refunded_amount")
        if value is not None:
            refunded += to_minor(value, exponent, field=f"payments[{index}].refunded_amount")
        method = item.get("payment_method")
        if isinstance(method, Mapping) and isinstance(method.get("id"), str):
            methods.append(method["id"])
    if not refunded and isinstance(transactions, Mapping):
        refunded = _processed_refunds(transactions.get("refunds"), exponent)
    kind = order_kind(status, detail, amount, refunded)
    if kind is Kind.OTHER:
        warnings.append(fields.warning(DETAIL_RULE, f"unknown order status {status[:40]!r}"))
    occurred = _occurred(resource, (), ("last_updated_date", "created_date"), warnings)
    return _snapshot(
        Snapshot(kind, f"order.{status}", status, detail, amount, refunded, currency, occurred),
        resource,
        object_id,
        dedup_key,
        {"api": "orders", **({"payment_method_id": methods[0]} if methods else {})},
        warnings,
    )


def _processed_refunds(refunds: object, exponent: int) -> int:
    """The sum of an order's `transactions.refunds[].amount` whose status is `processed`
    (the fallback when its payments carry no `refunded_amount`)."""
    total = 0
    for index, item in enumerate(refunds if isinstance(refunds, list) else []):
        if isinstance(item, Mapping) and item.get("status") == "processed":
            value = item.get("amount")
            if value is not None:
                total += to_minor(value, exponent, field=f"refunds[{index}].amount")
    return total


def _occurred(
    resource: Mapping[str, Any],
    first: tuple[str, ...],
    then: tuple[str, ...],
    warnings: list[dict[str, str]],
) -> datetime | None:
    """The first of these timestamps present, read leniently (naive: UTC, with a warning)."""
    for key in (*first, *then):
        value = resource.get(key)
        if value is None or value == "":
            continue
        moment = fields.lenient_time(value, field=key, rule=TIME_RULE, warnings=warnings, naive=UTC)
        if moment is not None:
            return moment
    return None


def opt_text(body: Mapping[str, Any], key: str) -> str | None:
    """A text field, leniently: non-strings are None, text is trimmed (hints and API extras
    must not fail a delivery or a read)."""
    value = body.get(key)
    if not isinstance(value, str):
        return None
    return value.strip() or None
