"""Merchant delivery, the pure parts: destination config, fan-out, the circuit breaker and
how a merchant's HTTP answer is classified."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from porteiro.config.load import parse_config
from porteiro.errors import ConfigError
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState
from porteiro.outgoing.gateway_http import retry_after
from porteiro.providers.standard.webhook import decode_secret, sign_headers
from porteiro.sinks.fanout import outbox_rows
from porteiro.sinks.http_relay import classify
from porteiro.sinks.message_id import message_id
from porteiro.sinks.relay import CircuitBreaker

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def config(**destinations: dict[str, Any]) -> Any:
    return parse_config({"destinations": destinations}, {"ERP_SECRET": SECRET})


def test_destination_config_keys_and_defaults() -> None:
    parsed = config(
        erp={
            "url": "https://erp.example/hooks",
            "secret": "${ERP_SECRET}",
            "kinds": ["payment.paid", "payment.refunded"],
            "rate_per_second": 5,
            "concurrency": 2,
            "timeout_seconds": 3,
            "retry": {"max_attempts": 4, "base_delay_seconds": 1},
        },
        bus={"rabbitmq_url": "amqp://guest:guest@127.0.0.1:5672/"},
    ).destinations
    erp, bus = parsed["erp"], parsed["bus"]
    assert erp.transport == "http" and erp.secret == SECRET
    assert erp.kinds == ("payment.paid", "payment.refunded")
    assert (erp.rate_per_second, erp.concurrency, erp.timeout_seconds) == (5.0, 2, 3.0)
    assert erp.retry.max_attempts == 4 and erp.retry.base_delay_seconds == 1.0
    assert bus.transport == "rabbitmq" and bus.exchange == "porteiro.events"
    assert bus.rate_per_second is None and bus.kinds == ()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"secret": SECRET}, "exactly one of url or rabbitmq_url"),
        ({"url": "http://x", "rabbitmq_url": "amqp://x"}, "exactly one"),
        ({"url": "http://x"}, "whsec_"),
        ({"url": "http://x", "secret": "plain"}, "whsec_"),
        ({"url": "http://x", "secret": SECRET, "kinds": ["payment.payed"]}, "unknown kind"),
        ({"url": "http://x", "secret": SECRET, "kinds": ["other"]}, "unknown kind"),
        ({"url": "http://x", "secret": SECRET, "concurrency": 0}, "concurrency"),
        ({"url": "http://x", "secret": SECRET, "rate_per_second": -1}, "rate_per_second"),
        ({"url": "http://x", "secret": SECRET, "timeout": 3}, "unknown key"),
        ({"url": "http://x", "secret": SECRET, "retry": {"jitter": 2}}, "jitter"),
    ],
)
def test_destination_config_errors(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(erp=table)


def test_fanout_filters_kinds_and_builds_the_normalised_payload() -> None:
    destinations = config(
        erp={"url": "http://x", "secret": SECRET, "kinds": ["payment.refunded"]},
        all={"url": "http://y", "secret": SECRET},
    ).destinations
    payment = Payment("stripe", "pi_1", PaymentState.PAID, 1000, "BRL", 0, "order-7", 3, NOW, {})
    paid = ParsedEvent(
        "evt_gw_1", Kind.PAYMENT_PAID, "charge.succeeded", "pi_1", reference="order-7",
        amount=1000, currency="BRL", occurred_at=NOW, data={"k": "v"},
    )  # fmt: skip
    [row] = outbox_rows(42, "stripe", paid, payment, destinations)
    assert row.message_id == message_id("stripe", "evt_gw_1")  # the event's, not row 42's
    assert (row.destination, row.event_id, row.kind, row.object_id) == (
        "all",
        42,
        "payment.paid",
        "pi_1",
    )
    assert row.payload == {
        "id": message_id("stripe", "evt_gw_1"), "type": "payment.paid", "source": "stripe",
        "object_id": "pi_1",
        "reference": "order-7", "amount": 1000, "currency": "BRL",
        "occurred_at": row.payload["occurred_at"], "data": {"k": "v"},
        "gateway_event_id": "evt_gw_1",
        "payment": {"state": "paid", "amount": 1000, "refunded_amount": 0, "currency": "BRL",
                    "version": 3},
    }  # fmt: skip
    other = ParsedEvent("evt_gw_2", Kind.OTHER, "customer.created", "pi_1")
    assert outbox_rows(43, "stripe", other, payment, destinations) == []
    orphan = ParsedEvent("evt_gw_3", Kind.PAYMENT_PAID, "x", None)
    assert outbox_rows(44, "stripe", orphan, payment, destinations) == []


def test_forwarded_signature_verifies_with_the_official_library() -> None:
    body = b'{"id":"evt_1","type":"payment.paid"}'
    headers = sign_headers(decode_secret(SECRET), "evt_1", int(NOW.timestamp()), body)
    wh = Webhook(SECRET)
    # The library checks the timestamp against its own clock: sign "now" for it.
    fresh = sign_headers(decode_secret(SECRET), "evt_1", int(datetime.now(UTC).timestamp()), body)
    assert wh.verify(body, fresh) == {"id": "evt_1", "type": "payment.paid"}
    assert headers["webhook-signature"] == wh.sign("evt_1", NOW, body.decode())


def test_circuit_breaker_opens_after_threshold_and_on_a_failed_probe() -> None:
    breaker = CircuitBreaker(3, timedelta(seconds=30))
    assert breaker.failure(NOW, probing=False) is None
    breaker.success()
    assert breaker.failure(NOW, probing=False) is None
    assert breaker.failure(NOW, probing=False) is None
    assert breaker.failure(NOW, probing=False) == NOW + timedelta(seconds=30)
    assert breaker.failure(NOW, probing=True) == NOW + timedelta(seconds=30)


def _response(status: int, **headers: str) -> httpx.Response:
    request = httpx.Request("POST", "https://merchant.example/hooks")
    return httpx.Response(status, headers=headers, request=request, text="nope")


def test_classify_merchant_answers() -> None:
    assert classify(_response(204), NOW).ok
    gone = classify(_response(410), NOW)
    assert not gone.ok and gone.disable is not None and "410" in gone.disable
    limited = classify(_response(429, **{"retry-after": "7"}), NOW)
    assert limited.retry_after == 7.0 and not limited.trips_breaker
    down = classify(_response(503), NOW)
    assert down.retry_after is None and down.trips_breaker
    failed = classify(_response(500), NOW)
    assert failed.result == "500" and failed.error == "HTTP 500: nope"
    assert not classify(_response(302), NOW).ok  # redirects are not followed


def test_retry_after_forms() -> None:
    assert retry_after("120", NOW) == 120.0
    assert retry_after("Sun, 01 Mar 2026 12:00:30 GMT", NOW) == 30.0
    assert retry_after("Sun, 01 Mar 2026 11:00:00 GMT", NOW) == 0.0
    assert retry_after("soon", NOW) is None
    assert retry_after(None, NOW) is None
