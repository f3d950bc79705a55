"""The worker: claim due events, apply them to the ledger, retry or dead-letter failures.

The inbox is the queue: a worker only ever talks to the store. Every write it makes under
a claim is fenced by the claim token, so a worker that was paused past its lease (and whose
events another worker took over) cannot apply anything twice: its late writes are refused
and counted as `claim_lost`.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import socket
import time
from collections.abc import Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any

from porteiro import ledger
from porteiro.errors import NonRetryable, StoreUnavailable
from porteiro.model import Outcome, ParsedEvent, Payment
from porteiro.observability import logger
from porteiro.runtime import Runtime
from porteiro.store.base import UNPARSEABLE_TYPE, Claim

_ERROR_TEXT_LIMIT = 1000


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def error_text(exc: BaseException) -> str:
    """`Type: message`, truncated: what operators see as last_error."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _ERROR_TEXT_LIMIT else text[: _ERROR_TEXT_LIMIT - 3] + "..."


class Worker:
    """Processes due events of one store until stopped.

    `pause_after_claim` is a fault-injection knob for crash tests: the worker sleeps that
    long holding its fresh claims, so a test can SIGSTOP or SIGKILL it at that moment.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        worker_id: str | None = None,
        pause_after_claim: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        self.runtime = runtime
        self.id = worker_id or new_worker_id()
        self.pause_after_claim = pause_after_claim
        self._rng = rng or random.Random()
        self._log = logger().bind(worker=self.id)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Loop until `stop` is set (the current batch finishes first) or cancelled."""
        stop = stop or asyncio.Event()
        settings = self.runtime.config.worker
        self._log.info("worker.started", action="worker.started")
        try:
            while not stop.is_set():
                try:
                    processed = await self.run_once()
                    if processed == 0:
                        await _until(
                            self.runtime.store.wait_for_work(settings.poll_interval_seconds), stop
                        )
                except StoreUnavailable as exc:
                    # An outage must not kill the worker: back off and try again.
                    self._log.warning(
                        "store unavailable", action="worker.store_unavailable", error=str(exc)
                    )
                    await _until(asyncio.sleep(settings.poll_interval_seconds), stop)
                except Exception as exc:
                    # Nor must a bug in one loop turn: a silent dead worker is the worst case.
                    self._log.error(
                        "worker loop failed",
                        action="worker.loop_failed",
                        error=error_text(exc),
                        exc_info=exc,
                    )
                    await _until(asyncio.sleep(settings.poll_interval_seconds), stop)
        finally:
            self._log.info("worker.stopped", action="worker.stopped")

    async def run_once(self) -> int:
        """Claim one batch and process it; return how many events were claimed."""
        settings = self.runtime.config.worker
        claims = await self.runtime.store.claim(
            self.id,
            settings.batch_size,
            timedelta(seconds=settings.lease_seconds),
            self.runtime.clock(),
        )
        if not claims:
            return 0
        if self.pause_after_claim > 0:
            await asyncio.sleep(self.pause_after_claim)
        limit = asyncio.Semaphore(max(settings.concurrency, 1))

        async def run_group(group: Sequence[Claim]) -> None:
            async with limit:
                for claim in group:
                    await self._process(claim)

        await asyncio.gather(*(run_group(group) for group in group_by_payment(claims)))
        return len(claims)

    async def _process(self, claim: Claim) -> None:
        """Handle one claim; never raises (except cancellation), so a batch always ends."""
        source = claim.event.source
        started = time.perf_counter()
        try:
            outcome = await self._handle(claim)
        except Exception as exc:  # any failure of this event is retried, never fatal
            outcome = await self._fail(claim, exc)
        metrics = self.runtime.metrics
        metrics.processed.labels(source, outcome).inc()
        metrics.processing_seconds.labels(source).observe(time.perf_counter() - started)

    async def _handle(self, claim: Claim) -> str:
        stored = claim.event
        store = self.runtime.store
        now = self.runtime.clock()
        provider = self.runtime.providers.get(stored.source)
        if provider is None:
            reason = f"unknown source {stored.source!r}: not in the configuration"
            return await self._dead(claim, reason, now)
        if stored.type == UNPARSEABLE_TYPE:
            # Requeued without a re-parse: the raw body still has to go through the adapter.
            reason = stored.last_error or "unparseable delivery"
            return await self._dead(claim, f"{reason} (re-parse it with `porteiro replay`)", now)
        event = stored.parsed()
        if event.thin:
            event = await provider.enrich(event, self.runtime.http)
        if not event.actionable:
            reason = (
                "no payment object" if event.object_id is None else f"kind other ({event.type})"
            )
            if not await store.ignore(claim, reason, now):
                return self._claim_lost(claim)
            self._log.info(
                "event ignored", action="event.ignored", event_id=stored.id, reason=reason
            )
            return "ignored"
        return await self._apply(claim, event, now)

    async def _apply(self, claim: Claim, event: ParsedEvent, now: datetime) -> str:
        stored = claim.event
        verdicts: list[str] = []

        def decide(current: Payment | None) -> Outcome:
            outcome = ledger.apply(
                current, source=stored.source, event_id=stored.id, event=event, at=now
            )
            verdicts.append(outcome.transition.verdict.value)
            return outcome

        if not await self.runtime.store.apply(claim, event, decide, now):
            return self._claim_lost(claim)
        verdict = verdicts[-1] if verdicts else "applied"
        self._log.info(
            "event processed",
            action="event.processed",
            event_id=stored.id,
            source=stored.source,
            kind=event.kind.value,
            verdict=verdict,
        )
        return verdict

    async def _fail(self, claim: Claim, exc: Exception) -> str:
        stored = claim.event
        text = error_text(exc)
        now = self.runtime.clock()
        retry_at = (
            None
            if isinstance(exc, NonRetryable)
            else self.runtime.config.worker.retry.decide(stored.attempts, now, self._rng)
        )
        try:
            if retry_at is None:
                return await self._dead(claim, text, now)
            if not await self.runtime.store.retry_later(claim, text, retry_at, now):
                return self._claim_lost(claim)
        except Exception as write_error:
            # The store is down too: the lease expires and the event is claimed again.
            self._log.error(
                "could not record failure",
                action="event.failure_unrecorded",
                event_id=stored.id,
                error=text,
                write_error=error_text(write_error),
            )
            return "retry"
        self._log.warning(
            "event failed, retry scheduled",
            action="event.retry_scheduled",
            event_id=stored.id,
            attempts=stored.attempts,
            next_attempt_at=retry_at.isoformat(),
            error=text,
        )
        return "retry"

    async def _dead(self, claim: Claim, reason: str, now: datetime) -> str:
        if not await self.runtime.store.dead_letter(claim, reason, now):
            return self._claim_lost(claim)
        self._log.error(
            "event dead-lettered",
            action="event.dead_lettered",
            event_id=claim.event.id,
            attempts=claim.event.attempts,
            error=reason,
        )
        return "dead"

    def _claim_lost(self, claim: Claim) -> str:
        self._log.warning(
            "claim lost: another worker owns this event now",
            action="event.claim_lost",
            event_id=claim.event.id,
        )
        return "claim_lost"


def group_by_payment(claims: Sequence[Claim]) -> list[list[Claim]]:
    """Claims of one (source, object_id) in one group, in event id order; the groups run
    concurrently, each group sequentially, so one payment never races itself."""
    groups: dict[tuple[str, str | None, int], list[Claim]] = {}
    for claim in sorted(claims, key=lambda c: c.event.id):
        event = claim.event
        # Events without an object are independent of each other: one group each.
        alone = 0 if event.object_id is not None else event.id
        groups.setdefault((event.source, event.object_id, alone), []).append(claim)
    return list(groups.values())


async def _until(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Await `work` unless `stop` is set first; errors of `work` propagate."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, stopper):
            pending.cancel()
        await asyncio.gather(task, stopper, return_exceptions=True)
    error = task.exception() if task.done() and not task.cancelled() else None
    if error is not None:
        raise error
