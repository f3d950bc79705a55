"""Pix adapter: every authentication path, the payload rules, and PSP confirmation against
a real local fake of the PSP's API (tests/fakes/pix.py served by uvicorn).

What every adapter does (a wrong secret, a missing header, a stale timestamp, the ack,
the sample lifecycle's round trip) is asserted once, for all, in test_provider_contract.py.
"""

from __future__ import annotations

import json
import random
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from porteiro.config import SourceConfig
from porteiro.errors import (
    AuthenticationError,
    ConfigError,
    ForbiddenPeer,
    GatewayError,
    MalformedHeader,
    MissingHeader,
    NonRetryable,
    ParseError,
)
from porteiro.http.receiver import client_cert_der, client_cert_subject
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import build_provider
from porteiro.providers.base import SamplePayment
from porteiro.providers.pix import PixProvider
from porteiro.providers.pix.payload import E2E_ID, RTR_ID
from porteiro.providers.pix.samples import sample_txid
from porteiro.runtime import utc_now
from tests.fakes.pix import FakePsp, Issued, issue, make_ca
from tests.support.servers import live_server

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CHAVE = "pix@loja.example"
TOKEN = "s3cr3t-Token_value"
EFI_IP = "34.193.116.226"
E2E_1 = "E12345678202009091221kkkkkkkkkkk"  # the BCB spec's examples
E2E_2 = "E87654321202009091221dfghi123456"
TXID_1 = "c3e0e7a4e7f1469a9f782d3d4999343c"
TXID_2 = "971122d8f37211eaadc10242ac120002"
RTR_1 = "D12345678202009091221abcdf098765"
RTR_2 = "D12345678202009091222abcdf098766"
CLIENT_ID, CLIENT_SECRET = "Client_Id_abc", "Client_Secret_xyz"


def provider(**options: Any) -> PixProvider:
    settings: dict[str, Any] = {"keys": [CHAVE], "hmac_token": TOKEN, "confirm": False}
    settings.update(options)
    settings = {key: value for key, value in settings.items() if value is not None}
    api = settings.pop("api_base_url", None)
    built = build_provider(
        SourceConfig(name="efi", provider="pix", api_base_url=api, options=settings)
    )
    assert isinstance(built, PixProvider)
    return built


def request(
    body: bytes = b"{}",
    *,
    query: str = "",
    path: str = "/webhooks/efi",
    peer: str | None = EFI_IP,
    headers: Sequence[tuple[str, str]] = (),
    subject: str | None = None,
    der: bytes | None = None,
) -> InboundRequest:
    return InboundRequest(
        source="efi",
        method="POST",
        path=path,
        query=query,
        headers=[("content-type", "application/json"), *headers],
        body=body,
        peer=peer,
        received_at=NOW,
        client_cert_subject=subject,
        client_cert_der=der,
    )


def pix(
    e2eid: str = E2E_1,
    *,
    txid: str | None = TXID_1,
    valor: str = "110.00",
    chave: str | None = CHAVE,
    devolucoes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "endToEndId": e2eid,
        "txid": txid,
        "chave": chave,
        "valor": valor,
        "horario": "2020-09-09T20:15:00.358Z",
        "infoPagador": "0123456789",
    }
    if devolucoes is not None:
        item["devolucoes"] = devolucoes
    return {key: value for key, value in item.items() if value is not None}


def refund(rtr_id: str = RTR_1, valor: str = "10.00", status: str = "DEVOLVIDO") -> dict[str, Any]:
    return {
        "id": "123ABC",
        "rtrId": rtr_id,
        "valor": valor,
        "status": status,
        "horario": {"solicitacao": "2020-09-09T20:15:00.358Z"},
    }


def delivery(*items: dict[str, Any]) -> bytes:
    return json.dumps({"pix": list(items)}).encode()


# -- hmac (Efí skip-mTLS) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "path"),
    [
        (f"hmac={TOKEN}", "/webhooks/efi/pix"),
        (f"hmac={TOKEN}&ignorar=/pix", "/webhooks/efi"),  # registered with &ignorar=
        (f"hmac={TOKEN}&ignorar=", "/webhooks/efi/pix"),
        (f"hmac={TOKEN}/pix", "/webhooks/efi"),  # registered without ignorar: suffix in value
        (f"hmac={TOKEN}%2Fpix", "/webhooks/efi"),
        (f"ignorar=&hmac={quote(TOKEN)}", "/webhooks/efi/pix"),
    ],
)
def test_hmac_secret_is_accepted_wherever_efi_puts_the_pix_suffix(query: str, path: str) -> None:
    provider().verify(request(query=query, path=path), NOW)


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("ignorar=/pix", MissingHeader),
        (f"hmac={TOKEN}x", ForbiddenPeer),
        (f"hmac={TOKEN}/pixx", ForbiddenPeer),
        (f"hmac=/pix{TOKEN}", ForbiddenPeer),
    ],
)
def test_wrong_or_missing_hmac_is_refused(query: str, error: type[AuthenticationError]) -> None:
    with pytest.raises(error):
        provider().verify(request(query=query), NOW)


def test_hmac_token_beyond_ascii_is_compared_as_utf8() -> None:
    secret = "s\u00eagredo"
    accented = provider(hmac_token=secret)
    accented.verify(request(query=f"hmac={quote(secret)}&ignorar=/pix"), NOW)
    with pytest.raises(ForbiddenPeer):
        accented.verify(request(query="hmac=s%EAgredo"), NOW)  # latin-1 escape: not ours


def test_hmac_mode_allows_only_efis_address_by_default() -> None:
    with pytest.raises(ForbiddenPeer, match="allow_ips"):
        provider().verify(request(query=f"hmac={TOKEN}", peer="203.0.113.9"), NOW)
    with pytest.raises(ForbiddenPeer):
        provider().verify(request(query=f"hmac={TOKEN}", peer=None), NOW)


