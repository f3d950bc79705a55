"""Job leases: which process runs each singleton job (the reconciler's stale cycle, each
destination's relay) and which workers run (a presence lease each, jobs/presence.py),
part of the Store (store/base.py). A lease is a row with an expiry its holder renews
while it runs the job; a holder that dies stops renewing, and once the lease expires
another process takes the job (porteiro.jobs). Written once for both stores over the
connection port (store/port.py): one upsert takes or renews a lease, so two processes
racing for a free job cannot both get it (the primary key on `job` decides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from porteiro.store import rows
from porteiro.store.port import Port


@dataclass(frozen=True, slots=True)
class JobLease:
    job: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime
    lease_until: datetime

    def live(self, now: datetime) -> bool:
        return self.lease_until > now


# The holder renews its own lease; anyone takes an expired one (acquired_at restarts).
TAKE: Final = """
INSERT INTO job_leases AS l (job, holder, acquired_at, renewed_at, lease_until)
VALUES (%(job)s, %(holder)s, %(now)s, %(now)s, %(until)s)
ON CONFLICT (job) DO UPDATE SET
    acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at
                       ELSE excluded.acquired_at END,
    holder = excluded.holder, renewed_at = excluded.renewed_at,
    lease_until = excluded.lease_until
WHERE l.holder = excluded.holder OR l.lease_until < excluded.renewed_at
RETURNING holder"""

RELEASE: Final = "DELETE FROM job_leases WHERE job = %(job)s AND holder = %(holder)s"

# The caller's prefix holds no LIKE wildcard ("worker:").
FORGET: Final = """
DELETE FROM job_leases WHERE job LIKE %(pattern)s AND lease_until < %(before)s"""

LEASES: Final = "SELECT * FROM job_leases ORDER BY job"

# Reads the outbox_due index (destination, status, next_attempt_at).
DUE_OUTBOX: Final = """
SELECT destination, MIN(next_attempt_at) AS due FROM outbox
WHERE status = 'pending' AND next_attempt_at <= %(now)s GROUP BY destination"""

# What a claim would take (store.claim): each MIN reads the first row of the claim's
# own due or lease index.
DUE_EVENTS: Final = """
SELECT MIN(due) AS due FROM (
    SELECT MIN(next_attempt_at) AS due FROM events
    WHERE status IN ('pending', 'retrying') AND next_attempt_at <= %(now)s
    UNION ALL
    SELECT MIN(lease_until) AS due FROM events
    WHERE status = 'processing' AND lease_until < %(now)s
) AS waiting"""


class LeaseStore:
    _port: Port

    async def take_lease(self, job: str, holder: str, now: datetime, until: datetime) -> bool:
        """Take `job` for `holder` until `until`, or renew it when `holder` holds it
        already: True when `holder` now holds it; False while another's lease is live."""
        d = self._port.dialect
        params = {"job": job, "holder": holder, "now": d.time(now), "until": d.time(until)}
        return bool(await self._port.write_returning(TAKE, [params]))

    async def release_lease(self, job: str, holder: str) -> None:
        """Give `job` up (only if `holder` still holds it), so another takes it at once."""
        await self._port.execute(RELEASE, {"job": job, "holder": holder})

    async def forget_leases(self, prefix: str, before: datetime) -> int:
        """Delete the leases of jobs named `prefix`... that expired before `before` (the
        workers' presences, whose names die with their process); how many."""
        params = {"pattern": f"{prefix}%", "before": self._port.dialect.time(before)}
        return await self._port.execute(FORGET, params)

    async def job_leases(self) -> Sequence[JobLease]:
        """Every job's lease, live or expired, by job name."""
        found = await self._port.fetch(LEASES, {})
        return [
            JobLease(
                job=row["job"],
                holder=row["holder"],
                acquired_at=rows.decode_time(row["acquired_at"]),
                renewed_at=rows.decode_time(row["renewed_at"]),
                lease_until=rows.decode_time(row["lease_until"]),
            )
            for row in found
        ]

    async def due_outbox_since(self, now: datetime) -> Mapping[str, datetime]:
        """Per destination with pending rows due by `now`: since when the oldest is due."""
        found = await self._port.fetch(DUE_OUTBOX, {"now": self._port.dialect.time(now)})
        return {row["destination"]: rows.decode_time(row["due"]) for row in found}

    async def due_events_since(self, now: datetime) -> datetime | None:
        """Since when the oldest event waiting for a worker is due (pending or retrying
        and due by `now`, or claimed under a lease that expired), or None."""
        row = await self._port.fetch_one(DUE_EVENTS, {"now": self._port.dialect.time(now)})
        return None if row is None or row["due"] is None else rows.decode_time(row["due"])


def lease_store(store: object) -> LeaseStore:
    """`store` as a LeaseStore (both built-in stores are), or TypeError."""
    if not isinstance(store, LeaseStore):
        raise TypeError(f"{type(store).__name__} does not implement LeaseStore")
    return store
