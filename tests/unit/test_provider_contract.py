"""The adapter contract: what every gateway in the registry does, asserted once for all of
them through each adapter's own `sign` and `sample_lifecycle` (issue 23).

Each gateway has one row in GATEWAYS: how to configure a source with test secrets, where
its credential travels, and what its scheme has (a timestamp, a signed body, an official
SDK). A gateway added to the registry without a row fails the first test below. What is
particular to one gateway (its header grammar, payload shapes, status mappings, the docs'
examples) stays in its own test_provider_<gateway>.py.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

import httpx
import pytest
import stripe
from Adyen import util as adyen_util  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st
from mercadopago.webhook import WebhookSignatureValidator  # type: ignore[import-untyped]
from standardwebhooks.webhooks import Webhook

from porteiro import ledger
from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    ConfigError,
    ForbiddenPeer,
    MalformedHeader,
    MissingHeader,
    ParseError,
    SignatureMismatch,
    TimestampOutOfTolerance,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent, PaymentState
from porteiro.providers import PROVIDERS, build_provider
from porteiro.providers.base import Ack, Provider, SamplePayment, SignedRequest
from tests.support.inbound import inbound
from tests.support.servers import free_port

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SEED = 7
# Where a contract source's API would be: nothing listens there, so an adapter that
# reached for its API where the contract says it must not fails instead of going online.
NOWHERE = f"http://127.0.0.1:{free_port()}"


# -- where a credential travels, and how a test changes it ----------------------------------


@dataclass(frozen=True)
class Credential:
    """The slots a delivery's credential fills: request headers, a query parameter, or a
    field of every notification item in the body (Adyen's `additionalData`)."""

    place: Literal["headers", "query", "items"]
    names: tuple[str, ...]


def with_slot(
    signed: SignedRequest, credential: Credential, name: str, value: str | None
) -> SignedRequest:
    """`signed` with one credential slot set to `value`, or removed when None."""
    if credential.place == "headers":
        headers = {key.lower(): item for key, item in signed.headers.items() if key.lower() != name}
        return replace(signed, headers=headers if value is None else {**headers, name: value})
    if credential.place == "query":
        pairs = parse_qsl(signed.query, keep_blank_values=True)
        kept = [(key, item) for key, item in pairs if key != name]
        return replace(signed, query=urlencode(kept if value is None else [(name, value), *kept]))
    document = json.loads(signed.body)
    for wrapper in document["notificationItems"]:
        extra = wrapper["NotificationRequestItem"].setdefault("additionalData", {})
        extra.pop(name, None)
        if value is not None:
            extra[name] = value
    return replace(signed, body=json.dumps(document).encode())


def setting(name: str, value: str) -> Callable[[Gateway, SignedRequest], SignedRequest]:
    return lambda gateway, signed: with_slot(signed, gateway.credential, name, value)


def repeating_query(name: str) -> Callable[[Gateway, SignedRequest], SignedRequest]:
    return lambda gateway, signed: replace(signed, query=f"{signed.query}&{name}=again")


def changing_the_amount(signed: SignedRequest) -> SignedRequest:
    """The payment's amount (12345 in every contract payment) raised by one cent."""
    return replace(signed, body=signed.body.replace(b"12345", b"12346"))


def changing_the_query_id(signed: SignedRequest) -> SignedRequest:
    """Mercado Pago signs the query's `data.id`, not the body."""
    pairs = [
        (key, item + "0" if key == "data.id" else item)
        for key, item in parse_qsl(signed.query, keep_blank_values=True)
    ]
    return replace(signed, query=urlencode(pairs))


# -- the official SDKs, where the gateway publishes one ------------------------------------


@dataclass(frozen=True)
class Sdk:
    """The gateway's own library: `sign` as the gateway signs (None where the SDK only
    checks), `accepts` raising unless it accepts a delivery we signed."""

    sign: Callable[[bytes, str, datetime], SignedRequest] | None
    accepts: Callable[[SignedRequest, str, datetime], None]


def stripe_sign(body: bytes, secret: str, now: datetime) -> SignedRequest:
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=int(now.timestamp())
    )
    return SignedRequest(body=body, headers={"Stripe-Signature": str(header)})


