"""Mercado Pago: `x-signature` over a manifest, thin notifications enriched from the API.

Authentication (PROVIDERS.md §3.1): `x-signature: ts=<ts>,v1=<hex>`, HMAC-SHA256 keyed with
the secret (UTF-8) over `id:{data.id};request-id:{x-request-id};ts:{ts};`, built as Mercado
Pago's own validator builds it: `data.id` from the QUERY STRING and `x-request-id` trimmed,
a pair with an absent or blank value dropped (the trailing `;` stays), `ts` verbatim.
`data.id` is lower-cased as the docs ask; the id as received (what the official SDK signs)
is accepted too. `ts` may be seconds or milliseconds (above 10^11: ms) and must be within
`tolerance_seconds` of now, both ways. Any configured secret may match (rotation).

The signature covers neither body nor state, so a notification is only a hint: `parse`
makes one THIN event (keyed by the body's notification `id`, else `{type}:{action}:{data.id}`)
filed under the signed query `data.id`; other topics are non-thin `other` (ignored).
Legacy IPN (`?topic=payment&id=123`) is keyed `ipn:{topic}:{id}:{x-request-id}`.
`enrich` reads `GET /v1/payments/{id}` and maps `status`/`status_detail`; amounts are
decimals in major units, scaled exactly by the currency's ISO 4217 exponent. Refund kinds
carry only the cumulative refunded total (every notification re-reads the same figure).
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import (
    ConfigError,
    GatewayError,
    MalformedHeader,
    MissingHeader,
    NonRetryable,
    ParseError,
    SignatureMismatch,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields, signing
from porteiro.providers.base import (
    Ack,
    Provider,
    SamplePayment,
    SignedRequest,
    register,
    snapshot_key,
)

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
STATUS_KINDS: Mapping[str, Kind] = {
    "pending": Kind.PAYMENT_CREATED,
    "in_process": Kind.PAYMENT_CREATED,
    "authorized": Kind.PAYMENT_AUTHORIZED,
    "approved": Kind.PAYMENT_PAID,
    "rejected": Kind.PAYMENT_FAILED,
    "cancelled": Kind.PAYMENT_CANCELED,
    "refunded": Kind.PAYMENT_REFUNDED,
    "charged_back": Kind.DISPUTE_LOST,
    "in_mediation": Kind.DISPUTE_OPENED,
}
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


class MercadoPagoProvider:
    """Mercado Pago webhooks (and legacy IPN) for one source."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = [secret.encode("utf-8") for secret in source.secrets]
        if not self._keys:
            raise ConfigError(f"source {source.name!r}: provider mercadopago needs secrets")
        self.exponents = {**CURRENCY_EXPONENTS, **_exponent_option(source)}

    def verify(self, request: InboundRequest, now: datetime) -> None:
        header = request.header(SIGNATURE_HEADER)
        if header is None or not header.strip():
            raise MissingHeader(f"{SIGNATURE_HEADER} header is missing")
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
        body = _load_body(request.body)
        if "type" not in body and "action" not in body and ("topic" in params or "topic" in body):
            return [_ipn_event(params, body, request.header(REQUEST_ID_HEADER))]
        return [_notification_event(body, params.get("data.id") or None)]

    def ack(self) -> Ack:
        return Ack()

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        if not event.thin:
            return event
        if event.object_id is None:
            raise NonRetryable("thin notification without a payment id")
        resource = await self._get_payment(event.object_id, http)
        fetched = payment_event(resource, event.object_id, event.dedup_key, self.exponents)
        return replace(fetched, type=event.type, data={**event.data, **fetched.data})

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """The payment's current state; None without an access token (`api_key`)."""
        if not self.source.api_key:
            return None
        resource = await self._get_payment(object_id, http)
        return self._snapshot(resource, object_id)

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
                created = _lenient_time(resource.get("date_created"))
                if created is not None and not since <= created < until:
                    continue  # the search's bounds are inclusive
                yield self._snapshot(resource, str(resource.get("id")))
            paging = body.get("paging")
            total = paging.get("total") if isinstance(paging, dict) else None
            if not results or not isinstance(total, int) or (page + 1) * SEARCH_PAGE >= total:
                return
        raise GatewayError(f"mercadopago payments search: more than {MAX_PAGES} pages")

    def _snapshot(self, resource: Mapping[str, Any], object_id: str) -> ParsedEvent:
        status, detail = resource.get("status"), resource.get("status_detail")
        event = payment_event(resource, object_id, "", self.exponents)
        # A new refund total is a new fact: several partial refunds must not collide.
        refunded = event.refunded_total if event.refunded_total else None
        key = snapshot_key(object_id, status, detail or "", *((refunded,) if refunded else ()))
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

    async def _get_payment(self, payment_id: str, http: httpx.AsyncClient) -> dict[str, Any]:
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key (access token) set")
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        what = f"mercadopago GET /v1/payments/{payment_id}"
        headers = {"authorization": f"Bearer {self.source.api_key}", "accept": "application/json"}
        try:
            url = f"{base}/v1/payments/{quote(payment_id, safe='')}"
            response = await http.get(url, headers=headers)
        except httpx.HTTPError as exc:
            raise GatewayError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404:
            raise GatewayError(f"{what}: 404, payment not found (not visible yet?)")
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


