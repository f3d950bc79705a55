"""The reconciler ("malha fina"): ask the gateway about what its webhooks never said.

Two jobs, both ending in the SAME path as webhooks: what the gateway answers is stored
as synthetic events (origin `reconcile`, de-duplicated like deliveries) and the worker
applies them through the ledger, so a late webhook and a poll converge.

- `stale_cycle`: open payments past their expiry plus a grace period (or older than a
  maximum age), and expected payments never heard of, are looked up with the adapter's
  status read. `serve` runs it every `[reconcile] interval_seconds`.
- `audit_window`: the gateway's list for a time window compared with the store (missing,
  divergent, unknown), the missing ingested, the report saved and written as JSON + CSV.

Every gateway call goes through porteiro.outgoing.gateway_http (per-source rate limit, retries of
429/5xx honouring Retry-After). Adyen has no status read: its reports say so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx

from porteiro import ledger, storable
from porteiro.config import (
    DEFAULT_PENDING_MAX_AGE_SECONDS,
    DEFAULT_RECONCILE_GRACE_SECONDS,
    SourceConfig,
)
from porteiro.errors import PorteiroError, StoreUnavailable
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState
from porteiro.observability import logger
from porteiro.outgoing.gateway_http import GatewayPolicy, gateway_client
from porteiro.providers.base import Provider, SupportsWindow, SupportsWindowScope, is_snapshot
from porteiro.reconcile.report import (
    NO_STATUS_READ,
    AuditReport,
    Finding,
    SourceCycle,
    StaleReport,
    write_files,
)
from porteiro.runtime import Runtime
from porteiro.store.reconcile import ReconcileStore, StaleItem, reconcile_store

ORIGIN = "reconcile"
# Parallel status reads per source (the rate limit is the real throttle).
STATUS_CONCURRENCY = 8
# An object that stays open at the gateway is asked about less and less often.
MAX_RECHECK = timedelta(hours=6)
NO_STATUS_RECHECK = timedelta(days=1)
# States in which money moved: what a list of settled money (Pix) must hold.
MONEY_STATES = frozenset({
    PaymentState.PAID, PaymentState.PARTIALLY_REFUNDED, PaymentState.REFUNDED,
    PaymentState.DISPUTED, PaymentState.CHARGED_BACK,
})  # fmt: skip

# progress(done, total): total is None while the gateway's list is being read.
Progress = Callable[[int, int | None], None]


@dataclass(frozen=True, slots=True)
class SourcePolicy:
    """A source's reconciliation keys (its options)."""

    grace: timedelta
    max_age: timedelta

    @classmethod
    def for_source(cls, source: SourceConfig) -> SourcePolicy:
        grace = source.option_number("reconcile_grace_seconds", DEFAULT_RECONCILE_GRACE_SECONDS)
        age = source.option_number("pending_max_age_seconds", DEFAULT_PENDING_MAX_AGE_SECONDS)
        return cls(grace=timedelta(seconds=grace), max_age=timedelta(seconds=age))


