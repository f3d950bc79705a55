"""The unattended-role decision (pure) and the roles `serve` hands its receiver processes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from porteiro.jobs.presence import presence_job
from porteiro.jobs.roles import ROLES_ENV, Roles
from porteiro.jobs.watch import UNATTENDED_AFTER, unattended
from porteiro.store.leases import JobLease

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - UNATTENDED_AFTER - timedelta(seconds=1)


def lease(job: str, until: datetime) -> JobLease:
    return JobLease(job, "host:1:ab", until - timedelta(minutes=1), until, until)


def test_due_outbox_rows_without_a_live_relay_are_unattended() -> None:
    [found] = unattended(NOW, [], ["shop"], {"shop": LONG_AGO}, reconcile_due=False)
    assert (found.role, found.job, found.due_since) == ("relay", "relay:shop", LONG_AGO)


def test_a_live_relay_or_recent_work_is_no_warning() -> None:
    live = [lease("relay:shop", NOW + timedelta(seconds=5))]
    assert unattended(NOW, live, ["shop"], {"shop": LONG_AGO}, reconcile_due=False) == []
    recent = {"shop": NOW - UNATTENDED_AFTER / 2}
    assert unattended(NOW, [], ["shop"], recent, reconcile_due=False) == []


def test_a_lease_that_just_expired_is_a_handover_not_a_warning() -> None:
    just = [lease("reconcile", NOW - UNATTENDED_AFTER / 2)]
    assert unattended(NOW, just, [], {}, reconcile_due=True) == []
    gone = [lease("reconcile", LONG_AGO)]
    [found] = unattended(NOW, gone, [], {}, reconcile_due=True)
    assert (found.role, found.job) == ("reconcile", "reconcile")


def test_destinations_without_due_rows_need_nothing() -> None:
    assert unattended(NOW, [], ["shop", "erp"], {"erp": LONG_AGO}, reconcile_due=False)[0].job == (
        "relay:erp"
    )
    assert unattended(NOW, [], ["shop"], {}, reconcile_due=False) == []


def test_due_events_without_a_live_worker_are_unattended() -> None:
    [found] = unattended(NOW, [], [], {}, reconcile_due=False, due_events=LONG_AGO)
    assert (found.role, found.job, found.due_since) == ("worker", "worker", LONG_AGO)
    assert "no worker runs" in found.message
    # A dead worker's presence long expired, or another role's lease, is no worker.
    others = [
        lease(presence_job("host:9:dead"), LONG_AGO),
        lease("reconcile", NOW + timedelta(seconds=5)),
    ]
    assert [f.role for f in unattended(NOW, others, [], {}, False, LONG_AGO)] == ["worker"]


def test_any_live_worker_or_recent_events_is_no_warning() -> None:
    one = [lease(presence_job("host:2:cd"), NOW + timedelta(seconds=5))]
    assert unattended(NOW, one, [], {}, reconcile_due=False, due_events=LONG_AGO) == []
    recent = NOW - UNATTENDED_AFTER / 2
    assert unattended(NOW, [], [], {}, reconcile_due=False, due_events=recent) == []
    assert unattended(NOW, [], [], {}, reconcile_due=False, due_events=None) == []


def test_a_worker_that_just_stopped_is_a_restart_not_a_warning() -> None:
    just = [lease(presence_job("host:3:ef"), NOW - UNATTENDED_AFTER / 2)]
    assert unattended(NOW, just, [], {}, reconcile_due=False, due_events=LONG_AGO) == []


def test_roles_travel_to_the_receiver_processes() -> None:
    for roles in (Roles(), Roles(relay=False, lease_seconds=2.5), Roles(False, False, False)):
        assert Roles.from_env({ROLES_ENV: roles.to_env()}) == roles
    assert Roles.from_env({}) == Roles(worker=False, relay=False, reconcile=False)