@register("mercadopago")
def _build(source: SourceConfig) -> Provider:
    return MercadoPagoProvider(source)


# -- the payment resource -----------------------------------------------------------------


def payment_kind(status: str, detail: str | None, amount: int | None, refunded: int) -> Kind:
    """The canonical kind of a payment in this `status` / `status_detail`."""
    if status == "approved" and (
        detail == "partially_refunded" or (amount is not None and 0 < refunded < amount)
    ):
        return Kind.PAYMENT_PARTIALLY_REFUNDED
    if status == "cancelled" and detail == "expired":
        return Kind.PAYMENT_EXPIRED
    return STATUS_KINDS.get(status, Kind.OTHER)


def to_minor(value: object, exponent: int, *, field: str) -> int:
    """A decimal amount in major units as an exact integer of minor units."""
    # Not pix_payload.minor_units: JSON numbers, any exponent, and NonRetryable (an API read).
    if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
        raise NonRetryable(f"{field} is not a number")
    try:
        minor = Decimal(value).scaleb(exponent)
    except (ArithmeticError, ValueError):  # decimal's InvalidOperation, Overflow...
        raise NonRetryable(f"{field} is not a number") from None
    if not minor.is_finite() or minor < 0 or minor != minor.to_integral_value():
        raise NonRetryable(f"{field} {value} has more decimals than its currency allows")
    return int(minor)


def payment_event(
    resource: Mapping[str, Any], object_id: str, dedup_key: str, exponents: Mapping[str, int]
) -> ParsedEvent:
    """The canonical event for a `GET /v1/payments/{id}` answer."""
    status = str(resource["status"])
    detail = _opt_text(resource, "status_detail")
    currency = (_opt_text(resource, "currency_id") or "").upper() or None
    exponent = exponents.get(currency or "", 2)
    raw_amount = resource.get("transaction_amount")
    amount = None if raw_amount is None else to_minor(raw_amount, exponent, field="amount")
    raw_refunded = resource.get("transaction_amount_refunded") or 0
    refunded = to_minor(raw_refunded, exponent, field="transaction_amount_refunded")
    kind = payment_kind(status, detail, amount, refunded)
    payment_amount = amount
    refunded_total: int | None = None
    if kind in (Kind.PAYMENT_REFUNDED, Kind.PAYMENT_PARTIALLY_REFUNDED):
        # Cumulative only: several notifications re-read the same total.
        refunded_total = refunded or (amount if kind is Kind.PAYMENT_REFUNDED else None)
        amount = None
    when = resource.get("date_approved") if kind is Kind.PAYMENT_PAID else None
    when = when or resource.get("date_last_updated") or resource.get("date_created")
    try:
        occurred = fields.opt_rfc3339(when, field="date_last_updated")
    except ParseError as exc:
        raise GatewayError(f"mercadopago payment {object_id}: {exc}") from None
    details = {key: _opt_text(resource, key) for key in ("payment_method_id", "payment_type_id")}
    return ParsedEvent(
        dedup_key=dedup_key,
        kind=kind,
        type=f"payment.{status}",
        object_id=object_id,
        reference=_opt_text(resource, "external_reference"),
        amount=amount,
        currency=currency,
        occurred_at=occurred,
        refunded_total=refunded_total,
        data={
            "status": status,
            "status_detail": detail or "",
            "payment_amount": payment_amount,
            **{key: value for key, value in details.items() if value},
        },
    )


