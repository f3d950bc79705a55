"""Mercado Pago: `x-signature` over a manifest, thin notifications enriched from the API.

Authentication (Mercado Pago's webhook docs, "validate the origin"):
`x-signature: ts=<ts>,v1=<hex>`, HMAC-SHA256 keyed with the secret (UTF-8) over
`id:{data.id};request-id:{x-request-id};ts:{ts};`, built as Mercado Pago's own validator
builds it: `data.id` from the QUERY STRING and `x-request-id` trimmed,
a pair with an absent or blank value dropped (the trailing `;` stays), `ts` verbatim.
`data.id` is lower-cased as the docs ask; the id as received (what the official SDK signs)
is accepted too. `ts` may be seconds or milliseconds (above 10^11: ms) and must be within
`tolerance_seconds` of now, both ways. Any configured secret may match (rotation).

The signature covers neither body nor state, so a notification is only a hint: `parse`
makes one THIN event (keyed by the body's notification `id`, else `{type}:{action}:{data.id}`)
filed under the signed query `data.id`, for the `payment` and `order` (Orders API) topics;
other topics are non-thin `other` (ignored, with the reason in the event's `note`).

Legacy IPN (`?topic=payment&id=123`, or a `{"resource", "topic"}` body) cannot be
authenticated at all (Mercado Pago: its x-signature does not validate with the secret), so
`verify` lets a request that is recognisably IPN-only through and `parse` makes it an
UNVERIFIED hint: thin, carrying nothing the ledger uses, keyed `ipn:{topic}:{id}:{minute}`
(a flood of one id is one event), admitted through a per-source token bucket (beyond it the
hint is stored, ignored, and not fetched), and a 404 on its id is dead at once (no retries,
no payment). `merchant_order` and `chargebacks` IPN are ignored: each payment sends its own.

`enrich` reads `GET /v1/payments/{id}` or `GET /v1/orders/{id}` (mercadopago_payload maps
them).
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    ConfigError,
    GatewayError,
    MalformedHeader,
    MissingHeader,
    NonRetryable,
    ParseError,
    SignatureMismatch,
)
from porteiro.model import WARNINGS_KEY, InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields, signing
from porteiro.providers.base import (
    Ack,
    SamplePayment,
    SignedRequest,
    snapshot_key,
)
from porteiro.providers.mercadopago_payload import (
    CHARGEBACK_KINDS,
    ORDER_KINDS,
    STATUS_KINDS,
    TIME_RULE,
    opt_text,
    order_event,
    order_kind,
    payment_event,
    payment_kind,
    to_minor,
)

__all__ = [
    "CHARGEBACK_KINDS",
    "ORDER_KINDS",
    "STATUS_KINDS",
    "MercadoPagoProvider",
    "manifest",
    "order_event",
    "order_kind",
    "parse_signature_header",
    "payment_event",
    "payment_kind",
    "to_minor",
]

SIGNATURE_HEADER = "x-signature"
REQUEST_ID_HEADER = "x-request-id"
DEFAULT_API_BASE_URL = "https://api.mercadopago.com"
MS_THRESHOLD = 10**11  # as seconds that is the year 5138; as ms, 1973
# ISO 4217 minor-unit exponents of the currencies Mercado Pago settles in. Any other
# currency is taken as 2; the `currency_exponents` option overrides or extends this.
CURRENCY_EXPONENTS: Mapping[str, int] = {
    "ARS": 2, "BRL": 2, "CLP": 0, "COP": 2, "MXN": 2, "PEN": 2, "UYU": 2, "USD": 2,
}  # fmt: skip
SEARCH_PAGE = 100
MAX_PAGES = 10_000
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
DEFAULT_IPN_PER_MINUTE = 60.0  # new unverified hints (distinct ids) fetched per minute
DEFAULT_IPN_BURST = 60
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


class ResourceNotFound(GatewayError):
    """The API answered 404 for the notified id."""


class MercadoPagoProvider:
    """Mercado Pago webhooks (and legacy IPN, as unverified hints) for one source."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = [secret.encode("utf-8") for secret in source.secrets]
        if not self._keys:
            raise ConfigError(f"source {source.name!r}: provider mercadopago needs secrets")
        self.exponents = {**CURRENCY_EXPONENTS, **_exponent_option(source)}
        self.accept_ipn = source.options.get("accept_ipn", True)
        if not isinstance(self.accept_ipn, bool):
            raise ConfigError(f"source {source.name!r}: accept_ipn must be true or false")
        per_minute = source.option_number("ipn_hints_per_minute", DEFAULT_IPN_PER_MINUTE)
        burst = source.options.get("ipn_hint_burst", DEFAULT_IPN_BURST)
        if type(burst) is not int or burst < 1:
            raise ConfigError(f"source {source.name!r}: ipn_hint_burst must be an integer >= 1")
        self.hints = HintBudget(per_minute, burst)

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

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        if not event.thin:
            return event
        if event.object_id is None:
            raise NonRetryable("thin notification without a resource id")
        if event.data.get("topic") == "order":
            resource = await self._get("orders", event.object_id, http)
            fetched = order_event(resource, event.object_id, event.dedup_key, self.exponents)
        else:
            try:
                resource = await self._get("payments", event.object_id, http)
            except ResourceNotFound as exc:
                if event.data.get("format") == "ipn":
                    # Nothing vouches for an unverified hint's id: one read, no retries,
                    # and no payment is ever made from it.
                    raise NonRetryable(f"{exc}; an unverified IPN hint is not retried") from None
                raise
            fetched = payment_event(resource, event.object_id, event.dedup_key, self.exponents)
        warnings = [*event.warnings, *fetched.warnings]
        merged = replace(fetched, type=event.type, data={**event.data, **fetched.data})
        if warnings:
            merged = replace(merged, data={**merged.data, WARNINGS_KEY: warnings})
        return merged

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """The payment's (or Orders API order's) current state; None without an access
        token (`api_key`). Payment ids are numeric, order ids are not."""
        if not self.source.api_key:
            return None
        if object_id.isdigit():
            resource = await self._get("payments", object_id, http)
            return self._snapshot(payment_event(resource, object_id, "", self.exponents))
        resource = await self._get("orders", object_id, http)
        return self._snapshot(order_event(resource, object_id, "", self.exponents))

    async def list_window(
        self, since: datetime, until: datetime, http: httpx.AsyncClient
    ) -> AsyncIterator[ParsedEvent]:
        """One status snapshot per payment created in [since, until)
        (`GET /v1/payments/search`, `range=date_created`, oldest first)."""
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key to search payments")
        params: dict[str, str | int] = {
            "range": "date_created",
            "begin_date": since.astimezone(UTC).isoformat(timespec="milliseconds"),
            "end_date": until.astimezone(UTC).isoformat(timespec="milliseconds"),
            "criteria": "asc",
            "limit": SEARCH_PAGE,
        }
        for page in range(MAX_PAGES):
            body = await self._search({**params, "offset": page * SEARCH_PAGE}, http)
            results = body.get("results")
            if not isinstance(results, list):
                raise GatewayError("mercadopago payments search: no results list")
            for resource in results:
                if not isinstance(resource, dict) or not isinstance(resource.get("status"), str):
                    raise GatewayError("mercadopago payments search: a payment without status")
                created = fields.lenient_time(
                    resource.get("date_created"), field="date_created", rule=TIME_RULE,
                    warnings=[], naive=UTC,
                )  # fmt: skip
                if created is not None and not since <= created < until:
                    continue  # the search's bounds are inclusive
                object_id = str(resource.get("id"))
                yield self._snapshot(payment_event(resource, object_id, "", self.exponents))
            paging = body.get("paging")
            total = paging.get("total") if isinstance(paging, dict) else None
            if not results or not isinstance(total, int) or (page + 1) * SEARCH_PAGE >= total:
                return
        raise GatewayError(f"mercadopago payments search: more than {MAX_PAGES} pages")

    def _snapshot(self, event: ParsedEvent) -> ParsedEvent:
        status, detail = event.data.get("status"), event.data.get("status_detail")
        # A new refund total is a new fact: several partial refunds must not collide.
        refunded = event.refunded_total if event.refunded_total else None
        key = snapshot_key(
            event.object_id or "", status, detail or "", *((refunded,) if refunded else ())
        )
        return replace(event, dedup_key=key, data={**event.data, "origin": "reconcile"})

    async def _search(
        self, params: Mapping[str, str | int], http: httpx.AsyncClient
    ) -> Mapping[str, Any]:
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        what = "mercadopago GET /v1/payments/search"
        headers = {"authorization": f"Bearer {self.source.api_key}", "accept": "application/json"}
        try:
            response = await http.get(f"{base}/v1/payments/search", params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise GatewayError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise GatewayError(f"{what}: HTTP {response.status_code}")
        try:
            body = json.loads(response.content, parse_float=Decimal)
        except (ValueError, RecursionError) as exc:
            raise GatewayError(f"{what}: answer is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise GatewayError(f"{what}: expected a JSON object")
        return body

    async def _get(
        self, collection: str, object_id: str, http: httpx.AsyncClient
    ) -> dict[str, Any]:
        """`GET /v1/{payments|orders}/{id}`: the resource, which must carry a `status`."""
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key (access token) set")
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        what = f"mercadopago GET /v1/{collection}/{object_id}"
        headers = {"authorization": f"Bearer {self.source.api_key}", "accept": "application/json"}
        try:
            url = f"{base}/v1/{collection}/{quote(object_id, safe='')}"
            response = await http.get(url, headers=headers)
        except httpx.HTTPError as exc:
            raise GatewayError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404:
            raise ResourceNotFound(f"{what}: 404, not found (not visible yet?)")
        if response.status_code in (401, 403):
            raise GatewayError(
                f"{what}: HTTP {response.status_code}, the access token (api_key) was refused"
            )
        if response.status_code != 200:
            raise GatewayError(f"{what}: HTTP {response.status_code}")
        try:
            resource = json.loads(response.content, parse_float=Decimal)
        except (ValueError, RecursionError) as exc:
            raise GatewayError(f"{what}: answer is not JSON: {exc}") from None
        if not isinstance(resource, dict) or not isinstance(resource.get("status"), str):
            raise GatewayError(f"{what}: no status in the answer")
        return resource

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        """Headers and query exactly as Mercado Pago sends a webhook (ts in seconds)."""
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            parsed = None
        data = parsed.get("data") if isinstance(parsed, dict) else None
        data_id = _id_text(data.get("id")) if isinstance(data, dict) else None
        topic = parsed.get("type") if isinstance(parsed, dict) else None
        request_id = str(uuid.uuid4())
        ts = str(int(now.timestamp()))
        digest = signing.hmac_digest(
            self._keys[0], manifest(data_id.lower() if data_id else None, request_id, ts)
        )
        query = [("data.id", data_id)] if data_id else []
        query += [("type", topic)] if isinstance(topic, str) and topic else []
        headers = {
            "content-type": "application/json",
            SIGNATURE_HEADER: f"ts={ts},v1={digest.hex()}",
            REQUEST_ID_HEADER: request_id,
        }
        return SignedRequest(body=body, headers=headers, query=urlencode(query))

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        return sample_notifications(payment, now, rng)


# -- notifications --------------------------------------------------------------------------


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


def _exponent_option(source: SourceConfig) -> dict[str, int]:
    table = source.options.get("currency_exponents", {})
    valid = isinstance(table, dict) and all(
        isinstance(code, str) and type(exp) is int and 0 <= exp <= 4 for code, exp in table.items()
    )
    if not valid:
        raise ConfigError(f"source {source.name!r}: currency_exponents must map ISO codes to 0..4")
    return {code.upper(): exp for code, exp in table.items()}


# -- samples ----------------------------------------------------------------------------------


def sample_notifications(payment: SamplePayment, now: datetime, rng: random.Random) -> list[bytes]:
    """Webhook bodies for one payment: created, approved, then (refund) two updates.

    They carry no state; a fake or real API must hold the payment's state for them.
    """
    actions = ["payment.created", "payment.updated"]
    if payment.refund:
        actions += ["payment.updated", "payment.updated"]  # partially, then fully refunded
    user_id = rng.randrange(10**8, 10**9)
    local = timezone(timedelta(hours=-3))
    start = now.astimezone(local) - timedelta(seconds=len(actions))
    bodies = []
    for index, action in enumerate(actions):
        at = (start + timedelta(seconds=index)).isoformat(timespec="milliseconds")
        notification = {
            "id": rng.randrange(10**10, 10**11),
            "live_mode": False,
            "type": "payment",
            "date_created": at,
            "user_id": user_id,
            "api_version": "v1",
            "action": action,
            "data": {"id": payment.object_id},
        }
        bodies.append(json.dumps(notification, separators=(",", ":")).encode())
    return bodies
