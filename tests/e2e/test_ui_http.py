"""The console (/ui) over HTTP with real stores: login into a signed session cookie,
every page behind it with the security headers and no inline script, CSRF and
same-origin checks on every action, a `read` token sees no buttons and is refused and
audited when it posts anyway, each action audited as the API's are, and a gateway's text
always escaped. The browser's side is tests/e2e/test_ui_browser.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import urlencode

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from porteiro.config import Config, UiConfig
from porteiro.http.admin_auth import audit_action
from porteiro.http.app import create_app
from porteiro.model import EventStatus
from porteiro.runtime import Runtime
from porteiro.store.audit import AuditRecord, audit_store
from porteiro.store.base import EventFilter
from porteiro.ui import actions
from porteiro.ui.guard import SESSION_COOKIE
from porteiro.ui.render import CONTENT_SECURITY_POLICY
from porteiro.worker import Worker
from tests.support.app import PEER, post_signed
from tests.support.console import DESTINATION, console_config, hidden, log_in
from tests.support.events import event_body

READER_TOKEN = "ui-reader-token-0123456789"
OPERATOR_TOKEN = "ui-operator-token-0123456789"
BASE = "http://porteiro.test"
FORM = {"content-type": "application/x-www-form-urlencoded"}
PAGES = (
    "/ui/", "/ui/live", "/ui/payments", "/ui/payments?anomalous=1", "/ui/events",
    "/ui/dlq", "/ui/destinations", f"/ui/destinations/{DESTINATION}", "/ui/reconciliation",
    "/ui/quarantine", "/ui/audit",
)  # fmt: skip


@pytest.fixture
def config(config: Config) -> Config:
    return console_config(
        config, ("rita", READER_TOKEN), ("otto", OPERATOR_TOKEN), UiConfig(language="en")
    )


@pytest.fixture
async def app(runtime: Runtime) -> AsyncIterator[Starlette]:
    application = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application):
        yield application


def browser(app: Starlette, base: str = BASE) -> httpx.AsyncClient:
    """A client that keeps cookies and says, as a browser does, where its posts come from."""
    transport = httpx.ASGITransport(app=app, client=(PEER, 40123))
    return httpx.AsyncClient(
        transport=transport,
        base_url=base,
        headers={"origin": base, "sec-fetch-site": "same-origin"},
    )


async def csrf_of(http: httpx.AsyncClient) -> str:
    return hidden((await http.get("/ui/events")).text, "csrf")


async def dead_event(client: httpx.AsyncClient, runtime: Runtime, key: str) -> int:
    """One event of the shop source made dead through the real claim/dead-letter path."""
    assert (await post_signed(client, event_body(key, object_id=f"pay_{key}"), key)).is_success
    claims = await runtime.store.claim("ui-test", 10, timedelta(seconds=60), runtime.clock())
    [claim] = [each for each in claims if each.event.dedup_key == key]
    assert await runtime.store.dead_letter(claim, "merchant down", runtime.clock())
    return claim.event.id


async def audit_rows(runtime: Runtime) -> list[AuditRecord]:
    return list((await audit_store(runtime.store).list_audit(None, 100)).items)


class _Markup(HTMLParser):
    """What the CSP must never meet: inline scripts, inline styles, event attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if tag == "script" and "src" not in names:
            self.problems.append("inline <script>")
        if tag == "style":
            self.problems.append("inline <style>")
        self.problems += [f"{tag} {name}=" for name in names if name == "style"]
        self.problems += [f"{tag} {name}=" for name in names if name.startswith("on")]
        self.problems += [
            f"{tag} {name}=js:" for name, value in attrs if (value or "").startswith("js:")
        ]


