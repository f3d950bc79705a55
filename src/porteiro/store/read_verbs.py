"""The Store's reads (store/base.py), written once for both stores over the connection
port (store/port.py), which the stores give it (`_port`). Event filters bind every value;
their column names come from this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Protocol, TypeVar

from porteiro.model import Payment, StoredDelivery, StoredEvent, Transition
from porteiro.observability.readings import Backlog, Readings
from porteiro.store import conditions, rows
from porteiro.store.dialect import Dialect
from porteiro.store.port import Params, Port
from porteiro.store.reconcile import OPEN_STATES
from porteiro.store.records import EventFilter, Page

GET_EVENT: Final = "SELECT * FROM events WHERE id = %(id)s"

GET_DELIVERY: Final = "SELECT * FROM deliveries WHERE id = %(id)s"


GET_PAYMENT: Final = """
SELECT * FROM payments WHERE source = %(source)s AND object_id = %(object_id)s"""

PAYMENT_HISTORY: Final = """
SELECT * FROM transitions WHERE source = %(source)s AND object_id = %(object_id)s
ORDER BY id"""

# The metric readings (observability.readings): open rows only, through the status
# indexes, so a scrape costs the same with 5 M events stored as with 5.
EVENT_BACKLOG: Final = """
SELECT source, status, COUNT(*) AS n, MIN(received_at) AS oldest FROM events
WHERE status IN ('pending', 'processing', 'retrying', 'dead')
GROUP BY source, status"""

OUTBOX_BACKLOG: Final = """
SELECT destination, status, COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox
WHERE status IN ('pending', 'delivering', 'dead')
GROUP BY destination, status"""

OPEN_CIRCUITS: Final = """
SELECT name FROM destinations WHERE circuit_open_until > %(now)s"""


def past_expiry_query(open_state: str) -> str:
    """Expected payments past expiry whose payment is open (`open_state`) or unknown."""
    return f"""
SELECT e.source, COUNT(*) AS n FROM expectations AS e
LEFT JOIN payments AS p ON p.source = e.source AND p.object_id = e.object_id
WHERE e.expires_at < %(now)s AND (p.state IS NULL OR {open_state})
GROUP BY e.source"""


def events_deliveries_query(events: str, linked: str) -> str:
    """The deliveries of the events `events` (an IN-list on events.id) and `linked` (the
    same on event_deliveries.event_id) select: each event's first (first_delivery_id) and
    the repeats linked in event_deliveries, by event, oldest first. UNION, not UNION ALL:
    rows written before 2026-11-30 link first deliveries too."""
    return f"""
SELECT x.of_event, d.* FROM deliveries AS d
JOIN (SELECT id AS of_event, first_delivery_id AS delivery_id FROM events WHERE {events}
      UNION SELECT event_id, delivery_id FROM event_deliveries WHERE {linked}) AS x
  ON d.id = x.delivery_id
ORDER BY x.of_event, d.id"""


def list_events_query(where: str) -> str:
    return f"SELECT * FROM events WHERE {where} ORDER BY id DESC LIMIT %(limit)s"


def event_delivery_ids_query(where: str) -> str:
    return f"""
