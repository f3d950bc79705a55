"""Stripe adapter: `Stripe-Signature` checked against the official `stripe` SDK and a
golden vector from stripe-python's test_webhook inputs; event mapping (snapshot and thin
v2 events, and what is read past); status reads and thin-event fetches against a real
local fake Stripe API (tests/fakes/stripe.py on uvicorn).

What every adapter does (a wrong secret, a missing header, a stale timestamp, the ack,
the sample lifecycle's round trip) is asserted once, for all, in test_provider_contract.py.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import stripe
from hypothesis import given
from hypothesis import strategies as st

from porteiro import ledger
from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    ConfigError,
    GatewayError,
    MalformedHeader,
    ParseError,
    SignatureMismatch,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent, PaymentState
from porteiro.providers.base import SamplePayment
from porteiro.providers.stripe import StripeProvider
from porteiro.providers.stripe.webhook import parse_signature_header
from tests.fakes.stripe import FakeStripe
from tests.support.inbound import inbound
from tests.support.servers import free_port, live_server

SECRET = "whsec_test_secret"  # the SDK's own test secret
OLD_SECRET = "whsec_old_0123456789abcdefABCDEF"
NEW_SECRET = "whsec_new_fedcba9876543210FEDCBA"
# A golden vector computed from the stripe-python test_webhook inputs.
GOLDEN_T = 1614265330
GOLDEN_BODY = b'{"id":"evt_test_webhook","object":"event"}'
GOLDEN_V1 = "3c5817089d739023dd6190f70a3757e04f7a2fd8b5dab12c2e000f51970dccff"
GOLDEN_NOW = datetime.fromtimestamp(GOLDEN_T + 5, UTC)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T = int(NOW.timestamp())
API_KEY = "sk_test_porteiro"

PAYMENT_INTENT_SUCCEEDED: dict[str, Any] = {
    "id": "evt_1PxyzPI",
    "object": "event",
    "api_version": "2024-06-20",
    "created": 1718000000,
    "livemode": False,
    "pending_webhooks": 1,
    "request": {"id": "req_abc", "idempotency_key": "9f1c"},
    "type": "payment_intent.succeeded",
    "data": {
        "object": {
            "id": "pi_3Pxyz",
            "object": "payment_intent",
            "amount": 5000,
            "currency": "brl",
            "status": "succeeded",
            "latest_charge": "ch_3Pxyz",
            "metadata": {"order_id": "ord_123"},
        }
    },
}


def adapter(*secrets: str, **fields: Any) -> StripeProvider:
    options = fields.pop("options", {})
    source = SourceConfig(
        name="stripe",
        provider="stripe",
        secrets=secrets or (SECRET,),
        options=options,
        **fields,
    )
    return StripeProvider(source)


def request(body: bytes, headers: Mapping[str, str] | None = None) -> InboundRequest:
    return inbound("stripe", body, headers, received_at=NOW)


def body_of(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, indent=2).encode()


def sdk_header(body: bytes, secret: str = SECRET, t: int = T) -> str:
    """`Stripe-Signature` made by the official SDK's public test helper."""
    return str(
        stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=t)
    )


def sdk_v1(body: bytes, secret: str, t: int = T) -> str:
    # Private in the SDK, but the only way to get a bare v1 for multi-signature headers.
    return str(stripe.WebhookSignature._compute_signature(f"{t}.{body.decode()}", secret))


def verify(provider: StripeProvider, body: bytes, header: str, now: datetime = NOW) -> None:
    provider.verify(request(body, {"Stripe-Signature": header}), now)


# -- signatures: known answers and the official SDK ------------------------------------------


def test_golden_vector_verifies() -> None:
    verify(adapter(), GOLDEN_BODY, f"t={GOLDEN_T},v1={GOLDEN_V1}", GOLDEN_NOW)


def test_sign_reproduces_the_golden_vector() -> None:
    signed = adapter().sign(GOLDEN_BODY, datetime.fromtimestamp(GOLDEN_T, UTC))
    assert signed.headers["Stripe-Signature"] == f"t={GOLDEN_T},v1={GOLDEN_V1}"
    assert signed.body == GOLDEN_BODY and signed.query == "" and signed.path_suffix == ""


def test_sdk_agrees_with_the_golden_vector() -> None:
    header = sdk_header(GOLDEN_BODY, t=GOLDEN_T)
    assert header == f"t={GOLDEN_T},v1={GOLDEN_V1}"


@pytest.mark.parametrize(
    "body",
    [
        body_of(PAYMENT_INTENT_SUCCEEDED),
        json.dumps(PAYMENT_INTENT_SUCCEEDED, separators=(",", ":")).encode(),
        body_of({**PAYMENT_INTENT_SUCCEEDED, "description": "Café à la carte, 10€ ✓"}),
    ],
)
def test_sdk_signed_headers_verify(body: bytes) -> None:
    verify(adapter(), body, sdk_header(body))


def test_our_signature_passes_the_sdk() -> None:
    now = datetime.now(UTC)  # the SDK checks against the real clock
    body = body_of(PAYMENT_INTENT_SUCCEEDED)
    signed = adapter().sign(body, now)
    header = signed.headers["Stripe-Signature"]
    assert stripe.WebhookSignature.verify_header(signed.body, header, SECRET, tolerance=300)
    event = stripe.Webhook.construct_event(signed.body, header, SECRET)
    assert (event.id, event.type) == ("evt_1PxyzPI", "payment_intent.succeeded")
    assert signed.headers["Content-Type"].startswith("application/json")


# -- signatures: each breaks one thing ------------------------------------------------------


def test_secret_is_not_base64_decoded() -> None:
    # Standard Webhooks would key with base64("test_secret"); Stripe keys with the text.
    body = body_of(PAYMENT_INTENT_SUCCEEDED)
    with pytest.raises(SignatureMismatch):
        verify(adapter("whsec_dGVzdF9zZWNyZXQ="), body, sdk_header(body, "whsec_test_secret"))


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        "t",
        f"v1={GOLDEN_V1}",  # no t
        f"t=,v1={GOLDEN_V1}",
        f"t=abc,v1={GOLDEN_V1}",
        f"t=-{T},v1={GOLDEN_V1}",
        f"t=1.5,v1={GOLDEN_V1}",
        f"t={T},t={T},v1={GOLDEN_V1}",  # ambiguous
        f"t={T};v1={GOLDEN_V1}",
        f"t={T},v1",
        ",,,",
        "t=\uff11\uff12\uff13,v1=00",  # non-ASCII (fullwidth) digits
    ],
)
def test_malformed_header(header: str) -> None:
    with pytest.raises(MalformedHeader):
        verify(adapter(), GOLDEN_BODY, header)


