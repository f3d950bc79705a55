"""The roles a long-running process takes, and the background work they make.

- worker: applies stored events (porteiro.worker); any number run side by side, each
  keeping a presence lease (`worker:<id>`, jobs/presence.py) alive while it runs.
- relay: one singleton job per destination (`relay:NAME`), run by whichever process
  holds its lease. A singleton although the outbox claim (SKIP LOCKED, fenced by a claim
  token) is safe for many relays: a destination's `concurrency`, `rate_per_second` and
  circuit breaker are counted by one relay, so two would double what the merchant gets.
- reconcile: the stale cycle, one singleton job (`reconcile`), unless
  `[reconcile] enabled = false`.
- the role watch (jobs/watch.py): every process logs the roles that have work and run
  nowhere (due events and no worker's presence among them).

`serve` takes them all by default (also each of `--receivers N` processes), `worker`
and `relay` their share; flags turn each off. Whatever runs where, each singleton job
runs in one process at a time and moves when its holder dies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from porteiro.config import DestinationConfig
from porteiro.jobs.lease import DEFAULT_LEASE_SECONDS, LeasedJob, Work, new_holder_id
from porteiro.jobs.watch import RECONCILE_JOB, RoleWatch, relay_job
from porteiro.store.leases import lease_store

if TYPE_CHECKING:
    from porteiro.runtime import Runtime

ROLES_ENV = "PORTEIRO_SERVE_ROLES"


@dataclass(frozen=True, slots=True)
class Roles:
    worker: bool = True
    relay: bool = True
    reconcile: bool = True
    lease_seconds: float = DEFAULT_LEASE_SECONDS

    def to_env(self) -> str:
        """For `serve --receivers N`'s processes, which build their app from the
        environment: e.g. "worker,relay lease=15.0"."""
        names = [name for name in ("worker", "relay", "reconcile") if getattr(self, name)]
        return f"{','.join(names)} lease={self.lease_seconds}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Roles:
        """What `to_env` wrote; nothing but the watch when the variable is missing."""
        text = env.get(ROLES_ENV)
        if text is None:
            return cls(worker=False, relay=False, reconcile=False)
        names, _, lease = text.partition(" lease=")
        chosen = set(names.split(","))
        return cls(
            worker="worker" in chosen,
            relay="relay" in chosen,
            reconcile="reconcile" in chosen,
            lease_seconds=float(lease) if lease else DEFAULT_LEASE_SECONDS,
        )


def background(runtime: Runtime, roles: Roles, *, worker: Work | None = None) -> list[Work]:
    """The process's background work, each running until its event is set; `worker`
    instead of a default Worker when given."""
    from porteiro.reconcile.reconciler import Reconciler
    from porteiro.worker import Worker

    holder = new_holder_id()
    work: list[Work] = [RoleWatch(runtime.config, runtime.store, runtime.clock).run]
    if roles.worker:
        work.append(worker or Worker(runtime, presence_seconds=roles.lease_seconds).run)
    if roles.relay:
        destinations = list(runtime.config.destinations.values())
        work += relay_jobs(
            runtime.store, destinations, runtime.clock, holder=holder,
            lease_seconds=roles.lease_seconds,
        )  # fmt: skip
    if roles.reconcile and runtime.config.reconcile.enabled:

        async def reconcile(stop: asyncio.Event) -> None:
            await Reconciler(runtime).run(stop)  # a fresh one (clients) per lease

        leased = LeasedJob(
            RECONCILE_JOB, reconcile, lease_store(runtime.store), runtime.clock,
            holder=holder, lease_seconds=roles.lease_seconds,
        )  # fmt: skip
        work.append(leased.run)
    return work


def relay_jobs(
    store: object,
    destinations: Sequence[DestinationConfig],
    clock: Callable[[], datetime],
    *,
    holder: str,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    poll_interval: float = 0.5,
) -> list[Work]:
    """One leased job per destination: its relay runs while this process holds it."""
    from porteiro.sinks.relay import build_relays

    def relay_of(destination: DestinationConfig) -> Work:
        async def relay(stop: asyncio.Event) -> None:
            # Built per lease: a relay closes its sender when it stops.
            [built] = build_relays(store, [destination], clock, poll_interval=poll_interval)
            await built.run(stop)

        return LeasedJob(
            relay_job(destination.name), relay, lease_store(store), clock,
            holder=holder, lease_seconds=lease_seconds,
        ).run  # fmt: skip

    return [relay_of(destination) for destination in destinations]


def until_cancelled(work: Work) -> Callable[[], Awaitable[None]]:
    """`work` as a background task of the app (http/app.py), which cancels it on shutdown."""

    async def run() -> None:
        await work(asyncio.Event())

    run.__qualname__ = getattr(work, "__qualname__", "job")
    return run
