"""Mercado Pago's webhook dialect: the `x-signature` check, legacy IPN recognised as an
unverified hint (under a budget), and the notifications mapped to thin events.

Pure: no I/O. The scheme is described in the package docstring and
docs/gateways/mercadopago.md.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    MalformedHeader,
    MissingHeader,
    ParseError,
    SignatureMismatch,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields, signing
from porteiro.providers.base import Ack
from porteiro.providers.mercadopago.payload import TIME_RULE, opt_text

SIGNATURE_HEADER = "x-signature"
REQUEST_ID_HEADER = "x-request-id"
MS_THRESHOLD = 10**11  # as seconds that is the year 5138; as ms, 1973
# The topics whose notifications are enriched from the API (thin).
THIN_TOPICS = frozenset({"payment", "order"})
# Why the other topics are ignored (the event's `note`).
NOT_APPLIED: Mapping[str, str] = {
    "merchant_order": "merchant orders are not applied: each payment sends its own notification",
    "topic_merchant_order_wh": "merchant orders are not applied: each payment sends its own",
    "topic_chargebacks_wh": "chargebacks are applied from the payment's charged_back status",
    "chargebacks": "chargebacks are applied from the payment's charged_back status",
}
IPN_IGNORED: Mapping[str, str] = {
    "merchant_order": "merchant_order IPN is not applied: each payment sends its own IPN",
    "chargebacks": "chargebacks IPN is not applied: the payment's charged_back status is",
}
IPN_WINDOW_SECONDS = 60  # unverified IPN hints of one id within a minute are one event
RECENT_HINTS = 4096
_PAYMENT_ID = re.compile(r"[0-9]{1,20}")
IPN_ID_RULE = "mercadopago.ipn_id"
IPN_THROTTLED_RULE = "mercadopago.ipn_throttled"
LIVE_MODE_RULE = "mercadopago.live_mode"
DATA_ID_RULE = "mercadopago.data_id_mismatch"
_TS = re.compile(r"[0-9]{1,16}")
_HASH_BYTES = 32


@dataclass(frozen=True, slots=True)
class SignatureHeader:
    ts: str  # as sent: the manifest uses it verbatim
    seconds: int  # normalised to unix seconds
    signatures: tuple[bytes, ...]  # every v1 digest (other versions are ignored)


def parse_signature_header(value: str) -> SignatureHeader:
    """Parse `ts=<digits>,v1=<hex>`; raise MalformedHeader, never anything else."""
    pairs = signing.parse_pairs(value)
    stamps = [val for key, val in pairs if key == "ts"]
    if len(stamps) != 1 or not _TS.fullmatch(stamps[0]):
        raise MalformedHeader("x-signature needs exactly one ts=<digits>")
    digests = []
    for key, val in pairs:
        if key == "v1":
            digest = signing.decode_hex(val, what="x-signature v1")
            if len(digest) != _HASH_BYTES:
                raise MalformedHeader("x-signature v1 is not a SHA-256 hex digest")
            digests.append(digest)
    ts = int(stamps[0])
    return SignatureHeader(stamps[0], ts // 1000 if ts > MS_THRESHOLD else ts, tuple(digests))


def manifest(data_id: str | None, request_id: str | None, ts: str) -> bytes:
    """The signed text; absent parts are dropped, as Mercado Pago's validator does."""
    parts = [b"id:" + data_id.encode("utf-8")] if data_id else []
    if request_id:
        # The header's bytes as they came over the wire (a UUID in practice).
        parts.append(b"request-id:" + signing.header_bytes(request_id, what=REQUEST_ID_HEADER))
    return b";".join([*parts, b"ts:" + ts.encode("ascii")]) + b";"


def query_params(query: str) -> dict[str, str]:
    """Query parameters (percent-decoded as UTF-8, trimmed); a repeated name is refused."""
    params: dict[str, str] = {}
    try:
        text = signing.header_bytes(query, what="query").decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeError:
        raise MalformedHeader("query string is not UTF-8") from None
    for name, value in pairs:
        if params.setdefault(name, value.strip()) != value.strip():
            raise MalformedHeader(f"query parameter {name[:32]!r} is repeated")
    return params


