"""Pagar.me adapter: RS256 against a JWKS, X-Hub-Signature HMACs, v5 and legacy payloads.

Signatures are made with a freshly generated RSA key published in a JWKS file; key
fetching and status reads run against a small real HTTP server (Starlette on uvicorn).

What every adapter does (a wrong secret, a missing header, a stale timestamp, the ack,
the sample lifecycle's round trip) is asserted once, for all, in test_provider_contract.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import re
import string
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pagarme import postback as pagarme_postback
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    ConfigError,
    GatewayError,
    MalformedHeader,
    MissingHeader,
    ParseError,
    SignatureMismatch,
    UnknownKey,
)
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers.base import SamplePayment
from porteiro.providers.jwks import JwksCache, jwk_from_public_key, parse_jwks
from porteiro.providers.pagarme import PagarmeProvider
from porteiro.providers.pagarme.webhook import parse_asymmetric_header, parse_hub_header
from tests.support.inbound import inbound
from tests.support.servers import free_port, live_server

NOW = datetime(2024, 11, 28, 16, 40, tzinfo=UTC)
KID = "kid-2025"
HUB_HEADER = "X-Hub-Signature"
ASYM_HEADER = "X-Webhook-Asymmetric-Signature"

# A legacy (v4) postback, signed HMAC-SHA1 with the account's API key as the secret
# (docs/gateways/pagarme.md).
LEGACY_KEY = "ak_test_grXijQ4GicOa2BLGZrDRTR5qNQxJW0"
LEGACY_BODY = b'{"id":194330,"event":"transaction_status_changed"}'
LEGACY_SIGNATURE = "sha1=10a07f738271eb59e6044b4ed85ad78cad400acd"

CHARGE_PAID: dict[str, Any] = {
    "id": "hook_RyEKQO789TRpZjv5",
    "account": {"id": "acc_jZkdN857et650oNv", "name": "Lojinha"},
    "type": "charge.paid",
    "created_at": "2024-11-28T16:37:11.65Z",
    "data": {
        "id": "ch_d22356Jf4WuGr8no",
        "code": "1303624",
        "amount": 12356,
        "paid_amount": 12356,
        "status": "paid",
        "currency": "BRL",
        "payment_method": "credit_card",
        "order": {"id": "or_ZdnB5BBCmYhk534R", "code": "1303724", "status": "paid"},
        "last_transaction": {"id": "tran_1", "status": "captured", "success": True},
    },
}


@dataclass
class Keys:
    private: rsa.RSAPrivateKey
    key_file: Path
    jwks_file: Path
    other: rsa.RSAPrivateKey


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("pagarme")
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = folder / "signing.pem"
    key_file.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    jwks_file = folder / "jwks.json"
    jwks_file.write_text(json.dumps(jwks_document((KID, private))))
    return Keys(private=private, key_file=key_file, jwks_file=jwks_file, other=other)


def jwks_document(*pairs: tuple[str, rsa.RSAPrivateKey]) -> dict[str, Any]:
    return {"keys": [jwk_from_public_key(kid, key.public_key()) for kid, key in pairs]}


def source(keys: Keys | None = None, **options: Any) -> SourceConfig:
    secrets = options.pop("secrets", ())
    api_key = options.pop("api_key", None)
    api_base_url = options.pop("api_base_url", None)
    if keys is not None:
        options.setdefault("jwks_file", str(keys.jwks_file))
        options.setdefault("signing_kid", KID)
    return SourceConfig(
        name="pagarme",
        provider="pagarme",
        secrets=tuple(secrets),
        api_key=api_key,
        api_base_url=api_base_url,
        options=options,
    )


def request(body: bytes, headers: Mapping[str, str] | None = None) -> InboundRequest:
    return inbound("pagarme", body, headers, received_at=NOW)


def rs256(key: rsa.RSAPrivateKey, body: bytes, kid: str = KID, *, padded: bool = False) -> str:
    raw = key.sign(body, padding.PKCS1v15(), hashes.SHA256())
    signature = base64.urlsafe_b64encode(raw).decode()
    return f"alg=RS256; kid={kid}; signature={signature if padded else signature.rstrip('=')}"


def body_of(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload).encode()


# -- RS256 ----------------------------------------------------------------------------------


def test_rs256_signature_verifies(keys: Keys) -> None:
    body = body_of(CHARGE_PAID)
    PagarmeProvider(source(keys)).verify(
        request(body, {ASYM_HEADER: rs256(keys.private, body)}), NOW
    )


@pytest.mark.parametrize(
    "shape",
    [
        "alg=RS256;kid={kid};signature={sig}",
        "  signature={sig} ;  kid={kid} ; alg=RS256 ;",
        "ALG=rs256; KID={kid}; SIGNATURE={sig}",
    ],
)
def test_rs256_header_layouts(keys: Keys, shape: str) -> None:
    body = body_of(CHARGE_PAID)
    raw = keys.private.sign(body, padding.PKCS1v15(), hashes.SHA256())
    for encoded in (base64.urlsafe_b64encode(raw).decode(), base64.b64encode(raw).decode()):
        header = shape.format(kid=KID, sig=encoded)
        PagarmeProvider(source(keys)).verify(request(body, {ASYM_HEADER: header}), NOW)


def test_padded_signature_verifies(keys: Keys) -> None:
    body = body_of(CHARGE_PAID)
    header = rs256(keys.private, body, padded=True)
    PagarmeProvider(source(keys)).verify(request(body, {ASYM_HEADER: header}), NOW)


def test_our_sign_verifies(keys: Keys) -> None:
    adapter = PagarmeProvider(source(keys, signing_key_file=str(keys.key_file)))
    signed = adapter.sign(body_of(CHARGE_PAID), NOW)
    assert set(signed.headers) == {"content-type", "x-webhook-asymmetric-signature"}
    adapter.verify(request(signed.body, signed.headers), NOW)


def test_unknown_kid(keys: Keys) -> None:
    body = body_of(CHARGE_PAID)
    header = rs256(keys.private, body, kid="kid-unknown")
    with pytest.raises(UnknownKey):
        PagarmeProvider(source(keys)).verify(request(body, {ASYM_HEADER: header}), NOW)


def test_rs256_tampered_body(keys: Keys) -> None:
    body = body_of(CHARGE_PAID)
    header = rs256(keys.private, body)
    with pytest.raises(SignatureMismatch):
        PagarmeProvider(source(keys)).verify(request(body + b" ", {ASYM_HEADER: header}), NOW)


def test_rs256_signed_by_another_key(keys: Keys) -> None:
    body = body_of(CHARGE_PAID)
    with pytest.raises(SignatureMismatch):
        PagarmeProvider(source(keys)).verify(
            request(body, {ASYM_HEADER: rs256(keys.other, body)}), NOW
        )


def test_rs256_truncated_signature(keys: Keys) -> None:
    body = body_of(CHARGE_PAID)
    header = f"alg=RS256; kid={KID}; signature=AAAA"
    with pytest.raises(SignatureMismatch):
        PagarmeProvider(source(keys)).verify(request(body, {ASYM_HEADER: header}), NOW)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "alg=RS256",
        f"alg=RS256; kid={KID}",
        f"alg=RS256; signature=AAAA; kid={KID}; kid=other",
        f"alg=HS256; kid={KID}; signature=AAAA",
        f"alg=RS256; kid={KID}; signature=!!!!",
        f"alg=RS256; kid={KID}; signature=A",
        "alg=RS256; kid=; signature=AAAA",
        "alg=RS256, kid=k, signature=AAAA",
    ],
)
def test_malformed_asymmetric_header(keys: Keys, header: str) -> None:
    with pytest.raises(MalformedHeader):
        PagarmeProvider(source(keys)).verify(request(b"{}", {ASYM_HEADER: header}), NOW)


def test_asymmetric_header_wins_over_a_valid_hub_signature(keys: Keys) -> None:
    body = body_of(CHARGE_PAID)
    headers = {ASYM_HEADER: rs256(keys.other, body), HUB_HEADER: hub("sha256", "s", body)}
    with pytest.raises(SignatureMismatch):
        PagarmeProvider(source(keys, secrets=["s"])).verify(request(body, headers), NOW)


@given(text=st.text(max_size=200))
def test_asymmetric_header_parser_raises_only_authentication_errors(text: str) -> None:
    try:
        kid, signature = parse_asymmetric_header(text)
    except AuthenticationError:
        return
    assert kid and isinstance(signature, bytes)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200), hub_text=st.text(max_size=80))
def test_verify_on_arbitrary_headers_raises_only_authentication_errors(
    keys: Keys, text: str, hub_text: str
) -> None:
    adapter = PagarmeProvider(source(keys, secrets=["s"]))
    with pytest.raises(AuthenticationError):
        adapter.verify(request(b"{}", {ASYM_HEADER: text}), NOW)
    with pytest.raises(AuthenticationError):
        adapter.verify(request(b"{}", {HUB_HEADER: hub_text}), NOW)


# -- X-Hub-Signature ------------------------------------------------------------------------


def hub(algorithm: str, secret: str, body: bytes) -> str:
    return (
        f"{algorithm}=" + hmac.new(secret.encode(), body, getattr(hashlib, algorithm)).hexdigest()
    )


def test_legacy_golden_sha1() -> None:
    adapter = PagarmeProvider(source(secrets=[LEGACY_KEY]))
    adapter.verify(request(LEGACY_BODY, {HUB_HEADER: LEGACY_SIGNATURE}), NOW)


@given(
    body=st.text(max_size=200).map(str.encode),
    api_key=st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=40),
    tamper=st.booleans(),
)
@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
def test_legacy_postbacks_agree_with_pagarme_python(
    body: bytes, api_key: str, tamper: bool
) -> None:
    """The official SDK's postback validator and ours accept exactly the same signatures."""
    signature = hub("sha1", api_key, body)
    if tamper:
        signature = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    sdk_accepts = pagarme_postback.validate(signature, body.decode(), api_key)
    adapter = PagarmeProvider(source(secrets=[api_key]))
    try:
        adapter.verify(request(body, {HUB_HEADER: signature}), NOW)
        ours = True
    except SignatureMismatch:
        ours = False
    assert ours == sdk_accepts == (not tamper)


