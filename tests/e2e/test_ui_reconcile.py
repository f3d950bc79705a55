"""The console's "ingest the missing payments" of an audit report, against a fake Pagar.me
whose every webhook was dropped: the audit run without ingesting finds them missing, the
button reads the same window again and stores them, and the worker brings each payment
to the gateway's state."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx

from porteiro.config import SourceConfig
from porteiro.fakes import Settings
from porteiro.reconcile.reconciler import audit_window
from porteiro.store.audit import audit_store
from porteiro.store.base import EventFilter
from tests.e2e.test_reconcile import (
    ADMIN,
    PAGARME_KEY,
    PAGARME_SECRET,
    assert_truth,
    fake,
    porteiro,
    window_of,
)
from tests.support.console import hidden, log_in


async def test_the_console_ingests_what_an_audit_found_missing(tmp_path: Path) -> None:
    source = SourceConfig(name="pagarme", provider="pagarme", secrets=(PAGARME_SECRET,),
                          api_key=PAGARME_KEY)  # fmt: skip
    settings = Settings(webhook_url="http://127.0.0.1:9/unset", secret=PAGARME_SECRET,
                        api_key=PAGARME_KEY, hold=True)  # fmt: skip
    async with fake("pagarme", settings, payments=8, seed=5, drop_rate=1.0) as gw:
        source = replace(source, api_base_url=f"{gw.url}/core/v5")
        async with porteiro(f"sqlite:///{tmp_path / 'p.db'}", source) as app:
            await gw.start(f"{app.url}/webhooks/pagarme")
            state = await gw.done()  # every webhook dropped
            since, until = window_of(state)
            found = await audit_window(app.runtime, "pagarme", since, until, ingest=False)
            assert len(found.missing) == 8 and found.ingested == 0 and found.id is not None
            async with httpx.AsyncClient(base_url=app.url) as http:
                await log_in(http, ADMIN)
                page = await http.get(f"/ui/reconciliation/{found.id}")
                assert page.status_code == 200 and 'id="ingest-missing"' in page.text
                csrf = hidden(page.text, "csrf")
                done = await http.post(
                    f"/ui/reconciliation/{found.id}/ingest",
                    data={"csrf": csrf},
                    headers={"hx-request": "true"},
                )
                assert done.status_code == 200, done.text
                assert "incorporados: " in done.text
                [new_report] = re.findall(r"/ui/reconciliation/(\d+)", done.text)
                assert int(new_report) != found.id
            await app.settled()
            await assert_truth(app, state["payments"])
            [row] = (await audit_store(app.runtime.store).list_audit(None, 5)).items
            assert (row.entry.token_name, row.entry.action, row.entry.outcome) == (
                "admin", "reconcile.ingest", "ok",
            )  # fmt: skip
            assert row.entry.affected > 0


async def test_a_gateway_that_cannot_be_read_is_said_and_nothing_stored(tmp_path: Path) -> None:
    unreachable = "http://127.0.0.1:9/core/v5"
    source = SourceConfig(name="pagarme", provider="pagarme", secrets=(PAGARME_SECRET,),
                          api_key=PAGARME_KEY, api_base_url=unreachable)  # fmt: skip
    async with porteiro(f"sqlite:///{tmp_path / 'p.db'}", source) as app:
        store, now = app.runtime.store, app.runtime.clock()
        summary = {"kind": "audit", "missing": 1, "divergent": 0, "unknown": 0, "ingested": 0}
        missing = [{"object_id": "or_1", "ingested": False}]
        report_id = await store.save_report(
            "pagarme", "audit", {**summary, "findings": {"missing": missing}}, summary,
            since=now - timedelta(hours=1), until=now, now=now,
        )  # fmt: skip
        async with httpx.AsyncClient(base_url=app.url) as http:
            await log_in(http, ADMIN)
            page = await http.get(f"/ui/reconciliation/{report_id}")
            failed = await http.post(
                f"/ui/reconciliation/{report_id}/ingest", data={"csrf": hidden(page.text, "csrf")}
            )
        assert failed.status_code == 502 and "a consulta ao gateway falhou" in failed.text
        assert (await store.list_events(EventFilter(), None, 5)).items == []
        [row] = (await audit_store(store).list_audit(None, 5)).items
        assert (row.entry.action, row.entry.outcome, row.entry.affected) == (
            "reconcile.ingest", "rejected", 0,
        )  # fmt: skip
