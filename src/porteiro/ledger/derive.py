"""What a payment is, derived from its facts in order: state, amounts, reference, anomalies."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from porteiro.ledger.facts import (
    _CAPTURE_FAILED,
    _DISPUTE_LOST,
    _DISPUTE_OPENED,
    _DISPUTES,
    _FAILED,
    _MONEY,
    _PAID,
    _PREFERENCE,
    _PREFERRED,
    _PROGRESS,
    _REFUND_REVERSED,
    _REFUNDED,
    _REFUNDS,
    _UNDONE_BY_MONEY,
    _Fact,
)
from porteiro.model import PaymentState

_T = TypeVar("_T")


class _View(NamedTuple):
    """Everything the ledger derives from a set of facts."""

    state: PaymentState
    amount: int | None
    currency: str | None
    refunded_amount: int
    reference: str | None
    last_event_at: datetime | None
    anomalies: tuple[str, ...]


def _derive(ordered: Sequence[_Fact]) -> _View:
    """The view of a set of facts, given in order. Timed facts sort after untimed ones,
    oldest first, so the last fact holds the latest time if any has one."""
    amount, currency, reference = _preferred(ordered)
    if amount is None:
        amount = max(
            (f.payment_amount for f in ordered if f.payment_amount is not None), default=None
        )
    standing = _standing(ordered)
    total, full = _refunds(standing, amount)
    refunded = max(total, amount) if full and amount is not None else total
    return _View(
        state=_state(standing, refunded, full),
        amount=amount,
        currency=currency,
        refunded_amount=refunded,
        reference=reference,
        last_event_at=ordered[-1].occurred_at if ordered else None,
        anomalies=_anomalies(standing, amount, total),
    )


def _standing(ordered: Sequence[_Fact]) -> Sequence[_Fact]:
    """The facts that still stand, in order: without the refunds a `refund_reversed` fact
    takes back (by settlement id; a reversal of part of a refund leaves the rest) and the
    paid facts that sort before the latest `capture_failed` fact. A function of the set
    alone, as everything derived from it."""
    reversed_: dict[str, int | None] = {}  # settlement -> amount taken back (None: all)
    failed_capture: tuple[Any, ...] | None = None
    for f in ordered:
        if f.kind is _REFUND_REVERSED and f.settlement is not None:
            known = reversed_.get(f.settlement, 0)
            whole = known is None or f.amount is None
            reversed_[f.settlement] = None if whole else max(known or 0, f.amount or 0)
        elif f.kind is _CAPTURE_FAILED:
            failed_capture = f.order  # facts are in order: the last one is the latest
    if not reversed_ and failed_capture is None:
        return ordered
    kept: list[_Fact] = []
    for f in ordered:
        if f.kind in _REFUNDS and f.settlement is not None and f.settlement in reversed_:
            back = reversed_[f.settlement]
            if back is None or f.amount is None or back >= f.amount:
                continue
            f = f._replace(amount=f.amount - back)
        elif f.kind is _PAID and failed_capture is not None and f.order < failed_capture:
            continue
        kept.append(f)
    return kept


def _preferred(ordered: Sequence[_Fact]) -> tuple[int | None, str | None, str | None]:
    """Amount, currency and reference, each from the latest fact that has it among the
    paid facts, else the authorized, else the created, else (but the amount) the rest."""
    # Per group of _PREFERRED, then the rest: a later fact overwrites an earlier one.
    amounts: list[int | None] = [None] * len(_PREFERRED)
    currencies: list[str | None] = [None] * (len(_PREFERRED) + 1)
    references: list[str | None] = [None] * (len(_PREFERRED) + 1)
    for f in ordered:
        group = _PREFERENCE.get(f.kind, len(_PREFERRED))
        if f.amount is not None and group < len(_PREFERRED):
            amounts[group] = f.amount
        if f.currency is not None:
            currencies[group] = f.currency
        if f.reference is not None:
            references[group] = f.reference
    return _first(amounts), _first(currencies), _first(references)


def _first(values: list[_T | None]) -> _T | None:
    for value in values:
        if value is not None:
            return value
    return None


def _refunds(ordered: Sequence[_Fact], amount: int | None) -> tuple[int, bool]:
    """Total refunded (the larger of the gateway's cumulative reports and the sum of the
    refunds seen) and whether the payment is fully refunded."""
    refunds = [f for f in ordered if f.kind in _REFUNDS]
    reported = max((f.refunded_total or 0 for f in ordered), default=0)
    total = max(reported, sum(f.amount or 0 for f in refunds))
    if not refunds and total == 0:
        return 0, False
    full_kind = [f for f in refunds if f.kind is _REFUNDED]
    if amount is None:
        return total, bool(full_kind)
    # A "refunded" fact that names no amount at all means the whole payment.
    bare = any(f.amount is None and f.refunded_total is None for f in full_kind)
    return total, bare or total >= amount


def _state(ordered: Sequence[_Fact], refunded: int, full: bool) -> PaymentState:
    dispute = next((f.kind for f in reversed(ordered) if f.kind in _DISPUTES), None)
    if dispute is _DISPUTE_LOST:
        return PaymentState.CHARGED_BACK
    if dispute is _DISPUTE_OPENED:
        return PaymentState.DISPUTED
    if full:
        return PaymentState.REFUNDED
    if refunded > 0 or any(f.kind in _REFUNDS for f in ordered):
        return PaymentState.PARTIALLY_REFUNDED
    if any(f.kind in _MONEY for f in ordered):
        return PaymentState.PAID
    progress = next((f.kind for f in reversed(ordered) if f.kind in _PROGRESS), None)
    return PaymentState.PENDING if progress is None else _PROGRESS[progress]


def _anomalies(ordered: Sequence[_Fact], amount: int | None, refunded: int) -> tuple[str, ...]:
    """Contradictions in the set, listed in content order (never arrival order)."""
    found: list[str] = []
    # Several "paid" events for one object are normal (charge.paid + order.paid); only
    # distinct money movements (e.g. two Pix endToEndIds for one cob) mean paid twice.
    settlements = {f.settlement for f in ordered if f.kind is _PAID and f.settlement}
    found += ["paid twice"] * max(len(settlements) - 1, 0)
    money = [f.occurred_at for f in ordered if f.kind in _MONEY]
    if money:
        # In time order: the first time is the earliest.
        paid_at = next((t for t in money if t is not None), None)
        for f in ordered:
            late_failure = f.kind is _FAILED and _after(f.occurred_at, paid_at)
            if f.kind in _UNDONE_BY_MONEY or late_failure:
                found.append(f"{f.kind.value} but paid")
    if amount is not None and refunded > amount:
        found.append("refunded more than paid")
    # Contradictions the gateway itself reported (e.g. underpaid), one per fact.
    found += [f.anomaly for f in ordered if f.anomaly]
    return tuple(found)


def _after(when: datetime | None, reference: datetime | None) -> bool:
    return when is not None and reference is not None and when > reference


# The view of no facts at all, for a payment seen for the first time.
_NOTHING = _derive(())
