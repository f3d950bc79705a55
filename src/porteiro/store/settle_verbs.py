"""The Store's settle verbs (store/base.py): a claimed event ignored, retried
later or dead-lettered, fenced by its claim. Written once for both stores over the
connection port (store/port.py), which the stores give it (`_port`). The worker's hot
write, `apply_many`, is each store's own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from porteiro.model import EventStatus
from porteiro.store.port import Port
from porteiro.store.records import Claim

# Every fenced write matches the claim token while the event is processing; a lost
# claim (expired and taken over, or requeued) matches no row.
SETTLE: Final = """
UPDATE events SET status = %(status)s, last_error = %(error)s,
    next_attempt_at = COALESCE(%(at)s, next_attempt_at), claim_token = NULL,
    claimed_by = NULL, lease_until = NULL, updated_at = %(now)s
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'processing'"""


class SettleVerbs:
    _port: Port

    async def ignore(self, claim: Claim, reason: str, now: datetime) -> bool:
        """Fenced: mark the claimed event `ignored` with the reason."""
        return await self._settle_event(claim, EventStatus.IGNORED, reason, None, now)

    async def retry_later(self, claim: Claim, error: str, at: datetime, now: datetime) -> bool:
        """Fenced: status retrying, next_attempt_at = at, last_error = error."""
        return await self._settle_event(claim, EventStatus.RETRYING, error, at, now)

    async def dead_letter(self, claim: Claim, error: str, now: datetime) -> bool:
        """Fenced: status dead, last_error = error."""
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