async def test_every_page_needs_a_session_and_login_opens_one(app: Starlette) -> None:
    async with browser(app) as http:
        for path in PAGES:
            answer = await http.get(path)
            assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login"), path
        wrong = await log_in(http, "not-a-token")
        assert wrong.status_code == 401 and SESSION_COOKIE not in http.cookies
        assert "not-a-token" not in wrong.text
        done = await log_in(http, READER_TOKEN)
        assert (done.status_code, done.headers["location"]) == (303, "/ui/")
        cookie = next(
            value
            for name, value in done.headers.multi_items()
            if name == "set-cookie" and value.startswith(SESSION_COOKIE)
        ).lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert "secure" not in cookie  # plain HTTP here; over TLS it is (below)
        assert READER_TOKEN.lower() not in cookie  # names the token, never holds it
        for path in PAGES:
            page = await http.get(path)
            assert page.status_code == 200, (path, page.text[:300])
            assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert page.headers["x-frame-options"] == "DENY"
            assert page.headers["cache-control"] == "no-store"
            markup = _Markup()
            markup.feed(page.text)
            assert markup.problems == [], (path, markup.problems)


async def test_the_session_cookie_is_secure_over_tls(app: Starlette) -> None:
    async with browser(app, "https://porteiro.test") as http:
        done = await log_in(http, READER_TOKEN)
        assert done.status_code == 303
        assert "secure" in done.headers["set-cookie"].lower()


async def test_behind_a_tls_proxy_the_cookie_is_secure_over_plain_http(config: Config) -> None:
    proxied = replace(config, ui=UiConfig(language="en", behind_tls_proxy=True))
    application = create_app(Runtime.build(proxied), migrate=True)
    async with application.router.lifespan_context(application), browser(application) as http:
        form = await http.get("/ui/login")
        assert "secure" in form.headers["set-cookie"].lower()
        # The browser talks HTTPS to the proxy, so it sends the Secure cookie back; this
        # client talks plain HTTP to Porteiro, as the proxy does, and sends it by hand.
        nonce = hidden(form.text, "nonce")
        done = await http.post(
            "/ui/login",
            data={"nonce": nonce, "token": READER_TOKEN},
            headers={"cookie": f"porteiro_login={nonce}"},
        )
        assert done.status_code == 303
        assert "secure" in done.headers["set-cookie"].lower()


async def test_a_disabled_console_has_no_route(config: Config) -> None:
    off = replace(config, ui=UiConfig(enabled=False))
    application = create_app(Runtime.build(off), migrate=True)
    async with application.router.lifespan_context(application), browser(application) as http:
        for path in ("/ui", "/ui/login", "/ui/", "/ui/static/htmx.min.js"):
            assert (await http.get(path)).status_code == 404, path
        assert (await http.post("/ui/login", data={"token": READER_TOKEN})).status_code == 404


async def test_a_store_outage_is_a_503_page_with_retry_after(
    app: Starlette, runtime: Runtime
) -> None:
    async with browser(app) as http:
        await log_in(http, OPERATOR_TOKEN)
        csrf = await csrf_of(http)
        await runtime.store.close()  # the store is gone; the session, signed, is not
        for path in ("/ui/", "/ui/payments", "/ui/events", "/ui/dlq", "/ui/audit"):
            page = await http.get(path)
            assert page.status_code == 503, path
            assert page.headers["retry-after"] == str(runtime.config.server.retry_after_seconds)
            assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        paused = await http.post(f"/ui/destinations/{DESTINATION}/pause", data={"csrf": csrf})
        assert paused.status_code == 503 and "store unavailable" in paused.text
        await runtime.store.open()  # for the fixture's shutdown


async def test_a_forged_or_foreign_session_is_no_session(app: Starlette) -> None:
    async with browser(app) as http:
        await log_in(http, READER_TOKEN)
        real = http.cookies[SESSION_COOKIE]
        name, expiry, nonce, signature = real.split(".")
        # Another token's name on rita's signature, a later expiry, a changed signature.
        for forged in (
            ".".join(("b3R0byAgIA", expiry, nonce, signature)),
            ".".join((name, str(int(expiry) + 3600), nonce, signature)),
            ".".join((name, expiry, nonce, signature[:-2] + "AA")),
            "garbage",
        ):
            http.cookies.set(SESSION_COOKIE, forged, domain="porteiro.test", path="/ui")
            answer = await http.get("/ui/payments")
            assert answer.status_code == 303, forged


