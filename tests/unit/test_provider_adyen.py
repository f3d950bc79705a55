"""Adyen adapter: per-item HMAC (proven against the official `Adyen` SDK and Adyen's own
vectors), HTTP Basic auth, batches, event mapping, capture modes and simulate samples.

What every adapter does (a wrong secret, a missing header, a stale timestamp, the ack,
the sample lifecycle's round trip) is asserted once, for all, in test_provider_contract.py.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import random
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from Adyen import util as adyen_util  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porteiro import ledger
from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    ConfigError,
    MalformedHeader,
    MissingHeader,
    ParseError,
    SignatureMismatch,
)
from porteiro.model import UNPARSEABLE_TYPE, InboundRequest, Kind, ParsedEvent, PaymentState
from porteiro.providers import build_provider
from porteiro.providers.adyen import AdyenProvider
from porteiro.providers.adyen.samples import item_signature
from porteiro.providers.adyen.webhook import (
    IGNORED_CODES,
    KNOWN_CODES,
    NEEDS_ORIGINAL,
    SUCCESS_KINDS,
    event_kind,
    signing_string,
)
from porteiro.providers.base import SamplePayment
from tests.support.inbound import inbound

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
OTHER_KEY = "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174"
BASIC = "adyen-ws:s3cr3t:with-colon"

# Adyen's HMAC test vector (Adyen/adyen-python-api-library test/UtilTest.py).
VECTOR_ITEM: dict[str, Any] = {
    "pspReference": "7914073381342284",
    "merchantAccountCode": "TestMerchant",
    "merchantReference": "TestPayment-1407325143704",
    "amount": {"currency": "EUR", "value": 1130},
    "eventCode": "AUTHORISATION",
    "success": "true",
}
VECTOR_STRING = (
    "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
)
VECTOR_SIGNATURE = "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="

# Signatures Adyen's platform made (the SDK's util mocks), with ':' and '\' inside
# merchantReference and no escaping of either.
ADYEN_MOCKS = [
    ("M8NB66SBZSGLNK82", ":slashes are fun", "2EQYm7YJpKO4EtHSPu55SQTyWf8dkW5u2nD1tJFpViA="),
    ("T7FD4VM4D3RZNN82", "\\\\slashes are fun", "nIgT81gaB5oJpn2jPXupDq68iRo2wUlBsuYjtYfwKqo="),
]


def source(*secrets: str, **options: Any) -> SourceConfig:
    return SourceConfig(name="adyen", provider="adyen", secrets=secrets or (KEY,), options=options)


def adapter(*secrets: str, **options: Any) -> AdyenProvider:
    return AdyenProvider(source(*secrets, **options))


def request(body: bytes, headers: Mapping[str, str] | None = None) -> InboundRequest:
    return inbound("adyen", body, headers, received_at=NOW)


def item(code: str = "AUTHORISATION", success: object = "true", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "additionalData": {"authCode": "033899", "cardSummary": "1111"},
        "amount": {"currency": "EUR", "value": 1130},
        "eventCode": code,
        "eventDate": "2019-05-06T17:15:34.121+02:00",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "TestPayment-1407325143704",
        "paymentMethod": "visa",
        "pspReference": "7914073381342284",
        "success": success,
    }
    base.update(fields)
    return base


def sdk_signed(entry: dict[str, Any], key: str = KEY) -> dict[str, Any]:
    """`entry` with the hmacSignature computed by the official Adyen SDK."""
    signed = copy.deepcopy(entry)
    unsigned = {k: v for k, v in signed.items() if k != "additionalData"}
    signature = adyen_util.generate_notification_sig(unsigned, key).decode()
    signed.setdefault("additionalData", {})["hmacSignature"] = signature
    return signed


def body_of(*items: dict[str, Any], live: str = "false") -> bytes:
    wrapped = [{"NotificationRequestItem": entry} for entry in items]
    return json.dumps({"live": live, "notificationItems": wrapped}).encode()


def basic(credentials: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


def parse_one(entry: dict[str, Any], **options: Any) -> ParsedEvent:
    (event,) = adapter(**options).parse(request(body_of(entry)))
    return event


# -- known answers and the official SDK ---------------------------------------------------


def test_known_answer_vector() -> None:
    assert signing_string(VECTOR_ITEM) == VECTOR_STRING
    assert item_signature(VECTOR_ITEM, bytes.fromhex(KEY)) == VECTOR_SIGNATURE
    signed = {**VECTOR_ITEM, "additionalData": {"hmacSignature": VECTOR_SIGNATURE}}
    adapter().verify(request(body_of(signed)), NOW)


@pytest.mark.parametrize(("psp", "reference", "signature"), ADYEN_MOCKS)
def test_signatures_made_by_adyen_with_colons_and_backslashes(
    psp: str, reference: str, signature: str
) -> None:
    entry = item(
        pspReference=psp,
        merchantReference=reference,
        merchantAccountCode="AntoniStroinski",
        amount={"currency": "EUR", "value": 1000},
        additionalData={"hmacSignature": signature, "expiryDate": "03/2030"},
    )
    adapter(OTHER_KEY).verify(request(body_of(entry)), NOW)
    # The SDK agrees, and our signer produces the very same signature.
    assert adyen_util.is_valid_hmac_notification(entry, OTHER_KEY)
    assert item_signature(entry, bytes.fromhex(OTHER_KEY)) == signature


def test_items_signed_by_the_sdk_verify() -> None:
    entries = [
        sdk_signed(item()),
        sdk_signed(item("CAPTURE", originalReference="7914073381342284", pspReference="X" * 16)),
        sdk_signed(item("REFUND", "false", merchantReference="a:b\\c é ☃", reason="refused")),
    ]
    adapter().verify(request(body_of(*entries)), NOW)


def test_our_sign_validates_with_the_sdk() -> None:
    unsigned = [item(), item("REFUND", originalReference="7914073381342284", pspReference="R1")]
    signed = adapter().sign(body_of(*unsigned), NOW)
    document = json.loads(signed.body)
    assert len(document["notificationItems"]) == 2
    for wrapper in document["notificationItems"]:
        # The SDK checks only the first item of a whole request: hand it each item.
        assert adyen_util.is_valid_hmac_notification(wrapper["NotificationRequestItem"], KEY)
    assert signed.headers == {"content-type": "application/json"}
    adapter().verify(request(signed.body, signed.headers), NOW)


text_values = st.one_of(st.none(), st.text(st.characters(exclude_categories=["Cs"]), max_size=30))


@given(
    psp=st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20),
    original=text_values,
    reference=text_values,
    value=st.integers(min_value=0, max_value=10**12),
    currency=st.sampled_from(["EUR", "BRL", "USD", ""]),
    success=st.sampled_from(["true", "false"]),
)
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_sdk_and_adapter_agree_on_arbitrary_fields(
    psp: str, original: str | None, reference: str | None, value: int, currency: str, success: str
) -> None:
    entry = item("REFUND", success, pspReference=psp, amount={"value": value, "currency": currency})
    for key, field in (("originalReference", original), ("merchantReference", reference)):
        entry.pop(key, None)
        if field is not None:  # absent, not null: the SDK writes "None" for null
            entry[key] = field
    signed = sdk_signed(entry)
    adapter().verify(request(body_of(signed)), NOW)
    ours = item_signature(entry, bytes.fromhex(KEY))
    assert ours == signed["additionalData"]["hmacSignature"]


def test_null_fields_sign_as_empty_strings() -> None:
    """Documented divergence: JSON null is empty (Adyen's other SDKs), not the Python
    SDK's "None"; an absent field is empty for both."""
    entry = item(originalReference=None)
    absent = item()
    assert signing_string(entry) == signing_string(absent)
    adapter().verify(request(body_of(sdk_signed(absent) | {"originalReference": None})), NOW)


# -- refusals -----------------------------------------------------------------------------


def test_tampered_amount_in_one_item_refuses_the_whole_batch() -> None:
    entries = [sdk_signed(item(pspReference=f"PSP{n:013d}")) for n in range(3)]
    entries[1]["amount"]["value"] = 1
    with pytest.raises(SignatureMismatch, match="item 1"):
        adapter().verify(request(body_of(*entries)), NOW)


@pytest.mark.parametrize(
    "additional",
    [None, {}, {"hmacSignature": ""}, {"hmacSignature": "  "}, {"hmacSignature": None},
     {"authCode": "1"}],
)  # fmt: skip
def test_missing_signature(additional: dict[str, Any] | None) -> None:
    entry = item()
    entry.pop("additionalData")
    if additional is not None:
        entry["additionalData"] = additional
    with pytest.raises(MissingHeader, match="hmacSignature"):
        adapter().verify(request(body_of(entry)), NOW)


@pytest.mark.parametrize("signature", ["not base64!", "abc", 12, ["x"]])
def test_malformed_signature(signature: object) -> None:
    entry = item(additionalData={"hmacSignature": signature})
    with pytest.raises(MalformedHeader):
        adapter().verify(request(body_of(entry)), NOW)


def test_valid_base64_of_the_wrong_digest() -> None:
    entry = item(additionalData={"hmacSignature": base64.b64encode(b"x" * 32).decode()})
    with pytest.raises(SignatureMismatch):
        adapter().verify(request(body_of(entry)), NOW)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"\xff\xfe{",
        b"[]",
        b'{"live": "false"}',
        b'{"notificationItems": []}',
        b'{"notificationItems": [{"Other": {}}]}',
        b'{"notificationItems": [{"NotificationRequestItem": "x"}]}',
        b"[" * 100_000,
    ],
)
def test_unauthenticatable_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedHeader, match="unauthenticatable body"):
        adapter().verify(request(body), NOW)


