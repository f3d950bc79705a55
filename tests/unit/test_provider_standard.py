"""Standard Webhooks adapter: the specification's test vector and library, the scheme's
headers one by one, and Porteiro's normalised event format both ways.

What every adapter does (a wrong secret, a missing header, a stale timestamp, the ack,
the sample lifecycle's round trip) is asserted once, for all, in test_provider_contract.py.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError, MalformedHeader, ParseError, SignatureMismatch
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers.base import SamplePayment
from porteiro.providers.fields import parse_rfc3339
from porteiro.providers.standard import StandardProvider
from porteiro.providers.standard.webhook import decode_secret, event_body, sign_headers
from tests.support.inbound import inbound

# The Standard Webhooks test vector: the example secret, id, timestamp and body that the
# specification's reference libraries test their signatures against.
GOLDEN_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
GOLDEN_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
GOLDEN_TS = 1614265330
GOLDEN_BODY = b'{"test": 2432232314}'
GOLDEN_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
GOLDEN_NOW = datetime.fromtimestamp(GOLDEN_TS, UTC)

OTHER_SECRET = "whsec_" + "c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="  # "second-secret-for-rotation"

EVENT = {
    "id": "evt_1",
    "type": "payment.paid",
    "object_id": "pay_123",
    "reference": "order-42",
    "amount": 1000,
    "currency": "BRL",
    "occurred_at": "2024-11-28T16:37:11.65Z",
    "data": {"method": "pix"},
}


def provider(*secrets: str, tolerance: int = 300) -> StandardProvider:
    source = SourceConfig(
        name="std",
        provider="standard",
        secrets=secrets or (GOLDEN_SECRET,),
        tolerance_seconds=tolerance,
    )
    return StandardProvider(source)


def request(headers: Mapping[str, str], body: bytes) -> InboundRequest:
    return inbound("std", body, headers, received_at=GOLDEN_NOW)


def golden_headers(**override: str) -> dict[str, str]:
    headers = {
        "webhook-id": GOLDEN_ID,
        "webhook-timestamp": str(GOLDEN_TS),
        "webhook-signature": GOLDEN_SIGNATURE,
    }
    headers.update({key.replace("_", "-"): value for key, value in override.items()})
    return headers


def event_request(body: Mapping[str, Any], **headers: str) -> InboundRequest:
    return request({"webhook-id": "msg_header", **headers}, json.dumps(body).encode())


# -- the golden vector and the official library -------------------------------------------


def test_golden_vector_signs() -> None:
    headers = sign_headers(decode_secret(GOLDEN_SECRET), GOLDEN_ID, GOLDEN_TS, GOLDEN_BODY)
    assert headers["webhook-signature"] == GOLDEN_SIGNATURE


def test_golden_vector_verifies() -> None:
    provider().verify(request(golden_headers(), GOLDEN_BODY), GOLDEN_NOW)


def test_unpadded_signature_verifies() -> None:
    headers = golden_headers(webhook_signature=GOLDEN_SIGNATURE.rstrip("="))
    provider().verify(request(headers, GOLDEN_BODY), GOLDEN_NOW)


def test_header_names_are_case_insensitive() -> None:
    upper = {key.upper(): value for key, value in golden_headers().items()}
    provider().verify(request(upper, GOLDEN_BODY), GOLDEN_NOW)


def test_non_ascii_id_signed_by_the_library_verifies_as_received() -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    signature = Webhook(OTHER_SECRET).sign("msg_é", now, "{}")
    headers = {
        "webhook-id": "msg_é".encode().decode("latin-1"),  # how ASGI headers arrive
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    provider(OTHER_SECRET).verify(request(headers, b"{}"), now)


def test_our_signature_verifies_with_the_library() -> None:
    now = datetime.now(UTC)
    body = json.dumps(EVENT).encode()
    signed = provider(OTHER_SECRET).sign(body, now)
    assert Webhook(OTHER_SECRET).verify(body, dict(signed.headers)) == EVENT
    assert signed.headers["webhook-id"] == "evt_1"  # the body's id: stable across resends


def test_sign_uses_the_first_secret_and_a_stable_id_for_bodies_without_one() -> None:
    now = datetime.now(UTC)
    signed = provider(OTHER_SECRET, GOLDEN_SECRET).sign(b"not json", now)
    assert signed.headers["webhook-id"] == provider().sign(b"not json", now).headers["webhook-id"]
    Webhook(OTHER_SECRET).verify(b"not json", dict(signed.headers), json_parse=False)


# -- rotation -------------------------------------------------------------------------------


def test_rotation_any_signature_in_the_header_matches() -> None:
    other = sign_headers(decode_secret(OTHER_SECRET), GOLDEN_ID, GOLDEN_TS, GOLDEN_BODY)
    both = f"{other['webhook-signature']} {GOLDEN_SIGNATURE}"
    provider().verify(request(golden_headers(webhook_signature=both), GOLDEN_BODY), GOLDEN_NOW)
    provider(OTHER_SECRET).verify(
        request(golden_headers(webhook_signature=both), GOLDEN_BODY), GOLDEN_NOW
    )


def test_other_signature_versions_are_ignored() -> None:
    v1a = "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwV" + "A" * 24
    value = f"{v1a} {GOLDEN_SIGNATURE} v2,AAAA"
    provider().verify(request(golden_headers(webhook_signature=value), GOLDEN_BODY), GOLDEN_NOW)


# -- each test breaks one thing ---------------------------------------------------------------


def test_tampered_id_is_a_mismatch() -> None:
    with pytest.raises(SignatureMismatch):
        provider().verify(request(golden_headers(webhook_id="msg_other"), GOLDEN_BODY), GOLDEN_NOW)


def test_tampered_timestamp_is_a_mismatch() -> None:
    headers = golden_headers(webhook_timestamp=str(GOLDEN_TS + 1))
    with pytest.raises(SignatureMismatch):
        provider().verify(request(headers, GOLDEN_BODY), GOLDEN_NOW)


@pytest.mark.parametrize("value", ["abc", "1614265330.0", "-1614265330", "1.6e9", "0x60"])
def test_malformed_timestamp(value: str) -> None:
    with pytest.raises(MalformedHeader):
        provider().verify(request(golden_headers(webhook_timestamp=value), GOLDEN_BODY), GOLDEN_NOW)


@pytest.mark.parametrize(
    "value",
    [
        "v1,!!!notbase64!!!",
        "v1,A",  # one base64 character cannot encode a byte
        "v1," + "A" * 45,
        "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",  # no version
        ",g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        f"{GOLDEN_SIGNATURE} garbage",
    ],
)
def test_garbage_signature_list_is_malformed(value: str) -> None:
    with pytest.raises(MalformedHeader):
        provider().verify(request(golden_headers(webhook_signature=value), GOLDEN_BODY), GOLDEN_NOW)


def test_a_signature_list_without_v1_is_a_mismatch() -> None:
    with pytest.raises(SignatureMismatch):
        provider().verify(
            request(golden_headers(webhook_signature="v2,AAAA"), GOLDEN_BODY), GOLDEN_NOW
        )


def test_a_v1_signature_of_the_wrong_length_is_a_mismatch() -> None:
    with pytest.raises(SignatureMismatch):
        provider().verify(
            request(golden_headers(webhook_signature="v1,AAAA"), GOLDEN_BODY), GOLDEN_NOW
        )


# -- secrets --------------------------------------------------------------------------------


def test_secret_without_prefix_is_base64_too() -> None:
    bare = GOLDEN_SECRET.removeprefix("whsec_")
    assert decode_secret(bare) == decode_secret(GOLDEN_SECRET)
    provider(bare).verify(request(golden_headers(), GOLDEN_BODY), GOLDEN_NOW)


@pytest.mark.parametrize("secret", ["whsec_", "whsec_not base64!", "whsec_a"])
def test_invalid_secret_is_a_config_error(secret: str) -> None:
    with pytest.raises(ConfigError):
        provider(secret)


# -- parse ----------------------------------------------------------------------------------


def test_parse_reads_every_field() -> None:
    [event] = provider().parse(event_request({**EVENT, "refunded_total": 0, "extra": True}))
    assert event == ParsedEvent(
        dedup_key="evt_1",
        kind=Kind.PAYMENT_PAID,
        type="payment.paid",
        object_id="pay_123",
        reference="order-42",
        amount=1000,
        currency="BRL",
        occurred_at=datetime(2024, 11, 28, 16, 37, 11, 650000, tzinfo=UTC),
        refunded_total=0,
        data={"method": "pix"},
    )


def test_parse_minimal_body_falls_back_to_the_webhook_id() -> None:
    [event] = provider().parse(event_request({"type": "payment.created", "object_id": "p"}))
    assert event.dedup_key == "msg_header"
    assert (event.kind, event.amount, event.occurred_at, event.data) == (
        Kind.PAYMENT_CREATED,
        None,
        None,
        {},
    )


@pytest.mark.parametrize("event_type", ["payment.exploded", "other", "PAYMENT.PAID", "charge.paid"])
def test_unknown_type_is_other(event_type: str) -> None:
    [event] = provider().parse(event_request({"id": "e", "type": event_type}))
    assert (event.kind, event.type, event.object_id) == (Kind.OTHER, event_type, None)


def test_every_canonical_kind_is_recognised() -> None:
    for kind in Kind:
        [event] = provider().parse(event_request({"id": "e", "type": kind.value, "object_id": "p"}))
        assert event.kind is kind


def test_lower_case_currency_is_normalised() -> None:
    [event] = provider().parse(event_request({**EVENT, "currency": "brl"}))
    assert event.currency == "BRL"


def test_an_empty_body_is_not_json() -> None:
    with pytest.raises(ParseError, match="not valid JSON"):
        provider().parse(request({"webhook-id": "m"}, b""))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"type": None}, "type"),
        ({"type": 3}, "type"),
        ({"type": ""}, "type"),
        ({"id": 5}, "id"),
        ({"object_id": None}, "object_id"),
        ({"object_id": 123}, "object_id"),
        ({"reference": ["x"]}, "reference"),
        ({"amount": "1000"}, "amount"),
        ({"amount": 10.5}, "amount"),
        ({"amount": True}, "amount"),
        ({"amount": -1}, "amount"),
        ({"refunded_total": "0"}, "refunded_total"),
        ({"currency": "R$"}, "currency"),
        ({"currency": 986}, "currency"),
        ({"data": [1]}, "data"),
    ],
)
def test_wrong_field_types_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ParseError, match=field):
        provider().parse(event_request({**EVENT, **change}))


@pytest.mark.parametrize(
    ("occurred_at", "expected"),
    [
        ("yesterday", None),
        ("2024-13-28T16:37:11Z", None),
        (1732811831, None),
        ("2024-11-28T16:37:11", datetime(2024, 11, 28, 16, 37, 11, tzinfo=UTC)),  # no offset
    ],
)
def test_a_deviating_occurred_at_is_read_past_with_a_warning(
    occurred_at: object, expected: datetime | None
) -> None:
    (event,) = provider().parse(event_request({**EVENT, "occurred_at": occurred_at}))
    assert event.occurred_at == expected
    assert [w["rule"] for w in event.warnings] == ["standard.occurred_at"]
    assert (event.kind, event.amount, event.object_id) == (Kind.PAYMENT_PAID, 1000, "pay_123")


def test_no_id_anywhere_is_a_parse_error() -> None:
    body = json.dumps({"type": "other"}).encode()
    with pytest.raises(ParseError, match="id"):
        provider().parse(request({}, body))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-10-10T20:28:13.6201993Z", datetime(2023, 10, 10, 20, 28, 13, 620199, tzinfo=UTC)),
        ("2024-11-28t16:37:11z", datetime(2024, 11, 28, 16, 37, 11, tzinfo=UTC)),
        (
            "2024-11-28T13:37:11-03:00",
            datetime(2024, 11, 28, 16, 37, 11, tzinfo=UTC),
        ),
    ],
)
def test_parse_rfc3339(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text, field="at") == expected


def test_event_body_round_trips_through_parse() -> None:
    original = ParsedEvent(
        dedup_key="evt_9",
        kind=Kind.PAYMENT_REFUNDED,
        type="payment.refunded",
        object_id="pay_9",
        amount=300,
        currency="BRL",
        occurred_at=datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
        refunded_total=1000,
        data={"note": "x"},
    )
    [parsed] = provider().parse(event_request(event_body(original)))
    assert parsed == original


# -- sample lifecycle ----------------------------------------------------------------------------


def test_sample_lifecycle_with_refunds() -> None:
    adapter = provider()
    sample = SamplePayment(object_id="pay_8", reference="ord-8", amount=1000, refund=True)
    bodies = adapter.sample_lifecycle(sample, datetime.now(UTC), random.Random(2))
    events = [adapter.parse(request({}, body))[0] for body in bodies]
    assert [e.kind for e in events][-2:] == [Kind.PAYMENT_PARTIALLY_REFUNDED, Kind.PAYMENT_REFUNDED]
    partial, full = events[-2:]
    assert (partial.amount, partial.refunded_total) == (333, 333)
    assert (full.amount, full.refunded_total) == (667, 1000)
    assert len({e.dedup_key for e in events}) == len(events) == 5
