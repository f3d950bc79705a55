"""Pix mTLS with Porteiro terminating TLS itself: real certificates (made here with
`cryptography`), a real uvicorn with porteiro.http.tls's protocol class, real httpx clients.

Two Pix sources (Efí and another PSP) share the port with a Standard Webhooks source.
The handshake trusts the union of the sources' CAs (CERT_OPTIONAL); each Pix source then
re-verifies the client certificate against its own CA file.
"""

from __future__ import annotations

import json
import signal
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from porteiro.config import Config, ServerConfig, SourceConfig
from porteiro.config.load import load_config
from porteiro.http.app import create_app
from porteiro.http.tls import MINIMUM_VERSION, uvicorn_options
from porteiro.replay import matching_events
from porteiro.runtime import Runtime
from porteiro.store.base import EventFilter
from tests.fakes.pix import Issued, issue, make_ca
from tests.support.events import event_body
from tests.support.processes import porteiro, wait_healthy
from tests.support.servers import free_port, live_server
from tests.support.signing import SECRET, standard_headers

CHAVE = "pix@loja.example"
E2E = "E12345678202009091221kkkkkkkkkkk"


@dataclass
class Pki:
    directory: Path
    server_ca: Issued
    efi_ca: Path
    other_ca: Path
    efi_client: tuple[Path, Path]
    other_client: tuple[Path, Path]
    stranger_client: tuple[Path, Path]
    server: tuple[Path, Path]

    def client(
        self, cert: tuple[Path, Path] | None = None, *, tls_1_1: bool = False
    ) -> httpx.AsyncClient:
        context = ssl.create_default_context(cafile=str(self.directory / "server-ca.crt"))
        if cert is not None:
            context.load_cert_chain(str(cert[0]), str(cert[1]))
        if tls_1_1:  # a client that can still speak TLS 1.0/1.1 (security level 0)
            context.minimum_version = ssl.TLSVersion.TLSv1
            context.maximum_version = ssl.TLSVersion.TLSv1_1
            context.set_ciphers("DEFAULT:@SECLEVEL=0")
        return httpx.AsyncClient(verify=context, timeout=5)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("mtls")
    server_ca = make_ca("Loja Server CA", org="Loja")
    server_ca.write(directory, "server-ca")
    efi, other, stranger = make_ca("Efi Pay Root CA"), make_ca("Other PSP CA"), make_ca("Nobody")
    efi_ca, _ = efi.write(directory, "efi-ca")
    other_ca, _ = other.write(directory, "other-ca")
    return Pki(
        directory=directory,
        server_ca=server_ca,
        efi_ca=efi_ca,
        other_ca=other_ca,
        efi_client=issue(efi, "webhook.efipay.com.br").write(directory, "efi-client"),
        other_client=issue(other, "webhook.otherpsp.example").write(directory, "other-client"),
        stranger_client=issue(stranger, "webhook.efipay.com.br").write(directory, "stranger"),
        server=issue(server_ca, "localhost", server=True, dns=("localhost",)).write(
            directory, "server"
        ),
    )


def pix_source(name: str, ca_file: Path, cn: str) -> SourceConfig:
    options = {
        "keys": [CHAVE],
        "mtls_ca_file": str(ca_file),
        "allowed_cns": [cn],
        "confirm": False,
    }
    return SourceConfig(name=name, provider="pix", options=options)


def make_config(pki: Pki, store_url: str) -> Config:
    cert, key = pki.server
    return Config(
        store_url=store_url,
        sources={
            "efi": pix_source("efi", pki.efi_ca, "webhook.efipay.com.br"),
            "other": pix_source("other", pki.other_ca, "webhook.otherpsp.example"),
            "std": SourceConfig(name="std", provider="standard", secrets=(SECRET,)),
        },
        server=ServerConfig(tls_cert_file=str(cert), tls_key_file=str(key)),
    )


@dataclass
class Served:
    url: str
    runtime: Runtime


@pytest.fixture
async def served(pki: Pki, sqlite_url: str) -> AsyncIterator[Served]:
    config = make_config(pki, sqlite_url)
    runtime = Runtime.build(config)
    async with live_server(create_app(runtime, migrate=True), **uvicorn_options(config)) as url:
        yield Served(url, runtime)


def pix_body(e2eid: str = E2E) -> bytes:
    item = {
        "endToEndId": e2eid,
        "txid": "c3e0e7a4e7f1469a9f782d3d4999343c",
        "chave": CHAVE,
        "valor": "110.00",
        "horario": "2020-09-09T20:15:00.358Z",
    }
    return json.dumps({"pix": [item]}).encode()


async def test_our_psps_certificate_is_accepted(pki: Pki, served: Served) -> None:
    async with pki.client(pki.efi_client) as client:
        response = await client.post(f"{served.url}/webhooks/efi/pix", content=pix_body())
    assert response.status_code == 200
    (event,) = await matching_events(served.runtime.store, EventFilter(source="efi"))
    assert event.dedup_key == E2E