class HintBudget:
    """A token bucket over unverified IPN hints, with a memory of the hints it let in.

    A hint already let in (the same `ipn:{topic}:{id}:{window}` key) passes again at no
    cost: the store de-duplicates it, so a flood of one id is one event and one API read.
    A new key costs a token; tokens refill at `per_minute` up to `burst`. Time is the
    deliveries' own `received_at` (never read from a clock here), so a replay of old
    deliveries refills nothing.
    """

    def __init__(self, per_minute: float, burst: int, memory: int = RECENT_HINTS) -> None:
        self._rate = per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last: datetime | None = None
        self._memory = memory
        self._recent: OrderedDict[str, None] = OrderedDict()

    def admit(self, key: str, at: datetime) -> bool:
        if key in self._recent:
            self._recent.move_to_end(key)
            return True
        if self._last is not None:
            elapsed = (at - self._last).total_seconds()
            if elapsed > 0:
                self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
        if self._last is None or at > self._last:
            self._last = at
        if self._tokens < 1:
            return False
        self._tokens -= 1
        self._recent[key] = None
        while len(self._recent) > self._memory:
            self._recent.popitem(last=False)
        return True


class MercadoPagoWebhook:
    """Verify and parse deliveries: pure, on the raw request only."""

    source: SourceConfig
    accept_ipn: bool
    hints: HintBudget
    _keys: list[bytes]

    def verify(self, request: InboundRequest, now: datetime) -> None:
        header = request.header(SIGNATURE_HEADER)
        # Legacy IPN cannot be authenticated ("despite receiving the x-Signature header,
        # they do not allow validation through the secret key"): it is taken as a hint
        # only, never trusted (parse makes it thin; enrich re-reads the payment).
        # Only looked at when the signature is absent or fails (not on the hot path).
        if header is None or not header.strip():
            if self.accept_ipn and ipn_only(request):
                return
            raise MissingHeader(f"{SIGNATURE_HEADER} header is missing")
        try:
            self._verify_signature(header, request, now)
        except AuthenticationError:
            if self.accept_ipn and ipn_only(request):
                return
            raise

    def _verify_signature(self, header: str, request: InboundRequest, now: datetime) -> None:
        parsed = parse_signature_header(header)
        signing.check_timestamp(parsed.seconds, now, self.source.tolerance_seconds)
        if not parsed.signatures:
            raise SignatureMismatch("x-signature carries no v1 signature")
        data_id = query_params(request.query).get("data.id") or None
        request_id = (request.header(REQUEST_ID_HEADER) or "").strip() or None
        # Lower-cased per the docs; as received, as the official SDK signs it.
        ids: list[str | None] = (
            list(dict.fromkeys([data_id.lower(), data_id])) if data_id else [None]
        )
        messages = [manifest(one, request_id, parsed.ts) for one in ids]
        expected = [signing.hmac_digest(key, text) for key in self._keys for text in messages]
        if not signing.any_match(expected, parsed.signatures):
            raise SignatureMismatch("no signature matches any configured secret")

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        try:
            params = query_params(request.query)
        except MalformedHeader as exc:
            raise ParseError(str(exc)) from None
        ipn_body = _ipn_body(params, request.body)
        if ipn_body is not None:
            return [self._ipn_event(params, ipn_body, request.received_at)]
        body = _load_body(request.body)
        return [_notification_event(body, params.get("data.id") or None)]

    def _ipn_event(
        self, params: Mapping[str, str], body: Mapping[str, Any], received_at: datetime
    ) -> ParsedEvent:
        topic = (params.get("topic") or opt_text(body, "topic") or "").strip()
        resource = _id_text(body.get("resource"))
        object_id = params.get("id") or (
            resource.rstrip("/").rpartition("/")[2] if resource else ""
        )
        if not object_id:
            raise ParseError("IPN notification without an id")
        window = int(received_at.timestamp()) // IPN_WINDOW_SECONDS
        key = f"ipn:{topic}:{object_id}:{window}"
        data: dict[str, Any] = {"topic": topic, "format": "ipn", "verified": False}
        if topic != "payment":
            note = IPN_IGNORED.get(topic, "an IPN topic Porteiro does not apply")
            return ParsedEvent(
                key, Kind.OTHER, f"ipn.{topic}", object_id, data={**data, "note": note}
            )
        if not _PAYMENT_ID.fullmatch(object_id):
            event = ParsedEvent(
                key, Kind.OTHER, "ipn.payment.invalid_id", None,
                data={**data, "note": "IPN id is not a payment id: not fetched"},
            )  # fmt: skip
            # Not echoed: the text is the sender's, and could be anything.
            detail = f"IPN id is not numeric ({len(object_id)} characters): not fetched"
            return fields.with_warnings(event, [fields.warning(IPN_ID_RULE, detail)])
        if not self.hints.admit(key, received_at):
            event = ParsedEvent(
                f"ipn-throttled:{topic}:{object_id}:{window}", Kind.OTHER,
                "ipn.payment.throttled", object_id,
                data={**data, "note": "over the unverified-hint budget: stored, not fetched"},
            )  # fmt: skip
            detail = "unverified IPN hints over ipn_hints_per_minute: not fetched"
            return fields.with_warnings(event, [fields.warning(IPN_THROTTLED_RULE, detail)])
        return ParsedEvent(
            # A flood of one id within a window is one event (one API read); a later
            # window's hint re-reads the payment's state, which is all a hint can do.
            dedup_key=key,
            kind=Kind.OTHER,  # placeholder: the state comes from enrich
            type="ipn.payment",
            object_id=object_id,
            thin=True,
            data=data,
        )

    def ack(self) -> Ack:
        return Ack()


