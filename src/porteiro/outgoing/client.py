"""The outgoing idempotent client: create payments, orders and Pix cobs safely.

`PaymentClient.create_payment` stores the idempotency key with the request's fingerprint
and COMMITS it before the first attempt. Then it sends the gateway's create with that key
(client_<gateway>.py), retrying network errors, timeouts, 5xx, 409 (in progress) and 429
with exponential backoff and jitter and the SAME key, within a bounded number of
attempts. Any other 4xx is final: the key is marked `failed` and never sent again. A
finished key answers from the store without calling the gateway; the same key with another
request is an IdempotencyConflict, also without calling it. A key whose outcome is unknown
(the process died, or every attempt failed) stays `pending`: calling again with the same
key and request, `resume(key)` or `resume_pending()` continues it with the same key (and,
for Pix, the same txid). After a success the reconciler is told to expect the payment.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError, GatewayError, PorteiroError
from porteiro.observability import logger
from porteiro.outgoing.adyen import AdyenCreate
from porteiro.outgoing.mercadopago import MercadoPagoCreate
from porteiro.outgoing.pagarme import PagarmeCreate
from porteiro.outgoing.pix import PixCreate, pix_txid
from porteiro.outgoing.request import (
    CreateRequest,
    GatewayCreate,
    InvalidRequest,
    check_key,
    fingerprint,
    new_request,
)
from porteiro.outgoing.stripe import StripeCreate
from porteiro.retry import RetryPolicy
from porteiro.runtime import Runtime, utc_now
from porteiro.store.client import IdempotencyKey, IdempotencyStore, KeyState
from porteiro.store.reconcile import ReconcileStore

__all__ = [
    "CreateRejected",
    "CreateResult",
    "CreateUnresolved",
    "IdempotencyConflict",
    "InvalidRequest",
    "PaymentClient",
    "pix_txid",
]

GATEWAYS: Mapping[str, Callable[[SourceConfig], GatewayCreate]] = {
    "stripe": StripeCreate,
    "pagarme": PagarmeCreate,
    "mercadopago": MercadoPagoCreate,
    "adyen": AdyenCreate,
    "pix": PixCreate,
}
# Seconds, not the worker's hours: a caller is waiting. 5 attempts span about 7 s.
DEFAULT_POLICY = RetryPolicy(
    max_attempts=5, base_delay_seconds=0.5, multiplier=2.0, max_delay_seconds=30.0, jitter=0.25
)
# "In progress" (409) and "slow down" (429) are answers about the key, not the request.
RETRYABLE_4XX = frozenset({409, 429})


class IdempotencyConflict(PorteiroError):
    """The key was first used for another request; nothing was sent."""


class CreateRejected(PorteiroError):
    """The gateway refused the create for good (a non-retryable 4xx); the key is `failed`."""

    def __init__(self, record: IdempotencyKey, *, replayed: bool) -> None:
        super().__init__(
            f"source {record.source!r} key {record.key!r}: the gateway refused the create "
            f"(HTTP {record.response_status}): {record.last_error}"
        )
        self.key = record.key
        self.status = record.response_status
        self.body = record.response_body
        self.replayed = replayed


class CreateUnresolved(GatewayError):
    """Every attempt failed in a retryable way: the outcome is unknown and the key stays
    `pending`. Resume it with the same key later; never with a new one."""

    def __init__(self, record: IdempotencyKey, error: str) -> None:
        super().__init__(
            f"source {record.source!r} key {record.key!r}: no answer after "
            f"{record.attempts} attempts (last: {error}); resume with the same key"
        )
        self.key = record.key
        self.attempts = record.attempts
        self.last_error = error


@dataclass(frozen=True, slots=True)
class CreateResult:
    source: str
    key: str
    object_id: str
    status: int  # the gateway's HTTP status
    body: Mapping[str, Any]  # the gateway's answer
    attempts: int  # requests sent for this key, over every run
    replayed: bool  # answered from the store: nothing was sent this time
    resumed: bool  # continued a key stored earlier (a crash, or a retry by the caller)
    expires_at: datetime | None
    expected: bool  # the reconciler expects the payment

    def to_json(self) -> dict[str, Any]:
        expires_at = None if self.expires_at is None else self.expires_at.isoformat()
        return {"source": self.source, "key": self.key, "object_id": self.object_id,
                "status": self.status, "attempts": self.attempts, "replayed": self.replayed,
                "resumed": self.resumed, "expected": self.expected,
                "expires_at": expires_at}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Answer:
    """One attempt's result: final (succeeded / failed) or retryable."""

    state: KeyState | None  # None: retry
    status: int | None = None
    body: Any = None
    object_id: str | None = None
    error: str | None = None
    retry_after: float | None = None