SELECT events.first_delivery_id AS delivery_id FROM events
WHERE {where} AND events.first_delivery_id IS NOT NULL
UNION
SELECT ed.delivery_id FROM event_deliveries AS ed JOIN events ON events.id = ed.event_id
WHERE {where}
ORDER BY 1"""


def event_conditions(d: Dialect, filter: EventFilter) -> tuple[str, Params]:
    """The WHERE conditions on `events` for a filter, and their parameters."""
    equal = [
        (f"events.{column}", None if value is None else str(value))
        for column, value in (
            ("source", filter.source),
            ("status", filter.status),
            ("kind", filter.kind),
            ("object_id", filter.object_id),
            ("dedup_key", filter.dedup_key),
            ("reference", filter.reference),
        )
    ]
    return conditions.where(d, equal, "events.received_at", filter.since, filter.until)


class _Identified(Protocol):
    @property
    def id(self) -> int: ...


Item = TypeVar("Item", bound=_Identified)


def newest_first_page(found: Sequence[Item], limit: int) -> Page[Item]:
    """A page from up to `limit` + 1 rows read newest first: the one past the page says
    there is a next, whose cursor is the last id shown."""
    items = list(found)
    if len(items) > limit:
        items = items[:limit]
        return Page(items, str(items[-1].id) if items else None)
    return Page(items, None)


class ReadVerbs:
    _port: Port

    async def list_events(
        self, filter: EventFilter, cursor: str | None, limit: int
    ) -> Page[StoredEvent]:
        where, params = event_conditions(self._port.dialect, filter)
        before = rows.parse_cursor(cursor)
        if before is not None:
            where += " AND events.id < %(before)s"
            params["before"] = before
        params["limit"] = max(limit, 0) + 1
        found = await self._port.fetch(list_events_query(where), params)
        return newest_first_page([rows.event_from_row(row) for row in found], limit)

    async def get_event(self, event_id: int) -> StoredEvent | None:
        found = await self._port.fetch_one(GET_EVENT, {"id": event_id})
        return None if found is None else rows.event_from_row(found)

    async def event_deliveries(self, event_id: int) -> Sequence[StoredDelivery]:
        """Every delivery that carried this event, oldest first."""
        return (await self.events_deliveries([event_id])).get(event_id, [])

    async def events_deliveries(self, event_ids: Sequence[int]) -> dict[int, list[StoredDelivery]]:
        """`event_deliveries` of each of `event_ids` in one query per IN-list's worth
        (a payment's timeline reads them all); events with none are left out."""
        d = self._port.dialect
        found: dict[int, list[StoredDelivery]] = {}
        for chunk in d.chunks(list(dict.fromkeys(event_ids))):
            events, params = d.in_list("id", "ev", chunk)
            linked, more = d.in_list("event_id", "ed", chunk)
            sql = events_deliveries_query(events, linked)
            for row in await self._port.fetch(sql, {**params, **more}):
                found.setdefault(int(row["of_event"]), []).append(rows.delivery_from_row(row))
        return found

    async def get_delivery(self, delivery_id: int) -> StoredDelivery | None:
        found = await self._port.fetch_one(GET_DELIVERY, {"id": delivery_id})
        return None if found is None else rows.delivery_from_row(found)

    async def event_delivery_ids(self, filter: EventFilter) -> Sequence[int]:
        """Distinct ids of deliveries that carried events matching the filter, ascending
        (used by replay-by-filter, which re-parses them)."""
        where, params = event_conditions(self._port.dialect, filter)
        found = await self._port.fetch(event_delivery_ids_query(where), params)
        return [int(row["delivery_id"]) for row in found]

    async def get_payment(self, source: str, object_id: str) -> Payment | None:
        found = await self._port.fetch_one(GET_PAYMENT, {"source": source, "object_id": object_id})
        return None if found is None else rows.payment_from_row(found)

    async def payment_history(self, source: str, object_id: str) -> Sequence[Transition]:
        """Every transition of the payment, oldest first."""
        params = {"source": source, "object_id": object_id}
        found = await self._port.fetch(PAYMENT_HISTORY, params)
        return [rows.transition_from_row(row) for row in found]

    async def metric_readings(self, now: datetime) -> Readings:
        """What /metrics reports from the store: backlogs, dead letters, payments past
        expiry, destination circuits (observability.readings)."""
        d = self._port.dialect
        by_status: dict[str, int] = dict.fromkeys(("pending", "processing", "retrying", "dead"), 0)
        waiting: dict[str, list[tuple[int, datetime]]] = {}
        dead: dict[str, int] = {}
        for row in await self._port.fetch(EVENT_BACKLOG, {}):
            source, status, count = str(row["source"]), str(row["status"]), int(row["n"])
            by_status[status] += count
            if status == "dead":
                dead[source] = count
            elif status != "processing":
                waiting.setdefault(source, []).append((count, rows.decode_time(row["oldest"])))
        outbox: dict[str, list[tuple[int, datetime]]] = {}
        outbox_dead: dict[str, int] = {}
        for row in await self._port.fetch(OUTBOX_BACKLOG, {}):
            destination, count = str(row["destination"]), int(row["n"])
            if row["status"] == "dead":
                outbox_dead[destination] = count
            else:
                outbox.setdefault(destination, []).append((count, rows.decode_time(row["oldest"])))
        open_state, params = d.in_list("p.state", "open", [s.value for s in OPEN_STATES])
        params["now"] = d.time(now)
        expired = await self._port.fetch(past_expiry_query(open_state), params)
        circuits = await self._port.fetch(OPEN_CIRCUITS, {"now": d.time(now)})
        return Readings(
            taken_at=now,
            events_by_status=by_status,
            pending={source: _backlog(parts) for source, parts in waiting.items()},
            dead=dead,
            past_expiry={str(row["source"]): int(row["n"]) for row in expired},
            outbox={name: _backlog(parts) for name, parts in outbox.items()},
            outbox_dead=outbox_dead,
            circuit_open={str(row["name"]): True for row in circuits},
        )


def _backlog(parts: Sequence[tuple[int, datetime]]) -> Backlog:
    """One backlog of the (count, oldest) of its statuses."""
    return Backlog(sum(count for count, _ in parts), min(oldest for _, oldest in parts))
