"""Server-side TLS for `porteiro serve`, with the client certificate handed to the app.

Pix PSPs authenticate with a TLS client certificate (mTLS). uvicorn can ask for one, but
does not tell the ASGI app which certificate came, so `TlsHttpToolsProtocol` reads it
from the SSL object once the handshake is done and adds the ASGI TLS extension to every
request scope of that connection:

    scope["extensions"]["tls"] = {"client_cert_name": <RFC 4514 subject>,
                                  "client_cert_chain": [<PEM leaf>],
                                  "client_cert_der": <DER leaf>, "client_cert_error": None,
                                  "tls_version": 0x0303 | 0x0304, ...}

The handshake uses CERT_OPTIONAL: a client without a certificate still connects (other
sources on the same port, and Efí's registration probe, which must then be refused by
the app with a 401), while a presented certificate must chain to the union of the
configured CAs (`[server] tls_client_ca_file` plus every source's `mtls_ca_file`) or the
handshake fails. Each Pix source then re-verifies the leaf against its own CA file.
TLS 1.2 is the minimum.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from uvicorn.config import Config as UvicornConfig

from porteiro.config import Config
from porteiro.errors import ConfigError
from porteiro.http.limits import BoundedHttpToolsProtocol

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2
_VERSION_CODES = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}

ASGIApp = Callable[..., Any]


class _WithTls:
    """The app, with one connection's TLS facts added to each of its request scopes."""

    __slots__ = ("app", "tls")

    def __init__(self, app: ASGIApp, tls: dict[str, Any]) -> None:
        self.app = app
        self.tls = tls

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            extensions = dict(scope.get("extensions") or {})
            extensions["tls"] = dict(self.tls)
            scope = {**scope, "extensions": extensions}
        await self.app(scope, receive, send)


def tls_extension(ssl_object: ssl.SSLObject | ssl.SSLSocket) -> dict[str, Any]:
    """The ASGI TLS extension for one established connection."""
    der = ssl_object.getpeercert(binary_form=True)
    name = None
    chain: list[str] = []
    if der:
        name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
        chain = [ssl.DER_cert_to_PEM_cert(der)]
    version = ssl_object.version()
    return {
        "server_cert": None,
        "client_cert_chain": chain,
        "client_cert_name": name,
        "client_cert_error": None,  # a presented certificate that fails never gets here
        "client_cert_der": der or None,
        "tls_version": _VERSION_CODES.get(version or ""),
        "cipher_suite": None,
    }


def _wrap(app: ASGIApp, transport: asyncio.BaseTransport) -> ASGIApp | None:
    """The app wrapped for this connection; None if the connection must be dropped."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return app
    if ssl_object.version() not in _VERSION_CODES:  # belt and braces over minimum_version
        transport.close()
        return None
    return _WithTls(app, tls_extension(ssl_object))


class TlsHttpToolsProtocol(BoundedHttpToolsProtocol):
    """The bounded httptools protocol (porteiro.http.limits), with each connection's
    TLS facts handed to the app. A module-level class, not one made per call: `serve
    --receivers N` pickles uvicorn's Config, protocol class included, to its processes."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        wrapped = _wrap(self.app, transport)
        if wrapped is not None:
            self.app = wrapped


def client_ca_files(config: Config) -> list[str]:
    """Every CA bundle a client certificate may chain to: the server's, then each
    source's `mtls_ca_file`."""
    files = [config.server.tls_client_ca_file] if config.server.tls_client_ca_file else []
    for source in config.sources.values():
        path = source.options.get("mtls_ca_file")
        if isinstance(path, str) and path and path not in files:
            files.append(path)
    return files


@dataclass(frozen=True)
class _ContextFactory:
    """uvicorn's default context, at TLS 1.2 or above and trusting every client CA. A
    picklable object, as the protocol class, for `serve --receivers N`."""

    ca_files: tuple[str, ...]

    def __call__(
        self, settings: UvicornConfig, default: Callable[[], ssl.SSLContext]
    ) -> ssl.SSLContext:
        ctx = default()
        ctx.minimum_version = MINIMUM_VERSION
        for path in self.ca_files:
            ctx.load_verify_locations(cafile=path)
        return ctx


def uvicorn_options(config: Config) -> dict[str, Any]:
    """uvicorn.Config keyword arguments for serving `config` over TLS; {} without TLS."""
    server = config.server
    if not server.tls_cert_file:
        return {}
    for path in (server.tls_cert_file, server.tls_key_file, *client_ca_files(config)):
        if path and not Path(path).is_file():
            raise ConfigError(f"TLS file not found: {path}")
    ca_files = client_ca_files(config)
    return {
        "ssl_certfile": server.tls_cert_file,
        "ssl_keyfile": server.tls_key_file,
        "ssl_cert_reqs": ssl.CERT_OPTIONAL if ca_files else ssl.CERT_NONE,
        "ssl_context_factory": _ContextFactory(tuple(ca_files)),
        "http": TlsHttpToolsProtocol,
    }