def test_allow_ips_take_cidrs_and_ipv4_mapped_peers() -> None:
    ranged = provider(allow_ips=["10.1.0.0/16", "127.0.0.1"])
    ranged.verify(request(query=f"hmac={TOKEN}", peer="10.1.200.3"), NOW)
    ranged.verify(request(query=f"hmac={TOKEN}", peer="::ffff:127.0.0.1"), NOW)
    with pytest.raises(ForbiddenPeer):
        ranged.verify(request(query=f"hmac={TOKEN}", peer=EFI_IP), NOW)


def test_client_address_from_a_trusted_proxy_only() -> None:
    proxied = provider(trusted_proxies=["127.0.0.1"])
    forwarded = [("x-forwarded-for", f"198.51.100.1, {EFI_IP}")]
    proxied.verify(request(query=f"hmac={TOKEN}", peer="127.0.0.1", headers=forwarded), NOW)
    with pytest.raises(ForbiddenPeer):  # the proxy's own address is not Efí's
        proxied.verify(request(query=f"hmac={TOKEN}", peer="127.0.0.1"), NOW)
    with pytest.raises(ForbiddenPeer):  # anyone else cannot claim an address
        proxied.verify(request(query=f"hmac={TOKEN}", peer="203.0.113.9", headers=forwarded), NOW)
    with pytest.raises(MalformedHeader):
        bad = [("x-forwarded-for", "not-an-ip")]
        proxied.verify(request(query=f"hmac={TOKEN}", peer="127.0.0.1", headers=bad), NOW)


# -- mTLS: Porteiro's own TLS termination --------------------------------------------------


@dataclass
class Pki:
    efi: Issued
    other: Issued
    ca_file: Path
    client: Issued
    foreign_client: Issued


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    efi, other = make_ca("Efi Pay Root CA"), make_ca("Other PSP Root CA", org="Other PSP")
    ca_file, _ = efi.write(directory, "efi-chain")
    client = issue(efi, "webhook.efipay.com.br")
    foreign = issue(other, "webhook.efipay.com.br")  # same name, wrong issuer
    return Pki(efi, other, ca_file, client, foreign)


def mtls(pki: Pki, **options: Any) -> PixProvider:
    return provider(hmac_token=None, mtls_ca_file=str(pki.ca_file), **options)


def test_verified_client_certificate_of_our_psp_is_accepted(pki: Pki) -> None:
    subject = pki.client.cert.subject.rfc4514_string()
    mtls(pki, allowed_cns=["webhook.efipay.com.br"]).verify(
        request(path="/webhooks/efi/pix", subject=subject, der=pki.client.der), utc_now()
    )


def test_no_client_certificate_is_refused(pki: Pki) -> None:
    # Efí's registration probe comes without a certificate and must be refused.
    with pytest.raises(ForbiddenPeer, match="mTLS is required"):
        mtls(pki).verify(request(path="/webhooks/efi/pix"), utc_now())
    with pytest.raises(ForbiddenPeer):  # an hmac in the query is no substitute
        mtls(pki).verify(request(query=f"hmac={TOKEN}"), utc_now())


def test_certificate_from_another_ca_is_refused_by_this_source(pki: Pki) -> None:
    foreign = pki.foreign_client
    with pytest.raises(ForbiddenPeer, match="mtls_ca_file"):
        mtls(pki).verify(request(subject="CN=webhook.efipay.com.br", der=foreign.der), utc_now())


def test_allowed_cns_narrow_the_certificates_of_the_ca(pki: Pki) -> None:
    someone = issue(pki.efi, "cliente.efipay.com.br")
    with pytest.raises(ForbiddenPeer, match="allowed_cns"):
        mtls(pki, allowed_cns=["webhook.efipay.com.br"]).verify(request(der=someone.der), utc_now())
    mtls(pki).verify(request(der=someone.der), utc_now())  # no list: any cert of the CA


def test_expired_certificate_is_refused(pki: Pki) -> None:
    later = datetime(2099, 1, 1, tzinfo=UTC)
    with pytest.raises(ForbiddenPeer):
        mtls(pki).verify(request(der=pki.client.der), later)


def test_a_subject_without_the_certificate_cannot_be_reverified(pki: Pki) -> None:
    with pytest.raises(ForbiddenPeer, match="re-verify"):
        mtls(pki).verify(request(subject="CN=webhook.efipay.com.br"), NOW)


def test_garbage_der_is_refused(pki: Pki) -> None:
    with pytest.raises(ForbiddenPeer, match="DER"):
        mtls(pki).verify(request(der=b"\x30\x03junk"), NOW)


def test_receiver_reads_the_tls_extension(pki: Pki) -> None:
    pem = pki.client.pem.decode()
    scope: dict[str, Any] = {
        "extensions": {"tls": {"client_cert_name": "CN=x", "client_cert_chain": [pem]}}
    }
    assert client_cert_subject(scope) == "CN=x"
    assert client_cert_der(scope) == pki.client.der
    scope["extensions"]["tls"]["client_cert_der"] = b"raw"
    assert client_cert_der(scope) == b"raw"
    scope["extensions"]["tls"]["client_cert_error"] = "unknown ca"
    assert client_cert_der(scope) is None and client_cert_subject(scope) is None
    assert client_cert_der({"extensions": None}) is None


# -- mTLS at a trusted proxy ----------------------------------------------------------------

PROXY_OK = [
    ("x-ssl-client-verify", "SUCCESS"),
    ("x-ssl-client-s-dn", "CN=webhook.efipay.com.br,O=Efi S.A."),
]


def proxied(**options: Any) -> PixProvider:
    return provider(hmac_token=None, trusted_proxies=["127.0.0.1", "10.0.0.0/8"], **options)


def test_trusted_proxy_header_is_honoured_from_a_trusted_peer() -> None:
    proxied(allowed_cns=["webhook.efipay.com.br"]).verify(
        request(peer="10.2.3.4", headers=PROXY_OK), NOW
    )