def test_v0_only_is_a_mismatch_even_when_it_would_match() -> None:
    body = body_of(PAYMENT_INTENT_SUCCEEDED)
    good = sdk_v1(body, SECRET)
    with pytest.raises(SignatureMismatch, match="no v1"):
        verify(adapter(), body, f"t={T},v0={good}")
    with pytest.raises(stripe.SignatureVerificationError, match="expected scheme v1"):
        stripe.WebhookSignature.verify_header(
            body, f"t={int(datetime.now(UTC).timestamp())},v0=x", SECRET
        )


def test_v0_beside_a_good_v1_is_ignored() -> None:
    body = body_of(PAYMENT_INTENT_SUCCEEDED)
    verify(
        adapter(), body, f"t={T},v0=6ffbb59b2300aae63f27240606ba47fbd8d,v1={sdk_v1(body, SECRET)}"
    )


def test_non_hex_v1_beside_a_good_one_passes_like_the_sdk() -> None:
    # stripe-python's test_webhook: "t=...,v1=<good>,v1=bad_signature" verifies.
    body = body_of(PAYMENT_INTENT_SUCCEEDED)
    verify(adapter(), body, f"{sdk_header(body)},v1=bad_signature")
    verify(adapter(), body, f"t={T},v1=bad_signature,v1={sdk_v1(body, SECRET)}")
    with pytest.raises(SignatureMismatch):
        verify(adapter(), body, f"t={T},v1=bad_signature")


def test_rotation_header_with_old_and_new_signatures() -> None:
    body = body_of(PAYMENT_INTENT_SUCCEEDED)
    header = f"t={T},v1={sdk_v1(body, OLD_SECRET)},v1={sdk_v1(body, NEW_SECRET)}"
    verify(adapter(NEW_SECRET), body, header)
    verify(adapter(OLD_SECRET), body, header)
    with pytest.raises(SignatureMismatch):
        verify(adapter(SECRET), body, header)


def test_header_layout_tolerance() -> None:
    body = body_of(PAYMENT_INTENT_SUCCEEDED)
    good = sdk_v1(body, SECRET)
    verify(adapter(), body, f" t={T} , v1={good.upper()} ,")
    verify(adapter(), body, f"v1={good},t={T}")
    verify(adapter(), body, f"t=00{T},v1={good}")  # the signed t is the integer


def test_parse_signature_header() -> None:
    assert parse_signature_header(f"t={T},v1=00ff,v0=zz,v1=nothex,v1=AB") == (
        T,
        [b"\x00\xff", b"\xab"],
    )


@given(text=st.text(max_size=200))
def test_header_parser_raises_only_authentication_errors(text: str) -> None:
    try:
        timestamp, signatures = parse_signature_header(text)
    except AuthenticationError:
        return
    assert timestamp >= 0 and all(isinstance(s, bytes) for s in signatures)


_ITEM = st.one_of(
    st.tuples(st.sampled_from(["t", "v1", "v0", "T", "V1", "x", ""]), st.text(max_size=70)),
    st.tuples(st.just("t"), st.integers(-(10**13), 10**13).map(str)),
)


@given(items=st.lists(_ITEM, max_size=6), raw_bytes=st.binary(max_size=64))
def test_verify_on_arbitrary_headers_raises_only_authentication_errors(
    items: list[tuple[str, str]], raw_bytes: bytes
) -> None:
    header = ",".join(f"{key}={value}" for key, value in items)
    with pytest.raises(AuthenticationError):
        verify(adapter(), raw_bytes, header)


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        SourceConfig(name="s", provider="stripe", secrets=(SECRET,),
                     options={"reference_metadata_keys": "order_id"}),
        SourceConfig(name="s", provider="stripe", secrets=(SECRET,),
                     options={"reference_metadata_keys": [1]}),
    ],
)  # fmt: skip
def test_bad_configuration(source: SourceConfig) -> None:
    with pytest.raises(ConfigError):
        StripeProvider(source)


# -- parse ------------------------------------------------------------------------------------


def envelope(event_type: str, obj: Mapping[str, Any], **extra: Any) -> bytes:
    return body_of(
        {
            "id": "evt_1TEST",
            "object": "event",
            "api_version": "2024-06-20",
            "created": 1718000000,
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
            "data": {"object": dict(obj), **extra},
        }
    )


def parse_one(body: bytes, provider: StripeProvider | None = None) -> ParsedEvent:
    [event] = (provider or adapter()).parse(request(body))
    return event


INTENT = {"id": "pi_1", "object": "payment_intent", "amount": 2000, "currency": "usd",
          "status": "succeeded", "metadata": {"order_id": "ord-1"}}  # fmt: skip
CHARGE = {"id": "ch_1", "object": "charge", "amount": 2000, "amount_refunded": 0,
          "currency": "usd", "payment_intent": "pi_1", "status": "succeeded",
          "metadata": {"order_id": "ord-1"}}  # fmt: skip
REFUND = {"id": "re_1", "object": "refund", "amount": 500, "charge": "ch_1",
          "currency": "usd", "payment_intent": "pi_1", "status": "succeeded"}  # fmt: skip
DISPUTE = {"id": "du_1", "object": "dispute", "amount": 2000, "charge": "ch_1",
           "currency": "usd", "payment_intent": "pi_1", "status": "needs_response"}  # fmt: skip
SESSION = {"id": "cs_test_1", "object": "checkout.session", "amount_total": 2000,
           "currency": "usd", "payment_intent": "pi_1", "payment_status": "paid",
           "status": "complete", "client_reference_id": "ord-1", "metadata": {}}  # fmt: skip