def stripe_accepts(signed: SignedRequest, secret: str, now: datetime) -> None:
    event = stripe.Webhook.construct_event(signed.body, signed.headers["Stripe-Signature"], secret)
    assert event.object == "event"


def standard_sign(body: bytes, secret: str, now: datetime) -> SignedRequest:
    msg_id = "msg_" + hashlib.sha256(body).hexdigest()[:24]
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, now, body.decode()),
    }
    return SignedRequest(body=body, headers=headers)


def standard_accepts(signed: SignedRequest, secret: str, now: datetime) -> None:
    Webhook(secret).verify(signed.body, dict(signed.headers))


def adyen_sign(body: bytes, key: str, now: datetime) -> SignedRequest:
    document = json.loads(body)
    for wrapper in document["notificationItems"]:
        entry = wrapper["NotificationRequestItem"]
        unsigned = {name: value for name, value in entry.items() if name != "additionalData"}
        signature = adyen_util.generate_notification_sig(unsigned, key).decode()
        entry.setdefault("additionalData", {})["hmacSignature"] = signature
    return SignedRequest(body=json.dumps(document).encode(), headers={})


def adyen_accepts(signed: SignedRequest, key: str, now: datetime) -> None:
    # The SDK checks one item: hand it each.
    for wrapper in json.loads(signed.body)["notificationItems"]:
        assert adyen_util.is_valid_hmac_notification(wrapper["NotificationRequestItem"], key)


def mercadopago_accepts(signed: SignedRequest, secret: str, now: datetime) -> None:
    data_id = dict(parse_qsl(signed.query)).get("data.id")
    WebhookSignatureValidator.validate(
        signed.headers["x-signature"],
        signed.headers["x-request-id"],
        data_id,
        secret,
        tolerance_seconds=300,
        now=lambda: int(now.timestamp() * 1000),
    )


# -- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Gateway:
    """What the contract needs to know about one gateway's scheme."""

    configure: Callable[[Sequence[str]], SourceConfig]  # a source holding these secrets
    secrets: tuple[str, str]  # two test secrets: a source is configured with the first
    credential: Credential
    malformed: Callable[[Gateway, SignedRequest], SignedRequest]  # an unreadable credential
    refusal: type[AuthenticationError]  # what a wrong secret is refused with
    tamper: Callable[[SignedRequest], SignedRequest] | None  # alters what is signed
    body_authenticated: bool  # False: any body verifies under a good credential
    timestamped: bool  # the credential carries a time checked against tolerance_seconds
    ack: Ack
    payment: SamplePayment  # amount 12345; object_id ending in "1"
    kinds: tuple[Kind, ...]  # its lifecycle's distinct events (SEED), in the order seen
    reference: str  # the payment's reference once applied
    thin: bool  # every lifecycle event waits for the API (enrich): not applied alone
    sdk: Sdk | None


def source(provider: str, **fields: Any) -> SourceConfig:
    return SourceConfig(
        name=f"{provider}-contract", provider=provider, api_base_url=NOWHERE, **fields
    )