def test_proxy_headers_from_an_untrusted_peer_are_ignored() -> None:
    with pytest.raises(ForbiddenPeer, match="mTLS is required"):
        proxied().verify(request(peer="203.0.113.9", headers=PROXY_OK), NOW)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("x-ssl-client-verify", "NONE"), ("x-ssl-client-s-dn", "CN=webhook.efipay.com.br")],
        [("x-ssl-client-verify", "FAILED:unable to get issuer certificate")],
        [("x-ssl-client-verify", "SUCCESS")],
    ],
)
def test_proxy_must_say_success_and_name_the_subject(headers: list[tuple[str, str]]) -> None:
    with pytest.raises(ForbiddenPeer):
        proxied().verify(request(peer="127.0.0.1", headers=headers), NOW)


def test_proxy_subject_is_checked_against_allowed_cns() -> None:
    legacy = [
        ("x-ssl-client-verify", "SUCCESS"),
        ("x-ssl-client-s-dn", "/C=BR/O=Efi/CN=webhook.efipay.com.br"),
    ]
    strict = proxied(allowed_cns=["webhook.efipay.com.br"])
    strict.verify(request(peer="127.0.0.1", headers=legacy), NOW)
    other = [("x-ssl-client-verify", "SUCCESS"), ("x-ssl-client-s-dn", "CN=evil.example,O=Efi")]
    with pytest.raises(ForbiddenPeer, match="allowed_cns"):
        strict.verify(request(peer="127.0.0.1", headers=other), NOW)


def test_proxy_forwarded_certificate_is_reverified_against_the_source_ca(pki: Pki) -> None:
    both = proxied(mtls_ca_file=str(pki.ca_file))
    good = [*PROXY_OK, ("x-ssl-client-cert", quote(pki.client.pem.decode()))]
    both.verify(request(peer="127.0.0.1", headers=good), utc_now())
    bad = [*PROXY_OK, ("x-ssl-client-cert", quote(pki.foreign_client.pem.decode()))]
    with pytest.raises(ForbiddenPeer):
        both.verify(request(peer="127.0.0.1", headers=bad), utc_now())
    with pytest.raises(MalformedHeader):
        both.verify(
            request(peer="127.0.0.1", headers=[*PROXY_OK, ("x-ssl-client-cert", "x")]), utc_now()
        )


def test_header_names_are_configurable() -> None:
    custom = proxied(client_verify_header="X-Client-Verify", client_subject_header="X-Client-DN")
    headers = [("x-client-verify", "SUCCESS"), ("x-client-dn", "CN=webhook.efipay.com.br")]
    custom.verify(request(peer="127.0.0.1", headers=headers), NOW)
    with pytest.raises(ForbiddenPeer):
        custom.verify(request(peer="127.0.0.1", headers=PROXY_OK), NOW)


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hmac_token": None}, "needs mtls_ca_file"),
        ({"confirm": True}, "confirm = true needs"),
        ({"keys": "pix@loja"}, "keys must be a list"),
        ({"allow_ips": ["not-an-ip"]}, "allow_ips"),
        ({"mtls_ca_file": "/nonexistent/ca.pem"}, "cannot load"),
        ({"confirm": "yes"}, "true or false"),
    ],
)
def test_bad_configuration_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        provider(**options)


# -- parsing ----------------------------------------------------------------------------------


def parse(body: bytes, **options: Any) -> list[ParsedEvent]:
    return list(provider(**options).parse(request(body)))


def test_every_pix_of_a_delivery_is_its_own_paid_event() -> None:
    events = parse(delivery(pix(E2E_1, txid=TXID_1), pix(E2E_2, txid=TXID_2, valor="0.29")))
    assert [(e.dedup_key, e.kind, e.object_id, e.amount) for e in events] == [
        (E2E_1, Kind.PAYMENT_PAID, TXID_1, 11000),
        (E2E_2, Kind.PAYMENT_PAID, TXID_2, 29),
    ]
    first = events[0]
    assert first.currency == "BRL" and first.reference == TXID_1 and not first.thin
    assert first.occurred_at == datetime(2020, 9, 9, 20, 15, 0, 358000, tzinfo=UTC)
    assert first.data["settlement_id"] == E2E_1 and first.data["chave"] == CHAVE


def test_confirmation_makes_paid_items_thin_but_not_refunds() -> None:
    events = parse(delivery(pix(devolucoes=[refund()])), confirm=True, **api_options("http://x"))
    assert [e.thin for e in events] == [True, False]


def test_a_pix_without_txid_is_its_own_payment() -> None:
    (event,) = parse(delivery(pix(txid=None)))
    assert event.object_id == E2E_1 and event.reference is None


@pytest.mark.parametrize(
    ("e2eid", "warned"),
    [
        ("E1803615022211340s08793XPJ", True),  # Efí's "Pix recebido" example: 26 characters
        ("E12345678202009091221syhgfgufg", True),  # Efí's "Devolução" example: 30
        ("E1234567820200909122kkkkkkkkkkkk", False),  # 32 letters/digits, off the structure
        ("D12345678202009091221kkkkkkkkkkk", False),  # the schema is [a-zA-Z0-9]{32}, no more
        ("E12345678202009091221kkkkkkkkkk-", True),
    ],
)
def test_any_end_to_end_id_is_the_key_and_a_schema_deviation_a_warning(
    e2eid: str, warned: bool
) -> None:
    events = parse(delivery(pix(E2E_2, txid=TXID_2), pix(e2eid)))
    assert [(e.dedup_key, e.kind, e.error) for e in events] == [
        (E2E_2, Kind.PAYMENT_PAID, None),
        (e2eid, Kind.PAYMENT_PAID, None),
    ]
    assert not events[0].warnings
    rules = [w["rule"] for w in events[1].warnings]
    assert rules == (["pix.end_to_end_id_shape"] if warned else [])
    if warned:
        assert f"{len(e2eid)} characters" in events[1].warnings[0]["detail"]


@pytest.mark.parametrize("e2eid", ["", "   ", None, 12345678])
def test_an_item_without_a_usable_end_to_end_id_is_dead_alone(e2eid: Any) -> None:
    bad = {**pix(E2E_2, txid=TXID_2), "endToEndId": e2eid}
    good, dead = parse(delivery(pix(), bad))
    assert good.kind is Kind.PAYMENT_PAID and good.error is None
    assert dead.error is not None and "endToEndId" in dead.error and dead.object_id is None
    assert dead.dedup_key.startswith("porteiro:unparseable-item:")