@pytest.mark.parametrize(
    ("event_type", "obj", "kind"),
    [
        ("payment_intent.created", {**INTENT, "status": "requires_payment_method"},
         Kind.PAYMENT_CREATED),
        ("payment_intent.amount_capturable_updated", {**INTENT, "status": "requires_capture"},
         Kind.PAYMENT_AUTHORIZED),
        ("payment_intent.succeeded", INTENT, Kind.PAYMENT_PAID),
        ("payment_intent.payment_failed", {**INTENT, "status": "requires_payment_method"},
         Kind.PAYMENT_FAILED),
        ("payment_intent.canceled", {**INTENT, "status": "canceled"}, Kind.PAYMENT_CANCELED),
        ("payment_intent.processing", {**INTENT, "status": "processing"}, Kind.PAYMENT_CREATED),
        ("payment_intent.requires_action", {**INTENT, "status": "requires_action"},
         Kind.PAYMENT_CREATED),
        ("payment_intent.partially_funded", {**INTENT, "status": "requires_payment_method"},
         Kind.PAYMENT_CREATED),
        ("charge.succeeded", CHARGE, Kind.PAYMENT_PAID),
        ("charge.captured", CHARGE, Kind.PAYMENT_PAID),
        ("charge.failed", {**CHARGE, "status": "failed"}, Kind.PAYMENT_FAILED),
        ("charge.pending", {**CHARGE, "status": "pending"}, Kind.PAYMENT_CREATED),
        ("charge.updated", CHARGE, Kind.OTHER),
        ("charge.refund.updated", REFUND, Kind.OTHER),
        ("checkout.session.completed", SESSION, Kind.PAYMENT_PAID),
        ("checkout.session.completed", {**SESSION, "payment_status": "unpaid"},
         Kind.PAYMENT_CREATED),
        ("checkout.session.completed", {**SESSION, "payment_status": "no_payment_required"},
         Kind.OTHER),
        ("checkout.session.async_payment_succeeded", SESSION, Kind.PAYMENT_PAID),
        ("checkout.session.async_payment_failed", {**SESSION, "payment_status": "unpaid"},
         Kind.PAYMENT_FAILED),
        ("checkout.session.expired", {**SESSION, "status": "expired", "payment_intent": None,
                                      "payment_status": "unpaid"}, Kind.PAYMENT_EXPIRED),
        ("refund.created", REFUND, Kind.PAYMENT_PARTIALLY_REFUNDED),
        ("refund.created", {**REFUND, "status": "pending"}, Kind.OTHER),
        ("refund.failed", {**REFUND, "status": "failed"}, Kind.OTHER),
        ("charge.dispute.created", DISPUTE, Kind.DISPUTE_OPENED),
        ("charge.dispute.created", {**DISPUTE, "status": "under_review"}, Kind.DISPUTE_OPENED),
        ("charge.dispute.created", {**DISPUTE, "status": "warning_needs_response"}, Kind.OTHER),
        ("charge.dispute.updated", {**DISPUTE, "status": "warning_under_review"}, Kind.OTHER),
        ("charge.dispute.updated", {**DISPUTE, "status": "under_review"},
         Kind.DISPUTE_OPENED),
        ("charge.dispute.updated", {**DISPUTE, "status": "needs_response"},
         Kind.DISPUTE_OPENED),
        ("charge.dispute.closed", {**DISPUTE, "status": "prevented"}, Kind.OTHER),
        ("charge.dispute.closed", {**DISPUTE, "status": "won"}, Kind.DISPUTE_WON),
        ("charge.dispute.closed", {**DISPUTE, "status": "lost"}, Kind.DISPUTE_LOST),
        ("charge.dispute.closed", {**DISPUTE, "status": "warning_closed"}, Kind.OTHER),
        ("charge.dispute.funds_withdrawn", DISPUTE, Kind.DISPUTE_OPENED),
        ("charge.dispute.funds_reinstated", {**DISPUTE, "status": "won"}, Kind.DISPUTE_WON),
        ("customer.created", {"id": "cus_1", "object": "customer"}, Kind.OTHER),
        ("invoice.paid", {"id": "in_1", "object": "invoice", "payment_intent": "pi_9"},
         Kind.OTHER),
    ],
)  # fmt: skip
def test_type_mapping(event_type: str, obj: dict[str, Any], kind: Kind) -> None:
    event = parse_one(envelope(event_type, obj))
    assert (event.kind, event.type, event.dedup_key) == (kind, event_type, "evt_1TEST")
    assert event.occurred_at == datetime(2024, 6, 10, 6, 13, 20, tzinfo=UTC)


def test_the_documented_example() -> None:
    event = parse_one(body_of(PAYMENT_INTENT_SUCCEEDED))
    assert event.dedup_key == "evt_1PxyzPI"
    assert (event.kind, event.type) == (Kind.PAYMENT_PAID, "payment_intent.succeeded")
    assert (event.object_id, event.reference) == ("pi_3Pxyz", "ord_123")
    assert (event.amount, event.currency, event.refunded_total) == (5000, "BRL", None)
    assert event.occurred_at == datetime.fromtimestamp(1718000000, UTC)
    assert not event.thin
    assert event.data == {
        "object": "payment_intent",
        "stripe_id": "pi_3Pxyz",
        "status": "succeeded",
        "api_version": "2024-06-20",
        "payment_amount": 5000,
    }


@pytest.mark.parametrize(
    ("refunded", "kind"),
    [(500, Kind.PAYMENT_PARTIALLY_REFUNDED), (1999, Kind.PAYMENT_PARTIALLY_REFUNDED),
     (2000, Kind.PAYMENT_REFUNDED)],
)  # fmt: skip
def test_charge_refunded_partial_or_full(refunded: int, kind: Kind) -> None:
    obj = {**CHARGE, "amount_refunded": refunded, "refunded": refunded == 2000}
    event = parse_one(envelope("charge.refunded", obj, previous_attributes={"amount_refunded": 0}))
    assert (event.kind, event.object_id) == (kind, "pi_1")
    # Cumulative only: the charge says nothing about this one refund's amount.
    assert (event.refunded_total, event.amount) == (refunded, None)


def test_refund_created_carries_its_own_amount() -> None:
    event = parse_one(envelope("refund.created", REFUND))
    assert (event.kind, event.object_id) == (Kind.PAYMENT_PARTIALLY_REFUNDED, "pi_1")
    assert (event.amount, event.refunded_total, event.currency) == (500, None, "USD")
    assert event.data["stripe_id"] == "re_1"