GATEWAYS: Mapping[str, Gateway] = {
    "adyen": Gateway(
        configure=lambda secrets: source("adyen", secrets=tuple(secrets)),
        secrets=(
            "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
            "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174",
        ),
        credential=Credential("items", ("hmacSignature",)),
        malformed=setting("hmacSignature", "not base64!"),
        refusal=SignatureMismatch,
        tamper=changing_the_amount,
        body_authenticated=True,
        timestamped=False,
        ack=Ack(status=200, body=b"[accepted]", content_type="text/plain"),
        payment=SamplePayment("8815729400112231", "order-contract-1", 12345, refund=True),
        kinds=(Kind.PAYMENT_PAID, Kind.PAYMENT_PARTIALLY_REFUNDED, Kind.PAYMENT_PARTIALLY_REFUNDED),
        reference="order-contract-1",
        thin=False,
        sdk=Sdk(sign=adyen_sign, accepts=adyen_accepts),
    ),
    "mercadopago": Gateway(
        configure=lambda secrets: source("mercadopago", secrets=tuple(secrets)),
        secrets=("mp-contract-secret-one", "mp-contract-secret-two"),
        credential=Credential("headers", ("x-signature",)),
        malformed=setting("x-signature", "garbage"),
        refusal=SignatureMismatch,
        tamper=changing_the_query_id,
        body_authenticated=False,  # the signature covers the query's data.id: a hint only
        timestamped=True,
        ack=Ack(),
        payment=SamplePayment("9876543211", "order-contract-1", 12345, refund=True),
        kinds=(Kind.OTHER,) * 4,
        reference="order-contract-1",
        thin=True,
        sdk=Sdk(sign=None, accepts=mercadopago_accepts),
    ),
    "pagarme": Gateway(
        # X-Hub-Signature (HMAC); the RS256 path needs a JWKS: test_provider_pagarme.py.
        configure=lambda secrets: source("pagarme", secrets=tuple(secrets)),
        secrets=("pagarme-contract-secret-one", "pagarme-contract-secret-two"),
        credential=Credential("headers", ("x-hub-signature",)),
        malformed=setting("x-hub-signature", "garbage"),
        refusal=SignatureMismatch,
        tamper=changing_the_amount,
        body_authenticated=True,
        timestamped=False,  # replays are stopped by de-duplication on the hook id
        ack=Ack(),
        payment=SamplePayment("or_contract00000001", "order-contract-1", 12345, refund=True),
        kinds=(
            Kind.PAYMENT_CREATED,
            Kind.PAYMENT_PAID,
            Kind.PAYMENT_PAID,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_REFUNDED,
        ),
        reference="order-contract-1",
        thin=False,
        sdk=None,  # pagarme-python checks v4 sha1 postbacks only: test_provider_pagarme.py
    ),
    "pix": Gateway(
        # Efí's skip-mTLS `?hmac=` token, from an allowed address; mTLS cannot be signed.
        configure=lambda secrets: source(
            "pix",
            options={
                "hmac_token": list(secrets),
                "keys": ["pix@contract.example"],
                "confirm": False,
                "allow_ips": ["127.0.0.1"],
            },
        ),
        secrets=("pix-contract-token-one", "pix-contract-token-two"),
        credential=Credential("query", ("hmac",)),
        malformed=repeating_query("hmac"),
        refusal=ForbiddenPeer,
        tamper=None,  # a shared token: nothing of the delivery is signed
        body_authenticated=False,  # why paid items are confirmed with the PSP (confirm)
        timestamped=False,
        ack=Ack(),
        payment=SamplePayment("porteirocontract0000000001", "order-contract-1", 12345, refund=True),
        kinds=(
            Kind.PAYMENT_PAID,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
        ),
        reference="porteirocontract0000000001",  # the cob's txid
        thin=False,
        sdk=None,
    ),
    "standard": Gateway(
        configure=lambda secrets: source("standard", secrets=tuple(secrets)),
        secrets=(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24=",
        ),
        credential=Credential("headers", ("webhook-id", "webhook-timestamp", "webhook-signature")),
        malformed=setting("webhook-signature", "garbage"),
        refusal=SignatureMismatch,
        tamper=changing_the_amount,
        body_authenticated=True,
        timestamped=True,
        ack=Ack(),
        payment=SamplePayment("pay_contract_1", "order-contract-1", 12345, refund=True),
        kinds=(
            Kind.PAYMENT_CREATED,
            Kind.PAYMENT_AUTHORIZED,
            Kind.PAYMENT_PAID,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_REFUNDED,
        ),
        reference="order-contract-1",
        thin=False,
        sdk=Sdk(sign=standard_sign, accepts=standard_accepts),
    ),
    "stripe": Gateway(
        configure=lambda secrets: source("stripe", secrets=tuple(secrets)),
        secrets=("whsec_contract_secret_one", "whsec_contract_secret_two"),
        credential=Credential("headers", ("stripe-signature",)),
        malformed=setting("stripe-signature", "garbage"),
        refusal=SignatureMismatch,
        tamper=changing_the_amount,
        body_authenticated=True,
        timestamped=True,
        ack=Ack(),
        payment=SamplePayment("pi_3Pcontract0000001", "order-contract-1", 12345, refund=True),
        kinds=(
            Kind.PAYMENT_CREATED,
            Kind.PAYMENT_PAID,
            Kind.PAYMENT_PAID,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_REFUNDED,
        ),
        reference="order-contract-1",
        thin=False,
        sdk=Sdk(sign=stripe_sign, accepts=stripe_accepts),
    ),
}