@pytest.mark.parametrize("valor", ["110", "110.0", "1.005", "-1.00", "1e3", 110.0, "\uff11.00"])
def test_valor_must_be_a_two_decimal_string_or_the_item_is_dead(valor: Any) -> None:
    good, dead = parse(delivery(pix(E2E_2, txid=TXID_2), pix(valor=valor)))
    assert good.kind is Kind.PAYMENT_PAID and good.amount == 11000
    assert dead.error is not None and "valor" in dead.error


@pytest.mark.parametrize(
    "body",
    [b'{"pix": []}', b'{"pix": {}}', b'{"other": 1}', b'{"recs": 7}'],
)
def test_bodies_that_are_not_pix_callbacks_fail(body: bytes) -> None:
    with pytest.raises(ParseError):
        parse(body)


def test_an_item_that_is_no_object_is_dead_alone() -> None:
    dead, good = parse(json.dumps({"pix": [1, pix()]}).encode())
    assert dead.error == "pix[0]: pix[0] must be a JSON object"
    assert good.kind is Kind.PAYMENT_PAID and good.error is None


def test_amounts_convert_exactly() -> None:
    for valor, minor in [
        ("0.01", 1),
        ("0.29", 29),
        ("19.99", 1999),
        ("9999999999.99", 999999999999),
    ]:
        (event,) = parse(delivery(pix(valor=valor)))
        assert event.amount == minor


def test_devolucoes_are_events_of_the_same_payment() -> None:
    refunds = [
        refund(RTR_1, "10.00", "DEVOLVIDO"),
        refund(RTR_2, "5.00", "EM_PROCESSAMENTO"),
        refund("D12345678202009091223abcdf098767", "1.00", "NAO_REALIZADO"),
    ]
    paid, *rest = parse(delivery(pix(devolucoes=refunds)))
    assert [(e.dedup_key, e.kind, e.amount, e.object_id) for e in rest] == [
        (f"{RTR_1}:DEVOLVIDO", Kind.PAYMENT_PARTIALLY_REFUNDED, 1000, TXID_1),
        (f"{RTR_2}:EM_PROCESSAMENTO", Kind.OTHER, 500, TXID_1),
        ("D12345678202009091223abcdf098767:NAO_REALIZADO", Kind.OTHER, 100, TXID_1),
    ]
    assert "settlement_id" not in rest[0].data and rest[0].data["rtr_id"] == RTR_1
    assert paid.dedup_key == E2E_1  # the re-sent Pix item: a duplicate at the store


def test_refund_status_change_is_a_new_event() -> None:
    before = parse(delivery(pix(devolucoes=[refund(status="EM_PROCESSAMENTO")])))
    after = parse(delivery(pix(devolucoes=[refund(status="DEVOLVIDO")])))
    assert before[1].dedup_key != after[1].dedup_key
    assert before[0].dedup_key == after[0].dedup_key


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"rtrId": None}, "rtrId"),
        ({"rtrId": ""}, "rtrId"),
        ({"status": None}, "status"),
        ({"valor": "10"}, "valor"),
    ],
)
def test_a_malformed_devolucao_is_dead_alone(bad: dict[str, Any], problem: str) -> None:
    refunds = [{**refund(), **bad}, refund(RTR_2, "5.00", "DEVOLVIDO")]
    paid, dead, other = parse(delivery(pix(devolucoes=refunds)))
    assert paid.kind is Kind.PAYMENT_PAID and paid.error is None
    assert dead.error is not None and problem in dead.error
    assert dead.error.startswith("pix[0].devolucoes[0]:")
    assert other.dedup_key == f"{RTR_2}:DEVOLVIDO" and other.error is None


def test_a_devolucoes_of_another_type_is_one_dead_event() -> None:
    paid, dead = parse(delivery(pix(devolucoes="DEVOLVIDO")))  # type: ignore[arg-type]
    assert paid.kind is Kind.PAYMENT_PAID
    assert dead.error is not None and "devolucoes" in dead.error


@pytest.mark.parametrize("rtr_id", ["E12345678202009091221abcdf098765", "D1"])
def test_an_rtr_id_off_the_schema_is_read_with_a_warning(rtr_id: str) -> None:
    _paid, event = parse(delivery(pix(devolucoes=[refund(rtr_id)])))
    assert event.dedup_key == f"{rtr_id}:DEVOLVIDO" and event.error is None
    assert event.kind is Kind.PAYMENT_PARTIALLY_REFUNDED and event.amount == 1000
    rules = [w["rule"] for w in event.warnings]
    assert rules == ([] if len(rtr_id) == 32 else ["pix.rtr_id_shape"])


def test_the_bcb_example_with_devolucoes_as_one_object_is_read_as_a_list() -> None:
    item = {**pix(chave=None), "devolucoes": refund(status="EM_PROCESSAMENTO")}
    paid, event = parse(delivery(item, pix(E2E_2, txid=TXID_2)))[:2]
    assert event.dedup_key == f"{RTR_1}:EM_PROCESSAMENTO" and event.object_id == TXID_1
    rules = {w["rule"] for w in paid.warnings}
    assert rules == {"pix.devolucoes_not_array", "pix.chave_absent"}
    assert paid.kind is Kind.PAYMENT_PAID


def test_a_pix_to_someone_elses_chave_never_becomes_a_payment() -> None:
    events = parse(delivery(pix(chave="outra@chave.example", devolucoes=[refund()]), pix(E2E_2)))
    rejected, refund_event, ours = events
    assert rejected.kind is Kind.OTHER and rejected.data["rejected"] == "chave not ours"
    assert "settlement_id" not in rejected.data
    assert refund_event.kind is Kind.OTHER and refund_event.data["rejected"] == "chave not ours"
    assert ours.kind is Kind.PAYMENT_PAID