def test_non_scalar_signed_field_is_refused() -> None:
    entry = sdk_signed(item())
    entry["merchantReference"] = {"nested": True}
    with pytest.raises(MalformedHeader):
        adapter().verify(request(body_of(entry)), NOW)


# -- HTTP Basic auth ----------------------------------------------------------------------


def test_basic_auth_right() -> None:
    adapter(basic_auth=BASIC).verify(request(body_of(sdk_signed(item())), basic(BASIC)), NOW)


def test_basic_auth_missing() -> None:
    with pytest.raises(MissingHeader, match="Authorization"):
        adapter(basic_auth=BASIC).verify(request(body_of(sdk_signed(item()))), NOW)


@pytest.mark.parametrize("credentials", ["adyen-ws:wrong", "adyen-ws", ":", BASIC + " "])
def test_basic_auth_wrong(credentials: str) -> None:
    body = body_of(sdk_signed(item()))
    with pytest.raises(SignatureMismatch, match="Basic"):
        adapter(basic_auth=BASIC).verify(request(body, basic(credentials)), NOW)


@pytest.mark.parametrize("header", ["Bearer abc", "Basic", "Basic !!!", "Basic a"])
def test_basic_auth_malformed(header: str) -> None:
    body = body_of(sdk_signed(item()))
    with pytest.raises(MalformedHeader):
        adapter(basic_auth=BASIC).verify(request(body, {"Authorization": header}), NOW)


