"""The worker: claim due events, apply them to the ledger, retry or dead-letter failures.

The inbox is the queue: a worker only ever talks to the store. Every write it makes under
a claim is fenced by the claim token, so a worker that was paused past its lease (and whose
events another worker took over) cannot apply anything twice: its late writes are refused
and counted as `claim_lost`.

A claimed batch is applied in ONE store transaction (`Store.apply_many`: one commit, one
fsync, payments locked in a fixed order); thin events are enriched first, concurrently and
outside any transaction. While a full batch applies, the next one is claimed (prefetch);
after a partial one, the worker waits `gather_ms` before claiming again. Each applied
event's outbox rows (`[destinations]`) and in-process handlers (`[handlers]`) ride in that
same transaction (docs/handlers.md). What is written for an event that does not apply
(a retry, a dead letter, an ignore) is porteiro.worker.settle's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from porteiro import ledger, storable
from porteiro.errors import NonRetryable, PaymentBusy, StoreUnavailable, error_text
from porteiro.handlers import EFFECTIVE, Handlers, handle_for, load_handlers
from porteiro.jobs.lease import DEFAULT_LEASE_SECONDS, new_holder_id, until_stopped
from porteiro.jobs.presence import Presence
from porteiro.model import Outcome, ParsedEvent, Payment
from porteiro.observability import logger
from porteiro.providers.base import Provider
from porteiro.runtime import Runtime
from porteiro.sinks.fanout import outbox_rows
from porteiro.store.base import UNPARSEABLE_TYPE, Application, Applied, Claim, Decide
from porteiro.store.leases import lease_store
from porteiro.store.outbox import OutboxRow
from porteiro.worker.settle import Settler

# Outcomes after which the event is still to be processed (not done, ignored or dead).
_UNSETTLED = frozenset({"retry", "claim_lost"})


class Worker:
    """Processes due events of one store until stopped.

    `pause_after_claim` is a fault-injection knob for crash tests: the worker sleeps that
    long holding its fresh claims, so a test can SIGSTOP or SIGKILL it at that moment.
    `pause_in_apply` is another: the whole process blocks that long (as in a long GC
    pause) inside each batch's apply transaction, after its locks are taken.
    `handlers` defaults to the module named by `[handlers] module` (none if unset).
    While it runs, its presence lease (jobs/presence.py, `presence_seconds` long) tells
    the role watch that a worker runs.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        worker_id: str | None = None,
        pause_after_claim: float = 0.0,
        pause_in_apply: float = 0.0,
        rng: random.Random | None = None,
        handlers: Handlers | None = None,
        presence_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.runtime = runtime
        module = runtime.config.handlers.module
        if handlers is None and module is not None:
            handlers = load_handlers(module)
        self.handlers = handlers
        self.id = worker_id or new_holder_id()
        self.pause_after_claim = pause_after_claim
        self.pause_in_apply = pause_in_apply
        self._rng = rng or random.Random()
        self._log = logger().bind(worker=self.id)
        self._settle = Settler(runtime, self._log, self._rng)
        self._presence = Presence(
            self.id, lease_store(runtime.store), runtime.clock, lease_seconds=presence_seconds
        )

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Loop until `stop` is set (the current batch finishes first) or cancelled."""
        async with self._presence.kept():
            await self._loop(stop or asyncio.Event())

    async def _loop(self, stop: asyncio.Event) -> None:
        settings = self.runtime.config.worker
        self._log.info("worker.started", action="worker.started")
        ahead: asyncio.Future[Sequence[Claim]] | None = None
        self.runtime.metrics.workers_running.inc()
        try:
            while not stop.is_set():
                try:
                    pending, ahead = ahead, None
                    claims = await (pending if pending is not None else self._claim())
                    if not claims:
                        await until_stopped(
                            self.runtime.store.wait_for_work(settings.poll_interval_seconds), stop
                        )
                        continue
                    if settings.prefetch and len(claims) >= settings.batch_size:
                        # A full batch: more is probably due; claim it while this one applies.
                        ahead = asyncio.ensure_future(self._claim())
                    await self.process(claims)
                    if len(claims) < settings.batch_size and settings.gather_ms > 0:
                        # A partial batch: what is due now came in while it applied.
                        # Waiting a moment lets a steady trickle gather into one apply
                        # transaction (one commit) instead of one per ingest commit.
                        await until_stopped(asyncio.sleep(settings.gather_ms / 1000), stop)
                except StoreUnavailable as exc:
                    # An outage must not kill the worker: back off and try again (claims
                    # not settled come back when their lease expires).
                    self._log.warning(
                        "store unavailable", action="worker.store_unavailable", error=str(exc)
                    )
                    await until_stopped(asyncio.sleep(settings.poll_interval_seconds), stop)
                except Exception as exc:
                    # Nor must a bug in one loop turn: a silent dead worker is the worst case.
                    self._log.error(
                        "worker loop failed",
                        action="worker.loop_failed",
                        error=error_text(exc),
                        exc_info=exc,
                    )
                    await until_stopped(asyncio.sleep(settings.poll_interval_seconds), stop)
            if ahead is not None:
                # Claimed before the stop: finish them rather than leave them to their lease.
                pending, ahead = ahead, None
                try:
                    await self.process(await pending)
                except Exception as exc:  # their leases bring them back
                    self._log.warning(
                        "prefetched batch not processed",
                        action="worker.prefetch_dropped",
                        error=error_text(exc),
                    )
        finally:
            if ahead is not None:
                ahead.cancel()
            self.runtime.metrics.workers_running.dec()
            self._log.info("worker.stopped", action="worker.stopped")

    async def run_once(self) -> int:
        """Claim one batch and process it; return how many events were claimed."""
        claims = await self._claim()
        if claims:
            await self.process(claims)
        return len(claims)

    async def _claim(self) -> Sequence[Claim]:
        settings = self.runtime.config.worker
        return await self.runtime.store.claim(
            self.id,
            settings.batch_size,
            timedelta(seconds=settings.lease_seconds),
            self.runtime.clock(),
        )

    async def process(self, claims: Sequence[Claim]) -> None:
        """Settle every claim of a batch. Raises only StoreUnavailable (the batch could not
        be applied; its claims come back when their lease expires) or cancellation."""
        if self.pause_after_claim > 0:
            await asyncio.sleep(self.pause_after_claim)
        started = time.perf_counter()
        outcomes: dict[int, str] = {}
        ready: list[tuple[Claim, ParsedEvent]] = []
        side: list[Awaitable[None]] = []  # enrichments and settlements, run concurrently
        limit = asyncio.Semaphore(max(self.runtime.config.worker.concurrency, 1))
        try:
            for claim in sorted(claims, key=_event_id):
                work = self._sort(claim, ready)
                if work is not None:
                    side.append(self._guarded(claim, work, limit, ready, outcomes))
            await asyncio.gather(*side)
            if ready:
                ready.sort(key=lambda pair: pair[0].event.id)
                outcomes.update(await self._apply_batch(ready))
        finally:
            self._count(claims, outcomes, time.perf_counter() - started)

    def _sort(
        self, claim: Claim, ready: list[tuple[Claim, ParsedEvent]]
    ) -> Awaitable[str | ParsedEvent] | None:
        """Put an event that can go straight to the ledger into `ready`; otherwise return
        the work it needs first (enrichment, or a settlement without the ledger)."""
        stored = claim.event
        provider = self.runtime.providers.get(stored.source)
        if provider is None:
            reason = f"unknown source {stored.source!r}: not in the configuration"
            return self._settle.dead(claim, reason, self.runtime.clock())
        if stored.type == UNPARSEABLE_TYPE:
            # Requeued without a re-parse: the raw body still has to go through the adapter.
            reason = stored.last_error or "unparseable delivery"
            message = f"{reason} (re-parse it with `porteiro replay`)"
            return self._settle.dead(claim, message, self.runtime.clock())
        event = stored.parsed()
        if event.thin:
            return self._enrich(claim, provider, event)
        if not event.actionable:
            return self._settle.ignore(claim, event)
        ready.append((claim, event))
        return None

    async def _guarded(
        self,
        claim: Claim,
        work: Awaitable[str | ParsedEvent],
        limit: asyncio.Semaphore,
        ready: list[tuple[Claim, ParsedEvent]],
        outcomes: dict[int, str],
    ) -> None:
        """Run `work` (at most `concurrency` at once); an enriched event joins `ready`, any
        failure is retried, never fatal to the batch."""
        try:
            async with limit:
                result = await work
        except Exception as exc:
            result = await self._settle.fail(claim, exc)
        if isinstance(result, ParsedEvent):
            ready.append((claim, result))
        else:
            outcomes[claim.event.id] = result

    async def _enrich(
        self, claim: Claim, provider: Provider, event: ParsedEvent
    ) -> str | ParsedEvent:
        enriched = await provider.enrich(event, self.runtime.http)
        # What a gateway's API answered is held to the same rule as a webhook's body: a
        # value no store can hold dead-letters the event with why, never a retry loop.
        if (problem := storable.event_problem(enriched)) is not None:
            raise NonRetryable(f"the gateway's answer cannot be stored: {problem}")
        return enriched if enriched.actionable else await self._settle.ignore(claim, enriched)

    async def _apply_batch(self, ready: Sequence[tuple[Claim, ParsedEvent]]) -> dict[int, str]:
        now = self.runtime.clock()
        verdicts: dict[int, str] = {}
        batch = [
            Application(
                claim,
                event,
                _decider(claim, event, now, verdicts),
                outbox=self._fanout(claim, event),
                handle=None
                if self.handlers is None
                else handle_for(self.handlers, claim.event.id, claim.event.source, event),
            )
            for claim, event in ready
        ]
        if self.pause_in_apply > 0:
            batch[0] = _frozen_first(batch[0], self.pause_in_apply)
        try:
            results = await self.runtime.store.apply_many(batch, now)
        except StoreUnavailable:
            raise
        except Exception as exc:
            # A database error in the batch (not a ledger error: those come back per event).
            self._log.warning(
                "batch apply failed, applying its events one by one",
                action="worker.batch_failed",
                events=len(batch),
                error=error_text(exc),
            )
            results = await self._apply_each(batch, now)
        outcomes: dict[int, str] = {}
        for item, result in zip(batch, results, strict=True):
            stored = item.claim.event
            if result is True:
                outcomes[stored.id] = verdict = verdicts.get(stored.id, "applied")
                self._log.debug(
                    "event processed",
                    action="event.processed",
                    event_id=stored.id,
                    source=stored.source,
                    kind=item.event.kind.value,
                    verdict=verdict,
                )
            elif result is False:
                outcomes[stored.id] = self._settle.claim_lost(item.claim)
            elif isinstance(result, PaymentBusy):
                # Handed back by the store, its attempt not counted: not a failure.
                outcomes[stored.id] = "deferred"
                self._log.info(
                    "event deferred: another worker holds its payment",
                    action="event.deferred",
                    event_id=stored.id,
                )
            else:
                outcomes[stored.id] = await self._settle.fail(item.claim, result)
        return outcomes

    def _fanout(
        self, claim: Claim, event: ParsedEvent
    ) -> Callable[[Outcome], Sequence[OutboxRow]] | None:
        """The event's outbox rows for an effective verdict (None: no destinations)."""
        destinations = self.runtime.config.destinations
        if not destinations:
            return None
        stored = claim.event

        def rows(outcome: Outcome) -> Sequence[OutboxRow]:
            if outcome.transition.verdict not in EFFECTIVE:
                return []
            return outbox_rows(stored.id, stored.source, event, outcome.payment, destinations)

        return rows

    async def _apply_each(self, batch: Sequence[Application], now: datetime) -> list[Applied]:
        """The fallback: one transaction (a batch of one) per event, so one bad event fails
        alone."""
        store = self.runtime.store
        results: list[Applied] = []
        for item in batch:
            try:
                (result,) = await store.apply_many([item], now)
                results.append(result)
            except StoreUnavailable:
                raise
            except Exception as exc:
                results.append(exc)
        return results

    def _count(self, claims: Sequence[Claim], outcomes: dict[int, str], elapsed: float) -> None:
        """Metrics once per batch: one counter update per (source, kind, outcome); each
        settled event observes its batch's time (from claim to settled) and its time
        from receipt to settled (not a retry or a claim lost: the event is not done)."""
        metrics = self.runtime.metrics
        now = self.runtime.clock()
        counts: Counter[tuple[str, str, str]] = Counter()
        sources: Counter[str] = Counter()
        for claim in claims:
            outcome = outcomes.get(claim.event.id)
            if outcome is None:
                continue
            stored = claim.event
            counts[(stored.source, stored.kind.value, outcome)] += 1
            sources[stored.source] += 1
            if outcome not in _UNSETTLED:
                since = (now - stored.received_at).total_seconds()
                metrics.latency.labels(stored.source).observe(max(since, 0.0))
        for (source, kind, outcome), n in counts.items():
            metrics.processed.labels(source, kind, outcome).inc(n)
        for source, n in sources.items():
            histogram = metrics.processing_seconds.labels(source)
            for _ in range(n):
                histogram.observe(elapsed)


def _event_id(claim: Claim) -> int:
    return claim.event.id


def _decider(claim: Claim, event: ParsedEvent, now: datetime, verdicts: dict[int, str]) -> Decide:
    """The ledger call for one event, noting its verdict for metrics and logs."""
    stored = claim.event

    def decide(current: Payment | None) -> Outcome:
        outcome = ledger.apply(
            current, source=stored.source, event_id=stored.id, event=event, at=now
        )
        verdicts[stored.id] = outcome.transition.verdict.value
        return outcome

    return decide


def _frozen_first(item: Application, seconds: float) -> Application:
    """`item` whose decide first blocks the process (the fault `pause_in_apply` injects:
    the event loop stops too, as in a GC pause)."""
    decide = item.decide

    def frozen(current: Payment | None) -> Outcome:
        time.sleep(seconds)
        return decide(current)

    return dataclasses.replace(item, decide=frozen)