def test_a_pix_without_chave_is_paid_with_a_warning() -> None:
    (event,) = parse(delivery(pix(chave=None)))
    assert event.kind is Kind.PAYMENT_PAID and "rejected" not in event.data
    assert [w["rule"] for w in event.warnings] == ["pix.chave_absent"]
    (quiet,) = parse(delivery(pix(chave=None)), keys=[])  # no keys: nothing was skipped
    assert quiet.kind is Kind.PAYMENT_PAID and not quiet.warnings


def test_without_keys_the_chave_check_is_off() -> None:
    (event,) = parse(delivery(pix(chave="anything")), keys=[])
    assert event.kind is Kind.PAYMENT_PAID


# -- simulate -----------------------------------------------------------------------------------


def test_sign_produces_what_efi_sends_in_hmac_mode() -> None:
    adapter = provider(allow_ips=["127.0.0.1"])
    signed = adapter.sign(b'{"pix": []}', NOW)
    assert signed.query == f"hmac={TOKEN}&ignorar=/pix" and signed.path_suffix == ""
    adapter.verify(request(signed.body, query=signed.query, peer="127.0.0.1"), NOW)


def test_sign_in_proxy_mode_adds_the_proxy_headers() -> None:
    adapter = proxied(allowed_cns=["webhook-h.efipay.com.br"])
    signed = adapter.sign(b"{}", NOW)
    assert signed.path_suffix == "/pix"
    adapter.verify(request(peer="127.0.0.1", headers=list(signed.headers.items())), NOW)


def test_plain_mtls_cannot_be_simulated(pki: Pki) -> None:
    with pytest.raises(ConfigError, match="cannot be simulated"):
        mtls(pki).sign(b"{}", NOW)


def test_sample_lifecycle_is_realistic_and_converges() -> None:
    adapter = provider()
    rng = random.Random(3)
    for index in range(20):
        payment = SamplePayment(
            f"sim_ab12cd34_{index:05d}", f"order-{index}", 1000 + index, refund=True
        )
        bodies = adapter.sample_lifecycle(payment, NOW, rng)
        events = {e.dedup_key: e for body in bodies for e in adapter.parse(request(body))}
        txid = sample_txid(payment.object_id)
        assert 26 <= len(txid) <= 35 and txid.isalnum()
        paid = [e for e in events.values() if e.kind is Kind.PAYMENT_PAID]
        refunds = [e for e in events.values() if e.kind is Kind.PAYMENT_PARTIALLY_REFUNDED]
        assert len(paid) == 1 and paid[0].object_id == txid and paid[0].amount == payment.amount
        assert E2E_ID.fullmatch(paid[0].dedup_key)
        assert all(RTR_ID.fullmatch(e.data["rtr_id"]) for e in refunds)
        assert sum(e.amount or 0 for e in refunds) == payment.amount
        assert {e.object_id for e in events.values()} == {txid}


# -- confirmation against the fake PSP -------------------------------------------------------


def api_options(url: str) -> dict[str, Any]:
    return {"api_base_url": url, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}


@dataclass
class Psp:
    fake: FakePsp
    url: str
    http: httpx.AsyncClient


@pytest.fixture
async def psp() -> AsyncIterator[Psp]:
    fake = FakePsp(CLIENT_ID, CLIENT_SECRET)
    async with live_server(fake.app(), lifespan="off") as url, httpx.AsyncClient() as http:
        yield Psp(fake, url, http)


def confirming(psp: Psp, **options: Any) -> PixProvider:
    return provider(confirm=True, **api_options(psp.url), **options)


async def test_confirmed_pix_becomes_a_paid_event(psp: Psp) -> None:
    body = delivery(pix(E2E_1), pix(E2E_2, txid=TXID_2, valor="0.29"))
    psp.fake.add_delivery(body)
    adapter = confirming(psp)
    thin = adapter.parse(request(body))
    confirmed = [await adapter.enrich(event, psp.http) for event in thin]
    assert all(not e.thin and e.data["confirmed"] is True for e in confirmed)
    assert [(e.dedup_key, e.amount, e.object_id) for e in confirmed] == [
        (E2E_1, 11000, TXID_1),
        (E2E_2, 29, TXID_2),
    ]
    assert psp.fake.token_fetches == 1  # one token, cached, for both confirmations
    for _ in range(3):
        await adapter.enrich(thin[0], psp.http)
    assert psp.fake.token_fetches == 1
    assert [entry for entry in psp.fake.log if entry[0] == "GET"] == [
        ("GET", f"/v2/pix/{E2E_1}", 200),
        ("GET", f"/v2/pix/{E2E_2}", 200),
    ] + [("GET", f"/v2/pix/{E2E_1}", 200)] * 3


async def test_a_non_thin_event_is_not_confirmed_again(psp: Psp) -> None:
    event = ParsedEvent(dedup_key="x", kind=Kind.PAYMENT_PAID, type="pix", object_id="t")
    assert await confirming(psp).enrich(event, psp.http) is event
    assert psp.fake.log == []


async def test_pix_unknown_to_the_psp_is_retried(psp: Psp) -> None:
    (event,) = confirming(psp).parse(request(delivery(pix())))
    with pytest.raises(GatewayError, match="does not know"):
        await confirming(psp).enrich(event, psp.http)


@pytest.mark.parametrize(
    ("recorded", "reason"),
    [
        (pix(valor="1.10"), "valor 1.10 at the PSP, 110.00 in the webhook"),
        (pix(chave="outra@chave.example"), "chave not ours"),
        (pix(txid="outrotxid0000000000000000000"), "txid"),
    ],
)
async def test_mismatch_with_the_psp_is_never_paid(
    psp: Psp, recorded: dict[str, Any], reason: str
) -> None:
    psp.fake.add_pix(recorded)
    (event,) = confirming(psp).parse(request(delivery(pix())))
    with pytest.raises(NonRetryable, match=reason):
        await confirming(psp).enrich(event, psp.http)