def test_basic_auth_does_not_replace_the_hmac() -> None:
    with pytest.raises(SignatureMismatch):
        adapter(basic_auth=BASIC).verify(
            request(body_of(sdk_signed(item(), OTHER_KEY)), basic(BASIC)), NOW
        )


def test_basic_auth_rotation_and_sign() -> None:
    provider = adapter(basic_auth=["old:pw", BASIC])
    body = body_of(sdk_signed(item()))
    provider.verify(request(body, basic("old:pw")), NOW)
    provider.verify(request(body, basic(BASIC)), NOW)
    signed = provider.sign(body, NOW)
    assert signed.headers["authorization"] == basic("old:pw")["Authorization"]
    provider.verify(request(signed.body, signed.headers), NOW)


# -- rotation and configuration -----------------------------------------------------------


def test_rotation_any_key_matches_per_item() -> None:
    body = body_of(sdk_signed(item(pspReference="A" * 16)), sdk_signed(item(), OTHER_KEY))
    adapter(KEY, OTHER_KEY).verify(request(body), NOW)
    with pytest.raises(SignatureMismatch):
        adapter(KEY).verify(request(body), NOW)


@pytest.mark.parametrize(
    ("secrets", "options"),
    [
        (("not-hex",), {}),
        (("ABC",), {}),
        ((KEY, "zz"), {}),
        (("",), {}),
        ((KEY,), {"capture": "sometimes"}),
        ((KEY,), {"basic_auth": "no-colon"}),
        ((KEY,), {"basic_auth": 12}),
    ],
)
def test_bad_configuration(secrets: tuple[str, ...], options: dict[str, Any]) -> None:
    config = SourceConfig(name="adyen", provider="adyen", secrets=secrets, options=options)
    with pytest.raises(ConfigError):
        build_provider(config)


def test_registered_and_lowercase_hex_accepted() -> None:
    provider = build_provider(source(KEY.lower()))
    assert isinstance(provider, AdyenProvider)
    provider.verify(request(body_of(sdk_signed(item()))), NOW)


# -- hostile input ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
item_like = st.fixed_dictionaries(
    {},
    optional={
        name: json_values
        for name in (
            "pspReference",
            "originalReference",
            "merchantAccountCode",
            "merchantReference",
            "amount",
            "eventCode",
            "success",
            "additionalData",
        )
    },
)


@given(
    document=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"notificationItems": st.lists(
                st.fixed_dictionaries({"NotificationRequestItem": item_like}), max_size=3
            )}
        ),
        st.fixed_dictionaries(
            {"notificationItems": st.lists(
                st.fixed_dictionaries({"NotificationRequestItem": item_like.map(
                    lambda entry: {**entry, "additionalData": {"hmacSignature": VECTOR_SIGNATURE}}
                )}), min_size=1, max_size=3,
            )}
        ),
    ),
    basic_header=st.none() | st.text(max_size=30),
)  # fmt: skip
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_verify_raises_only_authentication_errors(
    document: object, basic_header: str | None
) -> None:
    body = json.dumps(document).encode()
    headers = {} if basic_header is None else {"Authorization": basic_header}
    for provider in (adapter(), adapter(basic_auth=BASIC)):
        with pytest.raises(AuthenticationError):
            provider.verify(request(body, headers), NOW)