@pytest.mark.parametrize("algorithm", ["sha1", "sha256"])
def test_hub_signature_variants(algorithm: str) -> None:
    body = body_of(CHARGE_PAID)
    adapter = PagarmeProvider(source(secrets=["secret"]))
    adapter.verify(request(body, {HUB_HEADER: hub(algorithm, "secret", body)}), NOW)
    upper = hub(algorithm, "secret", body).upper()
    adapter.verify(request(body, {HUB_HEADER: upper}), NOW)


def test_legacy_sha1_over_a_tampered_body() -> None:
    with pytest.raises(SignatureMismatch):
        PagarmeProvider(source(secrets=[LEGACY_KEY])).verify(
            request(LEGACY_BODY + b"\n", {HUB_HEADER: LEGACY_SIGNATURE}), NOW
        )


def test_hub_algorithm_is_part_of_the_signature() -> None:
    body = body_of(CHARGE_PAID)
    digest = hub("sha256", "secret", body).split("=", 1)[1]
    with pytest.raises(SignatureMismatch):
        PagarmeProvider(source(secrets=["secret"])).verify(
            request(body, {HUB_HEADER: "sha1=" + digest}), NOW
        )


@pytest.mark.parametrize(
    "header", ["sha1", "md5=00", "sha256=zz", "sha256=abc", "sha512=00", "=00"]
)
def test_malformed_hub_header(header: str) -> None:
    with pytest.raises(MalformedHeader):
        PagarmeProvider(source(secrets=["secret"])).verify(
            request(b"{}", {HUB_HEADER: header}), NOW
        )


def test_hub_parser() -> None:
    assert parse_hub_header(" SHA1=00ff ") == ("sha1", b"\x00\xff")


def test_hmac_sign_is_an_x_hub_sha256_by_default() -> None:
    signed = PagarmeProvider(source(secrets=["first"])).sign(b"{}", NOW)
    assert signed.headers["x-hub-signature"] == hub("sha256", "first", b"{}")