async def test_psp_answering_for_another_pix_is_refused(psp: Psp) -> None:
    psp.fake.pix[E2E_1] = pix(E2E_2)
    (event,) = confirming(psp).parse(request(delivery(pix())))
    with pytest.raises(NonRetryable, match="answered for endToEndId"):
        await confirming(psp).enrich(event, psp.http)


async def test_token_is_refetched_once_when_revoked(psp: Psp) -> None:
    psp.fake.add_delivery(delivery(pix()))
    adapter = confirming(psp)
    (event,) = adapter.parse(request(delivery(pix())))
    await adapter.enrich(event, psp.http)
    psp.fake.revoke_tokens()
    await adapter.enrich(event, psp.http)
    assert psp.fake.token_fetches == 2


async def test_token_expiry_is_honoured(psp: Psp) -> None:
    psp.fake.token_seconds = 0  # expires at once: every call fetches a new one
    psp.fake.add_delivery(delivery(pix()))
    adapter = confirming(psp)
    (event,) = adapter.parse(request(delivery(pix())))
    for _ in range(3):
        await adapter.enrich(event, psp.http)
    assert psp.fake.token_fetches == 3


async def test_wrong_client_credentials_are_a_gateway_error(psp: Psp) -> None:
    adapter = provider(confirm=True, **{**api_options(psp.url), "client_secret": "wrong"})
    (event,) = adapter.parse(request(delivery(pix())))
    with pytest.raises(GatewayError, match="oauth/token: HTTP 401"):
        await adapter.enrich(event, psp.http)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("ATIVA", Kind.PAYMENT_CREATED),
        ("CONCLUIDA", Kind.PAYMENT_PAID),
        ("REMOVIDA_PELO_USUARIO_RECEBEDOR", Kind.PAYMENT_CANCELED),
        ("REMOVIDA_PELO_PSP", Kind.PAYMENT_CANCELED),
    ],
)
async def test_fetch_status_maps_the_cob(psp: Psp, status: str, kind: Kind) -> None:
    paid = [pix()] if status == "CONCLUIDA" else []
    psp.fake.cobs[TXID_1] = {
        "txid": TXID_1,
        "status": status,
        "chave": CHAVE,
        "valor": {"original": "110.00"},
        # Created a minute ago with an hour to pay: not expired.
        "calendario": {"criacao": _ago(minutes=1), "expiracao": 3600},
        "pix": paid,
    }
    event = await confirming(psp).fetch_status(TXID_1, psp.http)
    assert event is not None
    assert (event.dedup_key, event.kind, event.amount) == (
        f"reconcile:{TXID_1}:{status}",
        kind,
        11000,
    )
    assert "settlement_id" not in event.data
    assert event.data["pix"] == ([E2E_1] if paid else [])
    with pytest.raises(GatewayError):
        await confirming(psp).fetch_status("unknowncob0000000000000000000", psp.http)


def _ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat().replace("+00:00", "Z")


async def test_fetch_status_reports_an_unpaid_cob_past_its_expiry_as_expired(psp: Psp) -> None:
    psp.fake.cobs[TXID_1] = {
        "txid": TXID_1,
        "status": "ATIVA",  # BCB: an expired cob stays ATIVA; its calendar says it expired
        "chave": CHAVE,
        "valor": {"original": "110.00"},
        "calendario": {"criacao": _ago(hours=2), "expiracao": 3600},
        "pix": [],
    }
    event = await confirming(psp).fetch_status(TXID_1, psp.http)
    assert event is not None
    assert (event.dedup_key, event.kind) == (f"reconcile:{TXID_1}:expired", Kind.PAYMENT_EXPIRED)


async def test_psp_api_over_mtls_with_our_client_certificate(pki: Pki, tmp_path: Path) -> None:
    """Efí's API wants our own client certificate: the dedicated client presents it."""
    server_cert, server_key = issue(pki.efi, "pix.api.test", server=True).write(tmp_path, "srv")
    ours = issue(pki.efi, "loja-client")
    client_cert, client_key = ours.write(tmp_path, "client")
    fake = FakePsp(CLIENT_ID, CLIENT_SECRET)
    fake.add_delivery(delivery(pix()))
    tls = {
        "ssl_certfile": str(server_cert),
        "ssl_keyfile": str(server_key),
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": str(pki.ca_file),
    }
    async with live_server(fake.app(), lifespan="off", **tls) as url, httpx.AsyncClient() as http:
        options = {"client_cert_file": str(client_cert), "client_key_file": str(client_key)}
        adapter = provider(
            confirm=True, **api_options(url), api_ca_file=str(pki.ca_file), **options
        )
        (event,) = adapter.parse(request(delivery(pix())))
        try:
            assert (await adapter.enrich(event, http)).data["confirmed"] is True
        finally:
            await adapter.aclose()
        without = provider(confirm=True, **api_options(url), api_ca_file=str(pki.ca_file))
        try:
            with pytest.raises(GatewayError):  # no client certificate: the PSP refuses us
                await without.enrich(event, http)
        finally:
            await without.aclose()


# -- issue 21: bodies in the PSP's own shapes ---------------------------------------------------

E2E_EFI_SENT = "E090893562021030PIf25a7868"  # Efí's "Pix enviado" example: 26 characters


def sent(
    status: str = "REALIZADO", *, e2eid: str | None = E2E_EFI_SENT, **extra: Any
) -> dict[str, Any]:
    """Efí's "Pix enviado" / "Pix rejeitado" item (its webhooks page, tab Envio)."""
    item: dict[str, Any] = {
        "endToEndId": e2eid,
        "chave": CHAVE,
        "tipo": "SOLICITACAO",
        "status": status,
        "valor": "0.01",
        "horario": "2021-03-04T20:39:47.000Z",
        "gnExtras": {"idEnvio": "123ABC"},
    }
    item.update(extra)
    return {key: value for key, value in item.items() if value is not None or key == "horario"}


def test_a_pix_sent_is_recorded_and_never_money_received() -> None:
    (event,) = parse(delivery(sent()))
    assert event.kind is Kind.OTHER and event.type == "pix.enviado.REALIZADO"
    assert event.object_id is None and not event.actionable and event.error is None
    assert event.dedup_key == "pix.enviado:123ABC:REALIZADO" and event.amount == 1
    assert event.data["direction"] == "sent" and event.data["id_envio"] == "123ABC"
    assert "settlement_id" not in event.data


