"""Who sent a Pix callback: mTLS client identity, trusted proxies, Efí's skip-mTLS secret.

The BCB standard has no body signature: the PSP authenticates with a TLS client
certificate. Porteiro learns that identity in one of two ways:
- it terminated TLS itself (`porteiro serve` with TLS, see porteiro.http.tls): the receiver
  fills `InboundRequest.client_cert_der`, and the leaf is re-verified here against THIS
  source's `mtls_ca_file`, so each source accepts only its own PSP's chain even though the
  server's handshake trusts the union of every source's CAs;
- a TLS-terminating proxy verified it and says so in headers (`SUCCESS` + subject, and
  optionally the URL-encoded PEM, as nginx's `$ssl_client_escaped_cert`), honoured only
  when the TCP peer is one of `trusted_proxies`.

Efí's skip-mTLS mode replaces all that with a static secret in the `hmac` query
parameter plus a source-IP allow-list. Efí appends "/pix" (Pix Automático: "/rec",
"/cobr") to the registered URL as a plain string, so the secret may arrive as
`hmac=SECRET/pix` (URL registered without `&ignorar=`), or untouched with `ignorar=/pix`
or a `/pix` path: all are accepted, for each of the three suffixes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qsl, unquote

from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from porteiro.errors import ConfigError, ForbiddenPeer, MalformedHeader, MissingHeader
from porteiro.model import InboundRequest
from porteiro.providers import signing

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
PIX_SUFFIX = "/pix"
# What a PSP appends to the registered URL: /pix (Pix), /rec and /cobr (Pix Automático).
CALLBACK_SUFFIXES = (PIX_SUFFIX, "/rec", "/cobr")
EFI_WEBHOOK_IPS = ("34.193.116.226",)  # Efí staff, 2025-01-17 (docs/gateways/pix.md)
_CN = re.compile(r"(?:^|[,/+])\s*CN=((?:[^,/+\\]|\\.)*)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ProxyHeaders:
    """Headers a trusted TLS-terminating proxy sets (and must overwrite from clients)."""

    verify: str = "x-ssl-client-verify"  # nginx $ssl_client_verify: "SUCCESS"
    subject: str = "x-ssl-client-s-dn"  # nginx $ssl_client_s_dn (RFC 2253)
    cert: str = "x-ssl-client-cert"  # nginx $ssl_client_escaped_cert (optional)
    client_ip: str = "x-forwarded-for"  # the rightmost entry is what the proxy saw


@dataclass(frozen=True, slots=True)
class PixAuth:
    """The authentication policy of one Pix source (see the module docstring)."""

    hmac_tokens: Sequence[bytes] = ()
    allow_ips: Sequence[Network] = ()
    trusted_proxies: Sequence[Network] = ()
    ca_certs: Sequence[x509.Certificate] = ()
    allowed_cns: frozenset[str] = frozenset()
    headers: ProxyHeaders = field(default_factory=ProxyHeaders)

    @property
    def hmac_mode(self) -> bool:
        return bool(self.hmac_tokens)

    def verify(self, request: InboundRequest, now: datetime) -> None:
        if self.hmac_mode:
            self._check_hmac(request.query)
        else:
            self._check_identity(request, now)
        if self.allow_ips:
            address = self.client_ip(request)
            if address is None or not _within(address, self.allow_ips):
                raise ForbiddenPeer(f"client address {address} is not in allow_ips")

    def client_ip(
        self, request: InboundRequest
    ) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The peer address, or what a trusted proxy says the client's address was."""
        peer = _address(request.peer)
        if peer is None or not self._from_proxy(peer):
            return peer
        forwarded = request.header(self.headers.client_ip)
        if not forwarded:
            return peer
        claimed = _address(forwarded.split(",")[-1].strip())
        if claimed is None:
            raise MalformedHeader(f"{self.headers.client_ip} is not an IP address")
        return claimed

    def _check_hmac(self, query: str) -> None:
        given = [value for key, value in parse_qsl(query, keep_blank_values=True) if key == "hmac"]
        if not given:
            raise MissingHeader("the hmac query parameter is missing")
        if len(given) > 1:
            raise MalformedHeader("the hmac query parameter appears more than once")
        value = given[0]
        candidates = {value, *(value.removesuffix(suffix) for suffix in CALLBACK_SUFFIXES)}
        # parse_qsl decoded the percent-escapes as UTF-8, as the token is encoded.
        encoded = [item.encode("utf-8", "surrogatepass") for item in sorted(candidates)]
        if not signing.any_match(self.hmac_tokens, encoded):
            raise ForbiddenPeer("the hmac query parameter does not match hmac_token")

    def _check_identity(self, request: InboundRequest, now: datetime) -> None:
        der = request.client_cert_der
        if der is not None:
            try:
                cert = x509.load_der_x509_certificate(der)
            except ValueError:
                raise ForbiddenPeer("the TLS client certificate is not valid DER") from None
            self._check_cert(cert, now)
            return
        if request.client_cert_subject is not None and self.ca_certs:
            # A server that reports only a name cannot be checked against our own CAs.
            raise ForbiddenPeer("the TLS server passed no client certificate to re-verify")
        peer = _address(request.peer)
        if peer is not None and self._from_proxy(peer):
            self._check_proxy_headers(request, now)
            return
        raise ForbiddenPeer("no verified TLS client certificate (mTLS is required)")

    def _check_proxy_headers(self, request: InboundRequest, now: datetime) -> None:
        verdict = request.header(self.headers.verify)
        if verdict is None:
            raise ForbiddenPeer("the proxy verified no client certificate")
        if verdict.strip().upper() != "SUCCESS":
            raise ForbiddenPeer(f"the proxy's client certificate check failed: {verdict[:64]}")
        pem = request.header(self.headers.cert)
        if pem and self.ca_certs:
            try:
                cert = x509.load_pem_x509_certificate(unquote(pem).encode("latin-1"))
            except (ValueError, UnicodeEncodeError):
                raise MalformedHeader(f"{self.headers.cert} is not a PEM certificate") from None
            self._check_cert(cert, now)
            return
        subject = request.header(self.headers.subject)
        if not subject:
            raise ForbiddenPeer(f"the proxy passed no client subject ({self.headers.subject})")
        self._check_cns(set(_CN.findall(subject)), subject)

    def _check_cert(self, cert: x509.Certificate, now: datetime) -> None:
        if not self.ca_certs:
            raise ForbiddenPeer("no mtls_ca_file to verify the client certificate against")
        # WebPKI rules, except that a client leaf needs no SAN or AKI: PSP webhook
        # certificates are named by CN (Efí: CN=webhook.efipay.com.br).
        leaf_policy = (
            ExtensionPolicy.webpki_defaults_ee()
            .may_be_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
            .may_be_present(x509.AuthorityKeyIdentifier, Criticality.AGNOSTIC, None)
        )
        verifier = (
            PolicyBuilder()
            .store(Store(list(self.ca_certs)))
            .time(now)
            .extension_policies(
                ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=leaf_policy
            )
        )
        try:
            verifier.build_client_verifier().verify(cert, [])
        except VerificationError as exc:
            raise ForbiddenPeer(
                f"client certificate not issued under mtls_ca_file: {exc}"
            ) from None
        names = {str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)}
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            names.update(san.value.get_values_for_type(x509.DNSName))
        except x509.ExtensionNotFound:
            pass
        self._check_cns(names, cert.subject.rfc4514_string())

    def _check_cns(self, names: set[str], subject: str) -> None:
        if self.allowed_cns and not names & self.allowed_cns:
            raise ForbiddenPeer(f"client certificate {subject[:200]!r} is not in allowed_cns")

    def _from_proxy(self, peer: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return _within(peer, self.trusted_proxies)


def networks(values: Sequence[str], *, what: str) -> tuple[Network, ...]:
    """IPs or CIDRs from the configuration."""
    try:
        return tuple(ipaddress.ip_network(value.strip(), strict=False) for value in values)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def load_ca_file(path: str, *, what: str) -> tuple[x509.Certificate, ...]:
    try:
        certs = x509.load_pem_x509_certificates(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{what}: cannot load {path}: {exc}") from None
    return tuple(certs)


def _address(value: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not value:
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    # An IPv4 client on a dual-stack socket shows up as ::ffff:a.b.c.d.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _within(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, allowed: Sequence[Network]
) -> bool:
    return any(address.version == net.version and address in net for net in allowed)