async def test_an_action_after_the_session_ended_goes_back_to_the_login(app: Starlette) -> None:
    async with browser(app) as http:
        path = f"/ui/destinations/{DESTINATION}/pause"
        plain = await http.post(path, data={"csrf": "x"})
        assert plain.status_code == 401
        htmx = await http.post(path, data={"csrf": "x"}, headers={"hx-request": "true"})
        assert (htmx.status_code, htmx.headers["hx-redirect"]) == (204, "/ui/login")
        polled = await http.get("/ui/live", headers={"hx-request": "true"})
        assert (polled.status_code, polled.headers["hx-redirect"]) == (204, "/ui/login")


async def test_login_refuses_a_form_without_its_nonce(app: Starlette) -> None:
    async with browser(app) as http:
        await http.get("/ui/login")
        refused = await http.post("/ui/login", data={"nonce": "guess", "token": OPERATOR_TOKEN})
        assert refused.status_code == 403 and SESSION_COOKIE not in http.cookies


async def test_actions_need_the_csrf_token_and_the_same_origin(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime
) -> None:
    event_id = await dead_event(client, runtime, "evt_csrf")
    async with browser(app) as http:
        await log_in(http, OPERATOR_TOKEN)
        csrf = await csrf_of(http)
        path = f"/ui/events/{event_id}/replay"
        for data, headers in (
            ({}, {}),  # no token at all
            ({"csrf": "x" + csrf[1:]}, {}),  # a wrong one
            ({"csrf": csrf}, {"origin": "https://evil.example"}),  # the right one, elsewhere
            ({"csrf": csrf}, {"sec-fetch-site": "cross-site"}),
        ):
            refused = await http.post(path, data=data, headers=headers)
            assert refused.status_code == 403, (data, headers)
        event = await runtime.store.get_event(event_id)
        assert event is not None and event.status is EventStatus.DEAD  # nothing done
        assert await audit_rows(runtime) == []  # a forged request names no one
        # The header htmx sends works as the field does.
        done = await http.post(path, headers={"x-csrf-token": csrf, "hx-request": "true"})
        assert done.status_code == 200
    event = await runtime.store.get_event(event_id)
    assert event is not None and event.status is EventStatus.PENDING
    [row] = await audit_rows(runtime)
    assert (row.entry.token_name, row.entry.action, row.entry.outcome) == (
        "otto", "event.replay", "ok",
    )  # fmt: skip
    assert row.entry.affected == 1


async def test_a_read_token_sees_no_buttons_and_is_refused_and_audited(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime
) -> None:
    event_id = await dead_event(client, runtime, "evt_read")
    async with browser(app) as http:
        await log_in(http, READER_TOKEN)
        for path in (f"/ui/events/{event_id}", "/ui/dlq", "/ui/destinations"):
            page = await http.get(path)
            assert page.status_code == 200
            assert "hx-post" not in page.text, path
        csrf = await csrf_of(http)
        refused = await http.post(f"/ui/events/{event_id}/replay", data={"csrf": csrf})
        assert refused.status_code == 403
        paused = await http.post(f"/ui/destinations/{DESTINATION}/pause", data={"csrf": csrf})
        assert paused.status_code == 403
    event = await runtime.store.get_event(event_id)
    assert event is not None and event.status is EventStatus.DEAD
    outcomes = sorted(
        (r.entry.token_name, r.entry.action, r.entry.outcome) for r in await audit_rows(runtime)
    )
    assert outcomes == [
        ("rita", "destination.pause", "forbidden"),
        ("rita", "event.replay", "forbidden"),
    ]


async def test_every_console_action_is_audited(app: Starlette) -> None:
    posts = [
        route
        for route in app.routes
        if isinstance(route, Route)
        and route.path.startswith("/ui/")
        and "POST" in (route.methods or ())
        and route.path not in ("/ui/login", "/ui/logout")
    ]
    assert len(posts) >= 6
    for route in posts:
        assert audit_action(route.endpoint) is not None, route.path