def test_a_pix_sent_and_refused_keeps_its_error_code_and_a_null_horario() -> None:
    erro = {"codigo": "AC03", "origem": "PSP do usuário recebedor", "motivo": "conta inválida"}
    item = sent("NAO_REALIZADO", horario=None, gnExtras={"idEnvio": "123ABC", "erro": erro})
    (event,) = parse(delivery(item))
    assert event.type == "pix.enviado.NAO_REALIZADO" and event.occurred_at is None
    assert event.data["erro_codigo"] == "AC03" and "motivo" not in event.data
    assert event.dedup_key != parse(delivery(sent()))[0].dedup_key  # a new fact


def test_a_pix_sent_is_never_thin_so_never_confirmed() -> None:
    (event,) = parse(delivery(sent()), confirm=True, **api_options("http://x"))
    assert not event.thin and event.kind is Kind.OTHER


def test_gn_extras_id_envio_alone_marks_a_pix_sent() -> None:
    item = {k: v for k, v in sent().items() if k != "tipo"}
    (event,) = parse(delivery(item))
    assert event.type == "pix.enviado.REALIZADO"


def test_a_pix_sent_whose_e2eid_collides_with_a_received_one_stays_apart() -> None:
    received, out = parse(delivery(pix(E2E_1), sent(e2eid=E2E_1)))
    assert received.kind is Kind.PAYMENT_PAID and received.dedup_key == E2E_1
    assert out.kind is Kind.OTHER and out.dedup_key != E2E_1


@pytest.mark.parametrize("tipo", ["RECEBIMENTO", "DEVOLUCAO", 7])
def test_a_direction_porteiro_does_not_know_is_dead_alone(tipo: Any) -> None:
    good, dead = parse(delivery(pix(E2E_2, txid=TXID_2), {**pix(), "tipo": tipo}))
    assert good.kind is Kind.PAYMENT_PAID
    assert dead.error is not None and "tipo" in dead.error


@pytest.mark.parametrize(
    ("horario", "expected", "rule"),
    [
        ("2020-09-09T20:15:00.358Z", datetime(2020, 9, 9, 20, 15, 0, 358000, tzinfo=UTC), None),
        ("2020-09-09T17:15:00-03:00", datetime(2020, 9, 9, 20, 15, tzinfo=UTC), None),
        ("2020-09-09T20:15:00", datetime(2020, 9, 9, 20, 15, tzinfo=UTC), "pix.horario_format"),
        ("09/09/2020 20:15", None, "pix.horario_format"),
        (1599682500, None, "pix.horario_format"),
    ],
)
def test_horario_is_ancillary(horario: Any, expected: datetime | None, rule: str | None) -> None:
    (event,) = parse(delivery({**pix(), "horario": horario}))
    assert event.kind is Kind.PAYMENT_PAID and event.occurred_at == expected
    assert [w["rule"] for w in event.warnings] == ([rule] if rule else [])


def test_warnings_carry_no_personal_data() -> None:
    item = {**pix(chave=None, e2eid="E1803615022211340s08793XPJ"), "horario": "x"}
    item["gnExtras"] = {"pagador": {"nome": "Fulana de Tal", "cpf": "12345678909"}}
    (event,) = parse(delivery(item))
    text = json.dumps(event.warnings)
    assert "12345678909" not in text and "Fulana" not in text
    assert {w["rule"] for w in event.warnings} == {
        "pix.end_to_end_id_shape", "pix.chave_absent", "pix.horario_format",
    }  # fmt: skip


REC = {
    "idRec": "RR1026652320240821lab77511abf",
    "status": "APROVADA",
    "atualizacao": [
        {"status": "CRIADA", "data": "2024-08-20T10:12:07.567Z"},
        {"status": "APROVADA", "data": "2024-08-22T12:43:53.337Z"},
    ],
    "ativacao": {"tipoJornada": "JORNADA_3", "dadosJornada": {"txid": "r9eFIFmwcZ55Nm4RsKZA"}},
}
COBR: dict[str, Any] = {
    "idRec": "RR1234567820240115abcdefghijk",
    "txid": "3136957d93134f2184b369e8f1c0729d",
    "status": "ATIVA",
    "atualizacao": [{"status": "ATIVA", "data": "2024-08-20T12:34:21.300Z"}],
    "tentativas": [
        {"dataLiquidacao": "2024-20-08", "tipo": "AGND", "status": "SOLICITADA",
         "endToEndId": "E12345678202406201221abcdef12345"},
    ],
}  # fmt: skip


def test_pix_automatico_rec_is_stored_not_interpreted() -> None:
    path = "/webhooks/efi/rec"
    (event,) = provider().parse(request(json.dumps({"recs": [REC]}).encode(), path=path))
    assert event.kind is Kind.OTHER and event.type == "pix.automatico.rec.APROVADA"
    assert event.object_id is None and not event.actionable
    assert event.dedup_key == f"pix.automatico.rec:{REC['idRec']}:APROVADA:2024-08-22T12:43:53.337Z"
    assert event.occurred_at == datetime(2024, 8, 22, 12, 43, 53, 337000, tzinfo=UTC)
    assert "not interpreted" in event.data["not_interpreted"]


def test_pix_automatico_cobr_keys_on_the_charge_its_status_and_attempt() -> None:
    (event,) = parse(json.dumps({"cobsr": [COBR]}).encode())
    assert event.type == "pix.automatico.cobr.ATIVA" and event.data["txid"] == COBR["txid"]
    assert event.data["id_rec"] == COBR["idRec"] and event.kind is Kind.OTHER
    settled = {**COBR, "tentativas": [{**COBR["tentativas"][0], "status": "LIQUIDADA"}]}
    (later,) = parse(json.dumps({"cobsr": [settled]}).encode())
    assert later.dedup_key != event.dedup_key
    (again,) = parse(json.dumps({"cobsr": [COBR]}).encode())
    assert again.dedup_key == event.dedup_key