async def test_no_certificate_is_refused_by_the_pix_source_only(pki: Pki, served: Served) -> None:
    async with pki.client() as client:
        # Efí's registration probe: the handshake completes, the app refuses.
        refused = await client.post(f"{served.url}/webhooks/efi/pix", content=pix_body())
        body = event_body("evt_no_cert_1")
        other = await client.post(
            f"{served.url}/webhooks/std",
            content=body,
            headers=standard_headers(body, "evt_no_cert_1"),
        )
        health = await client.get(f"{served.url}/healthz")
    assert refused.status_code == 401 and refused.json() == {"error": "forbidden_peer"}
    assert other.status_code == 200 and health.status_code == 200
    assert await matching_events(served.runtime.store, EventFilter(source="efi")) == []


async def test_another_psps_certificate_passes_the_handshake_but_not_this_source(
    pki: Pki, served: Served
) -> None:
    async with pki.client(pki.other_client) as client:
        wrong = await client.post(f"{served.url}/webhooks/efi/pix", content=pix_body())
        right = await client.post(f"{served.url}/webhooks/other/pix", content=pix_body())
    assert wrong.status_code == 401
    assert right.status_code == 200
    assert await matching_events(served.runtime.store, EventFilter(source="efi")) == []


async def test_certificate_of_an_unknown_ca_fails_the_handshake(pki: Pki, served: Served) -> None:
    async with pki.client(pki.stranger_client) as client:
        with pytest.raises(httpx.TransportError):
            await client.post(f"{served.url}/webhooks/efi/pix", content=pix_body())
    assert await matching_events(served.runtime.store, EventFilter(source="efi")) == []


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
async def test_tls_below_1_2_is_refused(pki: Pki, served: Served) -> None:
    async with pki.client(pki.efi_client, tls_1_1=True) as client:
        with pytest.raises(httpx.TransportError):
            await client.get(f"{served.url}/healthz")
    async with pki.client(pki.efi_client) as client:
        assert (await client.get(f"{served.url}/healthz")).status_code == 200


def test_server_context_requires_tls_1_2_and_trusts_every_sources_ca(pki: Pki) -> None:
    options = uvicorn_options(make_config(pki, "sqlite:///unused.db"))
    assert options["ssl_cert_reqs"] == ssl.CERT_OPTIONAL
    cert, key = pki.server

    def default() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        return context

    context = options["ssl_context_factory"](None, default)
    assert context.minimum_version == MINIMUM_VERSION == ssl.TLSVersion.TLSv1_2
    subjects = {dict(x[0] for x in ca["subject"])["commonName"] for ca in context.get_ca_certs()}
    assert subjects == {"Efi Pay Root CA", "Other PSP CA"}
    assert uvicorn_options(Config()) == {}


# -- the real `porteiro serve` --------------------------------------------------------------


def write_toml(pki: Pki, directory: Path) -> Path:
    cert, key = pki.server
    path = directory / "porteiro.toml"
    path.write_text(
        f"""
[store]
url = "sqlite:///{directory / "porteiro.db"}"

[server]
tls_cert_file = "{cert}"
tls_key_file = "{key}"

[sources.efi]
provider = "pix"
keys = ["{CHAVE}"]
mtls_ca_file = "{pki.efi_ca}"
allowed_cns = ["webhook.efipay.com.br"]
confirm = false
"""
    )
    return path


# Two receivers pickle uvicorn's Config, TLS protocol and context factory included, to
# their processes (a class made inside a function once failed there).
@pytest.fixture(params=[1, 2], ids=["one-receiver", "two-receivers"])
def serve_process(pki: Pki, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    config = write_toml(pki, tmp_path)
    assert load_config(config, {}).server.tls_cert_file == str(pki.server[0])
    port = free_port()
    proc = porteiro(
        config, "serve", "--port", str(port), "--receivers", str(request.param),
        log=tmp_path / "serve.log",
    )  # fmt: skip
    url = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(pki.directory / "server-ca.crt"))
    try:
        wait_healthy(proc, url, verify=context)
        yield url
    finally:
        proc.kill(signal.SIGTERM)
    assert f"porteiro listening on https://127.0.0.1:{port}" in (tmp_path / "serve.log").read_text()


@pytest.mark.slow
async def test_porteiro_serve_terminates_mtls(pki: Pki, serve_process: str) -> None:
    async with pki.client(pki.efi_client) as client:
        ok = await client.post(f"{serve_process}/webhooks/efi/pix", content=pix_body())
    async with pki.client() as client:
        refused = await client.post(f"{serve_process}/webhooks/efi", content=pix_body())
    assert (ok.status_code, refused.status_code) == (200, 401)
