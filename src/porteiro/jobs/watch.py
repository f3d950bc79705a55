"""The unattended-role check: work waiting for a role that no process runs, e.g. due
events and no worker's presence lease live (only `serve --no-worker` runs), due outbox
rows of a destination whose relay lease nobody holds (every process was started with
--no-relay), or stale payments due for a status read with no reconciler. /readyz shows
the warnings in its body (a missing role does not make a receiver unready: it still
acks) and every `serve`/`worker` process logs them periodically.

`unattended` decides from what was read (pure); `check_roles` reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from porteiro.config import Config
from porteiro.errors import StoreUnavailable
from porteiro.jobs.presence import is_presence
from porteiro.observability import logger
from porteiro.store.leases import JobLease, lease_store
from porteiro.store.reconcile import reconcile_store

# Work due this long with no live lease is unattended: more than a handover takes
# (a dead holder's lease expires within DEFAULT_LEASE_SECONDS).
UNATTENDED_AFTER = timedelta(seconds=30)
WATCH_INTERVAL_SECONDS = 60.0

RECONCILE_JOB = "reconcile"


def relay_job(destination: str) -> str:
    return f"relay:{destination}"


@dataclass(frozen=True, slots=True)
class Unattended:
    """A role with work that no process runs."""

    role: str  # "worker" | "relay" | "reconcile"
    job: str
    message: str
    due_since: datetime | None = None  # the oldest waiting work, when known

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "job": self.job,
            "message": self.message,
            "due_since": None if self.due_since is None else self.due_since.isoformat(),
        }


def unattended(
    now: datetime,
    leases: Sequence[JobLease],
    destinations: Collection[str],
    due_outbox: Mapping[str, datetime],
    reconcile_due: bool,
    due_events: datetime | None = None,
) -> list[Unattended]:
    """The roles with work and no live lease holder (for the workers: no live presence
    of any worker). A lease that expired less than UNATTENDED_AFTER ago is a handover in
    progress (a worker restarting), not yet a warning."""
    by_job = {lease.job: lease for lease in leases}

    def recent(lease: JobLease) -> bool:
        return lease.lease_until > now - UNATTENDED_AFTER

    def unheld(job: str) -> bool:
        lease = by_job.get(job)
        return lease is None or not recent(lease)

    found = []
    if (
        due_events is not None
        and due_events <= now - UNATTENDED_AFTER
        and not any(is_presence(lease.job) and recent(lease) for lease in leases)
    ):
        found.append(
            Unattended(
                "worker", "worker",
                "events wait and no worker runs (start `porteiro worker`, or `porteiro "
                "serve` without --no-worker)",
                due_events,
            )
        )  # fmt: skip
    for name in sorted(destinations):
        due = due_outbox.get(name)
        if due is not None and due <= now - UNATTENDED_AFTER and unheld(relay_job(name)):
            found.append(
                Unattended(
                    "relay", relay_job(name),
                    f"outbox rows for {name} wait and no process runs its relay "
                    "(start `porteiro worker` or `porteiro relay`, without --no-relay)",
                    due,
                )
            )  # fmt: skip
    if reconcile_due and unheld(RECONCILE_JOB):
        found.append(
            Unattended(
                "reconcile", RECONCILE_JOB,
                "stale payments are due for a status read and no process runs the "
                "reconciler (start `porteiro worker` without --no-reconcile)",
            )
        )  # fmt: skip
    return found


async def check_roles(config: Config, store: object, now: datetime) -> list[Unattended]:
    """Read what `unattended` decides from: the leases, and the work only of a role whose
    lease is not live (so a healthy deployment costs one small read)."""
    leases = await lease_store(store).job_leases()
    live = {lease.job for lease in leases if lease.live(now)}
    any_worker = any(is_presence(job) for job in live)
    due_events = None if any_worker else await lease_store(store).due_events_since(now)
    destinations = [name for name in config.destinations if relay_job(name) not in live]
    due_outbox = await lease_store(store).due_outbox_since(now) if destinations else {}
    reconcile_due = (
        config.reconcile.enabled
        and RECONCILE_JOB not in live
        and await _stale_work(config, store, now)
    )
    return unattended(now, leases, destinations, due_outbox, reconcile_due, due_events)


async def _stale_work(config: Config, store: object, now: datetime) -> bool:
    from porteiro.reconcile.reconciler import SourcePolicy

    reconcile = reconcile_store(store)
    for name, source in config.sources.items():
        policy = SourcePolicy.for_source(source)
        if await reconcile.stale_pending(name, now, policy.max_age, 1, grace=policy.grace):
            return True
    return False


class RoleWatch:
    """Logs the unattended roles every WATCH_INTERVAL_SECONDS (a background job of every
    `serve` and `worker` process)."""

    def __init__(
        self,
        config: Config,
        store: object,
        clock: Callable[[], datetime],
        *,
        interval: float = WATCH_INTERVAL_SECONDS,
    ) -> None:
        self._config = config
        self._store = store
        self._clock = clock
        self._interval = interval
        self._log = logger().bind(component="roles")

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval)
            if stop.is_set():
                return
            try:
                found = await check_roles(self._config, self._store, self._clock())
            except StoreUnavailable:
                continue  # the store's own errors are logged where they hurt
            for each in found:
                self._log.warning(each.message, action="role.unattended", **each.to_json())
