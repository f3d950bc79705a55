"""Polite, persistent access to a gateway's API: a per-source rate limit and bounded
retries, as an httpx transport.

Being an httpx transport, it sits under any `httpx.AsyncClient`, so adapters keep their
`http: httpx.AsyncClient` parameter and need not know about it. The reconciler builds one
client per source with `gateway_client(source)`.

- Rate limit: requests are spaced `1 / api_rate_per_second` apart (default 10/s) across
  every caller sharing the client. A 429's `Retry-After` pauses the whole source, not
  only the request that got it: the gateway said so for the account.
- Retries: 429, 5xx and network errors, up to `api_max_attempts` (default 4) attempts,
  after `Retry-After` when the gateway gives one (capped by `api_max_retry_after_seconds`,
  default 60: a longer wait fails now instead of stalling a cycle), else exponential
  backoff from 0.5 s with jitter. POST is retried only when it cannot have been processed
  (429, or the connection failed before the request was sent); other methods are
  idempotent by definition.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Errors raised before the request left: safe to retry whatever the method.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True, slots=True)
class GatewayPolicy:
    rate_per_second: float = 10.0
    max_attempts: int = 4
    base_delay_seconds: float = 0.5
    max_delay_seconds: float = 10.0
    max_retry_after_seconds: float = 60.0
    timeout_seconds: float = 10.0

    @classmethod
    def for_source(cls, source: SourceConfig) -> GatewayPolicy:
        """From the source's optional keys `api_rate_per_second`, `api_max_attempts`,
        `api_max_retry_after_seconds`, `api_timeout_seconds`."""
        defaults = cls()
        return cls(
            rate_per_second=_positive(source, "api_rate_per_second", defaults.rate_per_second),
            max_attempts=int(_positive(source, "api_max_attempts", defaults.max_attempts)),
            max_retry_after_seconds=_positive(
                source, "api_max_retry_after_seconds", defaults.max_retry_after_seconds
            ),
            timeout_seconds=_positive(source, "api_timeout_seconds", defaults.timeout_seconds),
        )

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Delay before attempt `attempt + 1`: exponential, jittered into [1/2, 1]."""
        ceiling = min(self.max_delay_seconds, self.base_delay_seconds * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + rng.random() / 2)


def _positive(source: SourceConfig, key: str, default: float) -> float:
    value = source.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"source {source.name!r}: {key} must be a number > 0")
    return float(value)


class RateLimiter:
    """Spaces acquisitions `1 / rate` seconds apart; `pause` pushes every slot back."""

    def __init__(
        self,
        rate_per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.interval = 1.0 / rate_per_second
        self._clock = clock
        self._sleep = sleep
        self._next = 0.0

    async def acquire(self) -> None:
        # No await between reading and moving the slot: concurrent callers queue up.
        now = self._clock()
        slot = max(now, self._next)
        self._next = slot + self.interval
        if slot > now:
            await self._sleep(slot - now)

    def pause(self, seconds: float) -> None:
        self._next = max(self._next, self._clock() + seconds)


class GatewayTransport(httpx.AsyncBaseTransport):
    """Rate-limited, retrying wrapper around another transport."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        policy: GatewayPolicy,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.policy = policy
        self.limiter = RateLimiter(policy.rate_per_second, sleep=sleep)
        self._rng = rng or random.Random()
        self._sleep = sleep
        self.attempts = 0  # every request sent, retries included (observable)
        self.retries = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        policy = self.policy
        for attempt in range(1, policy.max_attempts + 1):
            await self.limiter.acquire()
            self.attempts += 1
            last = attempt == policy.max_attempts
            try:
                response = await self.inner.handle_async_request(request)
            except httpx.TransportError as exc:
                if last or not _may_retry_error(request, exc):
                    raise
                await self._wait(policy.backoff(attempt, self._rng))
                continue
            if last or not _may_retry_status(request, response.status_code):
                return response
            wait = retry_after(response.headers.get("retry-after"), datetime.now(UTC))
            if wait is not None and wait > policy.max_retry_after_seconds:
                return response  # the gateway asks for longer than a cycle may wait
            await response.aclose()
            if response.status_code == 429 and wait is not None:
                self.limiter.pause(wait)
            await self._wait(wait if wait is not None else policy.backoff(attempt, self._rng))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _wait(self, seconds: float) -> None:
        self.retries += 1
        if seconds > 0:
            await self._sleep(seconds)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _may_retry_status(request: httpx.Request, status: int) -> bool:
    if status not in RETRY_STATUS:
        return False
    return status == 429 or request.method in _IDEMPOTENT


def _may_retry_error(request: httpx.Request, exc: httpx.TransportError) -> bool:
    return request.method in _IDEMPOTENT or isinstance(exc, _NOT_SENT)


def retry_after(value: str | None, now: datetime) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date), or None if absent/invalid."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def gateway_client(
    policy: GatewayPolicy,
    *,
    inner: httpx.AsyncBaseTransport | None = None,
    rng: random.Random | None = None,
) -> httpx.AsyncClient:
    """An AsyncClient whose every request goes through the policy."""
    transport = GatewayTransport(inner or httpx.AsyncHTTPTransport(), policy, rng=rng)
    timeout = httpx.Timeout(policy.timeout_seconds, connect=min(3.0, policy.timeout_seconds))
    return httpx.AsyncClient(transport=transport, timeout=timeout)
