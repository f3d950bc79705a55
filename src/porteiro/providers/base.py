"""The adapter interface every gateway implements, and the optional capabilities.

An adapter is small and mostly pure: `verify` and `parse` work on the raw request only
(no I/O), so they are tested without servers. `enrich` and `fetch_status` are the only
methods that talk to the gateway's API, through the httpx client they are given.
`sign` and `sample_lifecycle` exist so `porteiro simulate` and the tests can produce
deliveries exactly as the gateway would.

What only some gateways have is a capability Protocol of its own (`SupportsPrepare`,
`SupportsClose`, `SupportsWindow`, `SupportsWindowScope`), checked with `isinstance`.
This module imports no adapter: the registry (`porteiro.providers`) imports them.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.model import InboundRequest, ParsedEvent


@dataclass(frozen=True, slots=True)
class Ack:
    """The acknowledgement the gateway expects once a delivery is durable."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain"


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """A delivery ready to POST, as the gateway would send it (for `simulate`, tests)."""

    body: bytes
    headers: Mapping[str, str]
    query: str = ""  # without the leading "?"
    path_suffix: str = ""  # e.g. "/pix"


@dataclass(frozen=True, slots=True)
class SamplePayment:
    """Inputs `simulate` uses to build one realistic payment lifecycle."""

    object_id: str
    reference: str
    amount: int
    currency: str = "BRL"
    refund: bool = False  # also emit a (partial, then full) refund
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Provider(Protocol):
    """One gateway's webhook dialect, configured for one source."""

    source: SourceConfig

    def verify(self, request: InboundRequest, now: datetime) -> None:
        """Authenticate the raw request; raise an AuthenticationError subclass if not."""

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        """Turn an authenticated body into its distinct events; raise ParseError."""

    def ack(self) -> Ack:
        """The 2xx answer for a durable delivery (duplicate or not)."""

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        """For thin events, fetch the object's state from the gateway; else return it.
        Raise GatewayError on failure (the worker retries)."""

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """Ask the gateway for the object's current state as a synthetic event, or None
        where the gateway has no status read."""

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        """Sign a body with this source's first secret, exactly as the gateway does."""

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        """Realistic bodies for one payment's lifecycle, in the order they happened."""


@runtime_checkable
class SupportsWindow(Protocol):
    """An adapter that can list what the gateway knows in a time window (reconciliation).

    Event-level lists (Stripe `/v1/events`, Pix `GET /v2/pix`) yield the gateway's own
    events with their usual dedup keys, so a missing webhook is found by its key.
    Payment-level lists (Mercado Pago payment search, Pagar.me charges) yield one status
    snapshot per payment, keyed `snapshot_key(object_id, ...)`. Raise GatewayError when
    the gateway cannot be read."""

    def list_window(
        self, since: datetime, until: datetime, http: httpx.AsyncClient
    ) -> AsyncIterator[ParsedEvent]: ...


@runtime_checkable
class SupportsWindowScope(Protocol):
    """A window list that holds only part of what the store knows: `window_scope` is
    "money" when the gateway lists settled money only (Pix `GET /v2/pix`), so an unpaid
    payment absent from it is not "unknown to the gateway"."""

    window_scope: str


@runtime_checkable
class SupportsPrepare(Protocol):
    """An adapter with I/O to do before the pure `verify` (Pagar.me: load the JWKS key a
    delivery names). The receiver awaits it, bounded, before verifying."""

    async def prepare(self, request: InboundRequest, http: httpx.AsyncClient) -> None: ...


@runtime_checkable
class SupportsClose(Protocol):
    """An adapter holding clients of its own (Pix: one with a client certificate), closed
    when the runtime stops."""

    async def aclose(self) -> None: ...


def signing_keys(
    source: SourceConfig, decode: Callable[[str], bytes] = str.encode, *, hint: str = ""
) -> list[bytes]:
    """The source's `secrets` as signature keys: `decode`d (UTF-8 bytes by default). A
    source without secrets, or with one `decode` refuses (ConfigError), is a ConfigError
    naming the source; `hint` says what a secret looks like, e.g. " (whsec_...)"."""
    if not source.secrets:
        raise ConfigError(f"source {source.name!r}: provider {source.provider} needs secrets{hint}")
    try:
        return [decode(secret) for secret in source.secrets]
    except ConfigError as exc:
        raise ConfigError(f"source {source.name!r}: {exc}") from None


SNAPSHOT_PREFIX = "reconcile:"


def snapshot_key(object_id: str, *parts: object) -> str:
    """Dedup key of a status snapshot read from the gateway: the same state read twice is
    one event; any change in the parts (status, refunded amount...) is a new one."""
    return SNAPSHOT_PREFIX + ":".join([object_id, *("" if p is None else str(p) for p in parts)])


def is_snapshot(event: ParsedEvent) -> bool:
    return event.dedup_key.startswith(SNAPSHOT_PREFIX)
