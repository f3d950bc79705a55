"""Adyen's webhook dialect: the mapping of NotificationRequestItems to events.

The envelope is read in notification.py, HTTP Basic and the items' `hmacSignature` are
checked in signature.py, the eventCodes' kinds are in kinds.py; the names they define
are importable from here too. Pure: no I/O. The scheme and the mapping are described in
the package docstring and docs/gateways/adyen.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from porteiro.config import SourceConfig
from porteiro.errors import MalformedHeader, ParseError
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields
from porteiro.providers.adyen.kinds import (
    IGNORED_CODES,
    KNOWN_CODES,
    NEEDS_ORIGINAL,
    PAYMENT_AMOUNT_CODES,
    REFUND_KINDS,
    RULES,
    SUCCESS_KINDS,
    event_kind,
)
from porteiro.providers.adyen.notification import Unreadable, load_notification
from porteiro.providers.adyen.signature import (
    AUTHORIZATION_HEADER,
    SIGNED_FIELDS,
    decode_key,
    signing_string,
    verify_basic,
    verify_item,
)
from porteiro.providers.base import Ack

__all__ = [
    "ACCEPTED",
    "AUTHORIZATION_HEADER",
    "IGNORED_CODES",
    "KNOWN_CODES",
    "NEEDS_ORIGINAL",
    "RULES",
    "SIGNED_FIELDS",
    "SUCCESS_KINDS",
    "AdyenWebhook",
    "decode_key",
    "event_kind",
    "signing_string",
]

ACCEPTED = b"[accepted]"


class AdyenWebhook:
    """Verify and parse deliveries: pure, on the raw request only."""

    source: SourceConfig
    manual_capture: bool
    _keys: list[bytes]
    _basic: list[bytes]

    def verify(self, request: InboundRequest, now: datetime) -> None:
        if self._basic:
            verify_basic(request.header(AUTHORIZATION_HEADER), self._basic)
        try:
            _, items = load_notification(request.body)
        except Unreadable as exc:
            raise MalformedHeader(f"unauthenticatable body: {exc}") from None
        for index, item in enumerate(items):
            verify_item(index, item, self._keys)

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        try:
            document, items = load_notification(request.body)
        except Unreadable as exc:
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
        value, currency = _amount(item.get("amount"), where, refund=kind in REFUND_KINDS)
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
            "settlement_id": psp if kind in REFUND_KINDS else None,
        }
        data: dict[str, Any] = {k: v for k, v in details.items() if isinstance(v, str) and v}
        if value is not None and code in PAYMENT_AMOUNT_CODES:
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
