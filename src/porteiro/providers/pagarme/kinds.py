"""Pagar.me's event names and statuses as canonical kinds: the v5 and legacy v4 tables,
the status words that decide where a name moves no money, and the warning rules the
webhook and the status reads use. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from porteiro.model import Kind
from porteiro.providers import fields

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
# v5 events by their `type`.
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
NAMED_KINDS = frozenset(
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
STATUS_ENTITIES = ("order.", "charge.")
# Transaction statuses of a refund (card `refunded`/`voided` and their partial forms,
# Pix `refunded`): only then is `last_transaction.amount` the amount given back.
REFUND_TRANSACTIONS = frozenset(
    {"refunded", "partial_refunded", "voided", "partial_void", "partial_voided"}
)
# Of those, the ones that prove money had been paid (a void of a boleto or of an
# uncaptured card gives nothing back).
MONEY_BACK_TRANSACTIONS = frozenset({"refunded", "partial_refunded"})


def v5_kind(
    event_type: str, named: Kind, status: str | None, warnings: list[dict[str, str]]
) -> Kind:
    """The event's kind: its name's, unless the name moves no money and the object's own
    status is further along (then the status's, with a warning). A status behind a
    money-moving name (charge.paid still `pending`) leaves the name's kind, warned."""
    if not event_type.startswith(STATUS_ENTITIES) or status is None:
        return named
    by_status = STATUS_KINDS.get(status)
    if by_status is None:
        return named
    if named in NAMED_KINDS:
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