def test_hmac_sign_can_sign_as_pagarme_v4_does() -> None:
    adapter = PagarmeProvider(source(secrets=[LEGACY_KEY], signing_hub_algorithm="sha1"))
    signed = adapter.sign(LEGACY_BODY, NOW)
    assert signed.headers["x-hub-signature"] == LEGACY_SIGNATURE
    adapter.verify(request(signed.body, signed.headers), NOW)


# -- which signature is required ----------------------------------------------------------------


def test_hub_signature_without_secrets_is_not_enough() -> None:
    with pytest.raises(MissingHeader):
        PagarmeProvider(source()).verify(request(b"{}", {HUB_HEADER: hub("sha1", "s", b"{}")}), NOW)


def test_require_asymmetric_refuses_hmac_only() -> None:
    adapter = PagarmeProvider(source(secrets=["s"], require_asymmetric=True))
    with pytest.raises(MissingHeader):
        adapter.verify(request(b"{}", {HUB_HEADER: hub("sha256", "s", b"{}")}), NOW)


# -- configuration ----------------------------------------------------------------------------


def test_default_jwks_url() -> None:
    adapter = PagarmeProvider(source())
    assert adapter.keys.url == "https://hubapi.pagar.me/.well-known/jwks.json"
    assert adapter.keys.kids == frozenset()