class PaymentClient:
    def __init__(
        self,
        store: IdempotencyStore,
        source: SourceConfig,
        http: httpx.AsyncClient,
        *,
        policy: RetryPolicy = DEFAULT_POLICY,
        timeout_seconds: float = 10.0,
        clock: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if policy.max_attempts < 1 or timeout_seconds <= 0:
            raise ConfigError("the client needs max_attempts >= 1 and a positive timeout")
        factory = GATEWAYS.get(source.provider)
        if factory is None:
            known = ", ".join(sorted(GATEWAYS))
            raise ConfigError(f"source {source.name!r}: no outgoing creates for provider "
                              f"{source.provider!r} (supported: {known})")  # fmt: skip
        self.store = store
        self.source = source
        self.http = http
        self.gateway = factory(source)
        self.policy = policy
        self.timeout = timeout_seconds
        self.clock = clock
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._log = logger().bind(source=source.name, operation=self.gateway.operation)

    @classmethod
    def from_runtime(cls, runtime: Runtime, source: str, **options: Any) -> PaymentClient:
        config = runtime.config.sources.get(source)
        if config is None:
            raise ConfigError(f"unknown source {source!r}")
        if not isinstance(runtime.store, IdempotencyStore):
            raise ConfigError("this store keeps no idempotency keys")
        return cls(runtime.store, config, runtime.http, clock=runtime.clock, **options)

    async def aclose(self) -> None:
        await self.gateway.aclose()

    # -- the API -------------------------------------------------------------------------

    async def create_payment(
        self,
        amount: int,
        currency: str,
        reference: str,
        *,
        key: str | None = None,
        expires_in: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> CreateResult:
        """Create once. Raises IdempotencyConflict, CreateRejected, CreateUnresolved,
        InvalidRequest; StoreUnavailable before anything was sent if the key cannot be
        stored."""
        key = str(uuid.uuid4()) if key is None else check_key(key)
        request = new_request(amount, currency, reference, expires_in, extra)
        self.gateway.check(request)
        now = self.clock()
        if expires_in is not None:
            request = replace(request, expires_at=now + timedelta(seconds=expires_in))
        print_ = fingerprint(self.gateway.operation, request)
        record, new = await self.store.begin_idempotency_key(
            self.source.name, key, operation=self.gateway.operation, fingerprint=print_,
            request=request.to_json(), now=now,
        )  # fmt: skip
        if record.fingerprint != print_:
            self._log.warning("key reused with another request", action="client.conflict",
                              key=key)  # fmt: skip
            raise IdempotencyConflict(
                f"source {self.source.name!r} key {key!r} was used for another request"
            )
        return await self._continue(record, resumed=not new)

    async def resume(self, key: str) -> CreateResult:
        """Continue a stored key with its stored request (or answer its stored result)."""
        record = await self.store.get_idempotency_key(self.source.name, key)
        if record is None:
            raise InvalidRequest(f"source {self.source.name!r} has no idempotency key {key!r}")
        if record.operation != self.gateway.operation:
            raise IdempotencyConflict(f"key {key!r} belongs to {record.operation!r}")
        return await self._continue(record, resumed=True)

    async def resume_pending(
        self, *, older_than: timedelta = timedelta(0), limit: int = 100
    ) -> dict[str, CreateResult | PorteiroError]:
        """Resume this source's pending keys (oldest first) untouched for `older_than`:
        what a restarted process runs. Errors are returned per key, not raised."""
        keys = await self.store.pending_idempotency_keys(
            self.source.name, updated_before=self.clock() - older_than, limit=limit
        )
        outcomes: dict[str, CreateResult | PorteiroError] = {}
        for record in keys:
            try:
                outcomes[record.key] = await self.resume(record.key)
            except (IdempotencyConflict, CreateRejected, CreateUnresolved, InvalidRequest) as exc:
                outcomes[record.key] = exc
        return outcomes

    # -- the work ------------------------------------------------------------------------

    async def _continue(self, record: IdempotencyKey, *, resumed: bool) -> CreateResult:
        if record.state is not KeyState.PENDING:
            return await self._outcome(record, replayed=True, resumed=resumed)
        request = CreateRequest.from_json(record.request)
        error = "no attempt made"
        for tries in range(1, self.policy.max_attempts + 1):
            row = await self.store.start_idempotent_attempt(record.source, record.key, self.clock())
            if row.state is not KeyState.PENDING:  # another process settled it meanwhile
                return await self._outcome(row, replayed=True, resumed=True)
            answer = await self._attempt(request, record.key)
            if answer.state is not None:
                settled = await self.store.finish_idempotency_key(
                    record.source, record.key, state=answer.state, status=answer.status,
                    body=answer.body, object_id=answer.object_id, error=answer.error,
                    now=self.clock(),
                )  # fmt: skip
                return await self._outcome(settled, replayed=False, resumed=resumed)
            error = answer.error or "retryable failure"
            await self.store.note_idempotent_error(record.source, record.key, error, self.clock())
            self._log.warning("create attempt failed", action="client.attempt_failed",
                              key=record.key, attempt=row.attempts, error=error)  # fmt: skip
            if tries < self.policy.max_attempts:
                await self._sleep(self._delay(tries, answer.retry_after))
        final = await self.store.get_idempotency_key(record.source, record.key)
        self._log.error("create unresolved", action="client.unresolved", key=record.key,
                        error=error)  # fmt: skip
        raise CreateUnresolved(final or record, error)

    async def _attempt(self, request: CreateRequest, key: str) -> _Answer:
        try:
            reply = await self.gateway.send(request, key, self.http, self.timeout)
        except (httpx.RequestError, GatewayError) as exc:
            return _Answer(None, error=f"{type(exc).__name__}: {exc}".rstrip(": "))
        status, body = reply.status, reply.body
        if 200 <= status < 300:
            object_id = self.gateway.object_id(body if isinstance(body, Mapping) else {}, key)
            if object_id is None:
                return _Answer(KeyState.FAILED, status, body, None, "a 2xx answer without an id")
            return _Answer(KeyState.SUCCEEDED, status, body, object_id)
        error = f"HTTP {status}: {_summary(body)}"
        if status >= 500 or status in RETRYABLE_4XX:
            return _Answer(None, status, body, error=error, retry_after=reply.retry_after)
        return _Answer(KeyState.FAILED, status, body, None, error)

    def _delay(self, tries: int, retry_after: float | None) -> float:
        delay = self.policy.delay(tries, self._rng).total_seconds()
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.policy.max_delay_seconds)

    async def _outcome(
        self, record: IdempotencyKey, *, replayed: bool, resumed: bool
    ) -> CreateResult:
        if record.state is KeyState.FAILED:
            if not replayed:
                self._log.warning("create refused", action="client.rejected", key=record.key,
                                  status=record.response_status)  # fmt: skip
            raise CreateRejected(record, replayed=replayed)
        if record.object_id is None or record.response_status is None:
            raise CreateUnresolved(record, record.last_error or "not settled")
        request = CreateRequest.from_json(record.request)
        body = record.response_body if isinstance(record.response_body, Mapping) else {}
        expires_at = self.gateway.expires_at(request, body)
        expected = record.expected_at is not None or await self._expect(
            record, record.object_id, request, expires_at
        )
        if not replayed:
            self._log.info("created", action="client.created", key=record.key,
                           object_id=record.object_id, attempts=record.attempts)  # fmt: skip
        return CreateResult(
            source=record.source, key=record.key, object_id=record.object_id,
            status=record.response_status, body=body, attempts=record.attempts,
            replayed=replayed, resumed=resumed, expires_at=expires_at, expected=expected,
        )  # fmt: skip

    async def _expect(
        self,
        record: IdempotencyKey,
        object_id: str,
        request: CreateRequest,
        expires_at: datetime | None,
    ) -> bool:
        """Tell the reconciler what to look for. A failure here never loses the created
        payment: the key stays unmarked and the next replay registers it again."""
        store = self.store
        if not isinstance(store, ReconcileStore):
            self._log.warning("no reconciler store: the payment is not expected",
                              action="client.expectation_skipped", key=record.key)  # fmt: skip
            return False
        now = self.clock()
        try:
            await store.expect_payment(
                record.source, object_id, reference=request.reference, amount=request.amount,
                currency=request.currency, expires_at=expires_at, now=now,
            )  # fmt: skip
            await self.store.mark_idempotency_expected(record.source, record.key, now)
        except PorteiroError as exc:
            self._log.error("could not register the expected payment", key=record.key,
                            action="client.expectation_failed", error=str(exc))  # fmt: skip
            return False
        return True


def _summary(body: Any) -> str:
    text = str(body)
    return text if len(text) <= 300 else text[:297] + "..."