async def test_dlq_dry_run_changes_nothing_then_the_redrive_requeues(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime
) -> None:
    first = await dead_event(client, runtime, "evt_dry_1")
    second = await dead_event(client, runtime, "evt_dry_2")
    async with browser(app) as http:
        await log_in(http, OPERATOR_TOKEN)
        reasons = await http.get("/ui/dlq")
        assert "merchant down" in reasons.text
        preview = await http.get(
            f"/ui/dlq/preview?id={first}&id={second}", headers={"hx-request": "true"}
        )
        assert preview.status_code == 200
        assert "2 events would be replayed" in preview.text
        assert preview.text.count("payment.paid") >= 2  # each event's row, its kind
        for event_id in (first, second):
            event = await runtime.store.get_event(event_id)
            assert event is not None and event.status is EventStatus.DEAD  # a dry run
        assert await audit_rows(runtime) == []
        csrf = hidden(preview.text, "csrf")
        selection = urlencode([("csrf", csrf), ("id", first), ("id", second)])
        done = await http.post("/ui/dlq/replay", content=selection, headers=FORM)
        assert done.status_code == 200 and "requeued: 2" in done.text
        empty = await http.post("/ui/dlq/replay", data={"csrf": csrf})
        assert empty.status_code == 400  # an empty selection is not the whole queue
    for event_id in (first, second):
        event = await runtime.store.get_event(event_id)
        assert event is not None and event.status is EventStatus.PENDING
    rows = [(r.entry.action, r.entry.outcome, r.entry.affected) for r in await audit_rows(runtime)]
    assert sorted(rows) == [("dlq.replay", "ok", 2), ("dlq.replay", "rejected", 0)]


async def test_a_long_dry_run_lists_the_first_and_counts_them_all(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actions, "PREVIEW_MAX", 2)
    for key in ("evt_many_1", "evt_many_2", "evt_many_3"):
        await dead_event(client, runtime, key)
    async with browser(app) as http:
        await log_in(http, OPERATOR_TOKEN)
        preview = await http.get("/ui/dlq/preview?all=1", headers={"hx-request": "true"})
    assert "3 events would be replayed" in preview.text
    assert "The first ones are listed: 2." in preview.text
    table = preview.text[preview.text.index('id="planned"') : preview.text.index("</table>")]
    assert table.count("<tr>") == 3  # the header and two rows
    assert "Replay these 3" in preview.text


async def test_pause_and_resume_a_destination(app: Starlette, runtime: Runtime) -> None:
    async with browser(app) as http:
        await log_in(http, OPERATOR_TOKEN)
        csrf = await csrf_of(http)
        paused = await http.post(f"/ui/destinations/{DESTINATION}/pause", data={"csrf": csrf})
        assert paused.status_code == 200 and "resume" in paused.text
        states = await runtime.store.destination_states()
        assert states[DESTINATION].paused
        resumed = await http.post(f"/ui/destinations/{DESTINATION}/resume", data={"csrf": csrf})
        assert resumed.status_code == 200 and "/pause" in resumed.text
        unknown = await http.post("/ui/destinations/nope/pause", data={"csrf": csrf})
        assert unknown.status_code == 404
    assert not (await runtime.store.destination_states())[DESTINATION].paused
    actions = sorted((r.entry.action, r.entry.outcome) for r in await audit_rows(runtime))
    assert actions == [
        ("destination.pause", "ok"),
        ("destination.pause", "rejected"),
        ("destination.resume", "ok"),
    ]


