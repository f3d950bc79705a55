"""Job leases: which process runs each singleton job (the reconciler's stale cycle, each
destination's relay) and which workers run (a presence lease each, jobs/presence.py),
beside the core Store protocol. A lease is a row with an expiry its
holder renews while it runs the job; a holder that dies stops renewing, and once the
lease expires another process takes the job (porteiro.jobs). Implemented once for both
stores, over their connection port, by store/lease_verbs.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class JobLease:
    job: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime
    lease_until: datetime

    def live(self, now: datetime) -> bool:
        return self.lease_until > now


@runtime_checkable
class LeaseStore(Protocol):
    async def take_lease(self, job: str, holder: str, now: datetime, until: datetime) -> bool:
        """Take `job` for `holder` until `until`, or renew it when `holder` holds it
        already: True when `holder` now holds it; False while another's lease is live."""

    async def release_lease(self, job: str, holder: str) -> None:
        """Give `job` up (only if `holder` still holds it), so another takes it at once."""

    async def forget_leases(self, prefix: str, before: datetime) -> int:
        """Delete the leases of jobs named `prefix`... that expired before `before` (the
        workers' presences, whose names die with their process); how many."""

    async def job_leases(self) -> Sequence[JobLease]:
        """Every job's lease, live or expired, by job name."""

    async def due_outbox_since(self, now: datetime) -> Mapping[str, datetime]:
        """Per destination with pending rows due by `now`: since when the oldest is due."""

    async def due_events_since(self, now: datetime) -> datetime | None:
        """Since when the oldest event waiting for a worker is due (pending or retrying
        and due by `now`, or claimed under a lease that expired), or None."""


def lease_store(store: object) -> LeaseStore:
    """`store` as a LeaseStore (both built-in stores are), or TypeError."""
    if not isinstance(store, LeaseStore):
        raise TypeError(f"{type(store).__name__} does not implement LeaseStore")
    return store