def rows(where: Callable[[Gateway], bool] = lambda gateway: True) -> list[str]:
    return [name for name, gateway in GATEWAYS.items() if where(gateway)]


# -- helpers -------------------------------------------------------------------------------


def adapter(name: str, secrets: Sequence[str] | None = None, **changes: Any) -> Provider:
    gateway = GATEWAYS[name]
    configured = gateway.configure(gateway.secrets[:1] if secrets is None else secrets)
    return build_provider(replace(configured, **changes))


def delivered(name: str, signed: SignedRequest, at: datetime = NOW) -> InboundRequest:
    """The request the receiver hands the adapter for a signed delivery."""
    assert signed.path_suffix == ""  # no contract row signs into the path
    return inbound(
        f"{name}-contract", signed.body, signed.headers, received_at=at, query=signed.query
    )


def lifecycle(name: str, payment: SamplePayment | None = None, seed: int = SEED) -> list[bytes]:
    chosen = payment or GATEWAYS[name].payment
    return list(adapter(name).sample_lifecycle(chosen, NOW, random.Random(seed)))


def signed_sample(name: str) -> SignedRequest:
    """The lifecycle's first delivery, signed at NOW with the source's secret."""
    return adapter(name).sign(lifecycle(name)[0], NOW)


def refused(name: str, signed: SignedRequest, at: datetime = NOW) -> type[AuthenticationError]:
    """The AuthenticationError subclass `verify` raises for this delivery."""
    with pytest.raises(AuthenticationError) as caught:
        adapter(name).verify(delivered(name, signed, at), at)
    return type(caught.value)


def events_of(name: str, bodies: Sequence[bytes]) -> list[ParsedEvent]:
    """Every event of the bodies, each signed, verified and parsed as the receiver would."""
    provider = adapter(name)
    events: list[ParsedEvent] = []
    for body in bodies:
        request = delivered(name, provider.sign(body, NOW))
        provider.verify(request, NOW)
        events.extend(provider.parse(request))
    return events


def distinct(events: Sequence[ParsedEvent]) -> list[ParsedEvent]:
    """The events the store keeps: one per dedup key, in the order first seen."""
    kept: dict[str, ParsedEvent] = {}
    for event in events:
        kept.setdefault(event.dedup_key, event)
    return list(kept.values())


# -- the registry --------------------------------------------------------------------------


def test_every_registered_gateway_has_a_contract_row() -> None:
    missing, unknown = PROVIDERS.keys() - GATEWAYS.keys(), GATEWAYS.keys() - PROVIDERS.keys()
    assert not missing, f"gateways without a contract row in GATEWAYS: {sorted(missing)}"
    assert not unknown, f"contract rows for gateways not in the registry: {sorted(unknown)}"


@pytest.mark.parametrize("name", rows())
def test_the_registry_builds_the_gateways_own_adapter(name: str) -> None:
    configured = GATEWAYS[name].configure(GATEWAYS[name].secrets[:1])
    built = build_provider(configured)
    assert type(built) is PROVIDERS[name] and built.source is configured


@pytest.mark.parametrize("name", rows())
def test_a_source_without_secrets_cannot_sign(name: str) -> None:
    # Refused when built, or (Pagar.me: its RS256 keys come from a JWKS) when signing.
    body = lifecycle(name)[0]
    with pytest.raises(ConfigError):
        adapter(name, secrets=()).sign(body, NOW)


# -- the round trip: sample_lifecycle -> sign -> verify -> parse -----------------------------