# -- events -------------------------------------------------------------------------------

MAPPING = [
    ("AUTHORISATION", "true", Kind.PAYMENT_PAID),
    ("AUTHORISATION", "false", Kind.PAYMENT_FAILED),
    ("CAPTURE", "true", Kind.PAYMENT_PAID),
    ("CAPTURE", "false", Kind.OTHER),
    ("CAPTURE_FAILED", "true", Kind.PAYMENT_CAPTURE_FAILED),
    ("CAPTURE_FAILED", "false", Kind.OTHER),
    ("CANCELLATION", "true", Kind.PAYMENT_CANCELED),
    ("CANCELLATION", "false", Kind.OTHER),
    ("TECHNICAL_CANCEL", "true", Kind.PAYMENT_CANCELED),
    ("REFUND", "true", Kind.PAYMENT_PARTIALLY_REFUNDED),
    ("REFUND", "false", Kind.OTHER),
    ("REFUND_FAILED", "true", Kind.PAYMENT_REFUND_REVERSED),
    ("REFUND_FAILED", "false", Kind.OTHER),
    ("REFUNDED_REVERSED", "true", Kind.PAYMENT_REFUND_REVERSED),
    ("REFUNDED_REVERSED", "false", Kind.OTHER),
    ("EXPIRE", "true", Kind.PAYMENT_AUTHORIZATION_EXPIRED),
    ("EXPIRE", "false", Kind.OTHER),
    ("REFUND_WITH_DATA", "true", Kind.OTHER),
    ("CANCEL_OR_REFUND", "false", Kind.OTHER),
    ("NOTIFICATION_OF_CHARGEBACK", "true", Kind.DISPUTE_OPENED),
    ("REQUEST_FOR_INFORMATION", "true", Kind.DISPUTE_OPENED),
    ("CHARGEBACK", "true", Kind.DISPUTE_LOST),
    ("DISPUTE_OPENED_WITH_CHARGEBACK", "true", Kind.DISPUTE_LOST),
    ("CHARGEBACK_REVERSED", "true", Kind.DISPUTE_WON),
    ("PREARBITRATION_WON", "true", Kind.DISPUTE_WON),
    ("PREARBITRATION_LOST", "true", Kind.DISPUTE_LOST),
    ("SECOND_CHARGEBACK", "true", Kind.DISPUTE_LOST),
    ("NOTIFICATION_OF_FRAUD", "true", Kind.OTHER),
    ("OFFER_CLOSED", "true", Kind.PAYMENT_EXPIRED),
    ("OFFER_CLOSED", "false", Kind.OTHER),
    ("ORDER_CLOSED", "true", Kind.OTHER),
    ("PENDING", "true", Kind.PAYMENT_CREATED),
    ("AUTHORISATION_ADJUSTMENT", "true", Kind.OTHER),
    ("ORDER_OPENED", "true", Kind.OTHER),
    ("REPORT_AVAILABLE", "true", Kind.OTHER),
    ("RECURRING_CONTRACT", "true", Kind.OTHER),
    ("SOMETHING_NEW", "true", Kind.OTHER),
]


@pytest.mark.parametrize(("code", "success", "kind"), MAPPING)
def test_event_mapping(code: str, success: str, kind: Kind) -> None:
    extra = {"originalReference": "8313547924770610"} if code in NEEDS_ORIGINAL else {}
    event = parse_one(item(code, success, **extra))
    assert (event.kind, event.type, event.data["success"]) == (kind, code, success)
    assert event.dedup_key == f"7914073381342284:{code}:{success}"


@pytest.mark.parametrize("code", sorted(NEEDS_ORIGINAL))
def test_a_modification_without_original_reference_is_unreadable_alone(code: str) -> None:
    """Its pspReference is its own (the refund's, the dispute's): which payment is unknown.
    Adyen's own OpenAPI examples for CHARGEBACK_REVERSED, SECOND_CHARGEBACK and
    PREARBITRATION_WON leave it out."""
    events = adapter().parse(request(body_of(item(), item(code, pspReference="M" * 16))))
    assert events[0].kind is Kind.PAYMENT_PAID and events[0].error is None
    assert events[1].error is not None and "originalReference is required" in events[1].error
    # Refused by Adyen (success "false"), it changes nothing anywhere: read, as other.
    refused = parse_one(item(code, "false", pspReference="M" * 16))
    assert (refused.error, refused.kind) == (None, Kind.OTHER)


@pytest.mark.parametrize("code", sorted(SUCCESS_KINDS))
def test_every_mapped_code_is_other_when_it_did_not_succeed(code: str) -> None:
    assert event_kind(code, "false", None, manual_capture=False) is Kind.OTHER


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        ("refund", Kind.PAYMENT_REFUNDED),
        ("cancel", Kind.PAYMENT_CANCELED),
        (None, Kind.PAYMENT_CANCELED),
    ],
)
def test_cancel_or_refund_follows_modification_action(action: str | None, kind: Kind) -> None:
    extra = {} if action is None else {"modification.action": action}
    entry = item("CANCEL_OR_REFUND", originalReference="7914073381342284", pspReference="C" * 16)
    entry["additionalData"] = extra
    event = parse_one(entry)
    assert (event.kind, event.object_id) == (kind, "7914073381342284")


