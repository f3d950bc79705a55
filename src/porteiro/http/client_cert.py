"""The verified TLS client certificate of a request, as the ASGI TLS extension carries it
(Pix sources authenticate their PSP by mutual TLS)."""

from __future__ import annotations

import ssl
from typing import Any

from starlette.types import Scope


def client_cert_subject(scope: Scope) -> str | None:
    """The verified TLS client certificate subject, if the server checked one.

    Reads the ASGI TLS extension (`client_cert_name`, only when `client_cert_error` is
    empty), which `porteiro serve` fills when it terminates TLS (porteiro.http.tls). A trusted
    proxy's verified-client headers are not read here: which proxies are trusted is a
    per-source setting, so the adapter (providers/pix/auth.py) honours them itself.
    """
    tls = _verified_tls(scope)
    name = tls.get("client_cert_name") if tls else None
    return name if isinstance(name, str) and name else None


def client_cert_der(scope: Scope) -> bytes | None:
    """The verified client certificate (DER), so an adapter can re-check it against its
    own CA bundle: porteiro.http.tls's `client_cert_der`, else the first PEM of the standard
    `client_cert_chain` that other ASGI servers fill."""
    tls = _verified_tls(scope)
    if not tls:
        return None
    der = tls.get("client_cert_der")
    if isinstance(der, bytes) and der:
        return der
    chain = tls.get("client_cert_chain")
    if isinstance(chain, list | tuple) and chain and isinstance(chain[0], str):
        try:
            return ssl.PEM_cert_to_DER_cert(chain[0])
        except ValueError:
            return None
    return None


def _verified_tls(scope: Scope) -> dict[str, Any] | None:
    tls = (scope.get("extensions") or {}).get("tls")
    if not isinstance(tls, dict) or tls.get("client_cert_error"):
        return None
    return tls