@pytest.mark.parametrize("name", rows())
def test_a_signed_sample_lifecycle_verifies_and_parses_into_its_events(name: str) -> None:
    gateway = GATEWAYS[name]
    events = distinct(events_of(name, lifecycle(name)))
    assert tuple(event.kind for event in events) == gateway.kinds
    assert {event.object_id for event in events} == {gateway.payment.object_id}
    assert {event.thin for event in events} == {gateway.thin}
    assert all(event.error is None and not event.warnings for event in events)
    times = [event.occurred_at for event in events if event.occurred_at is not None]
    assert times == sorted(set(times)) and all(moment <= NOW for moment in times)


@pytest.mark.parametrize("refund", [False, True])
@pytest.mark.parametrize("name", rows(lambda gateway: not gateway.thin))
def test_the_ledger_converges_on_a_sample_lifecycle_in_any_order(name: str, refund: bool) -> None:
    gateway = GATEWAYS[name]
    payment = replace(gateway.payment, refund=refund)
    for seed in range(3):
        events = distinct(events_of(name, lifecycle(name, payment, seed)))
        numbered = list(enumerate(events, start=1))
        random.Random(seed).shuffle(numbered)
        final = ledger.replay_history(name, payment.object_id, numbered + numbered[:2], NOW)
        assert final.state is (PaymentState.REFUNDED if refund else PaymentState.PAID)
        assert (final.amount, final.currency, final.reference) == (12345, "BRL", gateway.reference)
        assert final.refunded_amount == (12345 if refund else 0)
        assert final.anomalies == 0


@pytest.mark.parametrize("name", rows())
def test_dedup_keys_are_stable_per_event_and_differ_between_events(name: str) -> None:
    provider = adapter(name)
    bodies = lifecycle(name)
    for body in bodies:
        # A retry is the same body signed again later: the same events, the same keys.
        first = provider.parse(delivered(name, provider.sign(body, NOW)))
        later = NOW + timedelta(seconds=90)
        again = provider.parse(delivered(name, provider.sign(body, later), later))
        assert [event.dedup_key for event in first] == [event.dedup_key for event in again]
    events = events_of(name, bodies)
    for event in events:  # a key re-sent in another body names the very same event
        assert all(other == event for other in events if other.dedup_key == event.dedup_key)
    assert len(distinct(events)) == len(GATEWAYS[name].kinds)
    payment = GATEWAYS[name].payment
    another = replace(payment, object_id=payment.object_id.removesuffix("1") + "2")
    theirs = events_of(name, lifecycle(name, another, seed=SEED + 1))
    assert {event.object_id for event in theirs} == {another.object_id}
    assert not {event.dedup_key for event in events} & {event.dedup_key for event in theirs}


# -- authentication ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", rows())
def test_a_delivery_signed_with_another_secret_is_refused(name: str) -> None:
    gateway = GATEWAYS[name]
    forged = adapter(name, secrets=gateway.secrets[1:]).sign(lifecycle(name)[0], NOW)
    assert refused(name, forged) is gateway.refusal


@pytest.mark.parametrize("name", rows())
def test_any_configured_secret_verifies_and_sign_uses_the_first(name: str) -> None:
    one, two = GATEWAYS[name].secrets
    rotating = adapter(name, secrets=(two, one))
    body = lifecycle(name)[0]
    for secret in (one, two):
        signed = adapter(name, secrets=(secret,)).sign(body, NOW)
        rotating.verify(delivered(name, signed), NOW)
    signed = rotating.sign(body, NOW)
    adapter(name, secrets=(two,)).verify(delivered(name, signed), NOW)
    with pytest.raises(GATEWAYS[name].refusal):
        adapter(name, secrets=(one,)).verify(delivered(name, signed), NOW)


@pytest.mark.parametrize("name", rows(lambda gateway: gateway.tamper is not None))
def test_altering_what_is_signed_is_a_signature_mismatch(name: str) -> None:
    tamper = GATEWAYS[name].tamper
    assert tamper is not None
    signed = signed_sample(name)
    altered = tamper(signed)
    assert altered != signed
    assert refused(name, altered) is SignatureMismatch


@pytest.mark.parametrize("name", rows(lambda gateway: not gateway.body_authenticated))
def test_where_the_body_is_not_authenticated_any_body_verifies(name: str) -> None:
    # Stated, not hidden: these deliveries are hints (Mercado Pago, enriched from the API)
    # or confirmed with the PSP (Pix), because their credential says nothing of the body.
    signed = signed_sample(name)
    adapter(name).verify(delivered(name, replace(signed, body=b'{"anything": "else"}')), NOW)