def test_capture_modes() -> None:
    assert parse_one(item()).kind is Kind.PAYMENT_PAID
    assert parse_one(item(), capture="automatic").kind is Kind.PAYMENT_PAID
    assert parse_one(item(), capture="manual").kind is Kind.PAYMENT_AUTHORIZED
    assert parse_one(item("AUTHORISATION", "false"), capture="manual").kind is Kind.PAYMENT_FAILED
    capture = item("CAPTURE", originalReference="7914073381342284", pspReference="C" * 16)
    assert parse_one(capture, capture="manual").kind is Kind.PAYMENT_PAID


def test_event_fields() -> None:
    event = parse_one(item(reason="033899:1111:03/2030"))
    assert event == ParsedEvent(
        dedup_key="7914073381342284:AUTHORISATION:true",
        kind=Kind.PAYMENT_PAID,
        type="AUTHORISATION",
        object_id="7914073381342284",
        reference="TestPayment-1407325143704",
        amount=1130,
        currency="EUR",
        occurred_at=datetime(2019, 5, 6, 17, 15, 34, 121000, tzinfo=timezone(timedelta(hours=2))),
        data={
            "psp_reference": "7914073381342284",
            "success": "true",
            "merchant_account": "TestMerchant",
            "payment_method": "visa",
            "reason": "033899:1111:03/2030",
            "live": "false",
            "payment_amount": 1130,
        },
    )


def test_a_refused_or_canceled_payment_keeps_its_amount() -> None:
    refused = item("AUTHORISATION", "false", amount={"currency": "EUR", "value": 12900})
    payment = ledger.replay_history("adyen", PSP, enumerate([parse_one(refused)]), NOW)
    assert (payment.state, payment.amount) == (PaymentState.FAILED, 12900)
    # A refund's amount is that refund's, never the payment's.
    refund = item("REFUND", originalReference=PSP, pspReference="R" * 16)
    assert "payment_amount" not in parse_one(refund).data


def test_batch_of_three_is_three_events() -> None:
    entries = [
        item(),
        item("REFUND", originalReference="7914073381342284", pspReference="R" * 16),
        item("REFUND", "false", originalReference="7914073381342284", pspReference="R" * 16),
    ]
    events = adapter().parse(request(body_of(*entries)))
    assert [e.dedup_key for e in events] == [
        "7914073381342284:AUTHORISATION:true",
        f"{'R' * 16}:REFUND:true",
        f"{'R' * 16}:REFUND:false",
    ]
    assert {e.object_id for e in events} == {"7914073381342284"}


def test_refunds_land_on_the_payment_and_converge() -> None:
    """Modifications are filed under originalReference, so the ledger sums them."""
    psp = "7914073381342284"

    def refund(reference: str, value: int) -> dict[str, Any]:
        amount = {"currency": "EUR", "value": value}
        return item("REFUND", originalReference=psp, pspReference=reference, amount=amount)

    entries = [
        item(amount={"currency": "EUR", "value": 1000}),
        refund("R1" * 8, 300),
        refund("R2" * 8, 700),
    ]
    events = adapter().parse(request(body_of(*entries)))
    assert [e.amount for e in events] == [1000, 300, 700]
    partial = ledger.replay_history("adyen", psp, enumerate(events[:2]), NOW)
    assert (partial.state, partial.refunded_amount) == (PaymentState.PARTIALLY_REFUNDED, 300)
    full = ledger.replay_history("adyen", psp, enumerate(events[::-1]), NOW)
    assert (full.state, full.refunded_amount, full.amount) == (PaymentState.REFUNDED, 1000, 1000)


UNREADABLE = [
    ({"pspReference": None}, "pspReference is required"),
    ({"pspReference": 7}, "pspReference must be a string"),
    ({"eventCode": ""}, "eventCode is required"),
    ({"success": "yes"}, "success"),
    ({"success": None}, "success"),
    ({"originalReference": 991314}, "originalReference must be a string"),
    ({"amount": {"value": "10", "currency": "EUR"}}, "amount.value"),
    ({"amount": {"value": 10.5, "currency": "EUR"}}, "amount.value"),
    ({"amount": {"value": 10, "currency": 978}}, "amount.currency"),
    ({"amount": [1]}, "amount must be an object"),
    ({"eventCode": "REFUND", "originalReference": "7914073381342284", "amount": {}}, "how much"),
    (
        {"eventCode": "REFUND", "originalReference": "7914073381342284", "amount": {"value": -5}},
        "non-negative",
    ),
    ({"eventCode": "CHARGEBACK_REVERSED"}, "originalReference is required"),
]