def ipn_only(request: InboundRequest) -> bool:
    """Whether a request is recognisably a legacy IPN (`?topic=...&id=...`, or a
    `{"resource", "topic"}` body) and nothing else: no `data.id` / `type` in the query,
    no `type` / `action` in the body. Never raises."""
    try:
        params = query_params(request.query)
    except MalformedHeader:
        return False
    return _ipn_body(params, request.body) is not None


def _ipn_body(params: Mapping[str, str], raw: bytes) -> dict[str, Any] | None:
    """The body of an IPN-only request (`{}` when empty or unreadable), else None."""
    if "data.id" in params or "type" in params:
        return None
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        body = None
    if body is not None and ("type" in body or "action" in body):
        return None
    if params.get("topic") and params.get("id"):
        return body or {}  # the query is the hint; an unreadable body adds nothing
    if body and isinstance(body.get("topic"), str) and _id_text(body.get("resource")):
        return body
    return None


def _notification_event(body: Mapping[str, Any], signed_id: str | None) -> ParsedEvent:
    warnings: list[dict[str, str]] = []
    topic = opt_text(body, "type")
    action = opt_text(body, "action")
    if topic is None and action is None:
        raise ParseError("notification has neither type nor action")
    topic = topic or (action or "").partition(".")[0]
    data = body.get("data")
    body_id = _id_text(data.get("id")) if isinstance(data, dict) else None
    object_id = signed_id or body_id
    thin = topic in THIN_TOPICS
    if thin and object_id is None:
        raise ParseError(f"{topic} notification without data.id")
    notice = _id_text(body.get("id"))
    details: dict[str, Any] = {"topic": topic, "action": action or ""}
    live_mode = body.get("live_mode")
    if isinstance(live_mode, bool):
        details["live_mode"] = live_mode
    elif live_mode is not None:
        warnings.append(fields.warning(LIVE_MODE_RULE, "live_mode is not a JSON boolean: ignored"))
    if body_id is not None and signed_id is not None and body_id != signed_id:
        details["body_data_id"] = body_id
        details["note"] = "body data.id differs from the signed query data.id; the query wins"
        warnings.append(
            fields.warning(DATA_ID_RULE, "body data.id differs from the signed query data.id")
        )
    if not thin:
        details["note"] = NOT_APPLIED.get(topic, "a topic Porteiro does not apply")
    occurred = fields.lenient_time(
        body.get("date_created"), field="date_created", rule=TIME_RULE, warnings=warnings,
        naive=UTC,
    )  # fmt: skip
    event = ParsedEvent(
        dedup_key=notice or f"{topic}:{action or ''}:{object_id or ''}",
        kind=Kind.OTHER,  # placeholder: the state comes from enrich
        type=action or topic,
        object_id=object_id,
        occurred_at=occurred,
        thin=thin,
        data=details,
    )
    return fields.with_warnings(event, warnings)


def _load_body(raw: bytes) -> dict[str, Any]:
    return fields.load_object(raw) if raw.strip() else {}


def _id_text(value: object) -> str | None:
    """An id given as a JSON string or integer, as text."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return str(value).strip() or None
