"""The outbox's settle and operator verbs (store/outbox.py), written once for both stores
over the connection port (store/port.py): a mixin of the dialects' outbox mixins, which
keep what differs (the claim, and the insert the ledger transaction makes).

Settling is fenced by the claim token; redrive and the destination states are an
operator's (admin API, CLI) and a breaker's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from porteiro.store import rows
from porteiro.store.base import Page
from porteiro.store.outbox import (
    REDRIVE_BATCH,
    DestinationState,
    OutboxClaim,
    OutboxStatus,
    StoredOutboxRow,
    changed_state,
    empty_counts,
    row_from_db,
    state_from_db,
)
from porteiro.store.port import Port, Queries
from porteiro.store.read_verbs import newest_first_page

# Every write under a claim matches its token: a lost claim matches no row.
SETTLE: Final = """
UPDATE outbox SET status = %(status)s, attempts = attempts + %(recount)s,
    next_attempt_at = COALESCE(%(at)s, next_attempt_at), last_error = %(error)s,
    last_status = COALESCE(%(result)s, last_status), delivered_at = %(delivered_at)s,
    claim_token = NULL, lease_until = NULL, updated_at = %(now)s
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'delivering'"""


def redrive_query(chosen: str, lock: str) -> str:
    """Dead rows of a destination back to pending, oldest first; `chosen` narrows them
    (an IN-list of ids, or nothing), `lock` passes over rows a relay is settling."""
    return f"""
UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = %(now)s,
    updated_at = %(now)s
WHERE id IN (
    SELECT id FROM outbox WHERE destination = %(destination)s AND status = 'dead'{chosen}
    ORDER BY id LIMIT %(limit)s{lock})"""


def list_query(*, of_status: bool, before: bool) -> str:
    """A destination's rows, newest first; only of a status, only before an id."""
    where = "destination = %(destination)s"
    if of_status:
        where += " AND status = %(status)s"
    if before:
        where += " AND id < %(before)s"
    return f"SELECT * FROM outbox WHERE {where} ORDER BY id DESC LIMIT %(limit)s"


BACKLOG: Final = "SELECT destination, status, COUNT(*) AS n FROM outbox GROUP BY 1, 2"

STATES: Final = "SELECT * FROM destinations"

GET_STATE: Final = "SELECT * FROM destinations WHERE name = %(name)s"

UPSERT_STATE: Final = """
INSERT INTO destinations (name, paused, disabled_reason, circuit_open_until, updated_at)
VALUES (%(name)s, %(paused)s, %(disabled_reason)s, %(circuit_open_until)s, %(updated_at)s)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
    disabled_reason = excluded.disabled_reason,
    circuit_open_until = excluded.circuit_open_until, updated_at = excluded.updated_at"""


class OutboxVerbs:
    _port: Port

    async def complete_outbox(self, claim: OutboxClaim, result: str, now: datetime) -> bool:
        return await self._settle(claim, OutboxStatus.DONE, now, result=result, delivered=True)

    async def retry_outbox(
        self, claim: OutboxClaim, error: str, result: str | None, at: datetime, now: datetime
    ) -> bool:
        return await self._settle(claim, OutboxStatus.PENDING, now, error, result, at)

    async def dead_outbox(
        self, claim: OutboxClaim, error: str, result: str | None, now: datetime
    ) -> bool:
        return await self._settle(claim, OutboxStatus.DEAD, now, error, result)

    async def release_outbox(self, claim: OutboxClaim, now: datetime) -> bool:
        return await self._settle(
            claim, OutboxStatus.PENDING, now, claim.row.last_error, at=now, recount=-1
        )

    async def _settle(
        self,
        claim: OutboxClaim,
        status: OutboxStatus,
        now: datetime,
        error: str | None = None,
        result: str | None = None,
        at: datetime | None = None,
        *,
        delivered: bool = False,
        recount: int = 0,
    ) -> bool:
        """Fenced by the claim token: set status, error, result, next attempt."""
        d = self._port.dialect
        stamp = d.time(now)
        params = {
            "status": status.value, "recount": recount, "at": d.optional_time(at),
            "error": error, "result": result, "delivered_at": stamp if delivered else None,
            "now": stamp, "id": claim.row.id, "token": claim.token,
        }  # fmt: skip
        return await self._port.execute(SETTLE, params) > 0

    async def redrive_outbox(
        self, destination: str, now: datetime, *, ids: Sequence[int] | None = None
    ) -> int:
        d = self._port.dialect
        stamp = d.time(now)
        # Every dead row of the destination, or these ids a chunk (one IN-list) at a time.
        chunks: list[Sequence[int] | None] = (
            [None] if ids is None else [*d.chunks(sorted(set(ids)))]
        )
        redriven = 0
        for chunk in chunks:
            params = {"destination": destination, "now": stamp, "limit": REDRIVE_BATCH - redriven}
            chosen = ""
            if chunk is not None:
                condition, chosen_ids = d.in_list("id", "ids", chunk)
                chosen, params = f" AND {condition}", {**params, **chosen_ids}
            query = redrive_query(chosen, d.lock(skip_locked=True))
            redriven += await self._port.execute(query, params)
            if redriven >= REDRIVE_BATCH:
                break
        return redriven

    async def list_outbox(
        self, destination: str, status: OutboxStatus | None, cursor: str | None, limit: int
    ) -> Page[StoredOutboxRow]:
        before = rows.parse_cursor(cursor)
        query = list_query(of_status=status is not None, before=before is not None)
        params = {
            "destination": destination,
            "status": None if status is None else status.value,
            "before": before,
            "limit": max(limit, 0) + 1,
        }
        found = await self._port.fetch(query, params)
        return newest_first_page([row_from_db(row) for row in found], limit)

    async def outbox_backlog(self) -> dict[str, dict[str, int]]:
        backlog: dict[str, dict[str, int]] = {}
        for row in await self._port.fetch(BACKLOG, {}):
            backlog.setdefault(row["destination"], empty_counts())[row["status"]] = int(row["n"])
        return backlog

    async def destination_states(self) -> dict[str, DestinationState]:
        return {row["name"]: state_from_db(row) for row in await self._port.fetch(STATES, {})}

    async def set_destination_state(
        self,
        name: str,
        now: datetime,
        *,
        paused: bool | None = None,
        disabled_reason: str | None = None,
        enable: bool = False,
        circuit_open_until: datetime | None = None,
        close_circuit: bool = False,
    ) -> DestinationState:
        d = self._port.dialect

        async def change(tx: Queries) -> DestinationState:
            found = await tx.fetch_one(GET_STATE + d.lock(), {"name": name})
            state = changed_state(
                DestinationState(name) if found is None else state_from_db(found),
                now, paused=paused, disabled_reason=disabled_reason, enable=enable,
                circuit_open_until=circuit_open_until, close_circuit=close_circuit,
            )  # fmt: skip
            await tx.execute(
                UPSERT_STATE,
                {
                    "name": name,
                    "paused": state.paused,
                    "disabled_reason": state.disabled_reason,
                    "circuit_open_until": d.optional_time(state.circuit_open_until),
                    "updated_at": d.time(now),
                },
            )
            return state

        return await self._port.transaction(change)