@pytest.mark.parametrize(("fields", "message"), UNREADABLE)
def test_an_unreadable_item_is_dead_on_its_own(fields: dict[str, Any], message: str) -> None:
    """What decides money is read strictly, but one bad item never sinks the batch."""
    refund: dict[str, Any] = {"amount": {"currency": "EUR", "value": 300}, "pspReference": "R" * 16}
    good = [item(), item("REFUND", originalReference="7914073381342284", **refund)]
    bad = item(**{"pspReference": "B" * 16, **fields})
    events = adapter().parse(request(body_of(good[0], bad, good[1])))
    assert [e.error is None for e in events] == [True, False, True]
    assert events[1].type == UNPARSEABLE_TYPE
    assert events[1].error is not None and message in events[1].error
    assert events[1].error.startswith("notificationItems[1]")
    assert [e.kind for e in (events[0], events[2])] == [
        Kind.PAYMENT_PAID,
        Kind.PAYMENT_PARTIALLY_REFUNDED,
    ]


def test_parse_of_a_non_notification_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        adapter().parse(request(b"{}"))


EVENT_DATES = [
    # Adyen's documented format, with milliseconds, and UTC as Z: no warning.
    ("2021-01-01T01:00:00+01:00", datetime(2021, 1, 1, tzinfo=UTC), False),
    ("2019-05-06T17:15:34.121+02:00", datetime(2019, 5, 6, 15, 15, 34, 121000, tzinfo=UTC), False),
    ("2024-02-09T10:19:48Z", datetime(2024, 2, 9, 10, 19, 48, tzinfo=UTC), False),
    # ISO 8601 offsets RFC 3339 does not allow, no offset at all: read, with a warning.
    ("2021-01-01T01:00:00+0100", datetime(2021, 1, 1, tzinfo=UTC), True),
    ("2021-01-01T01:00:00", datetime(2021, 1, 1, 1, tzinfo=UTC), True),
    # Unreadable: ignored, with a warning.
    ("yesterday", None, True),
    (1609459200, None, True),
]


@pytest.mark.parametrize(("value", "expected", "warned"), EVENT_DATES)
def test_event_date_is_read_past(value: object, expected: datetime | None, warned: bool) -> None:
    event = parse_one(item(eventDate=value))
    assert event.error is None and event.kind is Kind.PAYMENT_PAID
    assert event.occurred_at == expected
    assert rules(event) == ({"adyen.event_date"} if warned else set())


def rules(event: ParsedEvent) -> set[str]:
    return {w["rule"] for w in event.warnings}


@pytest.mark.parametrize(("value", "text"), [(True, "true"), (False, "false"), ("True", "true")])
def test_success_as_a_boolean_or_another_case_is_read_with_a_warning(
    value: object, text: str
) -> None:
    event = parse_one(item(success=value))
    assert (event.data["success"], rules(event)) == (text, {"adyen.success_type"})
    assert event.dedup_key == f"7914073381342284:AUTHORISATION:{text}"
    assert event.kind is (Kind.PAYMENT_PAID if text == "true" else Kind.PAYMENT_FAILED)


@pytest.mark.parametrize(("value", "expected"), [(20251201, "20251201"), ({"a": 1}, None)])
def test_merchant_reference_not_a_string_is_read_past(value: object, expected: str | None) -> None:
    event = parse_one(item(merchantReference=value))
    assert (event.reference, rules(event)) == (expected, {"adyen.merchant_reference"})
    assert event.kind is Kind.PAYMENT_PAID


@pytest.mark.parametrize(("live", "expected"), [(False, "false"), (True, "true"), (0, None)])
def test_live_not_a_string_is_read_past(live: object, expected: str | None) -> None:
    body = json.dumps({"live": live, "notificationItems": [{"NotificationRequestItem": item()}]})
    (event,) = adapter().parse(request(body.encode()))
    assert (event.data.get("live"), rules(event)) == (expected, {"adyen.live"})


def test_notification_items_as_one_object_is_one_item() -> None:
    provider = adapter()
    body = json.dumps({"live": "false", "notificationItems": {"NotificationRequestItem": item()}})
    signed = provider.sign(body.encode(), NOW)
    provider.verify(request(signed.body, signed.headers), NOW)
    (event,) = provider.parse(request(signed.body))
    assert (event.kind, rules(event)) == (Kind.PAYMENT_PAID, {"adyen.notification_items_object"})


def test_cancel_or_refund_without_an_action_is_a_cancel_with_a_warning() -> None:
    entry = item("CANCEL_OR_REFUND", originalReference="7914073381342284", pspReference="C" * 16)
    entry["additionalData"] = {}
    event = parse_one(entry)
    assert (event.kind, rules(event)) == (Kind.PAYMENT_CANCELED, {"adyen.modification_action"})
    entry["additionalData"] = {"modification.action": "refund"}
    assert rules(parse_one(entry)) == set()


