"""Adyen's eventCodes as canonical kinds: what each code means when it succeeded, the
codes that change no payment here, the ones that must name their payment, and the
warning rules the item readers use. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from porteiro.model import Kind

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
REFUND_KINDS = frozenset(
    {Kind.PAYMENT_PARTIALLY_REFUNDED, Kind.PAYMENT_REFUNDED, Kind.PAYMENT_REFUND_REVERSED}
)
# Codes whose `amount` is the whole payment's (EXPIRE: "the amount originally authorised"):
# kept as `payment_amount`, so a payment refused or canceled before it was paid keeps it.
PAYMENT_AMOUNT_CODES = frozenset(
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