def test_pix_automatico_item_without_its_id_is_dead_alone() -> None:
    bad = {k: v for k, v in REC.items() if k != "idRec"}
    good, dead = parse(json.dumps({"recs": [REC, bad]}).encode())
    assert good.error is None and dead.error is not None and "idRec" in dead.error


def test_pix_automatico_sent_as_one_object_is_read_with_a_warning() -> None:
    (event,) = parse(json.dumps({"recs": REC}).encode())
    assert [w["rule"] for w in event.warnings] == ["pix.automatico_not_array"]


@pytest.mark.parametrize(
    ("query", "path"),
    [
        (f"hmac={TOKEN}&ignorar=/rec", "/webhooks/efi"),
        (f"hmac={TOKEN}/rec", "/webhooks/efi"),
        (f"hmac={TOKEN}%2Fcobr", "/webhooks/efi"),
        (f"hmac={TOKEN}", "/webhooks/efi/cobr"),
    ],
)
def test_hmac_secret_is_accepted_with_the_pix_automatico_suffixes(query: str, path: str) -> None:
    provider().verify(request(query=query, path=path), NOW)


def test_hmac_with_another_suffix_is_still_refused() -> None:
    with pytest.raises(ForbiddenPeer):
        provider().verify(request(query=f"hmac={TOKEN}/boleto"), NOW)


def test_sign_appends_the_route_of_the_body() -> None:
    adapter = provider(allow_ips=["127.0.0.1"])
    assert adapter.sign(b'{"recs": []}', NOW).query.endswith("&ignorar=/rec")
    assert adapter.sign(b'{"cobsr": []}', NOW).query.endswith("&ignorar=/cobr")
    assert proxied().sign(b'{"cobsr": []}', NOW).path_suffix == "/cobr"


async def test_a_pix_the_psp_records_without_chave_is_confirmed(psp: Psp) -> None:
    body = delivery(pix(chave=None))
    psp.fake.add_delivery(body)
    adapter = confirming(psp)
    (thin,) = adapter.parse(request(body))
    event = await adapter.enrich(thin, psp.http)
    assert event.kind is Kind.PAYMENT_PAID and event.data["confirmed"] is True
    assert [w["rule"] for w in event.warnings] == ["pix.chave_absent"]  # the webhook's, kept


async def test_a_foreign_chave_at_the_psp_still_refuses_confirmation(psp: Psp) -> None:
    body = delivery(pix(chave=None))
    psp.fake.add_delivery(delivery(pix(chave="outra@chave.example")))
    adapter = confirming(psp)
    (thin,) = adapter.parse(request(body))
    with pytest.raises(NonRetryable, match="chave not ours"):
        await adapter.enrich(thin, psp.http)


async def test_a_psp_answer_naming_a_pix_sent_is_never_confirmed(psp: Psp) -> None:
    body = delivery(pix())
    psp.fake.add_pix({**pix(), "tipo": "SOLICITACAO"})
    adapter = confirming(psp)
    (thin,) = adapter.parse(request(body))
    with pytest.raises(NonRetryable, match="Pix sent"):
        await adapter.enrich(thin, psp.http)


async def test_psp_answers_are_read_past_ancillary_deviations(psp: Psp) -> None:
    efi_id = "E1803615022211340s08793XPJ"
    body = delivery(pix(efi_id))
    psp.fake.add_pix({**pix(efi_id), "horario": "2020-09-09T20:15:00"})
    adapter = confirming(psp)
    (thin,) = adapter.parse(request(body))
    event = await adapter.enrich(thin, psp.http)
    assert event.dedup_key == efi_id and event.data["confirmed"] is True
    assert {w["rule"] for w in event.warnings} == {"pix.end_to_end_id_shape", "pix.horario_format"}


async def test_window_list_reads_past_one_bad_item(psp: Psp) -> None:
    psp.fake.listed = [
        {**pix(E2E_1), "horario": "2026-03-01T11:00:00Z"},
        {**pix(E2E_2, txid=TXID_2), "valor": "1"},  # unreadable: skipped, logged
        "not an object",
        {**pix("E1803615022211340s08793XPJ", txid=None), "horario": "2026-03-01T11:30:00",
         "devolucoes": {**refund(), "horario": {"solicitacao": "2026-03-01T11:40:00Z"}}},
    ]  # fmt: skip
    adapter = confirming(psp)
    since, until = NOW - timedelta(hours=2), NOW
    events = [event async for event in adapter.list_window(since, until, psp.http)]
    assert [(e.dedup_key, e.kind) for e in events] == [
        (E2E_1, Kind.PAYMENT_PAID),
        ("E1803615022211340s08793XPJ", Kind.PAYMENT_PAID),
        (f"{RTR_1}:DEVOLVIDO", Kind.PAYMENT_PARTIALLY_REFUNDED),
    ]
    assert all(e.data["confirmed"] is True and e.error is None for e in events)
    assert {w["rule"] for w in events[1].warnings} >= {
        "pix.end_to_end_id_shape", "pix.horario_format", "pix.devolucoes_not_array",
    }  # fmt: skip


async def test_fetch_status_reads_past_a_cob_timestamp_it_cannot_parse(psp: Psp) -> None:
    psp.fake.cobs[TXID_1] = {
        "txid": TXID_1,
        "status": "CONCLUIDA",
        "chave": CHAVE,
        "valor": {"original": "110.00"},
        "calendario": {"criacao": "01/03/2026 09:00", "expiracao": 3600},
        "pix": [{**pix(), "horario": "2026-03-01T09:05:00"}],  # no offset: read as UTC
    }
    event = await confirming(psp).fetch_status(TXID_1, psp.http)
    assert event is not None and event.kind is Kind.PAYMENT_PAID and event.amount == 11000
    assert event.occurred_at == datetime(2026, 3, 1, 9, 5, tzinfo=UTC)
    assert [w["rule"] for w in event.warnings] == ["pix.horario_format", "pix.horario_format"]