def test_an_event_code_adyen_does_not_document_is_other_with_a_warning() -> None:
    event = parse_one(item("SOMETHING_NEW"))
    assert (event.kind, rules(event)) == (Kind.OTHER, {"adyen.unknown_event_code"})
    assert rules(parse_one(item("REPORT_AVAILABLE"))) == set()


# Every eventCode Adyen documents for Standard webhooks (docs.adyen.com/development-resources/
# webhooks/webhook-types, and the Webhooks OpenAPI `NotificationRequestItem.eventCode` enum):
# each is mapped or ignored for a reason, none gets the "unknown" warning.
DOCUMENTED_CODES = [
    "AUTHORISATION", "AUTHORISATION_ADJUSTMENT", "AUTORESCUE", "CANCEL_AUTORESCUE",
    "CANCELLATION", "CANCEL_OR_REFUND", "CAPTURE", "CAPTURE_FAILED", "CHARGEBACK",
    "CHARGEBACK_REVERSED", "DISPUTE_DEFENSE_PERIOD_ENDED", "DISPUTE_OPENED_WITH_CHARGEBACK",
    "EXPIRE", "HANDLED_EXTERNALLY",
    "INFORMATION_SUPPLIED", "ISSUER_COMMENTS", "MANUAL_REVIEW_ACCEPT", "MANUAL_REVIEW_REJECT",
    "NOTIFICATION_OF_CHARGEBACK", "NOTIFICATION_OF_FRAUD", "OFFER_CLOSED", "ORDER_CLOSED",
    "ORDER_OPENED", "PAIDOUT_REVERSED", "PAYOUT_DECLINE", "PAYOUT_EXPIRE", "PAYOUT_THIRDPARTY",
    "PENDING", "POSTPONED_REFUND", "PREARBITRATION_LOST", "PREARBITRATION_WON",
    "RECURRING_CONTRACT", "REFUND", "REFUNDED_REVERSED", "REFUND_FAILED", "REFUND_WITH_DATA",
    "REPORT_AVAILABLE", "REQUEST_FOR_INFORMATION", "SECOND_CHARGEBACK", "TECHNICAL_CANCEL",
    "VOID_PENDING_REFUND",
]  # fmt: skip


@pytest.mark.parametrize("code", DOCUMENTED_CODES)
def test_every_documented_code_is_mapped_or_ignored_for_a_reason(code: str) -> None:
    assert code in KNOWN_CODES
    entry = item(code, originalReference="7914073381342284", pspReference="M" * 16)
    event = parse_one(entry)
    assert event.error is None and "adyen.unknown_event_code" not in rules(event)
    assert (event.kind is Kind.OTHER) == (code in IGNORED_CODES)


def test_refunds_name_their_own_reference_as_the_settlement() -> None:
    refund = item("REFUND", originalReference="7914073381342284", pspReference="R" * 16)
    failed = item("REFUND_FAILED", originalReference="7914073381342284", pspReference="R" * 16)
    assert parse_one(refund).data["settlement_id"] == "R" * 16
    assert parse_one(failed).data["settlement_id"] == "R" * 16
    assert "settlement_id" not in parse_one(item()).data


PSP = "7914073381342284"


def modification(code: str, psp: str, value: int, minute: int) -> dict[str, Any]:
    return item(
        code,
        originalReference=PSP,
        pspReference=psp,
        amount={"currency": "EUR", "value": value},
        eventDate=f"2026-03-01T10:{minute:02d}:00+01:00",
    )


def every_order(
    entries: list[dict[str, Any]], **options: Any
) -> set[tuple[PaymentState, int | None, int]]:
    events = adapter(**options).parse(request(body_of(*entries)))
    found = set()
    for order in itertools.permutations(list(enumerate(events))):
        payment = ledger.replay_history("adyen", PSP, order, NOW)
        found.add((payment.state, payment.amount, payment.refunded_amount))
    return found


AUTHORISED = item(amount={"currency": "EUR", "value": 1000}, eventDate="2026-03-01T10:00:00+01:00")


@pytest.mark.parametrize("undo", ["REFUND_FAILED", "REFUNDED_REVERSED"])
def test_a_failed_or_reversed_refund_gives_the_refund_back_in_any_order(undo: str) -> None:
    refund = modification("REFUND", "R" * 16, 300, 5)
    other = modification("REFUND", "S" * 16, 200, 6)
    reversal = modification(undo, "R" * 16, 300, 9)
    assert every_order([AUTHORISED, refund, other, reversal]) == {
        (PaymentState.PARTIALLY_REFUNDED, 1000, 200)
    }
    assert every_order([AUTHORISED, refund, reversal]) == {(PaymentState.PAID, 1000, 0)}
    full = modification("REFUND", "T" * 16, 1000, 5)
    assert every_order([AUTHORISED, full, modification(undo, "T" * 16, 1000, 9)]) == {
        (PaymentState.PAID, 1000, 0)
    }