def test_refund_updated_counts_only_when_it_becomes_succeeded() -> None:
    became = envelope("refund.updated", REFUND, previous_attributes={"status": "pending"})
    assert parse_one(became).kind is Kind.PAYMENT_PARTIALLY_REFUNDED
    metadata_only = envelope("refund.updated", REFUND, previous_attributes={"metadata": {}})
    assert parse_one(metadata_only).kind is Kind.OTHER
    no_previous = envelope("refund.updated", REFUND)
    assert parse_one(no_previous).kind is Kind.OTHER
    failed = envelope("refund.updated", {**REFUND, "status": "failed"},
                      previous_attributes={"status": "succeeded"})  # fmt: skip
    assert parse_one(failed).kind is Kind.OTHER


def test_refund_and_payment_land_on_the_same_object() -> None:
    paid = parse_one(envelope("payment_intent.succeeded", INTENT))
    refunded = parse_one(envelope("charge.refunded", {**CHARGE, "amount_refunded": 2000}))
    refund = parse_one(envelope("refund.created", REFUND))
    dispute = parse_one(envelope("charge.dispute.created", DISPUTE))
    session = parse_one(envelope("checkout.session.completed", SESSION))
    assert {e.object_id for e in (paid, refunded, refund, dispute, session)} == {"pi_1"}


@pytest.mark.parametrize(
    ("event_type", "obj", "object_id"),
    [
        ("charge.succeeded", {**CHARGE, "payment_intent": None}, "ch_1"),
        ("charge.succeeded", {key: v for key, v in CHARGE.items() if key != "payment_intent"},
         "ch_1"),
        ("charge.succeeded", {**CHARGE, "payment_intent": {"id": "pi_x", "amount": 2000}},
         "pi_x"),
        ("charge.dispute.created", {**DISPUTE, "payment_intent": None}, "ch_1"),
        ("charge.dispute.created", {**DISPUTE, "payment_intent": None,
                                    "charge": {"id": "ch_2", "object": "charge"}}, "ch_2"),
        ("refund.created", {**REFUND, "payment_intent": None}, "ch_1"),
        ("checkout.session.expired", {**SESSION, "payment_intent": None}, "cs_test_1"),
        ("charge.dispute.created", {key: v for key, v in DISPUTE.items() if key != "object"},
         "pi_1"),
    ],
)  # fmt: skip
def test_object_id_fallbacks(event_type: str, obj: dict[str, Any], object_id: str) -> None:
    assert parse_one(envelope(event_type, obj)).object_id == object_id


def test_checkout_session_amount_and_client_reference() -> None:
    event = parse_one(envelope("checkout.session.completed", SESSION))
    assert (event.amount, event.currency, event.reference) == (2000, "USD", "ord-1")


def test_reference_keys() -> None:
    obj = {**INTENT, "metadata": {"reference": "ref-7", "order_id": ""}}
    assert parse_one(envelope("payment_intent.succeeded", obj)).reference == "ref-7"
    obj = {**INTENT, "metadata": {"order_reference": "o-8", "cart": "c-1"}}
    assert parse_one(envelope("payment_intent.succeeded", obj)).reference == "o-8"
    custom = adapter(options={"reference_metadata_keys": ["cart"]})
    assert parse_one(envelope("payment_intent.succeeded", obj), custom).reference == "c-1"
    bare = {**INTENT, "metadata": {}}
    assert parse_one(envelope("payment_intent.succeeded", bare)).reference is None
    session = {**SESSION, "metadata": {"order_id": "meta-wins"}}
    assert parse_one(envelope("checkout.session.completed", session)).reference == "meta-wins"


# Thin v2 notifications, in the shape of stripe-python's EventNotification
# (stripe/v2/core/_event.py) and docs.stripe.com/event-destinations#thin-payload.
THIN_METER: dict[str, Any] = {
    "id": "evt_test_65R9Ijk8C6XgpRVDqR8SRDUZbmMhiRqF",
    "object": "v2.core.event",
    "type": "v1.billing.meter.error_report_triggered",
    "livemode": False,
    "created": "2024-09-17T06:20:52.246Z",
    "related_object": {
        "id": "mtr_test_1",
        "type": "billing.meter",
        "url": "/v1/billing/meters/mtr_test_1",
    },
}
THIN_RELATED = {"id": "pi_thin1", "type": "payment_intent", "url": "/v1/payment_intents/pi_thin1"}
THIN_PAYMENT: dict[str, Any] = {
    "id": "evt_test_thin_pi_succeeded_0001",
    "object": "v2.core.event",
    "type": "v1.payment_intent.succeeded",
    "livemode": False,
    "created": "2026-03-01T11:59:58.120Z",
    "context": "acct_1Porteiro",
    "reason": {"type": "request", "request": {"id": "req_1", "idempotency_key": "k-1"}},
    "related_object": THIN_RELATED,
}


@pytest.mark.parametrize(
    "body",
    [
        THIN_METER,
        {**THIN_METER, "type": "v2.core.account.created",
         "related_object": {"id": "acct_1", "type": "v2.core.account",
                            "url": "/v2/core/accounts/acct_1"}},
        {**THIN_METER, "type": "v2.core.event_destination.ping",
         "related_object": {"id": "ed_1", "type": "v2.core.event_destination",
                            "url": "/v2/core/event_destinations/ed_1"}},
        {**THIN_METER, "type": "v2.money_management.outbound_payment.posted",
         "related_object": {"id": "obp_1", "type": "v2.money_management.outbound_payment",
                            "url": "/v2/money_management/outbound_payments/obp_1"}},
        {**THIN_METER, "type": "v1.billing.meter.no_meter_found", "related_object": None},
        {**THIN_PAYMENT, "related_object": {**THIN_RELATED, "type": "payment_method"}},
    ],
)  # fmt: skip
def test_thin_v2_event_not_about_a_payment_is_ignored(body: dict[str, Any]) -> None:
    event = parse_one(body_of(body))
    assert (event.kind, event.object_id, event.thin) == (Kind.OTHER, None, False)
    assert (event.dedup_key, event.type) == (body["id"], body["type"])
    assert not event.actionable and event.error is None
    assert "not about a payment" in event.data["ignored"]
    assert event.occurred_at == datetime.fromisoformat(body["created"])