@pytest.mark.parametrize(
    "options",
    [
        {"jwks_file": "/nonexistent/jwks.json"},
        {"jwks_file": "x.json", "jwks_url": "https://example.com/jwks"},
        {"jwks_refetch_seconds": "soon"},
        {"jwks_refetch_seconds": -1},
        {"require_asymmetric": "yes"},
        {"signing_key_file": "/nonexistent/key.pem"},
        {"signing_hub_algorithm": "md5"},
        {"signing_hub_algorithm": 1},
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        PagarmeProvider(source(**options))


def test_jwks_skips_unusable_keys(keys: Keys) -> None:
    good = jwk_from_public_key("good", keys.private.public_key())
    document = {
        "keys": [
            good,
            {**good, "kid": "enc", "use": "enc"},
            {**good, "kid": "ps", "alg": "PS256"},
            {**good, "kid": "ec", "kty": "EC"},
            {**good, "kid": "broken", "n": "!!"},
            {**good, "kid": 5},
            {key: value for key, value in good.items() if key not in ("use", "alg")}
            | {"kid": "bare"},
            "not a key",
        ]
    }
    assert set(parse_jwks(document)) == {"good", "bare"}


@pytest.mark.parametrize("document", [[], {}, {"keys": {}}, {"keys": [{"kty": "EC"}]}])
def test_jwks_without_usable_keys_is_refused(document: object) -> None:
    with pytest.raises(ConfigError):
        parse_jwks(document)


# -- parse: v5 --------------------------------------------------------------------------------


def v5(event_type: str, **data: Any) -> bytes:
    base = {"id": "ch_1", "code": "c1", "amount": 1000, "currency": "BRL", "status": "x"}
    return body_of(
        {
            "id": "hook_AAAAAAAAAAAAAAAA",
            "type": event_type,
            "created_at": "2024-11-28T16:37:11.65Z",
            "data": {**base, **data},
        }
    )


def parse_one(body: bytes) -> Any:
    [event] = PagarmeProvider(source()).parse(request(body))
    return event


def test_parse_the_documented_example() -> None:
    event = parse_one(body_of(CHARGE_PAID))
    assert event.dedup_key == "hook_RyEKQO789TRpZjv5"
    assert (event.kind, event.type) == (Kind.PAYMENT_PAID, "charge.paid")
    assert event.object_id == "or_ZdnB5BBCmYhk534R"  # the order is the payment
    assert event.reference == "1303724"
    assert (event.amount, event.currency) == (12356, "BRL")
    assert event.occurred_at == datetime(2024, 11, 28, 16, 37, 11, 650000, tzinfo=UTC)
    assert event.data == {
        "status": "paid",
        "charge_id": "ch_d22356Jf4WuGr8no",
        "payment_method": "credit_card",
        "account_id": "acc_jZkdN857et650oNv",
    }


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [
        ("order.created", Kind.PAYMENT_CREATED),
        ("order.pending", Kind.PAYMENT_CREATED),
        ("charge.created", Kind.PAYMENT_CREATED),
        ("charge.pending", Kind.PAYMENT_CREATED),
        ("charge.paid", Kind.PAYMENT_PAID),
        ("order.paid", Kind.PAYMENT_PAID),
        ("charge.payment_failed", Kind.PAYMENT_FAILED),
        ("order.payment_failed", Kind.PAYMENT_FAILED),
        ("order.canceled", Kind.PAYMENT_CANCELED),
        ("charge.refunded", Kind.PAYMENT_REFUNDED),
        ("charge.partial_canceled", Kind.PAYMENT_PARTIALLY_REFUNDED),
        ("charge.chargedback", Kind.DISPUTE_LOST),
        ("charge.underpaid", Kind.OTHER),
        ("charge.overpaid", Kind.PAYMENT_PAID),
        ("charge.antifraud_approved", Kind.OTHER),
        ("charge.antifraud_reproved", Kind.OTHER),
        ("subscription.created", Kind.OTHER),
        ("invoice.paid", Kind.OTHER),
    ],
)
def test_type_mapping(event_type: str, kind: Kind) -> None:
    event = parse_one(v5(event_type))
    assert (event.kind, event.type) == (kind, event_type)


def test_amount_mismatches_are_reported_as_anomalies_on_the_order() -> None:
    under = parse_one(v5("charge.underpaid", paid_amount=900, order={"id": "or_1"}))
    assert (under.kind, under.object_id) == (Kind.OTHER, "or_1")
    assert under.anomaly == "underpaid: paid 900 of 1000"
    assert under.actionable  # goes to the ledger, which records it for review
    over = parse_one(v5("charge.overpaid", paid_amount=1100, order={"id": "or_1"}))
    assert (over.kind, over.anomaly) == (Kind.PAYMENT_PAID, "overpaid: paid 1100 of 1000")
    assert parse_one(v5("charge.paid")).anomaly is None


def test_charge_events_file_under_the_order() -> None:
    event = parse_one(v5("charge.paid", order={"id": "or_1", "code": "order-code"}))
    assert (event.object_id, event.reference, event.data["charge_id"]) == (
        "or_1",
        "order-code",
        "ch_1",
    )


def test_charge_without_order_falls_back_to_the_charge() -> None:
    event = parse_one(v5("charge.paid"))
    assert (event.object_id, event.reference) == ("ch_1", "c1")


def test_order_events_use_data_id_and_code() -> None:
    event = parse_one(v5("order.paid", id="or_2", code="o2", order={"id": "ignored"}))
    assert (event.object_id, event.reference) == ("or_2", "o2")
    assert "charge_id" not in event.data


def test_partial_refund_amounts() -> None:
    body = v5(
        "charge.partial_canceled",
        canceled_amount=300,
        last_transaction={"amount": 300, "status": "refunded"},
    )
    event = parse_one(body)
    assert (event.amount, event.refunded_total) == (300, 300)


def test_full_refund_amounts() -> None:
    body = v5("charge.refunded", canceled_amount=1000, last_transaction={"amount": 700})
    event = parse_one(body)
    assert (event.amount, event.refunded_total) == (700, 1000)


def test_full_refund_without_details_refunds_the_charge_amount() -> None:
    event = parse_one(v5("charge.refunded"))
    assert (event.amount, event.refunded_total) == (None, 1000)


def test_seven_digit_fractions_and_lower_case_currency() -> None:
    body = body_of(
        {
            **CHARGE_PAID,
            "created_at": "2023-10-10T20:28:13.6201993Z",
            "data": {**CHARGE_PAID["data"], "currency": "brl"},
        }
    )
    event = parse_one(body)
    assert event.occurred_at == datetime(2023, 10, 10, 20, 28, 13, 620199, tzinfo=UTC)
    assert event.currency == "BRL"


def test_unknown_event_without_data_id_is_still_parsed() -> None:
    body = body_of({"id": "hook_x", "type": "recipient.updated", "data": {"name": "n"}})
    event = parse_one(body)
    assert (event.kind, event.object_id, event.occurred_at) == (Kind.OTHER, None, None)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[]", "neither JSON nor form"),
        (body_of({"type": "charge.paid", "data": {}}), "id"),
        (body_of({"id": "hook_x", "data": {}}), "type"),
        (body_of({"id": "hook_x", "type": "charge.paid"}), "data"),
        (body_of({"id": "hook_x", "type": "charge.paid", "data": []}), "data"),
        (body_of({"id": 12, "type": "charge.paid", "data": {}}), "id"),
        (body_of({"id": "hook_x", "type": "charge.paid", "data": {"code": "c"}}), "data.id"),
        (v5("charge.paid", amount="12.50"), "data.amount"),
        (v5("charge.paid", amount=True), "data.amount"),
        (v5("charge.paid", order={"id": 5}), "data.order.id"),
        (v5("charge.refunded", canceled_amount="x"), "canceled_amount"),
        (v5("charge.refunded", last_transaction={"amount": -1}), "last_transaction"),
        (v5("charge.created", status=3), "data.status"),
        (v5("order.canceled", charges=[{"canceled_amount": "x", "paid_amount": 1}]), "canceled"),
    ],
)
def test_parse_errors_say_why(body: bytes, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_one(body)


# -- parse: the gateway's own bodies (issue 21) -----------------------------------------------

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gateways" / "pagarme"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def rules(event: ParsedEvent) -> list[str]:
    return [w["rule"] for w in event.warnings]


def test_the_docs_order_paid_example_reads_its_naive_created_at_as_utc() -> None:
    # docs.pagar.me/reference/exemplo-de-webhook-1: "created_at": "2017-06-29T20:23:47".
    event = parse_one(fixture("order-paid-docs-example.json"))
    assert (event.kind, event.object_id, event.amount) == (
        Kind.PAYMENT_PAID,
        "or_PorteiroOrder0001",
        15990,
    )
    assert event.occurred_at == datetime(2017, 6, 29, 20, 23, 47, tzinfo=UTC)
    assert rules(event) == ["pagarme.timestamp_without_offset"]
    assert "fulano" not in json.dumps(event.warnings).lower()  # no personal data


@pytest.mark.parametrize("created_at", ["29/06/2017 20:23:47", "yesterday", 1498767827, True])
def test_an_unreadable_created_at_is_a_warning_not_a_dead_letter(created_at: object) -> None:
    body = json.loads(fixture("charge-paid-card.json"))
    event = parse_one(body_of({**body, "created_at": created_at}))
    assert (event.kind, event.object_id, event.occurred_at) == (
        Kind.PAYMENT_PAID,
        "or_PorteiroOrder0006",
        None,
    )
    assert rules(event) == ["pagarme.timestamp_unreadable"]


def test_offsets_and_fractions_need_no_warning() -> None:
    event = parse_one(fixture("charge-paid-pix.json"))  # 2025-01-06T18:41:02.5731829Z
    assert event.occurred_at == datetime(2025, 1, 6, 18, 41, 2, 573182, tzinfo=UTC)
    assert not event.warnings


def test_charge_created_with_status_paid_is_paid() -> None:
    event = parse_one(fixture("charge-created-paid.json"))
    assert (event.kind, event.type, event.object_id, event.amount) == (
        Kind.PAYMENT_PAID,
        "charge.created",
        "or_PorteiroOrder0005",
        15000,
    )
    assert rules(event) == ["pagarme.status_ahead_of_type"]


@pytest.mark.parametrize(
    ("event_type", "status", "kind"),
    [
        ("order.created", "paid", Kind.PAYMENT_PAID),
        ("order.created", "failed", Kind.PAYMENT_FAILED),
        ("order.created", "canceled", Kind.PAYMENT_CANCELED),
        ("order.pending", "paid", Kind.PAYMENT_PAID),
        ("charge.pending", "paid", Kind.PAYMENT_PAID),
        ("charge.created", "overpaid", Kind.PAYMENT_PAID),
        ("charge.processing", "paid", Kind.PAYMENT_PAID),
        ("order.updated", "paid", Kind.PAYMENT_PAID),
        ("order.closed", "paid", Kind.PAYMENT_PAID),
        ("charge.antifraud_reproved", "failed", Kind.PAYMENT_FAILED),
        ("charge.created", "chargedback", Kind.DISPUTE_LOST),
    ],
)
def test_a_status_further_along_than_the_name_wins(
    event_type: str, status: str, kind: Kind
) -> None:
    event = parse_one(v5(event_type, status=status))
    assert (event.kind, event.type) == (kind, event_type)
    assert rules(event) == ["pagarme.status_ahead_of_type"]


@pytest.mark.parametrize(
    ("event_type", "status"),
    [
        ("order.created", "pending"),
        ("charge.pending", "pending"),
        ("charge.processing", "processing"),
        ("order.updated", "pending"),
        ("order.closed", "processing"),
    ],
)
def test_progress_statuses_are_created_without_warning(event_type: str, status: str) -> None:
    event = parse_one(v5(event_type, status=status))
    assert (event.kind, list(event.warnings)) == (Kind.PAYMENT_CREATED, [])


@pytest.mark.parametrize(
    ("event_type", "status", "kind", "warned"),
    [
        # A money-moving name keeps its meaning: a status behind it is warned, never obeyed.
        ("charge.paid", "pending", Kind.PAYMENT_PAID, True),
        ("order.paid", "processing", Kind.PAYMENT_PAID, True),
        ("charge.refunded", "canceled", Kind.PAYMENT_REFUNDED, False),
        ("charge.partial_canceled", "paid", Kind.PAYMENT_PARTIALLY_REFUNDED, False),
        ("charge.chargedback", "chargedback", Kind.DISPUTE_LOST, False),
        ("charge.payment_failed", "pending", Kind.PAYMENT_FAILED, True),
        # Not even a later status moves it elsewhere: the name is the fact it reports.
        ("charge.paid", "canceled", Kind.PAYMENT_PAID, False),
        ("charge.payment_failed", "paid", Kind.PAYMENT_FAILED, False),
        # Underpaid money never makes the order paid, whatever the status says.
        ("charge.underpaid", "paid", Kind.OTHER, False),
        # Only orders and charges have these statuses.
        ("invoice.created", "paid", Kind.OTHER, False),
        ("subscription.created", "canceled", Kind.OTHER, False),
    ],
)
def test_an_event_named_after_money_keeps_its_name(
    event_type: str, status: str, kind: Kind, warned: bool
) -> None:
    event = parse_one(v5(event_type, status=status, paid_amount=900))
    assert event.kind is kind
    assert rules(event) == (["pagarme.status_behind_type"] if warned else [])


def test_status_of_other_entities_is_not_read() -> None:
    event = parse_one(v5("recipient.updated", status={"odd": True}))
    assert (event.kind, "status" in event.data) == (Kind.OTHER, False)


def test_ancillary_fields_that_deviate_are_read_past() -> None:
    event = parse_one(v5("charge.paid", currency=986, code=1303624, order=["or_1"]))
    assert (event.kind, event.object_id) == (Kind.PAYMENT_PAID, "ch_1")
    assert (event.currency, event.reference, event.amount) == (None, "1303624", 1000)
    assert rules(event) == ["pagarme.ancillary_field"] * 3
    details = " ".join(w["detail"] for w in event.warnings)
    assert "data.order is a JSON array" in details and "data.code is a number" in details


def test_a_last_transaction_that_is_not_an_object_is_read_past() -> None:
    event = parse_one(v5("charge.refunded", canceled_amount=1000, last_transaction=[{}]))
    assert (event.kind, event.amount, event.refunded_total) == (Kind.PAYMENT_REFUNDED, None, 1000)
    assert rules(event) == ["pagarme.ancillary_field"]


def test_refund_amount_comes_only_from_a_refund_transaction() -> None:
    body = v5(
        "charge.partial_canceled",
        canceled_amount=300,
        last_transaction={"amount": 1000, "status": "captured"},
    )
    event = parse_one(body)
    assert (event.amount, event.refunded_total) == (None, 300)
    assert rules(event) == ["pagarme.ancillary_field"]
    refund = parse_one(fixture("charge-partial-canceled.json"))
    assert (refund.amount, refund.refunded_total, list(refund.warnings)) == (5000, 5000, [])
    assert refund.data["payment_amount"] == 21700


def test_full_refund_fixture() -> None:
    event = parse_one(fixture("charge-refunded.json"))
    assert (event.kind, event.object_id, event.amount, event.refunded_total) == (
        Kind.PAYMENT_REFUNDED,
        "or_PorteiroOrder0006",
        16700,
        21700,
    )


def test_order_canceled_after_payment_is_a_refund() -> None:
    paid = {"id": "ch_a", "amount": 1000, "paid_amount": 1000, "canceled_amount": 1000}
    event = parse_one(v5("order.canceled", id="or_1", status="canceled", charges=[paid]))
    assert (event.kind, event.refunded_total, event.amount) == (Kind.PAYMENT_REFUNDED, 1000, None)
    assert event.data["payment_amount"] == 1000
    part = {**paid, "canceled_amount": 400}
    event = parse_one(v5("order.canceled", id="or_1", status="canceled", charges=part))
    assert (event.kind, event.refunded_total) == (Kind.PAYMENT_PARTIALLY_REFUNDED, 400)
    assert rules(event) == ["pagarme.list_as_object"]


def test_odd_transaction_statuses_never_crash_the_refund_reading() -> None:
    odd = {"canceled_amount": 10, "last_transaction": {"status": ["refunded"]}}
    event = parse_one(v5("order.canceled", id="or_1", charges=[odd]))
    assert (event.kind, event.refunded_total) == (Kind.PAYMENT_CANCELED, None)
    body = v5("charge.refunded", last_transaction={"amount": 5, "status": {"x": 1}})
    assert parse_one(body).amount is None


def test_order_canceled_before_payment_is_canceled() -> None:
    event = parse_one(fixture("order-canceled-boleto.json"))
    assert (event.kind, event.object_id, event.refunded_total) == (
        Kind.PAYMENT_CANCELED,
        "or_PorteiroOrder0009",
        None,
    )
    assert event.data["payment_amount"] == 3000


@pytest.mark.parametrize(
    ("name", "kind", "object_id", "method"),
    [
        ("order-created-pix.json", Kind.PAYMENT_CREATED, "or_PorteiroOrder0002", None),
        ("charge-paid-pix.json", Kind.PAYMENT_PAID, "or_PorteiroOrder0002", "pix"),
        ("order-payment-failed.json", Kind.PAYMENT_FAILED, "or_PorteiroOrder0003", None),
        ("charge-created-boleto.json", Kind.PAYMENT_CREATED, "or_PorteiroOrder0008", "boleto"),
        ("charge-paid-boleto.json", Kind.PAYMENT_PAID, "or_PorteiroOrder0008", "boleto"),
        ("charge-chargedback.json", Kind.DISPUTE_LOST, "or_PorteiroOrder0007", "credit_card"),
    ],
)
def test_fixture_bodies_parse_without_warnings(
    name: str, kind: Kind, object_id: str, method: str | None
) -> None:
    event = parse_one(fixture(name))
    assert (event.kind, event.object_id, list(event.warnings)) == (kind, object_id, [])
    assert event.data.get("payment_method") == method


# -- parse: legacy v4 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("paid", Kind.PAYMENT_PAID),
        ("refunded", Kind.PAYMENT_REFUNDED),
        ("refused", Kind.PAYMENT_FAILED),
        ("authorized", Kind.PAYMENT_AUTHORIZED),
        ("waiting_payment", Kind.PAYMENT_CREATED),
        ("pending_refund", Kind.OTHER),
        ("processing", Kind.OTHER),
    ],
)
def test_legacy_json_postback(status: str, kind: Kind) -> None:
    body = body_of(
        {
            "id": 194330,
            "object": "transaction",
            "event": "transaction_status_changed",
            "old_status": "processing",
            "current_status": status,
        }
    )
    event = parse_one(body)
    assert (event.dedup_key, event.kind, event.object_id) == (f"194330:{status}", kind, "194330")
    assert event.type == "transaction_status_changed"
    assert event.data == {"current_status": status, "old_status": "processing"}


