"""What the outgoing client asks a gateway for, independent of the gateway.

`CreateRequest` is the caller's request, validated and normalised; its `fingerprint`
(sha256 of the canonical JSON of the inputs and the operation) is what makes reusing an
idempotency key with another payload an error. `GatewayCreate` is the seam each gateway
module (stripe.py, pix.py, ...) implements: it turns a request and a key into the
gateway's own HTTP call and reads the answer; `ApiKeyCreate` holds what the gateways
called with an API key share.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import httpx
import orjson

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError, PorteiroError

# Every gateway accepts these: Adyen and Mercado Pago cap keys at 64 characters.
MAX_KEY_LENGTH = 64
_KEY_CHARS = frozenset(string.printable) - frozenset(string.whitespace)


class InvalidRequest(PorteiroError, ValueError):
    """The request cannot be sent as given (nothing was stored or sent)."""


@dataclass(frozen=True, slots=True)
class CreateRequest:
    amount: int  # minor units
    currency: str  # ISO 4217, upper case
    reference: str  # the merchant's order id
    expires_in: int | None = None  # seconds
    extra: Mapping[str, Any] = field(default_factory=dict)  # gateway fields, merged in
    # Fixed when the key is first stored (created_at + expires_in), so every attempt sends
    # the same body; not part of the fingerprint (the inputs are).
    expires_at: datetime | None = None

    def inputs(self) -> dict[str, Any]:
        return {"amount": self.amount, "currency": self.currency, "reference": self.reference,
                "expires_in": self.expires_in, "extra": dict(self.extra)}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        expires_at = None if self.expires_at is None else self.expires_at.isoformat()
        return {**self.inputs(), "expires_at": expires_at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CreateRequest:
        expires_at = data.get("expires_at")
        return new_request(
            data["amount"], data["currency"], data["reference"], data.get("expires_in"),
            data.get("extra"),
            expires_at=None if expires_at is None else datetime.fromisoformat(expires_at),
        )  # fmt: skip


def new_request(
    amount: int,
    currency: str,
    reference: str,
    expires_in: int | None = None,
    extra: Mapping[str, Any] | None = None,
    *,
    expires_at: datetime | None = None,
) -> CreateRequest:
    """A validated request; raises InvalidRequest."""
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
        raise InvalidRequest("amount must be a whole number of minor units >= 1")
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha():
        raise InvalidRequest("currency must be a 3-letter ISO 4217 code")
    if not isinstance(reference, str) or not reference.strip():
        raise InvalidRequest("reference must be a non-empty string")
    if expires_in is not None and (
        isinstance(expires_in, bool) or not isinstance(expires_in, int) or expires_in < 1
    ):
        raise InvalidRequest("expires_in must be a whole number of seconds >= 1")
    try:  # one JSON round trip: what is fingerprinted is exactly what is stored and resent
        plain = orjson.loads(orjson.dumps(dict(extra or {})))
    except TypeError as exc:
        raise InvalidRequest(f"extra must be JSON (string keys): {exc}") from None
    return CreateRequest(amount, currency.upper(), reference, expires_in, plain, expires_at)


def fingerprint(operation: str, request: CreateRequest) -> str:
    canonical = orjson.dumps({"operation": operation, **request.inputs()},
                             option=orjson.OPT_SORT_KEYS)  # fmt: skip
    return hashlib.sha256(canonical).hexdigest()


def check_key(key: str) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidRequest(f"an idempotency key has 1 to {MAX_KEY_LENGTH} characters")
    if not set(key) <= _KEY_CHARS:
        raise InvalidRequest("an idempotency key is printable ASCII without spaces")
    return key


def required_api_key(source: SourceConfig) -> str:
    if not source.api_key:
        raise ConfigError(f"source {source.name!r}: outgoing requests need api_key")
    return source.api_key


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` over `base`; nested objects are merged rather than replaced."""
    merged = dict(base)
    for name, value in extra.items():
        current = merged.get(name)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[name] = merge(current, value)
        else:
            merged[name] = value
    return merged


@dataclass(frozen=True, slots=True)
class GatewayReply:
    """A gateway's answer to a create, as the client judges and stores it."""

    status: int
    body: Any  # a JSON object or list; other answers as {"text": ...} / {"value": ...}
    retry_after: float | None = None  # seconds, from a Retry-After header

    @classmethod
    def of(cls, response: httpx.Response) -> GatewayReply:
        try:
            body = response.json()
        except ValueError:
            body = {"text": response.text[:2000]}
        else:
            body = body if isinstance(body, dict | list) else {"value": body}
        after = response.headers.get("retry-after", "")
        return cls(response.status_code, body, float(after) if after.isdigit() else None)


class GatewayCreate(Protocol):
    """One gateway's create call. `send` raises httpx errors (or GatewayError) for
    transport failures and returns any HTTP answer; the client decides what is retried."""

    operation: str

    def check(self, request: CreateRequest) -> None:
        """Raise InvalidRequest for what this gateway cannot take (before anything is
        stored)."""

    async def send(
        self, request: CreateRequest, key: str, http: httpx.AsyncClient, wait: float
    ) -> GatewayReply: ...

    def object_id(self, body: Mapping[str, Any], key: str) -> str | None:
        """The created object's id in the answer (what webhooks and reads are keyed by)."""

    def expires_at(self, request: CreateRequest, body: Mapping[str, Any]) -> datetime | None:
        """When an unpaid payment lapses: the gateway's answer, else the request's."""

    async def aclose(self) -> None: ...


class ApiKeyCreate:
    """What the creates called with the source's `api_key` share (a `GatewayCreate`
    needs `check` and `send` besides): the create URL, `path` under the source's API
    base (else the gateway's own, `default_base_url`), the created object's id as the
    answer's `id_field` string, and no expiry of the gateway's own (the request's).
    `check` passes everything: a gateway that refuses what it cannot take itself says so
    in its answer."""

    operation: str
    default_base_url: str
    path: str
    id_field = "id"

    def __init__(self, source: SourceConfig) -> None:
        self.url = (source.api_base_url or self.default_base_url).rstrip("/") + self.path
        self.api_key = required_api_key(source)

    def check(self, request: CreateRequest) -> None:
        return None

    def object_id(self, body: Mapping[str, Any], key: str) -> str | None:
        found = body.get(self.id_field)
        return found if isinstance(found, str) and found else None

    def expires_at(self, request: CreateRequest, body: Mapping[str, Any]) -> datetime | None:
        return request.expires_at

    async def aclose(self) -> None:
        return None