def test_thin_v2_event_about_a_payment_is_thin() -> None:
    event = parse_one(body_of(THIN_PAYMENT))
    assert (event.kind, event.object_id, event.thin) == (Kind.OTHER, "pi_thin1", True)
    assert event.actionable and not event.warnings
    assert (event.dedup_key, event.type) == (THIN_PAYMENT["id"], "v1.payment_intent.succeeded")
    assert event.occurred_at == datetime(2026, 3, 1, 11, 59, 58, 120000, tzinfo=UTC)
    assert event.data == {
        "notification": "thin",
        "snapshot_type": "payment_intent.succeeded",
        "related_type": "payment_intent",
        "related_path": "/v1/payment_intents/pi_thin1",
        "context": "acct_1Porteiro",
    }


def test_thin_related_object_deviations_are_read_past() -> None:
    elsewhere = {"id": "ch_thin1", "url": "https://attacker.example/v1/charges/ch_thin1"}
    body = {**THIN_PAYMENT, "type": "v1.charge.refunded", "related_object": elsewhere,
            "created": "2026-03-01 11:59:58"}  # fmt: skip
    event = parse_one(body_of(body))
    assert event.thin and event.object_id == "ch_thin1"
    # Never another host: the path Stripe serves charges at, on the configured API.
    assert event.data["related_path"] == "/v1/charges/ch_thin1"
    assert event.data["related_type"] == "charge"
    assert [w["rule"] for w in event.warnings] == [
        "stripe.created", "stripe.related_object", "stripe.related_object"
    ]  # fmt: skip
    assert event.occurred_at is None
    for url in ("/v1/payment_intents/../../v2/x", "/v1/customers/cus_1", None, 7):
        odd = {**THIN_RELATED, "url": url}
        event = parse_one(body_of({**THIN_PAYMENT, "related_object": odd}))
        assert event.data["related_path"] == "/v1/payment_intents/pi_thin1"
        assert [w["rule"] for w in event.warnings] == ["stripe.related_object"]


@pytest.mark.parametrize(
    ("thin_type", "related_type", "answer", "kind", "amounts"),
    [
        ("v1.payment_intent.succeeded", "payment_intent", "pi_thin1", Kind.PAYMENT_PAID,
         (4500, None)),
        ("v1.payment_intent.payment_failed", "payment_intent", "pi_thin1",
         Kind.PAYMENT_FAILED, (4500, None)),
        ("v1.charge.refunded", "charge", "ch_thin1", Kind.PAYMENT_PARTIALLY_REFUNDED,
         (None, 1500)),
        ("v1.refund.created", "refund", "re_thin1", Kind.PAYMENT_PARTIALLY_REFUNDED,
         (1500, None)),
        ("v1.charge.dispute.closed", "dispute", "du_thin1", Kind.DISPUTE_LOST, (4500, None)),
        ("v1.checkout.session.completed", "checkout.session", "cs_test_thin1",
         Kind.PAYMENT_PAID, (4500, None)),
    ],
)  # fmt: skip
async def test_enrich_fetches_the_related_object_and_maps_it_like_a_snapshot(
    fake: tuple[FakeStripe, str],
    thin_type: str,
    related_type: str,
    answer: str,
    kind: Kind,
    amounts: tuple[int | None, int | None],
) -> None:
    api, url = fake
    api.intents["pi_thin1"] = {"id": "pi_thin1", "object": "payment_intent", "amount": 4500,
                               "currency": "brl", "status": "succeeded",
                               "metadata": {"order_id": "ord-thin"}}  # fmt: skip
    api.charges["ch_thin1"] = {"id": "ch_thin1", "object": "charge", "amount": 4500,
                               "amount_refunded": 1500, "currency": "brl",
                               "payment_intent": "pi_thin1", "status": "succeeded",
                               "refunded": False, "metadata": {}}  # fmt: skip
    api.objects["re_thin1"] = {"id": "re_thin1", "object": "refund", "amount": 1500,
                               "charge": "ch_thin1", "currency": "brl",
                               "payment_intent": "pi_thin1", "status": "succeeded"}  # fmt: skip
    api.objects["du_thin1"] = {"id": "du_thin1", "object": "dispute", "amount": 4500,
                               "charge": "ch_thin1", "currency": "brl",
                               "payment_intent": "pi_thin1", "status": "lost"}  # fmt: skip
    api.objects["cs_test_thin1"] = {"id": "cs_test_thin1", "object": "checkout.session",
                                    "amount_total": 4500, "currency": "brl",
                                    "payment_intent": "pi_thin1", "payment_status": "paid",
                                    "status": "complete", "metadata": {}}  # fmt: skip
    paths = {"payment_intent": "payment_intents", "charge": "charges", "refund": "refunds",
             "dispute": "disputes", "checkout.session": "checkout/sessions"}  # fmt: skip
    path = paths[related_type]
    related = {"id": answer, "type": related_type, "url": f"/v1/{path}/{answer}"}
    thin = parse_one(body_of({**THIN_PAYMENT, "type": thin_type, "related_object": related}))
    provider = adapter(api_base_url=url, api_key=API_KEY)
    async with httpx.AsyncClient(timeout=5) as http:
        event = await provider.enrich(thin, http)
    assert (event.kind, event.object_id, event.thin) == (kind, "pi_thin1", False)
    assert (event.amount, event.refunded_total, event.currency) == (*amounts, "BRL")
    assert (event.dedup_key, event.type) == (THIN_PAYMENT["id"], thin_type)
    assert event.occurred_at == thin.occurred_at
    assert event.data["notification"] == "thin" and event.data["stripe_id"] == answer
    assert api.requests == [f"/v1/{path}/{answer}"]
    sent = api.headers[0]
    assert sent["stripe-context"] == "acct_1Porteiro"
    assert sent["stripe-request-trigger"] == f"event={THIN_PAYMENT['id']}"
    if related_type == "payment_intent":
        assert event.reference == "ord-thin"