@pytest.mark.parametrize("capture", ["automatic", "manual"])
def test_a_failed_capture_is_not_paid_until_recaptured(capture: str) -> None:
    steps = [AUTHORISED]
    if capture == "manual":
        steps.append(modification("CAPTURE", "C" * 16, 1000, 1))
    failed = modification("CAPTURE_FAILED", "C" * 16, 1000, 3)
    assert every_order([*steps, failed], capture=capture) == {(PaymentState.FAILED, 1000, 0)}
    recaptured = modification("CAPTURE", "D" * 16, 1000, 20)
    assert every_order([*steps, failed, recaptured], capture=capture) == {
        (PaymentState.PAID, 1000, 0)
    }


def test_an_expired_authorisation_expires_only_if_nothing_was_captured() -> None:
    expire = item(
        "EXPIRE", amount={"currency": "EUR", "value": 1000}, eventDate="2026-03-08T10:00:00+01:00"
    )
    assert every_order([AUTHORISED, expire], capture="manual") == {(PaymentState.EXPIRED, 1000, 0)}
    captured = modification("CAPTURE", "C" * 16, 1000, 1)
    assert every_order([AUTHORISED, captured, expire], capture="manual") == {
        (PaymentState.PAID, 1000, 0)
    }
    assert every_order([AUTHORISED, expire]) == {(PaymentState.PAID, 1000, 0)}


def test_parse_tolerates_missing_optionals() -> None:
    event = parse_one({"pspReference": "P" * 16, "eventCode": "AUTHORISATION", "success": True})
    assert (event.amount, event.currency, event.occurred_at, event.reference) == (
        None,
        None,
        None,
        None,
    )
    assert event.dedup_key == f"{'P' * 16}:AUTHORISATION:true"


# -- simulate -------------------------------------------------------------------------------


def sample(provider: AdyenProvider, seed: int, refund: bool = True) -> list[bytes]:
    payment = SamplePayment(
        object_id="sim_ad_00001", reference="order-1", amount=10_000, refund=refund
    )
    return list(provider.sample_lifecycle(payment, NOW, random.Random(seed)))  # fmt: skip


def events_of(provider: AdyenProvider, bodies: list[bytes]) -> list[ParsedEvent]:
    return [event for body in bodies for event in provider.parse(request(body))]


@pytest.mark.parametrize("capture", ["automatic", "manual"])
def test_sample_lifecycle(capture: str) -> None:
    provider = adapter(capture=capture)
    bodies = sample(provider, 3)
    for body in bodies:
        provider.verify(request(body), NOW)
        for wrapper in json.loads(body)["notificationItems"]:
            assert adyen_util.is_valid_hmac_notification(wrapper["NotificationRequestItem"], KEY)
    events = events_of(provider, bodies)
    codes = [event.type for event in events]
    assert codes == (["AUTHORISATION", "CAPTURE"] if capture == "manual" else ["AUTHORISATION"]) + [
        "REFUND",
        "REFUND",
    ]
    assert {event.object_id for event in events} == {"sim_ad_00001"}
    assert [e.amount for e in events if e.type == "REFUND"] == [3333, 6667]
    assert len({event.dedup_key for event in events}) == len(events)
    final = ledger.replay_history("adyen", "sim_ad_00001", enumerate(events), NOW)
    assert (final.state, final.refunded_amount) == (PaymentState.REFUNDED, 10_000)
    first = json.loads(bodies[0])["notificationItems"][0]["NotificationRequestItem"]
    assert first["eventDate"].endswith("+01:00") and first["operations"]


def test_sample_lifecycle_sometimes_batches_two_items() -> None:
    sizes = {
        len(json.loads(body)["notificationItems"])
        for seed in range(20)
        for body in sample(adapter(capture="manual"), seed)
    }
    assert sizes == {1, 2}


def test_sign_resigns_with_the_first_key_and_is_stable() -> None:
    provider = adapter(KEY, OTHER_KEY)
    forged = body_of(sdk_signed(item(), OTHER_KEY))
    signed = provider.sign(forged, NOW)
    assert provider.sign(signed.body, NOW).body == signed.body
    entry = json.loads(signed.body)["notificationItems"][0]["NotificationRequestItem"]
    assert entry["additionalData"]["hmacSignature"] == VECTOR_SIGNATURE
    assert entry["additionalData"]["authCode"] == "033899"
    adapter(KEY).verify(request(signed.body), NOW)


def test_sign_refuses_a_non_notification() -> None:
    with pytest.raises(ParseError):
        adapter().sign(b"[]", NOW)
