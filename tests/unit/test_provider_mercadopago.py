"""Mercado Pago adapter: the x-signature manifest (checked against the official SDK's
WebhookSignatureValidator), thin notifications, and enrichment from a real local HTTP
server that plays the payments API (tests/fakes/mercadopago.py).

What every adapter does (a wrong secret, a missing header, a stale timestamp, the ack,
the sample lifecycle's round trip) is asserted once, for all, in test_provider_contract.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import string
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mercadopago.webhook import (  # type: ignore[import-untyped]
    InvalidWebhookSignatureError,
    SignatureFailureReason,
    WebhookSignatureValidator,
)

from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    ConfigError,
    GatewayError,
    MalformedHeader,
    MissingHeader,
    NonRetryable,
    ParseError,
    SignatureMismatch,
    TimestampOutOfTolerance,
)
from porteiro.model import EventStatus, InboundRequest, Kind, ParsedEvent
from porteiro.providers.base import SamplePayment
from porteiro.providers.mercadopago import MercadoPagoProvider
from porteiro.providers.mercadopago.payload import (
    order_event,
    payment_event,
    payment_kind,
    to_minor,
)
from porteiro.providers.mercadopago.webhook import manifest, parse_signature_header
from porteiro.store.rows import initial_status
from tests.fakes.mercadopago import FakeMercadoPago, payment
from tests.support.inbound import inbound
from tests.support.servers import free_port, live_server

NOW = datetime(2025, 3, 20, 21, 20, 38, tzinfo=UTC)
TS = str(int(NOW.timestamp()))
SECRET = "your_secret_key_here"  # the official SDK's test constants
REQUEST_ID = "2066ca19-c6f1-498a-be75-1923005edd06"
DATA_ID_LOWER = "ord01jq4s4ky8hwq6na5pxb65b3d3"
SDK_TS = "1742505638683"
SDK_VECTOR = "633f91233312dd391ec75fa0bea539cfc2d6c4918873305b84a96cc1c58db71c"
TOKEN = "APP_USR-4815162342-test-token"

# The notification body as Mercado Pago's webhook documentation shows it.
EXAMPLE: dict[str, Any] = {
    "id": 12345,
    "live_mode": True,
    "type": "payment",
    "date_created": "2015-03-25T10:04:58.396-04:00",
    "user_id": 44444,
    "api_version": "v1",
    "action": "payment.created",
    "data": {"id": "999999999"},
}


def source(*secrets: str, **fields: Any) -> SourceConfig:
    return SourceConfig(
        name="mp",
        provider="mercadopago",
        secrets=secrets or (SECRET,),
        tolerance_seconds=fields.pop("tolerance_seconds", 300),
        api_key=fields.pop("api_key", TOKEN),
        api_base_url=fields.pop("api_base_url", None),
        options=fields,
    )


def adapter(*secrets: str, **fields: Any) -> MercadoPagoProvider:
    return MercadoPagoProvider(source(*secrets, **fields))


def request(
    body: bytes = b"", headers: Mapping[str, str] | None = None, query: str = ""
) -> InboundRequest:
    return inbound("mp", body, headers, received_at=NOW, query=query)


def digest(secret: str, text: str) -> str:
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def signed(
    data_id: str | None = "999999999",
    *,
    secret: str = SECRET,
    request_id: str | None = REQUEST_ID,
    ts: str = TS,
    body: bytes = b"{}",
) -> InboundRequest:
    """A delivery signed by hand, the way the official validator checks it (raw data.id)."""
    # Trimmed, blank parts dropped: WebhookSignatureValidator's own rules.
    parts = [f"id:{data_id.strip()}"] if data_id and data_id.strip() else []
    parts += [f"request-id:{request_id.strip()}"] if request_id and request_id.strip() else []
    text = ";".join([*parts, f"ts:{ts}"]) + ";"
    headers = {"x-signature": f"ts={ts},v1={digest(secret, text)}"}
    if request_id is not None:
        headers["x-request-id"] = request_id
    query = f"data.id={data_id}&type=payment" if data_id else "type=payment"
    return request(body, headers, query)


def sdk_accepts(req: InboundRequest, secret: str = SECRET) -> bool:
    data_id = dict(pair.split("=", 1) for pair in req.query.split("&")).get("data.id")
    try:
        WebhookSignatureValidator.validate(
            req.header("x-signature"), req.header("x-request-id"), data_id, secret
        )
    except InvalidWebhookSignatureError:
        return False
    return True


# -- known answers and the official SDK -------------------------------------------------------


def test_known_answer_vector_from_the_sdk_constants() -> None:
    text = manifest(DATA_ID_LOWER, REQUEST_ID, SDK_TS)
    assert text == f"id:{DATA_ID_LOWER};request-id:{REQUEST_ID};ts:{SDK_TS};".encode()
    assert digest(SECRET, text.decode()) == SDK_VECTOR
    headers = {"x-signature": f"ts={SDK_TS},v1={SDK_VECTOR}", "x-request-id": REQUEST_ID}
    moment = datetime.fromtimestamp(int(SDK_TS) / 1000, UTC)  # a 13-digit ts: milliseconds
    adapter().verify(request(b"", headers, f"data.id={DATA_ID_LOWER}&type=order"), moment)
    WebhookSignatureValidator.validate(headers["x-signature"], REQUEST_ID, DATA_ID_LOWER, SECRET)


def test_manifest_drops_absent_parts_and_keeps_the_trailing_semicolon() -> None:
    assert manifest(None, REQUEST_ID, "1") == f"request-id:{REQUEST_ID};ts:1;".encode()
    assert manifest("9", None, "1") == b"id:9;ts:1;"
    assert manifest(None, None, "1") == b"ts:1;"


@pytest.mark.parametrize("data_id", ["999999999", DATA_ID_LOWER, None])
def test_our_signature_validates_with_the_official_sdk(data_id: str | None) -> None:
    body = dict(EXAMPLE)
    if data_id is None:
        body.pop("data")
    else:
        body["data"] = {"id": data_id}
    out = adapter().sign(json.dumps(body).encode(), NOW)
    assert out.query == (f"data.id={data_id}&type=payment" if data_id else "type=payment")
    ts = out.headers["x-signature"].split(",")[0].removeprefix("ts=")
    assert ts == TS
    WebhookSignatureValidator.validate(
        out.headers["x-signature"], out.headers["x-request-id"], data_id, SECRET,
        tolerance_seconds=300, now=lambda: int(NOW.timestamp() * 1000),
    )  # fmt: skip
    with pytest.raises(InvalidWebhookSignatureError) as refused:
        WebhookSignatureValidator.validate(
            out.headers["x-signature"], out.headers["x-request-id"], "1", SECRET
        )
    assert refused.value.reason is SignatureFailureReason.SIGNATURE_MISMATCH
    adapter().verify(request(out.body, out.headers, out.query), NOW)


def test_sign_puts_a_fresh_uuid_request_id_and_sends_lower_case_ids_in_the_manifest() -> None:
    body = json.dumps({**EXAMPLE, "data": {"id": "ORD01ABC"}}).encode()
    first, second = adapter().sign(body, NOW), adapter().sign(body, NOW)
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert len(first.headers["x-request-id"]) == 36
    assert first.query == "data.id=ORD01ABC&type=payment"  # the query keeps the id as is
    # ...while the manifest uses it lower-cased, as the docs ask.
    WebhookSignatureValidator.validate(
        first.headers["x-signature"], first.headers["x-request-id"], "ord01abc", SECRET
    )
    adapter().verify(request(body, first.headers, first.query), NOW)


@pytest.mark.parametrize(
    ("data_id", "request_id"),
    [
        ("999999999", REQUEST_ID),
        (DATA_ID_LOWER, REQUEST_ID),
        ("ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", REQUEST_ID),  # raw, as the SDK signs it
        ("999999999", None),  # no x-request-id: the pair is dropped
        (None, REQUEST_ID),  # no data.id in the query: the pair is dropped
        (None, None),
    ],
)
def test_signatures_the_sdk_accepts_verify(data_id: str | None, request_id: str | None) -> None:
    delivery = signed(data_id, request_id=request_id)
    assert sdk_accepts(delivery)
    adapter().verify(delivery, NOW)


@given(
    data_id=st.text(alphabet=string.ascii_letters + string.digits, max_size=32),
    request_id=st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
    forged=st.booleans(),
)
def test_verify_agrees_with_the_sdk(data_id: str, request_id: str, forged: bool) -> None:
    delivery = signed(data_id, request_id=request_id)
    if forged:  # a query id that was not signed
        delivery = request(delivery.body, dict(delivery.headers), f"data.id={data_id}0")
    assert sdk_accepts(delivery) is not forged
    if forged:
        with pytest.raises(SignatureMismatch):
            adapter().verify(delivery, NOW)
    else:
        adapter().verify(delivery, NOW)


@pytest.mark.parametrize("request_id", ["", "   "])
def test_blank_request_id_is_dropped_like_the_sdk_does(request_id: str) -> None:
    delivery = signed(request_id=None)
    headers = {**dict(delivery.headers), "x-request-id": request_id}
    blank = request(delivery.body, headers, delivery.query)
    assert sdk_accepts(blank)
    adapter().verify(blank, NOW)


def test_dropping_the_request_id_after_signing_with_it_fails_in_both() -> None:
    delivery = signed(request_id=REQUEST_ID)
    stripped = request(delivery.body, {"x-signature": delivery.header("x-signature") or ""},
                       delivery.query)  # fmt: skip
    assert not sdk_accepts(stripped)
    with pytest.raises(SignatureMismatch):
        adapter().verify(stripped, NOW)


# -- refusals -------------------------------------------------------------------------------------


def test_tampered_request_id() -> None:
    delivery = signed()
    headers = {**dict(delivery.headers), "x-request-id": REQUEST_ID.replace("2", "3")}
    with pytest.raises(SignatureMismatch):
        adapter().verify(request(delivery.body, headers, delivery.query), NOW)


def test_any_of_several_v1_matches() -> None:
    delivery = signed()
    header = delivery.header("x-signature") or ""
    ts, good = header.split(",")
    headers = {**dict(delivery.headers), "x-signature": f"{ts},v1={'0' * 64},{good}"}
    adapter().verify(request(b"{}", headers, delivery.query), NOW)


def test_millisecond_timestamps() -> None:
    millis = str(int(NOW.timestamp() * 1000) + 123)
    delivery = signed(ts=millis)
    assert sdk_accepts(delivery)  # the SDK puts ts verbatim in the manifest too
    adapter().verify(delivery, NOW)
    assert parse_signature_header(delivery.header("x-signature") or "").seconds == int(TS)
    stale = signed(ts=str(int(NOW.timestamp() * 1000) - 301_000))
    with pytest.raises(TimestampOutOfTolerance):
        adapter().verify(stale, NOW)


@pytest.mark.parametrize(
    "header",
    [
        "v1=" + "a" * 64,  # no ts
        "ts=,v1=" + "a" * 64,
        "ts=abc,v1=" + "a" * 64,
        "ts=-5,v1=" + "a" * 64,
        "ts=1,ts=2,v1=" + "a" * 64,
        "ts=12345678901234567,v1=" + "a" * 64,  # 17 digits
        f"ts={TS},v1=zz",
        f"ts={TS},v1=" + "a" * 63,
        f"ts={TS},v1=" + "a" * 62,  # valid hex, not a SHA-256 digest
        f"ts={TS},v1=",
        f"ts={TS};v1=" + "a" * 64,
        "garbage",
        ",,,",
    ],
)
def test_malformed_signature_header(header: str) -> None:
    with pytest.raises(MalformedHeader):
        adapter().verify(request(b"{}", {"x-signature": header}, "data.id=1"), NOW)


def test_header_without_a_v1_signature_is_a_mismatch() -> None:
    header = f"ts={TS},v2=" + "a" * 64
    with pytest.raises(SignatureMismatch):
        adapter().verify(request(b"{}", {"x-signature": header}, "data.id=1"), NOW)


def test_header_parser_tolerates_spaces_and_case() -> None:
    parsed = parse_signature_header(f" TS = {TS} , V1 = {'AB' * 32} ")
    assert (parsed.ts, parsed.seconds, parsed.signatures) == (TS, int(TS), (b"\xab" * 32,))


def test_repeated_data_id_in_the_query_is_refused() -> None:
    delivery = signed("5")
    with pytest.raises(MalformedHeader):
        adapter().verify(request(b"{}", dict(delivery.headers), "data.id=5&data.id=6"), NOW)


@given(text=st.text(max_size=200))
def test_header_parser_raises_only_malformed_header(text: str) -> None:
    try:
        parsed = parse_signature_header(text)
    except MalformedHeader:
        return
    assert parsed.ts.isdigit() and all(len(sig) == 32 for sig in parsed.signatures)


@given(
    ts=st.integers(min_value=0, max_value=10**16 - 1),
    sigs=st.lists(st.binary(min_size=32, max_size=32), max_size=3),
)
def test_header_parser_round_trip(ts: int, sigs: list[bytes]) -> None:
    header = ",".join([f"ts={ts}", *(f"v1={sig.hex()}" for sig in sigs)])
    parsed = parse_signature_header(header)
    assert parsed.ts == str(ts) and list(parsed.signatures) == sigs
    assert parsed.seconds == (ts // 1000 if ts > 10**11 else ts)


@given(header=st.text(max_size=120), query=st.text(max_size=60), rid=st.text(max_size=40))
def test_verify_on_arbitrary_input_raises_only_authentication_errors(
    header: str, query: str, rid: str
) -> None:
    with pytest.raises(AuthenticationError):
        adapter().verify(request(b"{}", {"x-signature": header, "x-request-id": rid}, query), NOW)


# -- parsing thin notifications -----------------------------------------------------------------


def test_documented_notification_is_one_thin_event() -> None:
    [event] = adapter().parse(
        request(json.dumps(EXAMPLE).encode(), {}, "data.id=999999999&type=payment")
    )
    assert event.thin and event.kind is Kind.OTHER
    assert (event.dedup_key, event.object_id, event.type) == (
        "12345",
        "999999999",
        "payment.created",
    )
    assert event.data["topic"] == "payment" and event.data["live_mode"] is True
    assert event.occurred_at == datetime(2015, 3, 25, 14, 4, 58, 396000, tzinfo=UTC)
    # A thin "other" waits for enrichment; it is not ignored like a non-thin one.
    assert initial_status(event) is EventStatus.PENDING


def test_the_signed_query_id_wins_over_the_body() -> None:
    body = json.dumps({**EXAMPLE, "data": {"id": "111"}}).encode()
    [event] = adapter().parse(request(body, {}, "data.id=999999999&type=payment"))
    assert event.object_id == "999999999"
    assert event.data["body_data_id"] == "111" and "query wins" in event.data["note"]


def test_integer_ids_and_no_query() -> None:
    body = json.dumps({**EXAMPLE, "data": {"id": 42}}).encode()
    [event] = adapter().parse(request(body))
    assert (event.object_id, event.dedup_key) == ("42", "12345")


def test_without_notification_id_the_key_is_type_action_data_id() -> None:
    body = {key: value for key, value in EXAMPLE.items() if key != "id"}
    [event] = adapter().parse(request(json.dumps(body).encode(), {}, "data.id=999999999"))
    assert event.dedup_key == "payment:payment.created:999999999"


@pytest.mark.parametrize(
    "topic",
    [
        "merchant_order",
        "topic_merchant_order_wh",
        "topic_chargebacks_wh",
        "subscription_preapproval",
    ],
)
def test_other_topics_are_not_thin_and_are_ignored(topic: str) -> None:
    body = json.dumps({**EXAMPLE, "type": topic, "action": f"{topic}.updated"}).encode()
    [event] = adapter().parse(request(body, {}, f"data.id=77&type={topic}"))
    assert not event.thin and event.kind is Kind.OTHER and event.object_id == "77"
    assert initial_status(event) is EventStatus.IGNORED


def test_legacy_ipn_without_body_is_an_unverified_thin_hint() -> None:
    headers = {"x-request-id": REQUEST_ID}
    [event] = adapter().parse(request(b"", headers, "topic=payment&id=123"))
    assert event.thin and event.object_id == "123" and event.type == "ipn.payment"
    window = int(NOW.timestamp()) // 60
    # No request id in the key: a flood of one id within a minute is one event.
    assert event.dedup_key == f"ipn:payment:123:{window}"
    assert event.data == {"topic": "payment", "format": "ipn", "verified": False}
    assert (event.amount, event.reference, event.currency) == (None, None, None)
    [bare] = adapter().parse(request(b"", {}, "topic=payment&id=123"))
    assert bare.dedup_key == event.dedup_key
    later = inbound(
        "mp", b"", {}, received_at=NOW + timedelta(minutes=2), query="topic=payment&id=123"
    )
    [again] = adapter().parse(later)
    assert again.dedup_key != event.dedup_key


def test_legacy_ipn_with_resource_body() -> None:
    resource = "https://api.mercadolibre.com/collections/notifications/555"
    body = json.dumps({"resource": resource, "topic": "payment"}).encode()
    [event] = adapter().parse(request(body))
    assert event.thin and event.object_id == "555"
    # A real capture sends the bare id as the resource.
    [bare] = adapter().parse(request(b'{"resource": "96718866362", "topic": "payment"}'))
    assert bare.thin and bare.object_id == "96718866362"
    [order] = adapter().parse(request(b"", {}, "topic=merchant_order&id=9"))
    assert not order.thin and order.object_id == "9" and "not applied" in order.data["note"]
    assert initial_status(order) is EventStatus.IGNORED


@pytest.mark.parametrize(
    ("body", "query", "reason"),
    [
        (b"{}", "", "neither type nor action"),
        (b"", "", "neither type nor action"),
        (b'{"type": "payment", "action": "payment.created", "data": {}}', "", "without data.id"),
        (b"", "topic=payment", "neither type nor action"),  # no id: not an IPN
        (b"{}", "data.id=%ff", "not UTF-8"),
    ],
)
def test_parse_errors(body: bytes, query: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        adapter().parse(request(body, {}, query))


def test_currency_exponents_option_is_checked() -> None:
    for bad in ({"BRL": "2"}, {"BRL": 9}, ["BRL"], {"BRL": True}):
        with pytest.raises(ConfigError):
            adapter(currency_exponents=bad)
    assert adapter(currency_exponents={"cop": 0}).exponents["COP"] == 0


def test_sample_lifecycle_shapes() -> None:
    sample = SamplePayment("1234567890", "order-1", 10050, refund=True)
    bodies = adapter().sample_lifecycle(sample, NOW, random.Random(3))
    notes = [json.loads(body) for body in bodies]
    assert [n["action"] for n in notes] == ["payment.created"] + ["payment.updated"] * 3
    assert all(n["type"] == "payment" and n["data"] == {"id": "1234567890"} for n in notes)
    assert all(n["api_version"] == "v1" and n["live_mode"] is False for n in notes)
    assert len({n["id"] for n in notes}) == 4 and len({n["user_id"] for n in notes}) == 1
    assert all(isinstance(n["id"], int) for n in notes)
    times = [datetime.fromisoformat(n["date_created"]) for n in notes]
    assert times == sorted(times) and times[-1] < NOW
    short = adapter().sample_lifecycle(SamplePayment("1", "r", 5), NOW, random.Random(3))
    assert len(short) == 2


# -- pure mapping and amounts --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "exponent", "minor"),
    [
        (Decimal("100.5"), 2, 10050),
        (Decimal("0.29"), 2, 29),  # int(0.29 * 100) == 28
        (Decimal("19.99"), 2, 1999),  # int(19.99 * 100) == 1998
        (Decimal("0.1") + Decimal("0.2"), 2, 30),
        (100, 2, 10000),
        (Decimal("1500"), 0, 1500),
        (Decimal("123456789012.34"), 2, 12345678901234),
    ],
)
def test_to_minor_is_exact(value: Decimal | int, exponent: int, minor: int) -> None:
    assert to_minor(value, exponent, field="amount") == minor


@pytest.mark.parametrize(
    ("value", "exponent"),
    [
        (Decimal(repr(0.1 + 0.2)), 2),  # 0.30000000000000004 is not a whole number of cents
        (Decimal("1500.5"), 0),
        (Decimal("-1"), 2),
        (Decimal("NaN"), 2),
        (True, 2),
        (1.5, 2),  # a float means the JSON was read lossily
        ("x", 2),
    ],
)
def test_to_minor_refuses_what_is_not_exact(value: object, exponent: int) -> None:
    with pytest.raises(NonRetryable):
        to_minor(value, exponent, field="amount")


@pytest.mark.parametrize(
    ("status", "detail", "refunded", "kind"),
    [
        ("approved", "accredited", 0, Kind.PAYMENT_PAID),
        ("approved", "partially_refunded", 300, Kind.PAYMENT_PARTIALLY_REFUNDED),
        ("approved", "accredited", 300, Kind.PAYMENT_PARTIALLY_REFUNDED),
        ("authorized", "pending_capture", 0, Kind.PAYMENT_AUTHORIZED),
        ("pending", "pending_waiting_transfer", 0, Kind.PAYMENT_CREATED),
        ("in_process", "pending_review_manual", 0, Kind.PAYMENT_CREATED),
        ("rejected", "cc_rejected_insufficient_amount", 0, Kind.PAYMENT_FAILED),
        ("cancelled", "by_collector", 0, Kind.PAYMENT_CANCELED),
        ("cancelled", "expired", 0, Kind.PAYMENT_EXPIRED),
        ("refunded", "refunded", 1000, Kind.PAYMENT_REFUNDED),
        ("charged_back", "settled", 0, Kind.DISPUTE_LOST),
        ("in_mediation", "", 0, Kind.DISPUTE_OPENED),
        ("something_new", None, 0, Kind.OTHER),
    ],
)
def test_payment_kind(status: str, detail: str | None, refunded: int, kind: Kind) -> None:
    assert payment_kind(status, detail, 1000, refunded) is kind


# -- enrichment against a real local server ------------------------------------------------------


@dataclass
class Api:
    url: str
    fake: FakeMercadoPago
    http: httpx.AsyncClient


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    fake = FakeMercadoPago(token=TOKEN)
    async with live_server(fake.app(), lifespan="off") as url, httpx.AsyncClient() as http:
        yield Api(url, fake, http)


def thin(object_id: str = "999999999", dedup_key: str = "12345") -> ParsedEvent:
    event = adapter().parse(
        request(json.dumps({**EXAMPLE, "id": dedup_key}).encode(), {}, f"data.id={object_id}")
    )[0]
    assert event.thin
    return event


async def enrich(api: Api, resource: dict[str, Any], **fields: Any) -> ParsedEvent:
    api.fake.payments[str(resource["id"])] = resource
    provider = adapter(api_base_url=api.url, **fields)
    return await provider.enrich(thin(str(resource["id"])), api.http)


ENRICH_CASES = [
    ("approved", "accredited", "0", Kind.PAYMENT_PAID, 10050, None),
    ("approved", "partially_refunded", "30.25", Kind.PAYMENT_PARTIALLY_REFUNDED, None, 3025),
    ("approved", "accredited", "0.01", Kind.PAYMENT_PARTIALLY_REFUNDED, None, 1),
    ("authorized", "pending_capture", "0", Kind.PAYMENT_AUTHORIZED, 10050, None),
    ("pending", "pending_waiting_transfer", "0", Kind.PAYMENT_CREATED, 10050, None),
    ("in_process", "pending_contingency", "0", Kind.PAYMENT_CREATED, 10050, None),
    ("rejected", "cc_rejected_other_reason", "0", Kind.PAYMENT_FAILED, 10050, None),
    ("cancelled", "by_payer", "0", Kind.PAYMENT_CANCELED, 10050, None),
    ("cancelled", "expired", "0", Kind.PAYMENT_EXPIRED, 10050, None),
    ("refunded", "refunded", "100.5", Kind.PAYMENT_REFUNDED, None, 10050),
    ("refunded", "refunded", "0", Kind.PAYMENT_REFUNDED, None, 10050),  # no figure: all of it
    ("charged_back", "settled", "0", Kind.DISPUTE_LOST, 10050, None),
    ("in_mediation", "", "0", Kind.DISPUTE_OPENED, 10050, None),
]


@pytest.mark.parametrize(("status", "detail", "refunded", "kind", "amount", "total"), ENRICH_CASES)
async def test_enrich_maps_every_status(
    api: Api, status: str, detail: str, refunded: str, kind: Kind, amount: int | None,
    total: int | None,
) -> None:  # fmt: skip
    resource = payment(
        "999999999", status=status, status_detail=detail, amount="100.5", refunded=refunded,
        reference="order-42", date_last_updated="2024-01-10T15:00:00.000-04:00",
    )  # fmt: skip
    event = await enrich(api, resource)
    assert event.kind is kind and not event.thin
    assert (event.amount, event.refunded_total) == (amount, total)
    assert event.data["payment_amount"] == 10050  # the whole payment, refunds included
    assert (event.dedup_key, event.object_id, event.type) == (
        "12345",
        "999999999",
        "payment.created",
    )
    assert (event.reference, event.currency) == ("order-42", "BRL")
    assert event.data["status"] == status and event.data["status_detail"] == detail
    assert event.data["topic"] == "payment"  # the notification's own data is kept
    assert event.occurred_at == datetime(2024, 1, 10, 19, 0, tzinfo=UTC)
    assert api.fake.log == [("999999999", 200)]


async def test_paid_uses_the_approval_time(api: Api) -> None:
    resource = payment("1", status="approved", amount="10", date_approved="2024-01-10T14:31:00Z")
    event = await enrich(api, resource)
    assert event.occurred_at == datetime(2024, 1, 10, 14, 31, tzinfo=UTC)


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        (Decimal("100.5"), "BRL", 10050),
        (Decimal("0.1") + Decimal("0.2"), "ARS", 30),
        (Decimal("19.99"), "MXN", 1999),
        (Decimal("1500"), "CLP", 1500),
        (Decimal("25000"), "COP", 2500000),
    ],
)
async def test_amounts_are_converted_exactly(
    api: Api, amount: Decimal, currency: str, minor: int
) -> None:
    event = await enrich(api, payment("7", status="approved", amount=amount, currency=currency))
    assert (event.amount, event.currency) == (minor, currency)


async def test_an_amount_finer_than_the_currency_is_refused(api: Api) -> None:
    with pytest.raises(NonRetryable):
        await enrich(api, payment("7", status="approved", amount=0.1 + 0.2))
    with pytest.raises(NonRetryable):
        await enrich(api, payment("8", status="approved", amount="1500.5", currency="CLP"))


async def test_currency_exponents_option(api: Api) -> None:
    resource = payment("7", status="approved", amount="25000", currency="COP")
    event = await enrich(api, resource, currency_exponents={"COP": 0})
    assert event.amount == 25000


async def test_missing_payment_is_a_retryable_gateway_error(api: Api) -> None:
    with pytest.raises(GatewayError, match="404") as failed:
        await adapter(api_base_url=api.url).enrich(thin("404404"), api.http)
    assert not isinstance(failed.value, NonRetryable)
    api.fake.payments["404404"] = payment("404404", status="approved", amount="1")
    event = await adapter(api_base_url=api.url).enrich(thin("404404"), api.http)
    assert event.kind is Kind.PAYMENT_PAID
    assert api.fake.requests_for("404404") == [404, 200]


async def test_wrong_token_is_a_gateway_error(api: Api) -> None:
    api.fake.payments["5"] = payment("5", status="approved", amount="1")
    with pytest.raises(GatewayError, match="access token"):
        await adapter(api_base_url=api.url, api_key="wrong").enrich(thin("5"), api.http)
    assert api.fake.log == [("5", 401)]


async def test_unreachable_api_is_a_gateway_error() -> None:
    provider = adapter(api_base_url=f"http://127.0.0.1:{free_port()}")
    async with httpx.AsyncClient() as http:
        with pytest.raises(GatewayError, match="ConnectError"):
            await provider.enrich(thin(), http)


async def test_no_access_token_is_a_gateway_error(api: Api) -> None:
    with pytest.raises(GatewayError, match="api_key"):
        await adapter(api_base_url=api.url, api_key=None).enrich(thin(), api.http)


async def test_non_thin_events_pass_through(api: Api) -> None:
    event = ParsedEvent("k", Kind.OTHER, "merchant_order", "1")
    assert await adapter(api_base_url=api.url).enrich(event, api.http) is event
    assert api.fake.log == []


async def test_fetch_status(api: Api) -> None:
    api.fake.payments["31"] = payment(
        "31", status="approved", status_detail="partially_refunded", amount="50",
        refunded="20", reference="r-31",
    )  # fmt: skip
    event = await adapter(api_base_url=api.url).fetch_status("31", api.http)
    assert event is not None and not event.thin
    # The refunded total is part of the key: a second partial refund is a new fact.
    assert event.dedup_key == "reconcile:31:approved:partially_refunded:2000"
    assert (event.kind, event.refunded_total, event.reference) == (
        Kind.PAYMENT_PARTIALLY_REFUNDED, 2000, "r-31",
    )  # fmt: skip
    assert event.data["origin"] == "reconcile"
    assert await adapter(api_key=None).fetch_status("31", api.http) is None


def test_now_is_not_hidden() -> None:
    # verify takes `now`: a delivery signed an hour ago passes at that time only.
    then = NOW - timedelta(hours=1)
    delivery = signed(ts=str(int(then.timestamp())))
    adapter().verify(delivery, then)
    with pytest.raises(TimestampOutOfTolerance):
        adapter().verify(delivery, NOW)


# -- issue 21: what the gateway documents, read the way it means it ---------------------------


@pytest.mark.parametrize(
    ("status", "detail", "kind"),
    [
        # https://www.mercadopago.com.br/developers/en/docs/checkout-api/response-handling/query-results
        ("charged_back", "settled", Kind.DISPUTE_LOST),  # the money was retained
        ("charged_back", "reimbursed", Kind.DISPUTE_WON),  # the money came back
        ("charged_back", "in_process", Kind.DISPUTE_OPENED),  # the payer disowns it
        ("charged_back", None, Kind.DISPUTE_LOST),
        ("refunded", "by_admin", Kind.PAYMENT_REFUNDED),
        ("refunded", "refunded", Kind.PAYMENT_REFUNDED),
        ("in_mediation", None, Kind.DISPUTE_OPENED),
        ("cancelled", "by_collector", Kind.PAYMENT_CANCELED),
        ("canceled", "by_payer", Kind.PAYMENT_CANCELED),  # the .uy edition's spelling
        ("canceled", "expired", Kind.PAYMENT_EXPIRED),
        ("in_process", "deferred_retry", Kind.PAYMENT_CREATED),
        ("pending", "pending_challenge", Kind.PAYMENT_CREATED),
        ("rejected", "cc_rejected_high_risk", Kind.PAYMENT_FAILED),
        ("rejected", "bank_error", Kind.PAYMENT_FAILED),
        ("authorized", "pending_capture", Kind.PAYMENT_AUTHORIZED),
    ],
)
def test_every_documented_status_detail_pair(status: str, detail: str | None, kind: Kind) -> None:
    assert payment_kind(status, detail, 1000, 0) is kind


def _payment_event(**fields_: Any) -> ParsedEvent:
    resource = {**payment("42", status="approved", amount="10"), **fields_}
    return payment_event(resource, "42", "k", {"BRL": 2})


def test_chargeback_outcomes_keep_the_whole_amount_for_the_ledger() -> None:
    won = _payment_event(status="charged_back", status_detail="reimbursed")
    assert (won.kind, won.amount, won.data["payment_amount"]) == (Kind.DISPUTE_WON, 1000, 1000)
    assert won.warnings == ()
    odd = _payment_event(status="charged_back", status_detail="something_new")
    assert odd.kind is Kind.DISPUTE_LOST
    assert [w["rule"] for w in odd.warnings] == ["mercadopago.status_detail"]


def test_an_unknown_status_is_other_with_a_warning() -> None:
    event = _payment_event(status="mystery")
    assert event.kind is Kind.OTHER
    assert [w["rule"] for w in event.warnings] == ["mercadopago.status_detail"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-01-10T14:33:30.000-04:00", datetime(2024, 1, 10, 18, 33, 30, tzinfo=UTC)),
        ("2024-01-10T14:33:30Z", datetime(2024, 1, 10, 14, 33, 30, tzinfo=UTC)),
        ("2024-01-10T14:33:30.123456789-03:00", datetime(2024, 1, 10, 17, 33, 30, 123456, UTC)),
    ],
)
def test_documented_timestamp_forms_read_without_warnings(value: str, expected: datetime) -> None:
    event = _payment_event(date_approved=value)
    assert event.occurred_at == expected and event.warnings == ()


def test_a_deviating_timestamp_is_read_past_not_a_failed_read() -> None:
    # Before issue 21 an API answer with such a date failed the read (GatewayError, retried).
    naive = _payment_event(date_approved="2024-01-10T14:33:30.000")
    assert naive.kind is Kind.PAYMENT_PAID and naive.amount == 1000
    assert naive.occurred_at == datetime(2024, 1, 10, 14, 33, 30, tzinfo=UTC)
    assert [w["rule"] for w in naive.warnings] == ["mercadopago.timestamp"]
    garbage = _payment_event(date_approved="yesterday", date_last_updated=None, date_created=None)
    assert garbage.occurred_at is None and garbage.kind is Kind.PAYMENT_PAID
    assert [w["rule"] for w in garbage.warnings] == ["mercadopago.timestamp"]


@pytest.mark.parametrize(
    ("amount", "minor"),
    [(Decimal("100.5"), 10050), ("100.50", 10050), (" 100.5 ", 10050), (100, 10000),
     (Decimal("100.0"), 10000), (Decimal("1.005E2"), 10050)],
)  # fmt: skip
def test_every_documented_amount_form_parses(amount: object, minor: int) -> None:
    # JSON numbers (payments API) and decimal strings (Orders API) alike.
    resource = {**payment("42", status="approved", amount="1"), "transaction_amount": amount}
    assert payment_event(resource, "42", "k", {"BRL": 2}).amount == minor


@pytest.mark.parametrize("amount", ["", "abc", True, [1], Decimal("-1"), "1.001"])
def test_an_unreadable_amount_is_refused(amount: object) -> None:
    resource = {**payment("42", status="approved", amount="1"), "transaction_amount": amount}
    with pytest.raises(NonRetryable):
        payment_event(resource, "42", "k", {"BRL": 2})


# -- Orders API --------------------------------------------------------------------------------

ORDER_ID = "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"


def order(status: str, detail: str, *, refunded: str | None = None, **extra: Any) -> dict[str, Any]:
    """An Orders API order as `GET /v1/orders/{id}` answers it (sdk-nodejs OrderResponse)."""
    pay: dict[str, Any] = {
        "id": "PAY01JQ4S4KY8HWQ6NA5PXB65B3D3", "status": status, "status_detail": detail,
        "amount": "200.00", "paid_amount": "200.00",
        "payment_method": {"id": "master", "type": "credit_card", "installments": 1},
    }  # fmt: skip
    if refunded is not None:
        pay["refunded_amount"] = refunded
    return {
        "id": ORDER_ID, "type": "online", "external_reference": "ext-1", "status": status,
        "status_detail": detail, "total_amount": "200.00", "total_paid_amount": "200.00",
        "currency": "BRL", "created_date": "2025-03-26T14:46:50.011Z",
        "last_updated_date": "2025-03-26T14:46:53.212Z",
        "transactions": {"payments": [pay]}, **extra,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("status", "detail", "refunded", "kind", "amount", "total"),
    [
        ("created", "created", None, Kind.PAYMENT_CREATED, 20000, None),
        ("processing", "in_process", None, Kind.PAYMENT_CREATED, 20000, None),
        ("action_required", "waiting_payment", None, Kind.PAYMENT_CREATED, 20000, None),
        ("action_required", "waiting_capture", None, Kind.PAYMENT_AUTHORIZED, 20000, None),
        ("processed", "accredited", None, Kind.PAYMENT_PAID, 20000, None),
        ("processed", "partially_refunded", "50.00", Kind.PAYMENT_PARTIALLY_REFUNDED, None, 5000),
        ("processed", "refunded", "200.00", Kind.PAYMENT_REFUNDED, None, 20000),
        ("refunded", "refunded", None, Kind.PAYMENT_REFUNDED, None, 20000),
        ("failed", "bad_filled_card_data", None, Kind.PAYMENT_FAILED, 20000, None),
        ("canceled", "canceled", None, Kind.PAYMENT_CANCELED, 20000, None),
        ("expired", "expired", None, Kind.PAYMENT_EXPIRED, 20000, None),
    ],
)
def test_order_statuses(
    status: str, detail: str, refunded: str | None, kind: Kind, amount: int | None,
    total: int | None,
) -> None:  # fmt: skip
    event = order_event(order(status, detail, refunded=refunded), ORDER_ID, "k", {"BRL": 2})
    assert (event.kind, event.amount, event.refunded_total) == (kind, amount, total)
    assert event.data["payment_amount"] == 20000 and event.reference == "ext-1"
    assert event.occurred_at == datetime(2025, 3, 26, 14, 46, 53, 212000, tzinfo=UTC)
    assert event.warnings == ()


def test_order_payments_sent_as_one_object_are_read_with_a_warning() -> None:
    resource = order("processed", "partially_refunded", refunded="20.00")
    resource["transactions"]["payments"] = resource["transactions"]["payments"][0]
    event = order_event(resource, ORDER_ID, "k", {"BRL": 2})
    assert (event.kind, event.refunded_total) == (Kind.PAYMENT_PARTIALLY_REFUNDED, 2000)
    assert [w["rule"] for w in event.warnings] == ["mercadopago.order_payments"]


def test_order_refunds_count_when_the_payments_carry_no_refunded_amount() -> None:
    refunds = [
        {"id": "REF01", "transaction_id": "PAY01", "amount": "30.00", "status": "processed"},
        {"id": "REF02", "transaction_id": "PAY01", "amount": "10.00", "status": "processing"},
    ]
    resource = order("processed", "partially_refunded")
    resource["transactions"]["refunds"] = refunds
    event = order_event(resource, ORDER_ID, "k", {"BRL": 2})
    assert (event.kind, event.refunded_total) == (Kind.PAYMENT_PARTIALLY_REFUNDED, 3000)


ORDER_NOTIFICATION: dict[str, Any] = {
    "action": "order.processed",
    "api_version": "v1",
    "application_id": "7000000000000001",
    "data": {"id": ORDER_ID, "status": "processed", "total_amount": "200.00"},
    "date_created": "2025-03-26T14:46:53.410Z",
    "live_mode": False,
    "type": "order",
    "user_id": "2021490138",
}


def test_an_orders_api_notification_is_thin_and_verifies_with_the_lower_cased_id() -> None:
    provider = adapter()
    body = json.dumps(ORDER_NOTIFICATION).encode()
    delivery = provider.sign(body, NOW)
    req = request(body, delivery.headers, delivery.query)
    provider.verify(req, NOW)
    [event] = provider.parse(req)
    assert event.thin and event.object_id == ORDER_ID and event.type == "order.processed"
    assert event.data["topic"] == "order" and event.warnings == ()


async def test_enrich_reads_the_order_from_the_orders_api(api: Api) -> None:
    api.fake.orders[ORDER_ID] = order("processed", "accredited")
    body = json.dumps(ORDER_NOTIFICATION).encode()
    [hint] = adapter().parse(request(body, {}, f"data.id={ORDER_ID}&type=order"))
    event = await adapter(api_base_url=api.url).enrich(hint, api.http)
    assert (event.kind, event.amount, event.currency) == (Kind.PAYMENT_PAID, 20000, "BRL")
    assert event.type == "order.processed" and not event.thin
    assert api.fake.log == [(ORDER_ID, 200)]
    status = await adapter(api_base_url=api.url).fetch_status(ORDER_ID, api.http)
    assert status is not None and status.kind is Kind.PAYMENT_PAID
    assert status.dedup_key == f"reconcile:{ORDER_ID}:processed:accredited"


# -- notifications: ancillary fields read past ----------------------------------------------


def test_notification_deviations_become_warnings_not_failures() -> None:
    body = {**EXAMPLE, "date_created": "2015-03-25T10:04:58", "live_mode": "true",
            "user_id": "44444", "id": "12345"}  # fmt: skip
    [event] = adapter().parse(request(json.dumps(body).encode(), {}, "data.id=999999999"))
    assert event.thin and event.object_id == "999999999" and event.dedup_key == "12345"
    assert event.occurred_at == datetime(2015, 3, 25, 10, 4, 58, tzinfo=UTC)
    assert sorted(w["rule"] for w in event.warnings) == [
        "mercadopago.live_mode", "mercadopago.timestamp",
    ]  # fmt: skip
    mismatch = {**EXAMPLE, "data": {"id": "111"}}
    [other] = adapter().parse(request(json.dumps(mismatch).encode(), {}, "data.id=999999999"))
    assert [w["rule"] for w in other.warnings] == ["mercadopago.data_id_mismatch"]


# -- legacy IPN: an unverified hint -------------------------------------------------------------


MERCHANT_ORDER_IPN = json.dumps(
    {"resource": "https://api.mercadolibre.com/merchant_orders/9", "topic": "merchant_order"}
).encode()


@pytest.mark.parametrize(
    ("body", "query"),
    [
        (b"", "topic=payment&id=123"),
        (b'{"resource": "123", "topic": "payment"}', ""),
        (MERCHANT_ORDER_IPN, ""),
        (b"not json", "topic=payment&id=123"),
    ],
)
def test_ipn_only_requests_pass_verify_unsigned(body: bytes, query: str) -> None:
    adapter().verify(request(body, {}, query), NOW)
    # Mercado Pago: IPN carries an x-signature that does not validate with the secret.
    bogus = {"x-signature": f"ts={TS},v1={'0' * 64}", "x-request-id": REQUEST_ID}
    adapter().verify(request(body, bogus, query), NOW)


@pytest.mark.parametrize(
    ("body", "query"),
    [
        (json.dumps(EXAMPLE).encode(), "data.id=999999999&type=payment"),
        (json.dumps(EXAMPLE).encode(), "topic=payment&id=999999999"),  # a webhook body
        (b"", "id=123"),
        (b"", "topic=payment"),
        (b'{"topic": "payment"}', ""),
        (b"", "topic=payment&id=123&data.id=123"),
    ],
)
def test_anything_else_still_needs_a_valid_signature(body: bytes, query: str) -> None:
    with pytest.raises(MissingHeader):
        adapter().verify(request(body, {}, query), NOW)
    bogus = {"x-signature": f"ts={TS},v1={'0' * 64}", "x-request-id": REQUEST_ID}
    with pytest.raises(SignatureMismatch):
        adapter().verify(request(body, bogus, query), NOW)


def test_ipn_can_be_refused_altogether() -> None:
    with pytest.raises(MissingHeader):
        adapter(accept_ipn=False).verify(request(b"", {}, "topic=payment&id=123"), NOW)


def test_an_ipn_id_that_is_not_a_payment_id_is_never_fetched() -> None:
    [event] = adapter().parse(request(b"", {}, "topic=payment&id=..%2Fusers%2Fme"))
    assert not event.thin and event.object_id is None
    assert [w["rule"] for w in event.warnings] == ["mercadopago.ipn_id"]
    assert "users" not in event.warnings[0]["detail"]  # the sender's text is not echoed
    assert initial_status(event) is EventStatus.IGNORED


def test_new_ipn_hints_beyond_the_budget_are_stored_but_not_fetched() -> None:
    provider = adapter(ipn_hints_per_minute=6, ipn_hint_burst=2)

    def hint(payment_id: int, at: datetime) -> ParsedEvent:
        req = inbound("mp", b"", {}, received_at=at, query=f"topic=payment&id={payment_id}")
        [event] = provider.parse(req)
        return event

    assert hint(1, NOW).thin and hint(2, NOW).thin
    # A flood of an id already let in costs nothing: the store keeps it as one event.
    assert all(hint(1, NOW).thin for _ in range(50))
    late = hint(3, NOW)
    assert not late.thin and late.type == "ipn.payment.throttled"
    assert [w["rule"] for w in late.warnings] == ["mercadopago.ipn_throttled"]
    assert initial_status(late) is EventStatus.IGNORED
    assert late.dedup_key != hint(3, NOW + timedelta(seconds=10)).dedup_key  # refilled: 1 token
    assert not hint(4, NOW + timedelta(seconds=10)).thin


async def test_an_unverified_hint_for_an_unknown_id_is_read_once_then_dead(api: Api) -> None:
    [hint] = adapter().parse(request(b"", {}, "topic=payment&id=404404"))
    with pytest.raises(NonRetryable, match="not retried"):
        await adapter(api_base_url=api.url).enrich(hint, api.http)
    assert api.fake.log == [("404404", 404)]


async def test_an_unverified_hint_applies_only_what_the_api_says(api: Api) -> None:
    api.fake.payments["123"] = payment("123", status="approved", amount="12.5", reference="r")
    body = b'{"resource": "123", "topic": "payment", "status": "refunded", "amount": 1}'
    [hint] = adapter().parse(request(body))
    event = await adapter(api_base_url=api.url).enrich(hint, api.http)
    assert (event.kind, event.amount, event.reference) == (Kind.PAYMENT_PAID, 1250, "r")
    assert event.data["format"] == "ipn" and event.data["verified"] is False


@pytest.mark.parametrize(
    "options",
    [
        {"accept_ipn": "yes"},
        {"ipn_hint_burst": 0},
        {"ipn_hint_burst": 1.5},
        {"ipn_hints_per_minute": -1},
    ],
)
def test_ipn_options_are_checked(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        adapter(**options)