async def test_enrich_failures_are_retryable_gateway_errors(
    fake: tuple[FakeStripe, str],
) -> None:
    api, url = fake
    thin = parse_one(body_of(THIN_PAYMENT))
    async with httpx.AsyncClient(timeout=5) as http:
        with pytest.raises(GatewayError, match="no api_key"):
            await adapter(api_base_url=url).enrich(thin, http)
        with pytest.raises(GatewayError, match="404"):
            await adapter(api_base_url=url, api_key=API_KEY).enrich(thin, http)
        api.intents["pi_thin1"] = {"id": "pi_other", "object": "payment_intent", "amount": 1,
                                   "status": "succeeded"}  # fmt: skip
        with pytest.raises(GatewayError, match="not pi_thin1"):
            await adapter(api_base_url=url, api_key=API_KEY).enrich(thin, http)
        api.intents["pi_thin1"] = {"id": "pi_thin1", "object": "payment_intent",
                                   "amount": "45.00", "status": "succeeded"}  # fmt: skip
        with pytest.raises(GatewayError, match="amount"):
            await adapter(api_base_url=url, api_key=API_KEY).enrich(thin, http)


FIXTURES = Path(__file__).parent.parent / "fixtures" / "gateways" / "stripe"
THIN_FIXTURES = sorted(FIXTURES.glob("thin-*.json"))
SNAPSHOT_FIXTURES = sorted(set(FIXTURES.glob("*.json")) - set(THIN_FIXTURES))


@pytest.mark.parametrize("path", THIN_FIXTURES, ids=lambda p: p.stem)
def test_the_sdk_parses_our_thin_fixtures_signed_by_us(path: Path) -> None:
    body = path.read_bytes()
    signed = adapter().sign(body, datetime.now(UTC))
    client = stripe.StripeClient("sk_test_porteiro")
    notification = client.parse_event_notification(
        signed.body, signed.headers["Stripe-Signature"], SECRET
    )
    event = parse_one(body)
    assert (notification.id, notification.type) == (event.dedup_key, event.type)
    related = getattr(notification, "related_object", None)
    if event.thin:
        assert related is not None and related.id == event.object_id
        assert event.data["related_path"] == related.url


@pytest.mark.parametrize("path", SNAPSHOT_FIXTURES, ids=lambda p: p.stem)
def test_the_sdk_constructs_our_snapshot_fixtures_signed_by_us(path: Path) -> None:
    body = path.read_bytes()
    signed = adapter().sign(body, datetime.now(UTC))
    sdk_event = stripe.Webhook.construct_event(
        signed.body, signed.headers["Stripe-Signature"], SECRET
    )
    event = parse_one(body)
    assert (sdk_event.id, sdk_event.type) == (event.dedup_key, event.type)
    assert event.error is None and not event.warnings


# -- what the adapter reads past (the issue 21 rule) -----------------------------------------


@pytest.mark.parametrize(
    ("created", "occurred", "warned"),
    [
        (1718000000, datetime(2024, 6, 10, 6, 13, 20, tzinfo=UTC), False),
        ("1718000000", datetime(2024, 6, 10, 6, 13, 20, tzinfo=UTC), True),
        (1718000000.0, datetime(2024, 6, 10, 6, 13, 20, tzinfo=UTC), True),
        ("yesterday", None, True),
        ("2024-06-10T06:13:20Z", None, True),
        (10**20, None, True),
        (-5, None, True),
        (True, None, True),
        (None, None, False),
    ],
)
def test_created_is_read_past_with_a_warning(
    created: object, occurred: datetime | None, warned: bool
) -> None:
    event = parse_one(body_of({**PAYMENT_INTENT_SUCCEEDED, "created": created}))
    assert (event.kind, event.object_id, event.amount) == (Kind.PAYMENT_PAID, "pi_3Pxyz", 5000)
    assert event.occurred_at == occurred
    assert [w["rule"] for w in event.warnings] == (["stripe.created"] if warned else [])


@pytest.mark.parametrize(
    "request_field",
    ["req_OLDSTYLE123", {"id": "req_1", "idempotency_key": "k"}, {"id": None,
     "idempotency_key": None}, None],
)  # fmt: skip
def test_request_as_a_string_or_an_object(request_field: object) -> None:
    # API versions before 2017-05-25 send `request` as the request id string.
    event = parse_one(body_of({**PAYMENT_INTENT_SUCCEEDED, "request": request_field,
                               "api_version": "2017-02-14", "livemode": True}))  # fmt: skip
    assert (event.kind, event.amount, list(event.warnings)) == (Kind.PAYMENT_PAID, 5000, [])


def test_charge_refunded_without_or_with_the_refunds_list() -> None:
    # API 2022-11-15 stopped expanding `refunds` on the Charge; older ones send a list.
    bare = {**CHARGE, "amount_refunded": 800, "refunded": False}
    refunds = {"object": "list", "data": [{**REFUND, "amount": 800}], "has_more": False,
               "url": "/v1/charges/ch_1/refunds"}  # fmt: skip
    listed = {**bare, "refunds": refunds}
    for obj in (bare, listed):
        event = parse_one(envelope("charge.refunded", obj))
        assert (event.kind, event.refunded_total, event.amount) == (
            Kind.PAYMENT_PARTIALLY_REFUNDED, 800, None
        )  # fmt: skip


def test_unknown_dispute_status_is_read_past_with_a_warning() -> None:
    created = parse_one(envelope("charge.dispute.created", {**DISPUTE, "status": "new_one"}))
    assert created.kind is Kind.DISPUTE_OPENED and created.object_id == "pi_1"
    assert [w["rule"] for w in created.warnings] == ["stripe.dispute_status"]
    closed = parse_one(envelope("charge.dispute.closed", {**DISPUTE, "status": None}))
    assert closed.kind is Kind.OTHER
    assert [w["rule"] for w in closed.warnings] == ["stripe.dispute_status"]
    known = parse_one(envelope("charge.dispute.closed", {**DISPUTE, "status": "warning_closed"}))
    assert (known.kind, list(known.warnings)) == (Kind.OTHER, [])


def test_checkout_payment_status() -> None:
    free = {**SESSION, "payment_status": "no_payment_required", "payment_intent": None,
            "amount_total": 0}  # fmt: skip
    event = parse_one(envelope("checkout.session.completed", free))
    assert (event.kind, list(event.warnings), event.object_id) == (Kind.OTHER, [], "cs_test_1")
    assert event.data["payment_status"] == "no_payment_required"
    odd = parse_one(envelope("checkout.session.completed", {**SESSION, "payment_status": 3}))
    assert odd.kind is Kind.OTHER
    assert [w["rule"] for w in odd.warnings] == ["stripe.checkout_payment_status"]