def test_legacy_form_postback_verifies_and_parses() -> None:
    body = (
        b"id=194330&fingerprint=abc&event=transaction_status_changed&old_status=processing"
        b"&desired_status=paid&current_status=paid&object=transaction&transaction%5Bamount%5D=1000"
    )
    adapter = PagarmeProvider(source(secrets=[LEGACY_KEY]))
    adapter.verify(request(body, {HUB_HEADER: hub("sha1", LEGACY_KEY, body)}), NOW)
    [event] = adapter.parse(request(body))
    assert (event.dedup_key, event.kind, event.object_id) == (
        "194330:paid",
        Kind.PAYMENT_PAID,
        "194330",
    )


def test_legacy_form_postbacks_carry_the_transaction_amounts() -> None:
    paid = parse_one(fixture("postback-v4-paid.form"))
    assert (paid.kind, paid.object_id, paid.amount) == (Kind.PAYMENT_PAID, "7700002", 5000)
    assert paid.occurred_at == datetime(2017, 5, 12, 10, 0, tzinfo=UTC)
    refunded = parse_one(fixture("postback-v4-refunded.form"))
    assert (refunded.kind, refunded.amount, refunded.refunded_total) == (
        Kind.PAYMENT_REFUNDED,
        None,
        5000,
    )
    assert refunded.data["payment_amount"] == 5000
    assert not paid.warnings and not refunded.warnings


