"""Every expression of the alert rules (deploy/prometheus/alerts.yml) and of the Grafana
dashboard (deploy/grafana/porteiro.json) reads metrics Porteiro exports, by labels they
carry: a renamed metric or label would otherwise leave an alert that never fires and a
panel that stays empty.

What Porteiro exports is what a real app's /metrics answers after a short real load:
signed deliveries (one repeated, one forged, one to an unknown source), a worker pass
that fans out to a destination's outbox, a relay failing to reach that destination
until its circuit opens, and a reconciliation audit.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from porteiro.config import Config, DestinationConfig
from porteiro.reconcile.reconciler import audit_window
from porteiro.runtime import Runtime
from porteiro.sinks.relay import build_relays
from porteiro.worker import Worker
from tests.support.app import SOURCE, make_config, post_signed
from tests.support.events import event_body, lifecycle_bodies
from tests.support.promql import exported, reads, unknown
from tests.support.signing import standard_headers
from tests.support.waiting import wait_until_async

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "porteiro.json"
RUNBOOK = ROOT / "docs" / "operations.md"
# A row of the runbook's metrics tables: | `name` | type | labels | meaning |
METRIC_ROW = re.compile(r"^\| `(porteiro_\w+)` \| (counter|gauge|histogram) \|", re.MULTILINE)
OTHER_SECRET = "whsec_" + base64.b64encode(b"not-the-source-secret-0123456789").decode()
# Grafana's `label_values(metric, label)` variable query.
LABEL_VALUES = re.compile(r"label_values\(\s*(?P<metric>[^,]+?)\s*,\s*(?P<label>\w+)\s*\)")

pytestmark = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


@pytest.fixture
def config(store_url: str) -> Config:
    # Nothing listens on port 1: every attempt fails, and the first opens the circuit.
    erp = DestinationConfig(
        "erp", url="http://127.0.0.1:1/", secret="whsec_MTIz", circuit_failures=1
    )
    return replace(make_config(store_url), destinations={"erp": erp})


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_expressions() -> tuple[list[str], list[tuple[str, str]]]:
    """The panels' `expr`s, and the (metric, label) pairs of its variables' queries."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    variables = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            found = LABEL_VALUES.fullmatch(query)
            assert found is not None, f"variable {variable['name']}: {query!r}"
            variables.append((found["metric"], found["label"]))
    return expressions, variables


async def relay_until_the_circuit_opens(client: httpx.AsyncClient, runtime: Runtime) -> None:
    destinations = list(runtime.config.destinations.values())
    (relay,) = build_relays(
        runtime.store, destinations, runtime.clock, poll_interval=0.05, metrics=runtime.metrics
    )
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))

    async def circuit_open() -> bool:
        text = (await client.get("/metrics")).text
        return 'porteiro_destination_circuit_open{destination="erp"} 1.0' in text

    try:
        await wait_until_async(circuit_open, "the destination's circuit open", within=20)
    finally:
        stop.set()
        await running


async def scrape_after_a_load(client: httpx.AsyncClient, runtime: Runtime) -> str:
    now = datetime.now(UTC)
    # A payment's lifecycle, one event of it again, and one with a time an adapter reads
    # past (a warning).
    bodies = lifecycle_bodies(1, now - timedelta(minutes=1))
    bodies += [bodies[-1], event_body("evt_odd", object_id="pay_2", occurred_at="soon")]
    for body in bodies:
        assert (await post_signed(client, body, json.loads(body)["id"])).status_code == 200
    forged = standard_headers(body, "forged", secret=OTHER_SECRET)
    refused = await client.post(f"/webhooks/{SOURCE}", content=body, headers=forged)
    assert refused.status_code == 401
    assert (await post_signed(client, body, "lost", path="/webhooks/nowhere")).status_code == 404
    assert await Worker(runtime).run_once() == 5
    await relay_until_the_circuit_opens(client, runtime)
    await audit_window(runtime, SOURCE, now - timedelta(hours=1), now, ingest=False)
    response = await client.get("/metrics")
    assert response.status_code == 200
    return response.text


async def test_alert_rules_and_dashboard_read_only_what_porteiro_exports(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    metrics = exported(await scrape_after_a_load(client, runtime))
    panels, variables = dashboard_expressions()
    expressions = rule_expressions() + panels
    assert len(expressions) > 20
    problems = {expression: unknown(expression, metrics) for expression in expressions}
    assert {expr: found for expr, found in problems.items() if found} == {}
    for metric, label in variables:
        assert label in (metrics.get(metric) or set()), (metric, label)
    # The load gave every metric read a series, so the label checks above checked them.
    read = set().union(*(reads(expression).metrics for expression in expressions))
    assert {name for name in read if metrics[name] is None} == set()


async def test_the_runbook_lists_every_metric_porteiro_exports_with_its_type(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    families = text_string_to_metric_families(await scrape_after_a_load(client, runtime))
    exposed = {f.name + ("_total" if f.type == "counter" else ""): f.type for f in families}
    documented = dict(METRIC_ROW.findall(RUNBOOK.read_text(encoding="utf-8")))
    assert documented == exposed