def test_metadata_absent_or_null_and_payment_intent_null() -> None:
    charge = {k: v for k, v in CHARGE.items() if k != "metadata"} | {"payment_intent": None}
    event = parse_one(envelope("charge.succeeded", charge))
    assert (event.object_id, event.reference, event.kind) == ("ch_1", None, Kind.PAYMENT_PAID)
    intent = {**INTENT, "metadata": None}
    assert parse_one(envelope("payment_intent.succeeded", intent)).reference is None


@pytest.mark.parametrize(
    ("event_type", "obj", "whole"),
    [
        ("payment_intent.payment_failed", {**INTENT, "status": "requires_payment_method"}, 2000),
        ("payment_intent.canceled", {**INTENT, "status": "canceled"}, 2000),
        ("charge.refunded", {**CHARGE, "amount_refunded": 500}, 2000),
        ("checkout.session.expired", {**SESSION, "status": "expired"}, 2000),
        ("refund.created", REFUND, None),
        ("charge.dispute.created", {**DISPUTE, "amount": 1500}, None),
    ],
)  # fmt: skip
def test_the_whole_payment_amount_is_kept_for_every_kind(
    event_type: str, obj: dict[str, Any], whole: int | None
) -> None:
    # A failed or canceled payment still has the amount the PaymentIntent asked for; a
    # refund's or a dispute's amount is not the payment's.
    event = parse_one(envelope(event_type, obj))
    assert event.data.get("payment_amount") == whole
    events = [(1, event)]
    assert ledger.replay_history("stripe", event.object_id or "", events, NOW).amount == whole


def test_charge_refund_updated_never_counts_the_refund_twice() -> None:
    # Stripe sends `charge.refund.updated` beside `refund.updated` for the same change.
    event = parse_one(envelope("charge.refund.updated", REFUND,
                               previous_attributes={"status": "pending"}))  # fmt: skip
    assert event.kind is Kind.OTHER
    assert parse_one(envelope("refund.updated", REFUND, previous_attributes={
        "status": "pending"})).kind is Kind.PAYMENT_PARTIALLY_REFUNDED  # fmt: skip


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (body_of({**PAYMENT_INTENT_SUCCEEDED, "object": "payment_intent"}), "snapshot event"),
        (body_of({k: v for k, v in PAYMENT_INTENT_SUCCEEDED.items() if k != "object"}),
         "snapshot event"),
        (body_of({**PAYMENT_INTENT_SUCCEEDED, "id": ""}), "id"),
        (body_of({**PAYMENT_INTENT_SUCCEEDED, "id": 5}), "id"),
        (body_of({**PAYMENT_INTENT_SUCCEEDED, "type": None}), "type"),
        (body_of({**PAYMENT_INTENT_SUCCEEDED, "data": []}), "data.object"),
        (body_of({**PAYMENT_INTENT_SUCCEEDED, "data": {"object": "pi_1"}}), "data.object"),
        (envelope("payment_intent.succeeded", {**INTENT, "id": None}), "no id"),
        (envelope("payment_intent.succeeded", {**INTENT, "amount": "20.00"}), "amount"),
        (envelope("payment_intent.succeeded", {**INTENT, "amount": True}), "amount"),
        (envelope("payment_intent.succeeded", {**INTENT, "currency": 840}), "currency"),
        (envelope("charge.succeeded", {**CHARGE, "payment_intent": 7}), "payment_intent"),
        (envelope("charge.refunded", {**CHARGE, "amount_refunded": None}), "amount_refunded"),
        (envelope("charge.refunded", {**CHARGE, "amount_refunded": -1}), "amount_refunded"),
        (body_of({**THIN_PAYMENT, "id": None}), "id"),
        (body_of({k: v for k, v in THIN_PAYMENT.items() if k != "related_object"}),
         "related_object"),
        (body_of({**THIN_PAYMENT, "related_object": {**THIN_RELATED, "id": ""}}),
         "related_object.id"),
    ],
)  # fmt: skip
def test_parse_errors_say_why(body: bytes, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_one(body)


# -- samples ------------------------------------------------------------------------------------


def test_sample_lifecycle_shapes() -> None:
    payment = SamplePayment("pi_sample", "ord-9", 1000, currency="BRL", refund=True)
    bodies = adapter().sample_lifecycle(payment, NOW, random.Random(1))
    events = [json.loads(body) for body in bodies]
    assert [e["type"] for e in events] == [
        "payment_intent.created",
        "payment_intent.succeeded",
        "charge.succeeded",
        "refund.created",
        "charge.refunded",
        "refund.created",
        "charge.refunded",
    ]
    assert len({e["id"] for e in events}) == len(events)
    for event in events:
        assert event["object"] == "event" and event["id"].startswith("evt_")
        assert event["livemode"] is False and event["pending_webhooks"] == 1
        assert event["api_version"] and event["request"]["id"].startswith("req_")
        assert event["created"] < T
    created = [e["created"] for e in events]
    assert created == sorted(created)
    charges = [e["data"]["object"] for e in events if e["type"] == "charge.refunded"]
    assert [(c["amount_refunded"], c["refunded"]) for c in charges] == [(333, False), (1000, True)]
    assert events[4]["data"]["previous_attributes"] == {"amount_refunded": 0, "refunded": False}
    intent = events[1]["data"]["object"]
    assert (intent["object"], intent["status"], intent["currency"]) == (
        "payment_intent",
        "succeeded",
        "brl",
    )
    assert intent["latest_charge"] == events[2]["data"]["object"]["id"]
    parsed = [parse_one(body) for body in bodies]
    assert {p.object_id for p in parsed} == {"pi_sample"}
    assert [p.kind for p in parsed] == [
        Kind.PAYMENT_CREATED,
        Kind.PAYMENT_PAID,
        Kind.PAYMENT_PAID,
        Kind.PAYMENT_PARTIALLY_REFUNDED,
        Kind.PAYMENT_PARTIALLY_REFUNDED,
        Kind.PAYMENT_PARTIALLY_REFUNDED,
        Kind.PAYMENT_REFUNDED,
    ]
    assert bodies[0].startswith(b"{\n  ")  # pretty-printed, as Stripe sends


def test_sample_without_refund() -> None:
    payment = SamplePayment("pi_plain", "ord-1", 700)
    bodies = adapter().sample_lifecycle(payment, NOW, random.Random(2))
    assert [json.loads(b)["type"] for b in bodies] == [
        "payment_intent.created",
        "payment_intent.succeeded",
        "charge.succeeded",
    ]


def test_partial_refund_alone_leaves_the_payment_partially_refunded() -> None:
    payment = SamplePayment("pi_part", "ord-p", 900, refund=True)
    events = [parse_one(b) for b in adapter().sample_lifecycle(payment, NOW, random.Random(4))]
    result = ledger.replay_history("stripe", "pi_part", list(enumerate(events[:5], 1)), NOW)
    assert (result.state, result.refunded_amount) == (PaymentState.PARTIALLY_REFUNDED, 300)


# -- status reads against a local fake Stripe ---------------------------------------------------


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeStripe, str]]:
    api = FakeStripe(api_key=API_KEY)
    async with live_server(api.app(), lifespan="off") as url:
        yield api, url