# -- notifications --------------------------------------------------------------------------


def _notification_event(body: Mapping[str, Any], signed_id: str | None) -> ParsedEvent:
    topic = _opt_text(body, "type")
    action = _opt_text(body, "action")
    if topic is None and action is None:
        raise ParseError("notification has neither type nor action")
    topic = topic or (action or "").partition(".")[0]
    data = body.get("data")
    body_id = _id_text(data.get("id")) if isinstance(data, dict) else None
    object_id = signed_id or body_id
    thin = topic == "payment"
    if thin and object_id is None:
        raise ParseError("payment notification without data.id")
    notice = _id_text(body.get("id"))
    details: dict[str, Any] = {
        "topic": topic,
        "action": action or "",
        "live_mode": body.get("live_mode"),
    }
    if body_id is not None and signed_id is not None and body_id != signed_id:
        details["body_data_id"] = body_id
        details["note"] = "body data.id differs from the signed query data.id; the query wins"
    return ParsedEvent(
        dedup_key=notice or f"{topic}:{action or ''}:{object_id or ''}",
        kind=Kind.OTHER,  # placeholder: the state comes from enrich
        type=action or topic,
        object_id=object_id,
        occurred_at=_lenient_time(body.get("date_created")),
        thin=thin,
        data={k: v for k, v in details.items() if v is not None},
    )


def _ipn_event(
    params: Mapping[str, str], body: Mapping[str, Any], request_id: str | None
) -> ParsedEvent:
    topic = params.get("topic") or _opt_text(body, "topic") or ""
    resource = _id_text(body.get("resource"))
    object_id = params.get("id") or (resource.rstrip("/").rpartition("/")[2] if resource else "")
    if not object_id:
        raise ParseError("IPN notification without an id")
    rid = (request_id or "").strip()
    return ParsedEvent(
        # No notification id: the request id keeps a later status change from being
        # swallowed as a duplicate; a re-sent one only re-reads the same state.
        dedup_key=f"ipn:{topic}:{object_id}" + (f":{rid}" if rid else ""),
        kind=Kind.OTHER,
        type=f"ipn.{topic}",
        object_id=object_id,
        thin=topic == "payment",
        data={"topic": topic, "format": "ipn"},
    )


def _load_body(raw: bytes) -> dict[str, Any]:
    return fields.load_object(raw) if raw.strip() else {}  # IPN may come with no body


def _id_text(value: object) -> str | None:
    """An id given as a JSON string or integer, as text."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return str(value).strip() or None


def _opt_text(body: Mapping[str, Any], key: str) -> str | None:
    # Lenient, unlike fields.opt_str (non-strings are None, text trimmed): hints and API
    # extras must not fail a delivery or a read.
    value = body.get(key)
    if not isinstance(value, str):
        return None
    return value.strip() or None


def _lenient_time(value: object) -> datetime | None:
    # Only informative on a thin event (enrich replaces it): never fail the delivery on it.
    try:
        return fields.parse_rfc3339(value, field="date_created")
    except ParseError:
        return None


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