@pytest.mark.parametrize("name", rows())
def test_a_missing_credential_is_a_missing_header(name: str) -> None:
    credential = GATEWAYS[name].credential
    signed = signed_sample(name)
    blanks = ["", "   "] if credential.place != "query" else []
    for slot in credential.names:
        for value in [None, *blanks]:
            assert refused(name, with_slot(signed, credential, slot, value)) is MissingHeader
        if credential.place == "headers":  # sent under another name: not there at all
            moved = with_slot(signed, credential, slot, None)
            elsewhere = {**moved.headers, f"x-moved-{slot}": signed.headers.get(slot) or "x"}
            assert refused(name, replace(moved, headers=elsewhere)) is MissingHeader


@pytest.mark.parametrize("name", rows())
def test_an_unreadable_credential_is_a_malformed_header(name: str) -> None:
    gateway = GATEWAYS[name]
    assert refused(name, gateway.malformed(gateway, signed_sample(name))) is MalformedHeader


@pytest.mark.parametrize("name", rows())
@given(values=st.lists(st.text(max_size=120), min_size=3, max_size=3))
def test_verify_raises_only_authentication_errors_on_any_credential(
    name: str, values: list[str]
) -> None:
    credential = GATEWAYS[name].credential
    signed = signed_sample(name)
    for slot, value in zip(credential.names, values, strict=False):
        signed = with_slot(signed, credential, slot, value)
    refused(name, signed)


@pytest.mark.parametrize("name", rows())
@given(body=st.binary(max_size=300))
def test_verify_raises_only_authentication_errors_on_any_body(name: str, body: bytes) -> None:
    signed = replace(signed_sample(name), body=body)
    if GATEWAYS[name].body_authenticated:
        refused(name, signed)
    else:
        adapter(name).verify(delivered(name, signed), NOW)


@pytest.mark.parametrize("name", rows(lambda gateway: gateway.timestamped))
def test_a_timestamp_outside_the_tolerance_either_way_is_refused(name: str) -> None:
    body = lifecycle(name)[0]
    provider = adapter(name)  # tolerance_seconds: 300
    for skew in (-301, 301, -3600, 86_400, -int(NOW.timestamp())):
        signed = provider.sign(body, NOW + timedelta(seconds=skew))
        assert refused(name, signed) is TimestampOutOfTolerance
    for skew in (-300, -299, 0, 299, 300):
        provider.verify(delivered(name, provider.sign(body, NOW + timedelta(seconds=skew))), NOW)


@pytest.mark.parametrize("name", rows(lambda gateway: gateway.timestamped))
def test_the_tolerance_is_the_sources(name: str) -> None:
    body = lifecycle(name)[0]
    strict, lenient = adapter(name, tolerance_seconds=10), adapter(name, tolerance_seconds=7200)
    for skew, accepted in ((-10, True), (10, True), (-11, False), (11, False)):
        request = delivered(name, strict.sign(body, NOW + timedelta(seconds=skew)))
        if accepted:
            strict.verify(request, NOW)
        else:
            with pytest.raises(TimestampOutOfTolerance):
                strict.verify(request, NOW)
    lenient.verify(delivered(name, lenient.sign(body, NOW - timedelta(hours=1))), NOW)


@pytest.mark.parametrize("name", rows(lambda gateway: not gateway.timestamped))
def test_an_untimestamped_scheme_verifies_an_old_delivery(name: str) -> None:
    # Nothing in the credential tells its age: a replay is stopped by de-duplication.
    provider = adapter(name)
    for age in (timedelta(days=1), timedelta(days=400)):
        signed = provider.sign(lifecycle(name)[0], NOW - age)
        provider.verify(delivered(name, signed, NOW), NOW)


# -- the official SDKs -------------------------------------------------------------------------


def signing_sdk(gateway: Gateway) -> bool:
    return gateway.sdk is not None and gateway.sdk.sign is not None