def test_legacy_json_postback_with_a_transaction_object() -> None:
    body = body_of(
        {
            "id": 7,
            "object": "transaction",
            "current_status": "chargedback",
            "transaction": {"amount": 990, "date_updated": "2017-05-12T10:00:00"},
        }
    )
    event = parse_one(body)
    assert (event.kind, event.amount) == (Kind.DISPUTE_LOST, 990)
    assert [w["rule"] for w in event.warnings] == ["pagarme.timestamp_without_offset"]


@pytest.mark.parametrize(
    "body",
    [
        b"id=1&object=transaction",
        b"id=&object=transaction&current_status=paid",
        b"id=1&object=transaction&current_status=paid&transaction%5Bamount%5D=10.00",
        b'{"id": 1, "current_status": "paid", "transaction": {"amount": "10"}}',
        b'{"object": "transaction", "current_status": "paid"}',
        b'{"id": true, "object": "transaction", "current_status": "paid"}',
        b'{"id": 1, "object": "transaction", "current_status": 3}',
    ],
)
def test_legacy_postbacks_need_id_and_status(body: bytes) -> None:
    with pytest.raises(ParseError):
        parse_one(body)


# -- sample lifecycle ----------------------------------------------------------------------------


def test_sample_lifecycle_signed_rs256(keys: Keys) -> None:
    adapter = PagarmeProvider(source(keys, signing_key_file=str(keys.key_file)))
    sample = SamplePayment(object_id="or_sample", reference="ref-1", amount=9000, refund=True)
    bodies = adapter.sample_lifecycle(sample, NOW, random.Random(7))
    events: list[ParsedEvent] = []
    for body in bodies:
        signed = adapter.sign(body, NOW)
        adapter.verify(request(signed.body, signed.headers), NOW)
        events.extend(adapter.parse(request(signed.body, signed.headers)))
    assert [e.type for e in events] == [
        "order.created",
        "charge.paid",
        "order.paid",
        "charge.partial_canceled",
        "charge.refunded",
    ]
    assert all(re.fullmatch(r"hook_\w{16}", e.dedup_key) for e in events)
    assert len({e.dedup_key for e in events}) == 5
    assert {e.object_id for e in events} == {"or_sample"}
    assert {e.reference for e in events} == {"ref-1"}
    partial, full = events[-2:]
    assert (partial.amount, partial.refunded_total) == (3000, 3000)
    assert (full.amount, full.refunded_total) == (6000, 9000)
    times = [e.occurred_at for e in events if e.occurred_at is not None]
    assert len(times) == 5 and times == sorted(times) and times[-1] < NOW


