"""The console in a real browser: Playwright driving Debian's Chromium against Porteiro
served by uvicorn on a real SQLite store (the stores' differences are
tests/e2e/test_ui_http.py's). An operator logs in, finds a payment by its order number
and reads its timeline, replays a dead letter after its dry-run diff and sees it done
without a reload, pauses and resumes a destination, and logs out; a POST without the
CSRF token is refused; a `read` token sees no action button; the CSP is never violated.

Each page is photographed: into docs/ui/ with PORTEIRO_TEST_SCREENSHOTS=docs/ui (`make
screenshots`, whose pictures docs/ui.md shows), else into the test's temporary folder.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright

from porteiro.config import Config, UiConfig
from porteiro.http.app import create_app
from porteiro.model import EventStatus
from porteiro.runtime import Runtime
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.support.app import post_signed
from tests.support.console import DESTINATION, console_config
from tests.support.events import event_body
from tests.support.servers import live_server
from tests.support.services import require_chromium

OPERATOR_TOKEN = "browser-operator-token-0123456789"
READER_TOKEN = "browser-reader-token-0123456789"
ORDER = "PED-20261203-0042"
pytestmark = pytest.mark.slow


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'console.db'}"


@pytest.fixture
def config(config: Config) -> Config:
    ui = UiConfig(language="pt", timezone="America/Sao_Paulo")
    return console_config(config, ("rui", READER_TOKEN), ("ana", OPERATOR_TOKEN), ui)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("PORTEIRO_TEST_SCREENSHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
async def base_url(runtime: Runtime) -> AsyncIterator[str]:
    async with live_server(create_app(runtime, migrate=True)) as url:
        await _seed(url, runtime)
        yield url


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    chromium = require_chromium()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def _seed(url: str, runtime: Runtime) -> None:
    """A paid payment of order ORDER (with a gateway retry), a second payment whose
    event goes dead, a refused request, and one reconciliation report."""
    async with httpx.AsyncClient(base_url=url) as client:

        async def send(key: str, kind: str, object_id: str, reference: str) -> None:
            body = event_body(key, kind, object_id=object_id, reference=reference, amount=15990)
            assert (await post_signed(client, body, key)).is_success

        await send("evt_b1", "payment.created", "pay_ana_1", ORDER)
        await send("evt_b2", "payment.paid", "pay_ana_1", ORDER)
        await send("evt_b2", "payment.paid", "pay_ana_1", ORDER)  # the gateway's retry
        while await Worker(runtime).run_once():
            pass
        await send("evt_b3", "payment.paid", "pay_late_2", "PED-20261203-0043")
        forged = await client.post(
            "/webhooks/shop",
            content=b"{}",
            headers={"webhook-id": "x", "webhook-timestamp": "1", "webhook-signature": "v1,AA"},
        )
        assert forged.status_code == 401
    # pay_late_2's event dies (the merchant's handler failed past its retries, say).
    [claim] = await runtime.store.claim("seed", 10, timedelta(seconds=60), runtime.clock())
    assert await runtime.store.dead_letter(claim, "handler: order not found", runtime.clock())
    now = runtime.clock()
    summary = {"kind": "audit", "missing": 0, "divergent": 0, "unknown": 0, "ingested": 0}
    await runtime.store.save_report(
        "shop", "audit", {**summary, "findings": {}}, summary,
        since=now - timedelta(hours=1), until=now, now=now,
    )  # fmt: skip


async def _log_in(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/ui/login")
    await page.fill("#token", token)
    await page.click("#login")
    await page.wait_for_url(f"{url}/ui/")


def _watch_csp(page: Page, problems: list[str]) -> None:
    def seen(message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            problems.append(message.text)

    page.on("console", seen)


async def test_an_operator_finds_a_payment_replays_a_dead_letter_and_pauses_a_destination(
    base_url: str, browser: Browser, runtime: Runtime, shots: Path
) -> None:
    context = await browser.new_context(
        viewport={"width": 1280, "height": 860}, locale="pt-BR", timezone_id="America/Sao_Paulo"
    )
    page = await context.new_page()
    violations: list[str] = []
    _watch_csp(page, violations)
    await _log_in(page, base_url, OPERATOR_TOKEN)
    await page.wait_for_selector("#live")
    assert await page.locator("#dead-count").inner_text() == "1"
    await page.screenshot(path=str(shots / "overview.png"), full_page=True)
    # The overview refreshes its numbers in place (htmx polls /ui/live every 5 s).
    async with page.expect_response(lambda answer: answer.url.endswith("/ui/live")) as polled:
        pass
    assert (await polled.value).status == 200
    assert await page.locator("#live").count() == 1

    # Find the payment by the merchant's order number, read its timeline.
    await page.click("nav >> text=Pagamentos")
    await page.fill("#search-reference", ORDER)
    await page.click("#search")
    rows = page.locator("#payments tbody tr")
    assert await rows.count() == 1
    await page.screenshot(path=str(shots / "payments.png"), full_page=True)
    await page.click("#payments tbody a")
    await page.wait_for_selector("#timeline")
    assert "pago" in await page.locator("#payment-state").inner_text()
    timeline = await page.locator("#timeline").inner_text()
    assert timeline.count("Entrega recebida") == 2 and "Entrega duplicada" in timeline
    assert "Encaminhado a erp" in timeline and "R$ 159,90" in timeline
    await page.screenshot(path=str(shots / "payment.png"), full_page=True)
    await page.click("#timeline a >> nth=0")
    await page.wait_for_selector(".delivery")
    await page.screenshot(path=str(shots / "event.png"), full_page=True)

    # The dead letter: its dry run first, then the redrive, in place.
    await page.click("nav >> text=Falhas (DLQ)")
    assert "handler: order not found" in await page.locator("#reasons").inner_text()
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    await page.check("#events tbody input[type=checkbox]")
    await page.click("#preview-selected")
    await page.wait_for_selector("#dry-run")
    planned = await page.locator("#planned tbody").inner_text()
    assert "pay_late_2" in planned and "pago" in planned
    dead = (await runtime.store.list_events(_dead(), None, 5)).items
    assert [event.dedup_key for event in dead] == ["evt_b3"]  # the dry run changed nothing
    await page.screenshot(path=str(shots / "dlq-dry-run.png"), full_page=True)
    await page.click("#confirm-replay")
    await page.wait_for_selector(".result.ok")
    assert "reenfileirados: 1" in await page.locator(".result.ok").inner_text()
    assert navigations == []  # no reload
    assert (await runtime.store.list_events(_dead(), None, 5)).items == []

    # Pause and resume the destination.
    await page.click("nav >> text=Destinos")
    await page.click("button.pause")
    await page.wait_for_selector("button.resume")
    assert "pausado" in await page.locator(".dest-state").inner_text()
    assert (await runtime.store.destination_states())[DESTINATION].paused
    await page.screenshot(path=str(shots / "destinations.png"), full_page=True)
    await page.click("button.resume")
    await page.wait_for_selector("button.pause")
    assert not (await runtime.store.destination_states())[DESTINATION].paused
    # A refused action says so where its result would have been (here: a forged token).
    forged_header = "document.body.setAttribute('hx-headers', '{\"X-CSRF-Token\": \"x\"}')"
    await page.evaluate(forged_header)
    await page.click("button.pause")
    await page.wait_for_selector("text=token CSRF ausente ou errado")
    assert not (await runtime.store.destination_states())[DESTINATION].paused

    # A POST without the CSRF token, with the session cookie, is refused.
    forged = await context.request.post(f"{base_url}/ui/destinations/{DESTINATION}/pause")
    assert forged.status == 403
    assert not (await runtime.store.destination_states())[DESTINATION].paused

    for name, path in (
        ("reconciliation", "/ui/reconciliation"),
        ("quarantine", "/ui/quarantine"),
        ("audit", "/ui/audit"),
    ):
        await page.goto(f"{base_url}{path}")
        await page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    audit = await page.locator("#audit").inner_text()
    assert "dlq.replay" in audit and "destination.pause" in audit and "ana" in audit

    # Log out: the session is gone.
    await page.click("#logout")
    await page.wait_for_url(f"{base_url}/ui/login")
    await page.goto(f"{base_url}/ui/payments")
    assert page.url == f"{base_url}/ui/login"
    await page.screenshot(path=str(shots / "login.png"))
    assert violations == []
    await context.close()


async def test_the_console_fits_a_phone(base_url: str, browser: Browser, shots: Path) -> None:
    context = await browser.new_context(
        viewport={"width": 390, "height": 844}, locale="pt-BR", is_mobile=True
    )
    page = await context.new_page()
    await _log_in(page, base_url, READER_TOKEN)
    await page.goto(f"{base_url}/ui/payments?reference={ORDER}")
    await page.click("#payments tbody a")
    await page.wait_for_selector("#timeline")
    # Nothing wider than the screen but the tables, which scroll on their own.
    overflow = await page.evaluate("document.documentElement.scrollWidth")
    assert overflow <= 390, overflow
    await page.screenshot(path=str(shots / "phone-payment.png"), full_page=True)
    await context.close()


async def test_a_read_token_sees_no_action_button(
    base_url: str, browser: Browser, runtime: Runtime
) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    await _log_in(page, base_url, READER_TOKEN)
    [dead] = (await runtime.store.list_events(_dead(), None, 5)).items
    for path in ("/ui/dlq", f"/ui/events/{dead.id}", "/ui/destinations", "/ui/reconciliation"):
        await page.goto(f"{base_url}{path}")
        assert await page.locator("[hx-post]").count() == 0, path
        assert await page.locator("main form[method=post]").count() == 0, path
        assert await page.locator("#preview-selected, #preview-filter").count() == 0, path
    await context.close()


def _dead() -> EventFilter:
    return EventFilter(status=EventStatus.DEAD)
