"""Stripe's event types as canonical kinds: the fixed table, and the events whose kind
their object decides (a Checkout Session's `payment_status`, a dispute's `status`, a
charge's refunded share, a refund that succeeded), and a PaymentIntent's statuses.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from porteiro.errors import ParseError
from porteiro.model import Kind
from porteiro.providers import fields

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
# A PaymentIntent's `status`, for the status reads (GET /v1/payment_intents/{id}, api.py).
STATUS_KINDS: Mapping[str, Kind] = {
    "succeeded": Kind.PAYMENT_PAID,
    "requires_capture": Kind.PAYMENT_AUTHORIZED,
    "canceled": Kind.PAYMENT_CANCELED,
    "processing": Kind.PAYMENT_CREATED,
    "requires_payment_method": Kind.PAYMENT_CREATED,
    "requires_confirmation": Kind.PAYMENT_CREATED,
    "requires_action": Kind.PAYMENT_CREATED,
}
# Warning rules (metric labels of porteiro_event_warnings_total): see webhook.py.
RULE_DISPUTE_STATUS = "stripe.dispute_status"
RULE_CHECKOUT_STATUS = "stripe.checkout_payment_status"


def event_kind(
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
