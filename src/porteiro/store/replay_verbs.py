"""The Store's replay (store/base.py): requeue events as they are, or re-parse a
delivery with the current code. Written once for both stores over the connection port
(store/port.py), which the stores give it (`_port`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from porteiro.model import ParsedEvent
from porteiro.store import rows
from porteiro.store.dialect import event_params
from porteiro.store.port import Port, Queries
from porteiro.store.read_verbs import GET_DELIVERY


def requeue_query(chosen: str) -> str:
    """Make the `chosen` events (an IN-list of ids) pending and due now, from scratch."""
    return f"""
UPDATE events SET status = 'pending', next_attempt_at = %(now)s, attempts = 0,
    claim_token = NULL, claimed_by = NULL, lease_until = NULL, updated_at = %(now)s
WHERE {chosen}"""


SETTLE_PLACEHOLDER: Final = """
UPDATE events SET status = 'ignored', claim_token = NULL, claimed_by = NULL,
    lease_until = NULL, updated_at = %(now)s
WHERE source = %(source)s AND first_delivery_id = %(id)s AND type = 'porteiro.unparseable'"""

# Replay with current code: the parsed fields are overwritten and the event made due.
UPSERT_REPARSED: Final = """
INSERT INTO events
    (source, dedup_key, kind, type, object_id, reference, amount, currency, occurred_at,
     refunded_total, thin, data, status, next_attempt_at, last_error, first_delivery_id,
     last_delivery_id, received_at, updated_at)
VALUES (%(source)s, %(dedup_key)s, %(kind)s, %(type)s, %(object_id)s, %(reference)s,
        %(amount)s, %(currency)s, %(occurred_at)s, %(refunded_total)s, %(thin)s, %(data)s,
        %(status)s, %(next_attempt_at)s, %(last_error)s, %(delivery_id)s, %(delivery_id)s,
        %(received_at)s, %(now)s)
ON CONFLICT (source, dedup_key) DO UPDATE SET
    kind = excluded.kind, type = excluded.type, object_id = excluded.object_id,
    reference = excluded.reference, amount = excluded.amount, currency = excluded.currency,
    occurred_at = excluded.occurred_at, refunded_total = excluded.refunded_total,
    thin = excluded.thin, data = excluded.data, status = excluded.status,
    last_error = COALESCE(excluded.last_error, events.last_error),
    next_attempt_at = excluded.next_attempt_at, attempts = 0, claim_token = NULL,
    claimed_by = NULL, lease_until = NULL, updated_at = excluded.updated_at
RETURNING id"""

LINK: Final = """
INSERT INTO event_deliveries (event_id, delivery_id) VALUES (%(event_id)s, %(delivery_id)s)
ON CONFLICT DO NOTHING"""

CLEAR_PARSE_ERROR: Final = "UPDATE deliveries SET parse_error = NULL WHERE id = %(id)s"


class ReplayVerbs:
    _port: Port

    async def requeue(self, event_ids: Sequence[int], now: datetime) -> int:
        """Replay: make these events pending and due now with attempts reset, whatever
        their status. Returns how many exist."""
        d = self._port.dialect
        ids = sorted(set(event_ids))
        stamp = d.time(now)

        async def requeue_all(tx: Queries) -> int:
            count = 0
            for chunk in d.chunks(ids):  # one transaction, one IN-list at a time
                chosen, params = d.in_list("id", "ids", chunk)
                count += await tx.execute(requeue_query(chosen), {**params, "now": stamp})
            return count

        count = await self._port.transaction(requeue_all) if ids else 0
        if count:
            await self._port.wake_workers()
        return count

    async def reparsed(
        self, delivery_id: int, events: Sequence[ParsedEvent], now: datetime
    ) -> Sequence[int]:
        """Replay with current code: overwrite the parsed fields of each event (matched on
        source and dedup_key; inserted if new, linked to the delivery), make them pending
        and due now with attempts reset; clear the delivery's parse_error and mark its
        unparseable placeholder `ignored`. Returns the event ids."""
        d = self._port.dialect
        stamp = d.time(now)

        async def replay(tx: Queries) -> list[int]:
            found = await tx.fetch_one(GET_DELIVERY, {"id": delivery_id})
            if found is None:
                raise LookupError(f"no delivery {delivery_id}")
            delivery = rows.delivery_from_row(found)
            received = d.time(delivery.received_at)
            # Its placeholders first: an item the current code still cannot read is dead
            # again.
            where = {"now": stamp, "source": delivery.source, "id": delivery_id}
            await tx.execute(SETTLE_PLACEHOLDER, where)
            event_ids: list[int] = []
            for event in events:
                params = event_params(d, event, delivery.source, now)
                params.update(
                    rows.reparsed_columns(event, stamp),
                    delivery_id=delivery_id,
                    received_at=received,
                )
                upserted = await tx.fetch_one(UPSERT_REPARSED, params)
                if upserted is None:  # RETURNING always yields one row
                    raise RuntimeError("reparsed upsert returned no row")
                event_ids.append(int(upserted["id"]))
                await tx.execute(LINK, {"event_id": upserted["id"], "delivery_id": delivery_id})
            await tx.execute(CLEAR_PARSE_ERROR, {"id": delivery_id})
            return event_ids

        event_ids = await self._port.transaction(replay)
        if event_ids:
            await self._port.wake_workers()
        return event_ids
