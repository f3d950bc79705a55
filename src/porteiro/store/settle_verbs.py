"""The Store protocol's settle and requeue verbs (store/base.py), written once for both
stores over the connection port (store/port.py): a mixin of SqliteStore and
PostgresStore, which give it `_port`. The worker's hot write, `apply_many`, is each
store's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from porteiro.model import EventStatus
from porteiro.store.base import Claim
from porteiro.store.port import Port, Queries

# Every fenced write matches the claim token while the event is processing; a lost
# claim (expired and taken over, or requeued) matches no row.
SETTLE: Final = """
UPDATE events SET status = %(status)s, last_error = %(error)s,
    next_attempt_at = COALESCE(%(at)s, next_attempt_at), claim_token = NULL,
    claimed_by = NULL, lease_until = NULL, updated_at = %(now)s
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'processing'"""


def requeue_query(chosen: str) -> str:
    """Make the `chosen` events (an IN-list of ids) pending and due now, from scratch."""
    return f"""
UPDATE events SET status = 'pending', next_attempt_at = %(now)s, attempts = 0,
    claim_token = NULL, claimed_by = NULL, lease_until = NULL, updated_at = %(now)s
WHERE {chosen}"""


class SettleVerbs:
    _port: Port

    async def ignore(self, claim: Claim, reason: str, now: datetime) -> bool:
        return await self._settle_event(claim, EventStatus.IGNORED, reason, None, now)

    async def retry_later(self, claim: Claim, error: str, at: datetime, now: datetime) -> bool:
        return await self._settle_event(claim, EventStatus.RETRYING, error, at, now)

    async def dead_letter(self, claim: Claim, error: str, now: datetime) -> bool:
        return await self._settle_event(claim, EventStatus.DEAD, error, None, now)

    async def _settle_event(
        self, claim: Claim, status: EventStatus, error: str, at: datetime | None, now: datetime
    ) -> bool:
        d = self._port.dialect
        params = {
            "status": status.value, "error": error, "at": d.optional_time(at),
            "now": d.time(now), "id": claim.event.id, "token": claim.token,
        }  # fmt: skip
        return await self._port.execute(SETTLE, params) > 0

    async def requeue(self, event_ids: Sequence[int], now: datetime) -> int:
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
