"""Signed HTTP forwarding: POST the normalised event with Standard Webhooks headers.

`webhook-id` is the row's stored message id (sinks/message_id.py: the same on every
retry, redrive and replay, and on every store), so the merchant de-duplicates on it;
`webhook-timestamp` is the attempt's time, and the `webhook-signature` (v1, HMAC-SHA256
with the destination's `whsec_` secret) covers `{id}.{timestamp}.{body}` exactly as sent.
Any library implementing the spec verifies it.

Answers: 2xx is done; 410 Gone disables the destination; 429 and 503 are retried no
sooner than their Retry-After; anything else (other statuses, timeouts, connection
errors) is retried with the destination's backoff, then dead-lettered. Redirects are not
followed: a moved endpoint is a configuration change, not something to chase silently.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import httpx
import orjson

from porteiro.config import DestinationConfig
from porteiro.errors import ConfigError, error_text
from porteiro.outgoing.gateway_http import retry_after
from porteiro.providers.standard.webhook import decode_secret, sign_headers
from porteiro.sinks.relay import SendResult
from porteiro.store.outbox import StoredOutboxRow

_USER_AGENT = "porteiro-relay"
_BODY_EXCERPT = 200


class HttpSender:
    def __init__(
        self,
        destination: DestinationConfig,
        *,
        clock: Callable[[], datetime],
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if destination.url is None or destination.secret is None:
            raise ConfigError(f"destination {destination.name!r} needs url and secret")
        self.url = destination.url
        self._key = decode_secret(destination.secret)
        self._clock = clock
        self._owned = client is None
        limits = httpx.Limits(max_connections=destination.concurrency)
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(destination.timeout_seconds),
            limits=limits,
            follow_redirects=False,
        )

    async def send(self, row: StoredOutboxRow) -> SendResult:
        body = orjson.dumps(row.payload)
        now = self._clock()
        headers = sign_headers(self._key, row.message_id, int(now.timestamp()), body)
        headers["content-type"] = "application/json"
        headers["user-agent"] = _USER_AGENT
        try:
            response = await self._client.post(self.url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            return SendResult(False, "timeout", error_text(exc) or "timeout")
        except httpx.HTTPError as exc:
            return SendResult(False, "error", error_text(exc))
        return classify(response, now)

    async def aclose(self) -> None:
        if self._owned:
            await self._client.aclose()


def classify(response: httpx.Response, now: datetime) -> SendResult:
    """A SendResult for the merchant's answer."""
    status = response.status_code
    result = str(status)
    if 200 <= status < 300:
        return SendResult(True, result)
    error = f"HTTP {status}: {response.text[:_BODY_EXCERPT]}".rstrip(": ")
    if status == 410:
        return SendResult(False, result, error, disable=f"410 Gone from {response.url}")
    if status in (429, 503):
        wait = retry_after(response.headers.get("retry-after"), now)
        # 429 says "slow down", not "down": it does not trip the circuit breaker.
        return SendResult(False, result, error, retry_after=wait, trips_breaker=status != 429)
    return SendResult(False, result, error)
