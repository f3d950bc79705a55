"""A small fake of a PSP's API Pix (Efí-like): OAuth2 token, `GET /v2/pix/{e2eid}`,
`GET /v2/cob/{txid}`, `GET /v2/pix?inicio&fim` (one page: every Pix recorded, or `listed`
as given, to serve items a real PSP's list might carry).

Backed by in-memory dicts the test fills (`add_delivery` registers every Pix item of a
callback body, as the PSP would have recorded it). The token endpoint checks HTTP basic
auth and the grant type; the API checks the bearer token and answers errors shaped like
the BCB's problem details. Every request is logged as (method, path, status).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

ERROR_BASE = "https://pix.bcb.gov.br/api/v2/error/"


@dataclass
class FakePsp:
    client_id: str
    client_secret: str
    token_seconds: int = 3600
    pix: dict[str, dict[str, Any]] = field(default_factory=dict)
    cobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)
    token_fetches: int = 0
    log: list[tuple[str, str, int]] = field(default_factory=list)
    listed: list[Any] | None = None

    def add_delivery(self, body: bytes) -> None:
        """Record every Pix of a callback body (refunds merged by rtrId)."""
        for item in json.loads(body)["pix"]:
            self.add_pix(item)

    def add_pix(self, item: Mapping[str, Any]) -> None:
        known = self.pix.setdefault(item["endToEndId"], {**item, "devolucoes": []})
        refunds = {refund["rtrId"]: refund for refund in known["devolucoes"]}
        for refund in item.get("devolucoes") or []:
            refunds[refund["rtrId"]] = refund
        known["devolucoes"] = list(refunds.values())

    def revoke_tokens(self) -> None:
        self.tokens.clear()

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/oauth/token", self._token, methods=["POST"]),
                Route("/v2/pix", self._list_pix, methods=["GET"]),
                Route("/v2/pix/{e2eid}", self._get_pix, methods=["GET"]),
                Route("/v2/cob/{txid}", self._get_cob, methods=["GET"]),
            ]
        )

    async def _token(self, request: Request) -> Response:
        expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        if request.headers.get("authorization") != f"Basic {expected}":
            return self._logged(request, _problem(401, "AcessoNegado", "invalid client"))
        body = json.loads(await request.body() or b"{}")
        if body.get("grant_type") != "client_credentials":
            return self._logged(request, _problem(400, "RequisicaoInvalida", "grant_type"))
        token = secrets.token_urlsafe(16)
        self.tokens.add(token)
        self.token_fetches += 1
        answer = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.token_seconds,
            "scope": "cob.read pix.read webhook.read",
        }
        return self._logged(request, JSONResponse(answer))

    async def _get_pix(self, request: Request) -> Response:
        return self._lookup(request, self.pix, request.path_params["e2eid"], "PixNaoEncontrado")

    async def _list_pix(self, request: Request) -> Response:
        header = request.headers.get("authorization", "")
        if header.removeprefix("Bearer ") not in self.tokens:
            return self._logged(request, _problem(401, "AcessoNegado", "invalid token"))
        items = list(self.pix.values()) if self.listed is None else self.listed
        params = request.query_params
        paginacao = {"paginaAtual": 0, "itensPorPagina": 1000, "quantidadeDePaginas": 1}
        answer = {
            "parametros": {
                "inicio": params.get("inicio"),
                "fim": params.get("fim"),
                "paginacao": paginacao,
            },
            "pix": items,
        }
        return self._logged(request, JSONResponse(answer))

    async def _get_cob(self, request: Request) -> Response:
        return self._lookup(request, self.cobs, request.path_params["txid"], "Cobranca")

    def _lookup(
        self, request: Request, table: Mapping[str, Any], key: str, missing: str
    ) -> Response:
        header = request.headers.get("authorization", "")
        if header.removeprefix("Bearer ") not in self.tokens:
            return self._logged(request, _problem(401, "AcessoNegado", "invalid token"))
        if key not in table:
            return self._logged(request, _problem(404, missing, f"{key} not found"))
        return self._logged(request, JSONResponse(table[key]))

    def _logged(self, request: Request, response: Response) -> Response:
        self.log.append((request.method, request.url.path, response.status_code))
        return response


def _problem(status: int, kind: str, detail: str) -> JSONResponse:
    body = {"type": ERROR_BASE + kind, "title": kind, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status)


# -- certificates: the PSP's CA and its webhook client certificate ------------------------


@dataclass
class Issued:
    """A certificate and its private key, PEM/DER on demand."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """`name.crt` and `name.key` in `directory`."""
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        cert_path.write_bytes(self.pem)
        key_path.write_bytes(
            self.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_path, key_path


def _name(cn: str, org: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "BR"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def make_ca(cn: str, org: str = "Efi S.A. - Instituicao de Pagamento") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    name = _name(cn, org)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    ca: Issued, cn: str, *, server: bool = False, org: str = "Efi S.A.", dns: tuple[str, ...] = ()
) -> Issued:
    """A leaf under `ca`: a client certificate, or a server one for `dns` names."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in (dns or (cn,))]
    if server:
        names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=90))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), False
        )
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(cert, key)
