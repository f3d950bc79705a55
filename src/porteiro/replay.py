"""Replay: make events due again, either as stored (requeue) or re-parsed from the raw
deliveries with the current adapter code (after an adapter fix, say).

Re-parsing works on whole deliveries: a delivery that carried several events (a Pix list,
an Adyen batch) is parsed again as a whole. Signatures are not checked again: the delivery
was authenticated when it arrived, and its timestamps are long stale.

A dry run changes nothing and reports the transition the ledger would make for each event,
against the payment as it is stored now.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from porteiro import ledger, storable
from porteiro.errors import ParseError
from porteiro.model import (
    EventStatus,
    InboundRequest,
    ParsedEvent,
    Payment,
    StoredDelivery,
    StoredEvent,
)
from porteiro.runtime import Runtime
from porteiro.store.base import UNPARSEABLE_TYPE, EventFilter, Store

Target = EventFilter | Sequence[int]
# Called after each unit of work with (done, total).
Progress = Callable[[int, int], None]

_PAGE = 500


@dataclass(frozen=True, slots=True)
class PlannedTransition:
    """What the ledger would do with one event (dry run)."""

    event_id: int | None  # None: the re-parse would create a new event
    source: str
    dedup_key: str
    kind: str
    object_id: str | None
    from_state: str | None
    to_state: str | None
    verdict: str  # a ledger verdict, or "ignored" / "needs enrichment"


@dataclass
class ReplayReport:
    deliveries: int = 0
    event_ids: list[int] = field(default_factory=list)  # events made due again
    failures: list[tuple[int, str]] = field(default_factory=list)  # delivery id, reason
    missing: list[int] = field(default_factory=list)  # event ids that do not exist
    planned: list[PlannedTransition] = field(default_factory=list)  # dry run only
    skipped: list[int] = field(default_factory=list)  # not dead: left alone by redrive
    selected: int = 0  # a redrive's preview: the dead events it would take, planned or not


async def reparse(
    runtime: Runtime, target: Target, *, dry_run: bool, progress: Progress | None = None
) -> ReplayReport:
    """Re-parse the raw deliveries of the target events with the current adapters."""
    report = ReplayReport()
    store = runtime.store
    delivery_ids, orphans = await _delivery_ids(store, target, report)
    report.deliveries = len(delivery_ids)
    planner = _Planner(runtime)
    for done, delivery_id in enumerate(delivery_ids, start=1):
        delivery = await store.get_delivery(delivery_id)
        events = _parse(runtime, delivery, delivery_id, report) if delivery else None
        if delivery is not None and events is not None:
            if dry_run:
                for event in events:
                    if (planned := await planner.plan(delivery.source, event)) is not None:
                        report.planned.append(planned)
            else:
                report.event_ids.extend(await store.reparsed(delivery_id, events, runtime.clock()))
        if progress is not None:
            progress(done, len(delivery_ids))
    # Events that came with no delivery (reconciliation) have nothing to re-parse.
    if orphans:
        await _requeue_known(runtime, orphans, dry_run, report, planner)
    # An event carried by several deliveries (a gateway retry) is counted once.
    report.event_ids = list(dict.fromkeys(report.event_ids))
    return report


async def requeue(
    runtime: Runtime, target: Target, *, dry_run: bool, progress: Progress | None = None
) -> ReplayReport:
    """Make the target events pending and due now, as stored, attempts reset."""
    report = ReplayReport()
    events = await _events(runtime.store, target, report)
    if dry_run:
        planner = _Planner(runtime)
        for event in events:
            if (planned := await planner.plan(event.source, event.parsed())) is not None:
                report.planned.append(planned)
        return report
    await _requeue_ids(runtime, [event.id for event in events], report, progress)
    return report


async def redrive(
    runtime: Runtime,
    filter: EventFilter,
    *,
    ids: Sequence[int] | None = None,
    progress: Progress | None = None,
) -> ReplayReport:
    """DLQ replay: dead events (matching `filter`, or among `ids`) due again. A dead
    unparseable placeholder is re-parsed instead, since requeueing it as is would only
    fail again."""
    report = ReplayReport()
    events = await _dead_events(runtime.store, filter, ids, report)
    stored = [e.id for e in events if e.type != UNPARSEABLE_TYPE]
    await _requeue_ids(runtime, stored, report, progress)
    await _reparse_unparsed(runtime, events, report, dry_run=False)
    return report


def planned_to_json(planned: PlannedTransition) -> dict[str, Any]:
    return {
        "event_id": planned.event_id,
        "source": planned.source,
        "dedup_key": planned.dedup_key,
        "kind": planned.kind,
        "object_id": planned.object_id,
        "from": planned.from_state,
        "to": planned.to_state,
        "verdict": planned.verdict,
    }


def report_to_json(report: ReplayReport) -> dict[str, Any]:
    return {
        "deliveries": report.deliveries,
        "event_ids": report.event_ids,
        "failures": [{"delivery_id": d, "reason": reason} for d, reason in report.failures],
        "missing": report.missing,
        "skipped": report.skipped,
        "planned": [planned_to_json(planned) for planned in report.planned],
    }


async def matching_events(store: Store, filter: EventFilter) -> list[StoredEvent]:
    """Every event matching the filter, oldest first."""
    found: list[StoredEvent] = []
    cursor: str | None = None
    while True:
        page = await store.list_events(filter, cursor, _PAGE)
        found.extend(page.items)
        if page.next is None or not page.items:
            break
        cursor = page.next
    return sorted(found, key=lambda event: event.id)


def inbound_request(delivery: StoredDelivery) -> InboundRequest:
    return InboundRequest(
        source=delivery.source,
        method="POST",
        path=delivery.path,
        query=delivery.query,
        headers=tuple(delivery.headers),
        body=delivery.body,
        peer=delivery.peer,
        received_at=delivery.received_at,
    )


async def _events(store: Store, target: Target, report: ReplayReport) -> list[StoredEvent]:
    if isinstance(target, EventFilter):
        return await matching_events(store, target)
    events: list[StoredEvent] = []
    for event_id in dict.fromkeys(target):
        event = await store.get_event(event_id)
        if event is None:
            report.missing.append(event_id)
        else:
            events.append(event)
    return events


async def _delivery_ids(
    store: Store, target: Target, report: ReplayReport
) -> tuple[list[int], list[StoredEvent]]:
    """Deliveries to re-parse, and the target events that have none."""
    if isinstance(target, EventFilter):
        return list(await store.event_delivery_ids(target)), []
    events = await _events(store, target, report)
    carried = await store.events_deliveries([event.id for event in events])
    ids = {delivery.id for deliveries in carried.values() for delivery in deliveries}
    return sorted(ids), [event for event in events if event.id not in carried]


def _parse(
    runtime: Runtime, delivery: StoredDelivery, delivery_id: int, report: ReplayReport
) -> Sequence[ParsedEvent] | None:
    provider = runtime.providers.get(delivery.source)
    if provider is None:
        report.failures.append((delivery_id, f"unknown source {delivery.source!r}"))
        return None
    try:
        # The same check as on the ack: an event the store cannot hold comes back dead with
        # why, instead of the store's error ending the whole replay.
        return storable.storable_events(provider.parse(inbound_request(delivery)))
    except ParseError as exc:  # still broken with the current code: stays dead
        report.failures.append((delivery_id, str(exc)))
        return None
    except Exception as exc:
        # An adapter bug reported as the receiver reports it: one delivery's crash must
        # not end a replay of thousands.
        report.failures.append((delivery_id, f"adapter error: {type(exc).__name__}: {exc}"))
        return None


async def _requeue_ids(
    runtime: Runtime, ids: Sequence[int], report: ReplayReport, progress: Progress | None
) -> None:
    for start in range(0, len(ids), _PAGE):
        chunk = ids[start : start + _PAGE]
        await runtime.store.requeue(chunk, runtime.clock())
        report.event_ids.extend(chunk)
        if progress is not None:
            progress(min(start + _PAGE, len(ids)), len(ids))


async def _requeue_known(
    runtime: Runtime,
    events: Sequence[StoredEvent],
    dry_run: bool,
    report: ReplayReport,
    planner: _Planner,
) -> None:
    if dry_run:
        for event in events:
            if (planned := await planner.plan(event.source, event.parsed())) is not None:
                report.planned.append(planned)
        return
    await _requeue_ids(runtime, [event.id for event in events], report, None)


class _Planner:
    """Dry run: the ledger's answer for each event, chained over earlier planned events of
    the same payment so that a batch is judged as it would be applied."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._payments: dict[tuple[str, str], Payment | None] = {}
        self._new_ids = -1  # stand-in ids for events the re-parse would create
        self._seen: set[tuple[str, str]] = set()

    async def plan(self, source: str, event: ParsedEvent) -> PlannedTransition | None:
        """None for an event already planned (carried by several deliveries)."""
        if (source, event.dedup_key) in self._seen:
            return None
        self._seen.add((source, event.dedup_key))
        store = self._runtime.store
        event_id = await _event_id(store, source, event.dedup_key)

        def planned(
            verdict: str, before: str | None = None, after: str | None = None
        ) -> PlannedTransition:
            return PlannedTransition(
                event_id,
                source,
                event.dedup_key,
                event.kind.value,
                event.object_id,
                before,
                after,
                verdict,
            )

        if event.thin:
            return planned("needs enrichment")
        if not event.actionable or event.object_id is None:
            return planned("ignored")
        key = (source, event.object_id)
        if key not in self._payments:
            self._payments[key] = await store.get_payment(source, event.object_id)
        if event_id is None:
            ledger_id, self._new_ids = self._new_ids, self._new_ids - 1
        else:
            ledger_id = event_id
        outcome = ledger.apply(
            self._payments[key],
            source=source,
            event_id=ledger_id,
            event=event,
            at=self._runtime.clock(),
        )
        self._payments[key] = outcome.payment
        transition = outcome.transition
        before = transition.from_state.value if transition.from_state is not None else None
        return planned(transition.verdict.value, before, transition.to_state.value)