def test_sample_lifecycle_without_refund() -> None:
    adapter = PagarmeProvider(source())
    bodies = adapter.sample_lifecycle(SamplePayment("or_1", "r", 100), NOW, random.Random(1))
    assert [json.loads(b)["type"] for b in bodies] == ["order.created", "charge.paid", "order.paid"]


# -- a small real gateway: JWKS endpoint and status reads ------------------------------------------


@dataclass
class Gateway:
    url: str
    jwks: dict[str, Any]
    hits: dict[str, int] = field(default_factory=dict)
    auth: list[str | None] = field(default_factory=list)


ORDERS = {
    "or_paid": {
        "id": "or_paid",
        "code": "ref-9",
        "amount": 5000,
        "currency": "BRL",
        "status": "paid",
        "updated_at": "2024-11-28T16:37:11Z",
    },
    "ch_late": {"id": "ch_late", "amount": 100, "currency": "BRL", "status": "pending"},
    "or_weird": {"id": "or_weird", "status": "paid", "amount": "lots"},
    # GET /orders as Pagar.me's docs print it: timestamps without an offset (UTC).
    "or_naive": {
        "id": "or_naive",
        "code": 1303724,
        "amount": 12356,
        "currency": "BRL",
        "status": "paid",
        "created_at": "2022-06-29T20:23:42",
        "updated_at": "2022-06-29T20:23:47",
    },
    "ch_badtime": {"id": "ch_badtime", "amount": 100, "status": "paid", "updated_at": "ontem"},
    # A refunded card charge as captured: no paid_amount, no paid_at; the refund is the
    # last transaction.
    "ch_refunded": {
        "id": "ch_refunded",
        "amount": 21700,
        "canceled_amount": 21700,
        "status": "canceled",
        "currency": "BRL",
        "canceled_at": "2025-01-06T18:43:27Z",
        "updated_at": "2025-01-06T18:43:27Z",
        "last_transaction": {"id": "tran_r", "amount": 21700, "status": "refunded"},
    },
    "ch_voided_unpaid": {
        "id": "ch_voided_unpaid",
        "amount": 3000,
        "canceled_amount": 3000,
        "status": "canceled",
        "last_transaction": {"id": "tran_v", "amount": 3000, "status": "generated"},
    },
}
# GET /charges (list_window): one page, in the docs' naive time format.
CHARGE_PAGE = {
    "data": [
        {
            "id": "ch_in",
            "amount": 700,
            "status": "paid",
            "created_at": "2024-11-28T12:00:00",
            "order": {"id": "or_in"},
        },
        {"id": "ch_before", "amount": 1, "status": "paid", "created_at": "2024-11-27T23:59:59"},
        {"id": "ch_odd", "amount": 800, "status": "pending", "created_at": "28/11/2024"},
    ],
    "paging": {"total": 3},
}


@pytest.fixture
async def gateway(keys: Keys) -> AsyncIterator[Gateway]:
    state = Gateway(url="", jwks=jwks_document((KID, keys.private)))

    async def jwks(request: Request) -> Response:
        state.hits["jwks"] = state.hits.get("jwks", 0) + 1
        return JSONResponse(state.jwks)

    async def resource(request: Request) -> Response:
        state.auth.append(request.headers.get("authorization"))
        item = ORDERS.get(request.path_params["id"])
        if item is None:
            return JSONResponse({"message": "not found"}, status_code=404)
        return JSONResponse(item)

    app = Starlette(
        routes=[
            Route("/.well-known/jwks.json", jwks),
            Route("/core/v5/charges", lambda _: JSONResponse(CHARGE_PAGE)),
            Route("/core/v5/orders/{id}", resource),
            Route("/core/v5/charges/{id}", resource),
        ]
    )
    async with live_server(app, lifespan="off") as url:
        state.url = url
        yield state


def signed_request(
    keys: Keys, kid: str = KID, key: rsa.RSAPrivateKey | None = None
) -> InboundRequest:
    body = body_of(CHARGE_PAID)
    return request(body, {ASYM_HEADER: rs256(key or keys.private, body, kid)})


async def test_prepare_fetches_the_jwks_for_an_unknown_kid(keys: Keys, gateway: Gateway) -> None:
    adapter = PagarmeProvider(source(jwks_url=gateway.url + "/.well-known/jwks.json"))
    delivery = signed_request(keys)
    with pytest.raises(UnknownKey):
        adapter.verify(delivery, NOW)  # nothing loaded yet: verify itself never fetches
    async with httpx.AsyncClient() as http:
        await adapter.prepare(delivery, http)
        await adapter.prepare(delivery, http)  # known now: no second fetch
    adapter.verify(delivery, NOW)
    assert gateway.hits["jwks"] == 1


async def test_unknown_kids_refetch_at_most_once_per_window(keys: Keys, gateway: Gateway) -> None:
    adapter = PagarmeProvider(
        source(jwks_url=gateway.url + "/.well-known/jwks.json", jwks_refetch_seconds=3600)
    )
    async with httpx.AsyncClient() as http:
        await adapter.prepare(signed_request(keys), http)
        for index in range(5):
            await adapter.prepare(signed_request(keys, kid=f"forged-{index}"), http)
    assert gateway.hits["jwks"] == 1
    with pytest.raises(UnknownKey):
        adapter.verify(signed_request(keys, kid="forged-0"), NOW)


async def test_key_rotation_is_picked_up_after_the_window(keys: Keys, gateway: Gateway) -> None:
    adapter = PagarmeProvider(
        source(jwks_url=gateway.url + "/.well-known/jwks.json", jwks_refetch_seconds=0)
    )
    rotated = signed_request(keys, kid="kid-next", key=keys.other)
    async with httpx.AsyncClient() as http:
        await adapter.prepare(rotated, http)
        with pytest.raises(UnknownKey):
            adapter.verify(rotated, NOW)
        gateway.jwks = jwks_document((KID, keys.private), ("kid-next", keys.other))
        await adapter.prepare(rotated, http)
    adapter.verify(rotated, NOW)
    adapter.verify(signed_request(keys), NOW)
    assert gateway.hits["jwks"] == 2


