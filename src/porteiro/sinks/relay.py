"""The relay loop shared by every transport: claim, send, settle; retry, dead-letter,
circuit breaker, rate and concurrency limits.

One Relay drains one destination's outbox. It keeps at most `concurrency` rows in flight
and claims only as many as it has free slots, so a claimed row is being sent, not queued
behind others while its lease runs out. Claims are leased and fenced by a token (like the
event worker's): a relay killed mid-send loses its rows to the next claim after the
lease, and a late write of a stalled relay is refused. The store's claim also enforces
per-payment order, so a relay never holds two rows of one payment at once.

Destination state (paused, disabled, circuit open until) lives in the store, so every
relay process and the operator's CLI see the same; each relay refreshes it every poll.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from porteiro.config import DestinationConfig
from porteiro.errors import StoreUnavailable, error_text
from porteiro.jobs.lease import new_holder_id, until_stopped
from porteiro.observability import Metrics, logger
from porteiro.outgoing.gateway_http import RateLimiter
from porteiro.store.outbox import DestinationState, OutboxClaim, OutboxStore, StoredOutboxRow

# Past the transport's own timeout, a send that still hangs is abandoned (then retried).
_SEND_GRACE_SECONDS = 5.0
_RETRY_AFTER_CAP_SECONDS = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class SendResult:
    """What one delivery attempt got. `result` is kept as the row's last_status (an HTTP
    status, "ack", "returned", "timeout"...)."""

    ok: bool
    result: str | None = None
    error: str | None = None
    retry_after: float | None = None  # seconds the destination asked us to wait
    disable: str | None = None  # the destination is gone: disable it with this reason
    trips_breaker: bool = True  # counts as a sign the destination is down


class Sender(Protocol):
    async def send(self, row: StoredOutboxRow) -> SendResult: ...

    async def aclose(self) -> None: ...


class CircuitBreaker:
    """Closed -> open after `threshold` consecutive failures -> after `cooldown`,
    half-open: one probe; its success closes the circuit, its failure reopens it."""

    def __init__(self, threshold: int, cooldown: timedelta) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0

    def success(self) -> None:
        self.failures = 0

    def failure(self, now: datetime, *, probing: bool) -> datetime | None:
        """Count a failure; returns until when the circuit opens, or None."""
        self.failures += 1
        if probing or self.failures >= self.threshold:
            self.failures = 0
            return now + self.cooldown
        return None


class Relay:
    """Drains one destination's outbox through `sender` until stopped."""

    def __init__(
        self,
        store: OutboxStore,
        destination: DestinationConfig,
        sender: Sender,
        *,
        clock: Callable[[], datetime],
        relay_id: str | None = None,
        poll_interval: float = 0.5,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.destination = destination
        self.sender = sender
        self.clock = clock
        self.id = relay_id or new_holder_id()
        self.poll_interval = poll_interval
        self._rng = rng or random.Random()
        self._breaker = CircuitBreaker(
            destination.circuit_failures, timedelta(seconds=destination.circuit_cooldown_seconds)
        )
        rate = destination.rate_per_second
        self._rate = RateLimiter(rate) if rate else None  # evenly spaced starts, no bursts
        self._state = DestinationState(destination.name)
        self._state_read = float("-inf")
        self._inflight: set[asyncio.Task[None]] = set()
        self._log = logger().bind(relay=self.id, destination=destination.name)
        metrics = metrics or Metrics()
        self._running = metrics.relays_running.labels(destination.name)
        self._outcomes = metrics.outbox_deliveries

    @property
    def name(self) -> str:
        return self.destination.name

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Loop until `stop` is set (in-flight sends finish first) or cancelled."""
        stop = stop or asyncio.Event()
        self._log.info("relay.started", action="relay.started")
        self._running.inc()
        try:
            while not stop.is_set():
                try:
                    waited = await self._step()
                except StoreUnavailable as exc:
                    self._log.warning(
                        "store unavailable", action="relay.store_unavailable", error=str(exc)
                    )
                    waited = asyncio.sleep(self.poll_interval)
                except Exception as exc:  # a bug in one turn must not end the relay
                    self._log.error(
                        "relay loop failed",
                        action="relay.loop_failed",
                        error=error_text(exc),
                        exc_info=exc,
                    )
                    waited = asyncio.sleep(self.poll_interval)
                if waited is not None:
                    await until_stopped(waited, stop)
            if self._inflight:
                await asyncio.wait(self._inflight)
        finally:
            for task in self._inflight:
                task.cancel()
            await self.sender.aclose()
            self._running.dec()
            self._log.info("relay.stopped", action="relay.stopped")

    async def _step(self) -> Awaitable[object] | None:
        """Start what can be started now; return what to wait for before the next step."""
        now = self.clock()
        state = await self._current_state()
        if not state.active:
            return self._idle()
        open_until = state.circuit_open_until
        if open_until is not None and open_until > now:
            remaining = (open_until - now).total_seconds()
            return self._idle(min(remaining, self.poll_interval))
        probing = open_until is not None
        if probing and self._inflight:
            return self._idle()  # the probe is still out
        free = (1 if probing else self.destination.concurrency) - len(self._inflight)
        if free <= 0:
            return _first_done(set(self._inflight), None)
        claims = await self.store.claim_outbox(
            self.name, self.id, free, timedelta(seconds=self.destination.lease_seconds), now
        )
        for claim in claims:
            task = asyncio.create_task(self._deliver(claim, probing=probing))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        return None if len(claims) == free else self._idle()

    def _idle(self, seconds: float | None = None) -> Awaitable[object]:
        timeout = self.poll_interval if seconds is None else max(seconds, 0.01)
        return _first_done(set(self._inflight), timeout)

    async def _current_state(self) -> DestinationState:
        if time.monotonic() - self._state_read >= self.poll_interval:
            states = await self.store.destination_states()
            self._state = states.get(self.name, DestinationState(self.name))
            self._state_read = time.monotonic()
        return self._state

    # -- one row -------------------------------------------------------------------------

    async def _deliver(self, claim: OutboxClaim, *, probing: bool) -> None:
        try:
            if self._rate is not None:
                await self._rate.acquire()
            if self._blocked(self.clock()):
                await self.store.release_outbox(claim, self.clock())
                return
            result = await self._send(claim.row)
            await self._settle(claim, result, probing=probing)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store failed: the lease brings the row back
            self._log.warning(
                "settling failed", action="outbox.settle_failed", error=error_text(exc)
            )

    def _blocked(self, now: datetime) -> bool:
        """The circuit opened or the destination was disabled since this row was claimed."""
        state = self._state
        opened = state.circuit_open_until is not None and state.circuit_open_until > now
        return opened or not state.active

    async def _send(self, row: StoredOutboxRow) -> SendResult:
        try:
            async with asyncio.timeout(self.destination.timeout_seconds + _SEND_GRACE_SECONDS):
                return await self.sender.send(row)
        except TimeoutError:
            return SendResult(False, "timeout", "the send did not finish in time")
        except Exception as exc:
            return SendResult(False, "error", error_text(exc))

    async def _settle(self, claim: OutboxClaim, result: SendResult, *, probing: bool) -> None:
        now = self.clock()
        row = claim.row
        if result.ok:
            settled = await self.store.complete_outbox(claim, result.result or "ok", now)
            outcome = "delivered"
            self._breaker.success()
            if probing:
                await self._set_state(now, close_circuit=True)
                self._log.info("circuit closed", action="circuit.closed")
            self._log.debug(
                "delivered", action="outbox.delivered", row=row.id, event_id=row.event_id
            )
        elif result.disable is not None:
            # Keep the row pending (the attempt counted): it flows when re-enabled.
            error = result.error or result.disable
            settled = await self.store.retry_outbox(claim, error, result.result, now, now)
            outcome = "disabled"
            await self._set_state(now, disabled_reason=result.disable)
            self._log.warning(
                "destination disabled", action="destination.disabled", reason=result.disable
            )
        else:
            settled, outcome = await self._failed(claim, result, now)
            if result.trips_breaker:
                opened = self._breaker.failure(now, probing=probing)
                if opened is not None:
                    await self._set_state(now, circuit_open_until=opened)
                    self._log.warning(
                        "circuit opened", action="circuit.opened", until=opened.isoformat()
                    )
        if not settled:
            self._log.warning("claim lost", action="outbox.claim_lost", row=row.id)
        self._count(outcome if settled else "claim_lost")

    def _count(self, outcome: str) -> None:
        self._outcomes.labels(self.name, outcome).inc()

    async def _failed(
        self, claim: OutboxClaim, result: SendResult, now: datetime
    ) -> tuple[bool, str]:
        """Retry or dead-letter the row: whether the write held its claim, and which."""
        row = claim.row
        error = result.error or "delivery failed"
        at = self.destination.retry.decide(row.attempts, now, self._rng)
        if at is None:
            self._log.warning(
                "dead-lettered",
                action="outbox.dead",
                row=row.id,
                event_id=row.event_id,
                error=error,
            )
            return await self.store.dead_outbox(claim, error, result.result, now), "dead"
        if result.retry_after is not None:
            # No sooner than the destination asked (bounded: a bogus header is no ban).
            wait = min(max(result.retry_after, 0.0), _RETRY_AFTER_CAP_SECONDS)
            at = max(at, now + timedelta(seconds=wait))
        self._log.info(
            "retry later", action="outbox.retry", row=row.id, attempts=row.attempts, error=error
        )
        return await self.store.retry_outbox(claim, error, result.result, at, now), "retry"

    async def _set_state(
        self,
        now: datetime,
        *,
        disabled_reason: str | None = None,
        circuit_open_until: datetime | None = None,
        close_circuit: bool = False,
    ) -> None:
        self._state = await self.store.set_destination_state(
            self.name, now, disabled_reason=disabled_reason,
            circuit_open_until=circuit_open_until, close_circuit=close_circuit,
        )  # fmt: skip
        self._state_read = time.monotonic()


async def _first_done(tasks: set[asyncio.Task[None]], timeout: float | None) -> None:  # noqa: ASYNC109
    """Until one of `tasks` ends (or `timeout`); a plain sleep when there are none."""
    if tasks:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    elif timeout is not None:
        await asyncio.sleep(timeout)


def build_relays(
    store: object,
    destinations: Sequence[DestinationConfig],
    clock: Callable[[], datetime],
    *,
    poll_interval: float = 0.5,
    metrics: Metrics | None = None,
) -> list[Relay]:
    """One relay per destination, with its transport (imported only when configured).
    One `metrics` for them all: two metric objects of one name in one process would
    overwrite each other's multiprocess file entries."""
    from porteiro.store.outbox import outbox_store

    outbox = outbox_store(store)
    metrics = metrics or Metrics()
    relay_id = new_holder_id()
    relays = []
    for destination in destinations:
        sender: Sender
        if destination.transport == "http":
            from porteiro.sinks.http_relay import HttpSender

            sender = HttpSender(destination, clock=clock)
        else:
            from porteiro.sinks.rabbitmq_relay import RabbitSender

            sender = RabbitSender(destination)
        relays.append(
            Relay(outbox, destination, sender, clock=clock, relay_id=relay_id,
                  poll_interval=poll_interval, metrics=metrics)
        )  # fmt: skip
    return relays