async def _event_id(store: Store, source: str, dedup_key: str) -> int | None:
    page = await store.list_events(EventFilter(source=source, dedup_key=dedup_key), None, 1)
    return page.items[0].id if page.items else None


async def preview_redrive(
    runtime: Runtime,
    filter: EventFilter,
    *,
    ids: Sequence[int] | None = None,
    limit: int | None = None,
) -> ReplayReport:
    """What `redrive` would do, changing nothing: the transition each dead event would
    make (an unparseable one: each event its re-parse would yield), in `planned`; events
    that are not dead in `skipped`, unknown ids in `missing`, as `redrive` reports them.
    With `limit`, only the first `limit` dead events are planned (each plan reads the
    store); `selected` counts them all."""
    report = ReplayReport()
    events = await _dead_events(runtime.store, filter, ids, report)
    report.selected = len(events)
    events = events if limit is None else events[:limit]
    planner = _Planner(runtime)
    stored = [e for e in events if e.type != UNPARSEABLE_TYPE]
    await _requeue_known(runtime, stored, True, report, planner)
    await _reparse_unparsed(runtime, events, report, dry_run=True)
    return report


async def _dead_events(
    store: Store, filter: EventFilter, ids: Sequence[int] | None, report: ReplayReport
) -> list[StoredEvent]:
    """A redrive's selection: the dead events matching `filter`, or those among `ids`
    (the others noted in the report: not dead in `skipped`, unknown in `missing`)."""
    if ids is None:
        return await matching_events(store, filter)
    events = await _events(store, ids, report)
    report.skipped = [e.id for e in events if e.status is not EventStatus.DEAD]
    return [e for e in events if e.status is EventStatus.DEAD]


async def _reparse_unparsed(
    runtime: Runtime, events: Sequence[StoredEvent], report: ReplayReport, *, dry_run: bool
) -> None:
    """A redrive's dead unparseable placeholders, re-parsed (requeued as they are, they
    would only fail again), into `report`."""
    unparsed = [e.id for e in events if e.type == UNPARSEABLE_TYPE]
    if unparsed:
        reparsed = await reparse(runtime, unparsed, dry_run=dry_run)
        report.deliveries = reparsed.deliveries
        report.event_ids.extend(reparsed.event_ids)
        report.planned.extend(reparsed.planned)
        report.failures.extend(reparsed.failures)