def intent(status: str, **fields: Any) -> dict[str, Any]:
    return {"id": "pi_r1", "object": "payment_intent", "amount": 3000, "currency": "brl",
            "status": status, "latest_charge": "ch_r1", "metadata": {"order_id": "ord-r"},
            "created": 1718000000, **fields}  # fmt: skip


async def read(url: str, object_id: str = "pi_r1", **fields: Any) -> ParsedEvent | None:
    fields.setdefault("api_key", API_KEY)
    provider = adapter(api_base_url=url + "/", **fields)
    async with httpx.AsyncClient(timeout=5) as http:
        return await provider.fetch_status(object_id, http)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("succeeded", Kind.PAYMENT_PAID),
        ("requires_capture", Kind.PAYMENT_AUTHORIZED),
        ("canceled", Kind.PAYMENT_CANCELED),
        ("processing", Kind.PAYMENT_CREATED),
        ("requires_payment_method", Kind.PAYMENT_CREATED),
        ("requires_confirmation", Kind.PAYMENT_CREATED),
        ("requires_action", Kind.PAYMENT_CREATED),
        ("some_future_status", Kind.OTHER),
    ],
)
async def test_fetch_status_maps_the_payment_intent(
    fake: tuple[FakeStripe, str], status: str, kind: Kind
) -> None:
    api, url = fake
    api.intents["pi_r1"] = intent(status)
    before = datetime.now(UTC) - timedelta(seconds=2)
    event = await read(url)
    assert event is not None
    assert (event.kind, event.type, event.object_id) == (kind, f"payment_intent.{status}", "pi_r1")
    assert event.dedup_key == f"reconcile:pi_r1:{status}"
    assert (event.amount, event.currency, event.reference) == (3000, "BRL", "ord-r")
    assert event.refunded_total is None and not event.thin
    assert event.occurred_at is not None and event.occurred_at >= before  # Stripe's Date
    assert event.data == {"origin": "reconcile", "status": status}
    assert api.requests == ["/v1/payment_intents/pi_r1?expand%5B%5D=latest_charge"]


@pytest.mark.parametrize(
    ("refunded", "kind"),
    [(1000, Kind.PAYMENT_PARTIALLY_REFUNDED), (3000, Kind.PAYMENT_REFUNDED)],
)
async def test_fetch_status_reports_refunds_of_the_latest_charge(
    fake: tuple[FakeStripe, str], refunded: int, kind: Kind
) -> None:
    api, url = fake
    api.intents["pi_r1"] = intent("succeeded")
    api.charges["ch_r1"] = {"id": "ch_r1", "object": "charge", "amount": 3000,
                            "amount_refunded": refunded}  # fmt: skip
    event = await read(url)
    assert event is not None
    assert (event.kind, event.refunded_total, event.amount) == (kind, refunded, None)
    assert event.dedup_key == f"reconcile:pi_r1:succeeded:refunded:{refunded}"


async def test_fetch_status_ignores_an_unrefunded_latest_charge(
    fake: tuple[FakeStripe, str],
) -> None:
    api, url = fake
    api.intents["pi_r1"] = intent("succeeded")
    api.charges["ch_r1"] = {"id": "ch_r1", "object": "charge", "amount": 3000, "amount_refunded": 0}
    event = await read(url)
    assert event is not None and (event.kind, event.refunded_total) == (Kind.PAYMENT_PAID, None)


async def test_fetch_status_without_api_key_or_for_non_intents(
    fake: tuple[FakeStripe, str],
) -> None:
    api, url = fake
    assert await read(url, api_key=None) is None
    for object_id in ("ch_1", "cs_test_1", "py_1"):
        assert await read(url, object_id) is None
    assert api.requests == []


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("unknown", "404"),
        ("wrong_key", "401"),
        ("outage", "500"),
        ("garbage", "status"),
    ],
)
async def test_fetch_status_failures_are_gateway_errors(
    fake: tuple[FakeStripe, str], setup: str, message: str
) -> None:
    api, url = fake
    api.intents["pi_r1"] = intent("succeeded")
    fields: dict[str, Any] = {}
    if setup == "unknown":
        api.intents.clear()
    elif setup == "wrong_key":
        fields["api_key"] = "sk_test_wrong"
    elif setup == "outage":
        api.fail_with = 500
    else:
        api.intents["pi_r1"] = {"id": "pi_r1"}
    with pytest.raises(GatewayError, match=message):
        await read(url, **fields)


async def test_fetch_status_unreachable_api_is_a_gateway_error() -> None:
    with pytest.raises(GatewayError):
        await read(f"http://127.0.0.1:{free_port()}")


async def test_fetch_status_reads_the_configured_reference_keys(
    fake: tuple[FakeStripe, str],
) -> None:
    api, url = fake
    api.intents["pi_r1"] = intent("succeeded", metadata={"cart": "c-9", "order_id": "o-1"})
    event = await read(url, options={"reference_metadata_keys": ["cart"]})
    assert event is not None and event.reference == "c-9"
