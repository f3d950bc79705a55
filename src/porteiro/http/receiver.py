"""The ingest pipeline behind POST /webhooks/{source}: cap, verify, parse, store, ack.

Order matters: the body is read under a size cap, the adapter authenticates the raw
bytes before anything parses them, and the 2xx goes out only once the delivery and its
events are durable. Every failure maps to one status: 401 (nothing stored but the
bounded quarantine), 404, 413, 503 with Retry-After (fast, never a hang or a 500).
This is the hot path: no per-request logger binding, no re-serialisation of the body, no
log line per accepted delivery unless at DEBUG (metrics count them); refusals and
failures still log at WARNING. Past `max_inflight` requests in flight (counted once
their body is read) the receiver answers 503 at once (saturated) rather than queueing
without bound behind the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import httpx
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from porteiro import storable
from porteiro.errors import AuthenticationError, ParseError, StoreUnavailable
from porteiro.http.body import (
    BodyTooLarge,
    body_too_large,
    declared_over,
    json_error,
    read_capped,
    receive_rest,
)
from porteiro.http.client_cert import client_cert_der, client_cert_subject
from porteiro.http.redact import Redaction, redactions
from porteiro.model import WARNINGS_KEY, InboundRequest, ParsedEvent
from porteiro.observability import logger
from porteiro.providers.base import Ack, Provider, SupportsPrepare
from porteiro.runtime import Runtime
from porteiro.store.base import RecordResult

# Metric label for requests to sources that are not configured: the path segment is
# attacker-controlled, so it never becomes a label value.
UNKNOWN_SOURCE_LABEL = "_unknown"
OUTCOMES = (
    "accepted",
    "duplicate",
    "unauthorized",
    "too_large",
    "unparseable",
    "unavailable",
    "saturated",
    "unknown_source",
)
# A provider's optional pre-verification step (e.g. Pagar.me refreshing its JWKS) may do
# network I/O; it gets this long, then verification proceeds with what it has.
PREPARE_TIMEOUT_SECONDS = 3.0
# For a provider that no configured source names (tests building a Runtime by hand).
_DEFAULT_REDACTION = Redaction()

# The app, the admin API and tests import these from here (the body and certificate
# helpers included, though they live in porteiro.http.body and porteiro.http.client_cert).
__all__ = [
    "OUTCOMES",
    "UNKNOWN_SOURCE_LABEL",
    "BodyTooLarge",
    "Receiver",
    "body_too_large",
    "client_cert_der",
    "client_cert_subject",
    "json_error",
    "read_capped",
    "webhook_source",
]

Prepare = Callable[[InboundRequest, httpx.AsyncClient], Awaitable[None]]


class Receiver:
    """The webhook endpoint; one instance per app, holding pre-bound metric children."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        server = runtime.config.server
        self._cap = server.max_body_bytes
        self._timeout = server.store_timeout_seconds
        self._retry_after = {"Retry-After": str(server.retry_after_seconds)}
        self._max_inflight = server.max_inflight
        self._inflight = 0
        self._log = logger()
        # Checked once: building the DEBUG line's arguments per ack costs ~1 us even when
        # the filtering logger drops it (logging is configured before apps are built).
        self._log_accepted = self._log.is_enabled_for(logging.DEBUG)
        self._metrics = runtime.metrics.ingest
        self._warnings = runtime.metrics.event_warnings
        # Every series exists at 0 from the start.
        self._metrics.declare([*runtime.providers, UNKNOWN_SOURCE_LABEL], OUTCOMES)
        self._prepare: dict[str, Prepare | None] = {
            name: provider.prepare if isinstance(provider, SupportsPrepare) else None
            for name, provider in runtime.providers.items()
        }
        # An ack is constant per provider (`ack()` takes nothing) and a Response only
        # reads itself when sent: one per source, not one per request.
        self._acks = {name: _ack_response(p.ack()) for name, p in runtime.providers.items()}
        # Credentials are redacted after verify and before storage (porteiro.http.redact).
        self._redactions = redactions(runtime.config.sources)

    async def handle(self, request: Request) -> Response:
        """The Starlette endpoint for /webhooks/{source}."""
        return await self.respond(request.scope, request.receive, request.path_params["source"])

    async def asgi(self, scope: Scope, receive: Receive, send: Send, source: str) -> None:
        """The same endpoint as bare ASGI, for WebhookFastPath (no router on the hot path).
        Sends the response's two messages itself: this module's responses have no
        background task, and the scope is HTTP (Response.__call__ would be one more
        coroutine per ack)."""
        response = await self.respond(scope, receive, source)
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": response.raw_headers,
            }
        )
        await send({"type": "http.response.body", "body": response.body})

    async def respond(self, scope: Scope, receive: Receive, source: str) -> Response:
        # One coroutine for the whole ack, failures aside: each nested `await` of a
        # coroutine is an object made, run and torn down per request, on the hot path.
        started = time.perf_counter()
        provider = self._runtime.providers.get(source)
        if provider is None:
            self._metrics.delivery(UNKNOWN_SOURCE_LABEL, "unknown_source")
            return json_error(404, "unknown source")
        try:
            inbound = await self._inbound(scope, receive, source)
        except ClientDisconnect:  # the gateway gave up mid-body: nothing to answer to
            return Response(status_code=400)
        if inbound is None:
            self._metrics.delivery(source, "too_large")
            return body_too_large(self._cap)
        # Counted from here, once the body is in: a request still sending its body holds
        # nothing of the store's, and counting it let a thousand stalled senders turn
        # every signed delivery into a 503 (a slow body is bounded by [server]
        # body_timeout_seconds instead, in porteiro.http.limits).
        if self._inflight >= self._max_inflight:
            self._metrics.delivery(source, "saturated")
            return json_error(503, "ingest saturated", self._retry_after)
        self._inflight += 1
        try:
            prepare = self._prepare[source]
            if prepare is not None:
                await self._run_prepare(prepare, inbound)
            try:
                provider.verify(inbound, inbound.received_at)
            except AuthenticationError as exc:
                return await self._unauthorized(inbound, exc)
            events, parse_error = self._parse(provider, inbound)
            try:
                result = await self._runtime.store.record_delivery(
                    self._redacted(inbound),
                    events,
                    parse_error=parse_error,
                    give_up_after=self._timeout,
                )
            except Exception as exc:  # an outage, a timeout, or what the store did not expect
                return self._unavailable(source, exc)
            self._count_accepted(source, result, parse_error, events)
            self._metrics.ack(source, time.perf_counter() - started)
            return self._acks[source]
        finally:
            self._inflight -= 1

    async def _inbound(self, scope: Scope, receive: Receive, source: str) -> InboundRequest | None:
        # ASGI servers give names lowercased already (the spec says so); lower() again
        # costs little and keeps a non-conforming server's names matchable.
        headers = [
            (name.decode("latin-1").lower(), value.decode("latin-1"))
            for name, value in scope["headers"]
        ]
        declared = None
        for name, value in headers:
            if name == "content-length":
                declared = value
                break
        if declared_over(declared, self._cap):
            return None
        # The body: usually one message, so that one is read here (no coroutine more).
        message = await receive()
        body = message.get("body", b"")
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        if message.get("more_body", False) or len(body) > self._cap:
            try:
                body = await receive_rest(receive, body, self._cap)
            except BodyTooLarge:
                return None
        client = scope.get("client")
        return InboundRequest(
            source=source,
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode("latin-1"),
            headers=headers,
            body=body,
            peer=client[0] if client else None,
            received_at=self._runtime.clock(),
            client_cert_subject=client_cert_subject(scope),
            client_cert_der=client_cert_der(scope),
        )

    async def _unauthorized(self, inbound: InboundRequest, exc: AuthenticationError) -> Response:
        self._metrics.delivery(inbound.source, "unauthorized")
        self._log.warning(
            "delivery.unauthorized",
            action="delivery.unauthorized",
            source=inbound.source,
            reason=exc.reason,
        )
        await self._quarantine(inbound, exc)
        return json_error(401, exc.reason)

    def _unavailable(self, source: str, exc: Exception) -> Response:
        """503 for any failure to store: the gateway retries, and the delivery is not
        lost to a 500 over a statement the database refused or a store bug."""
        if isinstance(exc, StoreUnavailable | TimeoutError):
            self._log.warning(
                "delivery.store_unavailable",
                action="delivery.store_unavailable",
                source=source,
                error=type(exc).__name__,
            )
        else:
            # The type only, no message nor traceback: a driver's message may quote the
            # values it refused (the body's). The type names the failure (psycopg has one
            # per SQLSTATE); the database's own log has the rest.
            self._log.error(
                "delivery.store_failed",
                action="delivery.store_failed",
                source=source,
                error=f"{type(exc).__module__}.{type(exc).__qualname__}",
            )
        self._metrics.delivery(source, "unavailable")
        return json_error(503, "store unavailable", self._retry_after)

    async def _run_prepare(self, prepare: Prepare, inbound: InboundRequest) -> None:
        try:
            async with asyncio.timeout(PREPARE_TIMEOUT_SECONDS):
                await prepare(inbound, self._runtime.http)
        except Exception as exc:  # best effort: verify decides with what it has
            self._log.warning(
                "provider.prepare_failed",
                action="provider.prepare_failed",
                source=inbound.source,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def _quarantine(self, inbound: InboundRequest, exc: AuthenticationError) -> None:
        # Forensics only: a failure here must not change the 401 nor delay it unboundedly.
        try:
            async with asyncio.timeout(self._timeout):
                await self._runtime.store.quarantine(
                    self._redacted(inbound), exc.reason, str(exc) or None
                )
        except Exception as failure:  # any store failure: the 401 is answered regardless
            self._log.warning(
                "delivery.quarantine_failed",
                action="delivery.quarantine_failed",
                source=inbound.source,
                error=type(failure).__name__,
            )

    def _redacted(self, inbound: InboundRequest) -> InboundRequest:
        """What is stored of a request: credentials redacted, headers storable."""
        request = self._redactions.get(inbound.source, _DEFAULT_REDACTION).request(inbound)
        stored = storable.headers(request.headers)
        return request if stored is request.headers else replace(request, headers=stored)

    def _parse(
        self, provider: Provider, inbound: InboundRequest
    ) -> tuple[Sequence[ParsedEvent], str | None]:
        # Every reason is a text column: one that quotes a NUL or a lone surrogate from the
        # body is escaped (storable.text), or the store would refuse the whole delivery.
        try:
            parsed = provider.parse(inbound)
        except ParseError as exc:
            return (), storable.text(str(exc) or "unparseable body")
        except Exception as exc:
            # An adapter bug must not drop an authenticated body: store it dead-lettered,
            # so `replay` can re-parse it once the adapter is fixed.
            self._log.exception(
                "delivery.parser_crashed", action="delivery.parser_crashed", source=inbound.source
            )
            return (), storable.text(f"adapter error: {type(exc).__name__}: {exc}")
        # A value the store cannot hold (an amount past 64 bits, a NUL in an id) makes its
        # event dead on its own rather than the whole delivery fail on every retry.
        events = storable.storable_events(parsed)
        if events is not parsed:
            self._log.warning(
                "delivery.unstorable_event",
                action="delivery.unstorable_event",
                source=inbound.source,
                reasons=[e.error for e, was in zip(events, parsed, strict=True) if e is not was],
            )
        return events, None

    def _count_accepted(
        self,
        source: str,
        result: RecordResult,
        parse_error: str | None,
        events: Sequence[ParsedEvent],
    ) -> None:
        if parse_error is not None:
            outcome = "unparseable"
        elif result.new == 0 and result.duplicates > 0:
            outcome = "duplicate"
        else:
            outcome = "accepted"
        self._metrics.delivery(source, outcome)
        self._metrics.events(source, result.new, result.duplicates)
        for event in events:
            if WARNINGS_KEY in event.data:  # rare: one dict lookup per event otherwise
                for warning in event.warnings:
                    self._warnings.labels(source, warning["rule"]).inc()
        if not self._log_accepted:
            return
        self._log.debug(
            "delivery.accepted",
            action="delivery.accepted",
            source=source,
            delivery_id=result.delivery_id,
            new=result.new,
            duplicates=result.duplicates,
            parse_error=parse_error,
        )


def _ack_response(ack: Ack) -> Response:
    return Response(ack.body, status_code=ack.status, media_type=ack.content_type)


def webhook_source(path: str, root_path: str = "") -> str | None:
    """The {source} of /webhooks/{source}, /webhooks/{source}/pix, or Pix Automático's
    /webhooks/{source}/rec and /webhooks/{source}/cobr, else None (the same paths the
    app's routes match: one non-empty segment). Whether the source may take /rec and
    /cobr (a Pix source only) is the app's to decide."""
    if root_path and path.startswith(root_path):
        path = path[len(root_path) :]
    if not path.startswith("/webhooks/"):
        return None
    source = path[len("/webhooks/") :]
    for suffix in ("/pix", "/rec", "/cobr"):
        if source.endswith(suffix):
            source = source[: -len(suffix)]
            break
    return source if source and "/" not in source else None