class Reconciler:
    """Holds one rate-limited client per source, so limits hold across cycles."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.store: ReconcileStore = reconcile_store(runtime.store)
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._log = logger().bind(component="reconciler")

    def client(self, source: str) -> httpx.AsyncClient:
        if source not in self._clients:
            policy = GatewayPolicy.for_source(self.runtime.config.sources[source])
            self._clients[source] = gateway_client(policy)
        return self._clients[source]

    async def aclose(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()

    # -- stale pending -------------------------------------------------------------------

    async def stale_cycle(self, now: datetime) -> StaleReport:
        report = StaleReport(at=now)
        for name in self.runtime.config.sources:
            cycle = await self._stale_source(name, now)
            if cycle.checked:
                report.sources.append(cycle)
                await self.store.save_report(
                    name, "stale", {**cycle.to_json(), "objects": cycle.objects[:1000]},
                    cycle.to_json(), since=None, until=None, now=now,
                )  # fmt: skip
        return report

    async def _stale_source(self, name: str, now: datetime) -> SourceCycle:
        source = self.runtime.config.sources[name]
        provider = self.runtime.providers[name]
        policy = SourcePolicy.for_source(source)
        limit = self.runtime.config.reconcile.batch_size
        items = await self.store.stale_pending(name, now, policy.max_age, limit, grace=policy.grace)
        cycle = SourceCycle(source=name, checked=len(items))
        if not items:
            return cycle
        cycle.objects = [item.object_id for item in items]
        gate = asyncio.Semaphore(STATUS_CONCURRENCY)
        http = self.client(name)

        async def read(item: StaleItem) -> ParsedEvent | Exception | None:
            async with gate:
                try:
                    return await provider.fetch_status(item.object_id, http)
                except (PorteiroError, httpx.HTTPError) as exc:
                    return exc

        answers = await asyncio.gather(*(read(item) for item in items))
        events = [answer for answer in answers if isinstance(answer, ParsedEvent)]
        cycle.found = len(events)
        cycle.status_read = any(answer is not None for answer in answers)
        if events:
            # An API answer the store cannot hold is dead on its own, as a body's would be.
            recorded = await self.store.record_synthetic(
                name, storable.storable_events(events), origin=ORIGIN, now=now
            )
            cycle.new, cycle.duplicates = recorded.new, recorded.duplicates
        await self._mark(name, items, answers, now, cycle)
        self._log.info(
            "stale payments checked", action="reconcile.stale_checked", source=name,
            checked=cycle.checked, found=cycle.found, new=cycle.new,
            errors=len(cycle.errors), status_read=cycle.status_read,
        )  # fmt: skip
        return cycle

    async def _mark(
        self,
        name: str,
        items: Sequence[StaleItem],
        answers: Sequence[ParsedEvent | Exception | None],
        now: datetime,
        cycle: SourceCycle,
    ) -> None:
        """Push each object's next check back: exponentially while it stays open, a day
        when the gateway has no status read."""
        interval = timedelta(seconds=self.runtime.config.reconcile.interval_seconds)
        groups: dict[tuple[datetime, str | None], list[str]] = {}
        for item, answer in zip(items, answers, strict=True):
            error = None
            if isinstance(answer, Exception):
                error = f"{type(answer).__name__}: {answer}"[:500]
                cycle.errors.append(f"{item.object_id}: {error}")
            wait = min(interval * 2**item.checks, MAX_RECHECK)
            if answer is None:
                wait = NO_STATUS_RECHECK
            groups.setdefault((now + wait, error), []).append(item.object_id)
        for (due, error), object_ids in groups.items():
            await self.store.mark_checked(name, object_ids, now, due, error)

    # -- window audit --------------------------------------------------------------------

    async def audit_window(
        self,
        name: str,
        since: datetime,
        until: datetime,
        *,
        ingest: bool = True,
        progress: Progress | None = None,
        out_dir: str | Path | None = None,
    ) -> AuditReport:
        source = self.runtime.config.sources[name]
        provider = self.runtime.providers[name]
        started = self.runtime.clock()
        report = AuditReport(name, source.provider, since, until, started)
        if isinstance(provider, SupportsWindow):
            listed = await self._list(provider, since, until, self.client(name), progress)
            # Before any lookup by their keys: one the store cannot hold is dead on its own.
            listed = list(storable.storable_events(listed))
            to_ingest = await self._compare(report, provider, listed, until, progress)
            if ingest and to_ingest:
                recorded = await self.store.record_synthetic(
                    name, to_ingest, origin=ORIGIN, now=self.runtime.clock()
                )
                report.ingested, report.duplicates = recorded.new, recorded.duplicates
                for finding in [*report.missing, *report.divergent]:
                    finding.ingested = finding.dedup_key is not None
        else:
            report.status_read, report.note = False, NO_STATUS_READ
        findings = self.runtime.metrics.reconcile_findings
        findings.labels(name, "missing").inc(len(report.missing))
        findings.labels(name, "divergent").inc(len(report.divergent))
        report.finished_at = self.runtime.clock()
        report.id = await self.store.save_report(
            name, "audit", report.to_json(), report.summary(),
            since=since, until=until, now=report.finished_at,
        )  # fmt: skip
        if out_dir is not None:
            report.files = [str(path) for path in write_files(report, out_dir)]
        self._log.info("window audited", action="reconcile.audited", **report.summary())
        return report

    async def _list(
        self,
        provider: SupportsWindow,
        since: datetime,
        until: datetime,
        http: httpx.AsyncClient,
        progress: Progress | None,
    ) -> list[ParsedEvent]:
        listed: list[ParsedEvent] = []
        async for event in provider.list_window(since, until, http):
            listed.append(event)
            if progress is not None and len(listed) % 100 == 0:
                progress(len(listed), None)
        return listed

    async def _compare(
        self,
        report: AuditReport,
        provider: Provider | SupportsWindow,
        listed: Sequence[ParsedEvent],
        until: datetime,
        progress: Progress | None,
    ) -> list[ParsedEvent]:
        """Fill the report's findings; return the events to ingest."""
        name, now = report.source, self.runtime.clock()
        unique = list({event.dedup_key: event for event in listed}.values())
        events = [event for event in unique if not is_snapshot(event)]
        known = await self.store.known_keys(name, [event.dedup_key for event in events])
        by_object: dict[str, list[ParsedEvent]] = {}
        for event in unique:
            if event.object_id is not None:
                by_object.setdefault(event.object_id, []).append(event)
        stored = await self.store.payments_by_id(name, list(by_object))
        report.listed, report.gateway_payments = len(listed), len(by_object)
        to_ingest = [event for event in events if event.dedup_key not in known]
        lacking = {event.object_id for event in to_ingest}
        done = 0
        for object_id, found in by_object.items():
            gateway = _gateway_view(name, object_id, found, now)
            current = stored.get(object_id)
            for event in found:
                if event.dedup_key in known or is_snapshot(event):
                    continue
                report.missing.append(
                    Finding.of("missing", object_id, event=event, gateway=gateway, store=current)
                )
            snapshot = next((event for event in found if is_snapshot(event)), None)
            if snapshot is not None and current is None:
                report.missing.append(Finding.of("missing", object_id, event=snapshot,
                                                 gateway=gateway))  # fmt: skip
                to_ingest.append(snapshot)
            elif object_id not in lacking and current is not None and _differs(gateway, current):
                if snapshot is None and _newer(current, until):
                    continue  # the store knows of events after the window: no comparison
                report.divergent.append(Finding.of("divergent", object_id, event=snapshot,
                                                   gateway=gateway, store=current))  # fmt: skip
                if snapshot is not None:
                    to_ingest.append(snapshot)  # the gateway's current state: let it apply
            done += 1
            if progress is not None and done % 100 == 0:
                progress(done, len(by_object))
        await self._unknown(report, provider, set(by_object))
        if progress is not None:
            progress(len(by_object), len(by_object))
        return to_ingest

    async def _unknown(
        self, report: AuditReport, provider: Provider | SupportsWindow, listed: set[str]
    ) -> None:
        money_only = isinstance(provider, SupportsWindowScope) and provider.window_scope == "money"
        window = await self.store.payments_in_window(report.source, report.since, report.until)
        for item in window:
            payment = item.payment
            if payment.object_id in listed:
                continue
            if money_only and payment.state not in MONEY_STATES:
                continue  # the gateway lists settled money only (Pix): nothing to compare
            report.unknown.append(Finding("unknown", payment.object_id,
                                          occurred_at=item.first_event_at,
                                          store_state=payment.state.value,
                                          store_amount=payment.amount,
                                          store_refunded=payment.refunded_amount))  # fmt: skip

    # -- in serve ------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """A stale cycle every `[reconcile] interval_seconds` until stopped/cancelled."""
        stop = stop or asyncio.Event()
        interval = self.runtime.config.reconcile.interval_seconds
        self._log.info("reconciler started", action="reconcile.started", interval=interval)
        try:
            while not stop.is_set():
                try:
                    await self.stale_cycle(self.runtime.clock())
                except StoreUnavailable as exc:  # an outage: the next cycle tries again
                    self._log.warning(
                        "store unavailable", action="reconcile.store_unavailable", error=str(exc)
                    )
                except Exception as exc:  # a failed cycle must not end the loop
                    self._log.error(
                        "stale cycle failed", action="reconcile.cycle_failed",
                        error=f"{type(exc).__name__}: {exc}", exc_info=exc,
                    )  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
        finally:
            await self.aclose()
            self._log.info("reconciler stopped", action="reconcile.stopped")