@pytest.mark.parametrize("name", rows(signing_sdk))
def test_deliveries_the_official_sdk_signs_verify(name: str) -> None:
    sdk, secret = GATEWAYS[name].sdk, GATEWAYS[name].secrets[0]
    assert sdk is not None and sdk.sign is not None
    now = datetime.now(UTC)  # the SDKs read the real clock
    for body in lifecycle(name):
        adapter(name).verify(delivered(name, sdk.sign(body, secret, now), now), now)


@pytest.mark.parametrize("name", rows(lambda gateway: gateway.sdk is not None))
def test_the_official_sdk_accepts_what_we_sign(name: str) -> None:
    sdk, secret = GATEWAYS[name].sdk, GATEWAYS[name].secrets[0]
    assert sdk is not None
    now = datetime.now(UTC)
    for body in lifecycle(name):
        sdk.accepts(adapter(name).sign(body, now), secret, now)


# -- parse on what is not the gateway's -------------------------------------------------------

NOT_JSON_OBJECTS = [b"{not json", b"[]", b"\xff\xfe", b"null", b'"x"', b"[" * 100_000]

_WORDS = [
    "id",
    "type",
    "object",
    "data",
    "amount",
    "currency",
    "status",
    "action",
    "created",
    "created_at",
    "object_id",
    "related_object",
    "pix",
    "notificationItems",
    "NotificationRequestItem",
    "pspReference",
    "eventCode",
    "success",
    "endToEndId",
    "valor",
    "txid",
    "devolucoes",
    "order",
    "charges",
    "last_transaction",
    "event",
    "payment_intent",
    "v2.core.event",
    "payment",
    "payment.paid",
    "charge.paid",
    "charge.refunded",
    "AUTHORISATION",
    "REFUND",
    "true",
]
_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.sampled_from(_WORDS)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    _LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(_WORDS) | st.text(max_size=8), children, max_size=6)
    ),
    max_leaves=30,
)


def parsed_or_parse_error(name: str, body: bytes) -> None:
    """parse either returns events or raises ParseError: never anything else."""
    try:
        events = adapter(name).parse(inbound(f"{name}-contract", body, received_at=NOW))
    except ParseError:
        return
    assert all(isinstance(event, ParsedEvent) for event in events)


@pytest.mark.parametrize("body", NOT_JSON_OBJECTS, ids=lambda body: repr(body[:12]))
@pytest.mark.parametrize("name", rows())
def test_parse_of_what_is_no_json_object_is_a_parse_error_saying_so(name: str, body: bytes) -> None:
    with pytest.raises(ParseError, match=r"JSON|UTF-8"):
        adapter(name).parse(inbound(f"{name}-contract", body, received_at=NOW))


@pytest.mark.parametrize("name", rows())
@given(body=st.binary(max_size=300))
def test_parse_raises_only_parse_errors_on_any_bytes(name: str, body: bytes) -> None:
    parsed_or_parse_error(name, body)


@pytest.mark.parametrize("name", rows())
@given(document=JSON_VALUES)
def test_parse_raises_only_parse_errors_on_any_json(name: str, document: object) -> None:
    parsed_or_parse_error(name, json.dumps(document).encode())


# -- ack, enrich, fetch_status ----------------------------------------------------------------


@pytest.mark.parametrize("name", rows())
def test_the_ack_is_what_the_gateway_expects(name: str) -> None:
    ack = adapter(name).ack()
    assert ack == GATEWAYS[name].ack and 200 <= ack.status < 300


@pytest.mark.parametrize("name", rows())
async def test_a_complete_event_is_not_enriched_and_no_api_means_no_status(name: str) -> None:
    provider = adapter(name)
    complete = ParsedEvent(
        dedup_key="evt_contract",
        kind=Kind.PAYMENT_PAID,
        type="contract.paid",
        object_id=GATEWAYS[name].payment.object_id,
        amount=12345,
        currency="BRL",
    )
    async with httpx.AsyncClient(timeout=2) as http:
        assert await provider.enrich(complete, http) is complete
        # The contract sources hold no API credentials: nothing to read the status with.
        assert await provider.fetch_status(GATEWAYS[name].payment.object_id, http) is None