async def test_a_payment_found_by_its_order_number_with_its_timeline(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime
) -> None:
    hostile = '<script>alert("x")</script>'
    for key, kind in (("evt_t1", "payment.created"), ("evt_t2", "payment.paid")):
        body = event_body(key, kind, object_id="pay_tl", reference=hostile, amount=123456)
        assert (await post_signed(client, body, key)).is_success
    repeat = event_body(
        "evt_t2", "payment.paid", object_id="pay_tl", reference=hostile, amount=123456
    )
    assert (await post_signed(client, repeat, "evt_t2")).is_success  # the gateway's retry
    assert await Worker(runtime).run_once() == 2
    async with browser(app) as http:
        await log_in(http, READER_TOKEN)
        found = await http.get("/ui/payments", params={"reference": hostile})
        assert found.status_code == 200
        assert hostile not in found.text  # escaped, never markup
        assert "&lt;script&gt;" in found.text and "/ui/payments/shop/pay_tl" in found.text
        assert "R$1,234.56" in found.text
        by_amount = await http.get("/ui/payments", params={"amount": "1.234,56"})
        assert "pay_tl" in by_amount.text
        none = await http.get("/ui/payments", params={"amount": "1,00"})
        assert "pay_tl" not in none.text
        bad = await http.get("/ui/payments", params={"amount": "lots"})
        assert bad.status_code == 400
        page = await http.get("/ui/payments/shop/pay_tl")
        assert page.status_code == 200
        timeline = page.text[page.text.index('id="timeline"') :]
        assert timeline.count("Delivery received") == 2
        assert timeline.count("Duplicate delivery") == 1
        assert "Forwarded to erp" in timeline
        assert (await http.get("/ui/payments/shop/nope")).status_code == 404
        by_key = await http.get("/ui/events", params={"dedup_key": "evt_t2"})
        assert by_key.text.count("/ui/payments/shop/pay_tl") == 1  # one event, its row
        events = await runtime.store.list_events(EventFilter(object_id="pay_tl"), None, 5)
        event_page = await http.get(f"/ui/events/{events.items[0].id}")
        assert "webhook-signature" in event_page.text  # its headers, as stored
        assert "&#34;amount&#34;: 123456" in event_page.text  # the body, indented


async def test_payments_are_paged_by_cursor(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime
) -> None:
    for n in range(55):
        key = f"evt_page_{n}"
        assert (
            await post_signed(client, event_body(key, object_id=f"pay_{n:03d}"), key)
        ).is_success
    while await Worker(runtime).run_once():
        pass
    seen: list[str] = []
    async with browser(app) as http:
        await log_in(http, READER_TOKEN)
        path = "/ui/payments"
        while path:
            page = await http.get(path)
            assert page.status_code == 200
            seen += re.findall(r"/ui/payments/shop/(pay_\d{3})", page.text)
            after = re.search(r'href="(\?[^"]*cursor=[^"]+)" rel="next"', page.text)
            path = "" if after is None else "/ui/payments" + after.group(1).replace("&amp;", "&")
        assert (await http.get("/ui/payments?cursor=not-a-cursor")).status_code == 400
    assert sorted(seen) == [f"pay_{n:03d}" for n in range(55)]
    assert len(seen) == len(set(seen))


async def test_the_api_reads_what_the_console_shows(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime
) -> None:
    reader = {"authorization": f"Bearer {READER_TOKEN}"}
    body = event_body("evt_api", object_id="pay_api", reference="PED-1", amount=990)
    assert (await post_signed(client, body, "evt_api")).is_success
    assert (await post_signed(client, body, "evt_api")).is_success
    assert await Worker(runtime).run_once() == 1
    await dead_event(client, runtime, "evt_api_dead")
    found = await client.get("/api/payments", params={"reference": "PED-1"}, headers=reader)
    assert found.status_code == 200
    [payment] = found.json()["items"]
    assert (payment["object_id"], payment["amount"], payment["state"]) == ("pay_api", 990, "paid")
    assert found.json()["next"] is None and "history" not in payment
    by_amount = await client.get("/api/payments", params={"amount": "990"}, headers=reader)
    assert [p["object_id"] for p in by_amount.json()["items"]] == ["pay_api"]
    for bad in ({"amount": "9,90"}, {"anomalous": "yes"}, {"state": "lost"}, {"cursor": "x"}):
        assert (await client.get("/api/payments", params=bad, headers=reader)).status_code == 400
    reasons = (await client.get("/api/dlq/reasons", headers=reader)).json()["items"]
    assert [(r["source"], r["reason"], r["count"]) for r in reasons] == [
        ("shop", "merchant down", 1)
    ]
    rate = (await client.get("/api/deliveries/rate", headers=reader)).json()["items"]
    assert sum(item["count"] for item in rate) == 3  # two of evt_api, one of evt_api_dead
    refused = await client.get("/api/deliveries/rate?minutes=0", headers=reader)
    assert refused.status_code == 400
    forged = await client.post("/webhooks/shop", content=b"{}", headers={"webhook-id": "x"})
    assert forged.status_code == 401
    quarantined = (await client.get("/api/quarantine/reasons", headers=reader)).json()["items"]
    assert [(q["source"], q["count"]) for q in quarantined] == [("shop", 1)]