async def test_prepare_ignores_requests_it_cannot_help(keys: Keys, gateway: Gateway) -> None:
    adapter = PagarmeProvider(source(jwks_url=gateway.url + "/.well-known/jwks.json"))
    async with httpx.AsyncClient() as http:
        await adapter.prepare(request(b"{}"), http)
        await adapter.prepare(request(b"{}", {ASYM_HEADER: "garbage"}), http)
    assert gateway.hits == {}


async def test_an_unreachable_jwks_leaves_the_kid_unknown(keys: Keys) -> None:
    adapter = PagarmeProvider(
        source(jwks_url=f"http://127.0.0.1:{free_port()}/jwks.json", jwks_refetch_seconds=0)
    )
    delivery = signed_request(keys)
    async with httpx.AsyncClient() as http:
        await adapter.prepare(delivery, http)  # logs, does not raise
        with pytest.raises(GatewayError):
            await adapter.refresh_keys(http)
    with pytest.raises(UnknownKey):
        adapter.verify(delivery, NOW)


async def test_jwks_file_is_reloaded_for_an_unknown_kid(keys: Keys, tmp_path: Path) -> None:
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps(jwks_document((KID, keys.private))))
    adapter = PagarmeProvider(source(jwks_file=str(jwks_file), jwks_refetch_seconds=0))
    rotated = signed_request(keys, kid="kid-next", key=keys.other)
    jwks_file.write_text(json.dumps(jwks_document(("kid-next", keys.other))))
    async with httpx.AsyncClient() as http:
        await adapter.prepare(rotated, http)
    adapter.verify(rotated, NOW)


async def test_jwks_cache_rate_limit_follows_its_clock(keys: Keys, gateway: Gateway) -> None:
    clock = [100.0]
    cache = JwksCache(
        url=gateway.url + "/.well-known/jwks.json", refetch_seconds=60, clock=lambda: clock[0]
    )
    async with httpx.AsyncClient() as http:
        assert await cache.ensure(KID, http)
        assert not await cache.ensure("other", http)
        clock[0] += 59
        assert not await cache.ensure("other", http)
        assert gateway.hits["jwks"] == 1
        clock[0] += 1
        assert not await cache.ensure("other", http)
    assert gateway.hits["jwks"] == 2


async def test_fetch_status_reads_the_order(gateway: Gateway) -> None:
    adapter = PagarmeProvider(source(api_key="sk_test_key", api_base_url=gateway.url + "/core/v5"))
    async with httpx.AsyncClient() as http:
        event = await adapter.fetch_status("or_paid", http)
        charge = await adapter.fetch_status("ch_late", http)
    assert event is not None and charge is not None
    assert event.dedup_key == "reconcile:or_paid:paid"
    assert (event.kind, event.type, event.object_id) == (Kind.PAYMENT_PAID, "order.paid", "or_paid")
    assert (event.amount, event.currency, event.reference) == (5000, "BRL", "ref-9")
    assert event.occurred_at == datetime(2024, 11, 28, 16, 37, 11, tzinfo=UTC)
    assert (charge.kind, charge.type) == (Kind.PAYMENT_CREATED, "charge.pending")
    expected = "Basic " + base64.b64encode(b"sk_test_key:").decode()
    assert gateway.auth == [expected, expected]


async def test_fetch_status_failures_are_gateway_errors(gateway: Gateway) -> None:
    adapter = PagarmeProvider(source(api_key="k", api_base_url=gateway.url + "/core/v5"))
    async with httpx.AsyncClient() as http:
        with pytest.raises(GatewayError, match="404"):
            await adapter.fetch_status("or_missing", http)
        with pytest.raises(GatewayError, match="amount"):
            await adapter.fetch_status("or_weird", http)


async def test_status_reads_take_naive_timestamps_as_utc(gateway: Gateway) -> None:
    adapter = PagarmeProvider(source(api_key="k", api_base_url=gateway.url + "/core/v5"))
    async with httpx.AsyncClient() as http:
        order = await adapter.fetch_status("or_naive", http)
        charge = await adapter.fetch_status("ch_badtime", http)
    assert order is not None and charge is not None
    assert (order.kind, order.amount, order.reference) == (Kind.PAYMENT_PAID, 12356, "1303724")
    assert order.occurred_at == datetime(2022, 6, 29, 20, 23, 47, tzinfo=UTC)
    assert [w["rule"] for w in order.warnings] == [
        "pagarme.ancillary_field",
        "pagarme.timestamp_without_offset",
    ]
    assert (charge.kind, charge.occurred_at) == (Kind.PAYMENT_PAID, None)
    assert [w["rule"] for w in charge.warnings] == ["pagarme.timestamp_unreadable"]


async def test_list_window_reads_naive_created_at_as_utc(gateway: Gateway) -> None:
    adapter = PagarmeProvider(source(api_key="k", api_base_url=gateway.url + "/core/v5"))
    since = datetime(2024, 11, 28, tzinfo=UTC)
    async with httpx.AsyncClient() as http:
        events = [e async for e in adapter.list_window(since, NOW, http)]
    # ch_before is outside the window (naive, UTC); ch_odd's time is unreadable: kept.
    assert [(e.object_id, e.kind) for e in events] == [
        ("or_in", Kind.PAYMENT_PAID),
        ("ch_odd", Kind.PAYMENT_CREATED),
    ]


async def test_a_refunded_charge_without_paid_amount_reads_as_refunded(gateway: Gateway) -> None:
    adapter = PagarmeProvider(source(api_key="k", api_base_url=gateway.url + "/core/v5"))
    async with httpx.AsyncClient() as http:
        refunded = await adapter.fetch_status("ch_refunded", http)
        voided = await adapter.fetch_status("ch_voided_unpaid", http)
    assert refunded is not None and voided is not None
    assert (refunded.kind, refunded.refunded_total) == (Kind.PAYMENT_REFUNDED, 21700)
    assert refunded.data["payment_amount"] == 21700
    assert (voided.kind, voided.refunded_total) == (Kind.PAYMENT_CANCELED, None)
