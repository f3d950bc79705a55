"""`porteiro simulate`: the plan is pure and reproducible; sending goes over real HTTP to
a real Porteiro (uvicorn, receiver, worker, SQLite) that checks every signature."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.fakes.simulate import Plan, build_plan, send
from porteiro.http.app import create_app
from porteiro.model import EventStatus
from porteiro.providers import build_provider
from porteiro.providers.base import Provider
from porteiro.replay import matching_events
from porteiro.runtime import Runtime, utc_now
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.support.servers import free_port, live_server

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER_SECRET = "whsec_DWn+aYYze9MYgeZDUxzzW/SkFmkxH0Kj"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def standard(secret: str = SECRET) -> Provider:
    return build_provider(SourceConfig(name="std", provider="standard", secrets=(secret,)))


def plan(seed: int, **options: object) -> Plan:
    settings: dict[str, object] = {"count": 10, "duplicates": 0.3, "shuffle": True, "refunds": 0.5}
    settings.update(options)
    return build_plan(standard(), now=NOW, rng=random.Random(seed), **settings)  # type: ignore[arg-type]


def event_ids(built: Plan) -> list[str]:
    return [json.loads(delivery.body)["id"] for delivery in built.deliveries]


def test_plan_is_reproducible_from_its_seed() -> None:
    assert plan(7).deliveries == plan(7).deliveries
    assert plan(7).deliveries != plan(8).deliveries


def test_duplicates_resend_the_same_body_for_the_fraction_asked() -> None:
    built = plan(1, shuffle=False, refunds=0.0)
    originals = [d for d in built.deliveries if not d.duplicate]
    assert len(originals) == 30  # created, authorized, paid for each of 10 payments
    assert built.duplicates == 9  # 30 % of 30
    bodies = {d.body for d in originals}
    assert all(d.body in bodies for d in built.deliveries if d.duplicate)
    assert len(set(event_ids(built))) == 30


def test_unshuffled_plan_keeps_each_lifecycle_in_order() -> None:
    built = plan(2, shuffle=False, duplicates=0.0, refunds=1.0)
    kinds = [json.loads(d.body)["type"] for d in built.deliveries if d.payment == 0]
    assert kinds == [
        "payment.created",
        "payment.authorized",
        "payment.paid",
        "payment.partially_refunded",
        "payment.refunded",
    ]


def test_shuffle_mixes_payments() -> None:
    built = plan(3, duplicates=0.0, refunds=0.0)
    order = [d.payment for d in built.deliveries]
    assert order != sorted(order)
    assert Counter(order) == {index: 3 for index in range(10)}


def test_whole_duplicates_resend_every_delivery_that_many_times() -> None:
    built = plan(1, shuffle=False, duplicates=3.0, refunds=0.0)
    assert built.duplicates == 90  # 3 extra copies of each of 30 deliveries
    assert set(Counter(d.body for d in built.deliveries).values()) == {4}
    mixed = plan(1, shuffle=False, duplicates=1.5, refunds=0.0)
    assert mixed.duplicates == 30 + 15


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        plan(1, duplicates=-0.5)
    with pytest.raises(ValueError):
        plan(1, refunds=1.5)
    with pytest.raises(ValueError):
        plan(1, count=-1)


@dataclass
class Served:
    url: str
    runtime: Runtime


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    config = Config(
        store_url=f"sqlite:///{tmp_path / 'porteiro.db'}",
        sources={"std": SourceConfig(name="std", provider="standard", secrets=(SECRET,))},
        worker=WorkerConfig(poll_interval_seconds=0.1),
    )
    runtime = Runtime.build(config)
    app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
    async with live_server(app) as url:
        yield Served(url, runtime)


async def test_simulated_deliveries_are_accepted_and_deduplicated(served: Served) -> None:
    provider = standard()
    built = build_plan(
        provider, count=15, duplicates=0.4, shuffle=True, refunds=0.3, now=utc_now(),
        rng=random.Random(11),
    )  # fmt: skip
    progress: list[int] = []
    report = await send(
        built, provider, url=served.url, source="std", concurrency=8, clock=utc_now,
        on_sent=progress.append,
    )  # fmt: skip
    assert report.all_ok and report.sent == len(built.deliveries) == len(progress)
    assert report.statuses == {200: report.sent}
    assert report.duplicates == built.duplicates > 0
    assert 0 < report.percentile(0.5) <= report.percentile(0.99)
    assert f"2xx {report.sent}" in report.summary()

    distinct = len(set(event_ids(built)))
    store = served.runtime.store
    for _ in range(100):  # the in-process worker applies them
        stored = await matching_events(store, EventFilter(source="std"))
        if len(stored) == distinct and all(e.status is EventStatus.DONE for e in stored):
            break
        await asyncio.sleep(0.05)
    assert len(stored) == distinct
    assert all(e.status is EventStatus.DONE for e in stored)
    assert sum(e.duplicates for e in stored) == built.duplicates


async def test_wrongly_signed_deliveries_are_counted_as_refused(served: Served) -> None:
    forger = standard(OTHER_SECRET)
    built = build_plan(
        forger, count=2, duplicates=0.0, shuffle=False, refunds=0.0, now=utc_now(),
        rng=random.Random(5),
    )  # fmt: skip
    report = await send(built, forger, url=served.url, source="std", concurrency=2, clock=utc_now)
    assert report.statuses == {401: 6}
    assert not report.all_ok
    assert "4xx 6" in report.summary()
    assert await matching_events(served.runtime.store, EventFilter(source="std")) == []


async def test_unreachable_url_is_a_transport_error() -> None:
    provider = standard()
    built = build_plan(
        provider, count=1, duplicates=0.0, shuffle=False, refunds=0.0, now=NOW,
        rng=random.Random(1),
    )  # fmt: skip
    report = await send(
        built, provider, url=f"http://127.0.0.1:{free_port()}", source="std", concurrency=1,
        clock=utc_now,
    )  # fmt: skip
    assert report.transport_errors == 3 and not report.all_ok