def _gateway_view(
    source: str, object_id: str, events: Sequence[ParsedEvent], now: datetime
) -> Payment:
    """The payment as the gateway's listed events (or snapshot) make it, by the ledger."""
    facts = [(n, event) for n, event in enumerate(events, 1) if event.kind is not Kind.OTHER]
    return ledger.replay_history(source, object_id, facts, now)


def _differs(gateway: Payment, stored: Payment) -> bool:
    amounts = gateway.amount is not None and stored.amount is not None
    return (
        gateway.state is not stored.state
        or (amounts and gateway.amount != stored.amount)
        or gateway.refunded_amount != stored.refunded_amount
    )


def _newer(stored: Payment, until: datetime) -> bool:
    return stored.last_event_at is not None and stored.last_event_at >= until


async def audit_window(
    runtime: Runtime,
    source: str,
    since: datetime,
    until: datetime,
    *,
    ingest: bool = True,
    progress: Progress | None = None,
    out_dir: str | Path | None = None,
) -> AuditReport:
    """Audit one source's window; see `Reconciler.audit_window`."""
    reconciler = Reconciler(runtime)
    try:
        return await reconciler.audit_window(
            source, since, until, ingest=ingest, progress=progress, out_dir=out_dir
        )
    finally:
        await reconciler.aclose()
