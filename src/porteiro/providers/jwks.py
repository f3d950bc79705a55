"""RSA signing keys from a JWKS (RFC 7517), cached, for Pagar.me's RS256 webhooks.

Lookup (`get`) is pure, so `verify` never does I/O. Loading happens outside it: a local
`jwks_file` is read when the cache is built; a `jwks_url` is fetched by `ensure` (called
from the adapter's `prepare`) when a signature names a kid the cache does not know, at
most once per `refetch_seconds`, so a flood of forged kids cannot hammer the key server.
A key is usable when `kty` is RSA, `use` is `sig` or absent and `alg` is RS256 or
absent, as Pagar.me's own plugin requires; other keys are skipped.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx
import structlog
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey, RSAPublicNumbers

from porteiro.errors import ConfigError, GatewayError, MalformedHeader
from porteiro.providers import signing
from porteiro.providers.api_json import get_json

_log = structlog.get_logger(__name__)


def parse_jwks(document: object) -> dict[str, RSAPublicKey]:
    """The usable RSA signature keys of a JWKS document, by kid."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ConfigError('a JWKS must be a JSON object with a "keys" list')
    keys: dict[str, RSAPublicKey] = {}
    for jwk in document["keys"]:
        if isinstance(jwk, dict):
            parsed = _rsa_key(jwk)
            if parsed is not None:
                keys[parsed[0]] = parsed[1]
    if not keys:
        raise ConfigError("the JWKS has no usable RSA signature key (kty=RSA, use=sig, RS256)")
    return keys


def load_jwks_file(path: Path) -> dict[str, RSAPublicKey]:
    try:
        document = json.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read JWKS file {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"JWKS file {path} is not JSON: {exc}") from exc
    try:
        return parse_jwks(document)
    except ConfigError as exc:
        raise ConfigError(f"JWKS file {path}: {exc}") from None


def jwk_from_public_key(kid: str, key: RSAPublicKey) -> dict[str, str]:
    """The JWK of an RSA public key (tests and `simulate` publish their own JWKS)."""
    numbers = key.public_numbers()
    return {
        "kty": "RSA",
        "use": "sig",
        "alg": "RS256",
        "kid": kid,
        "n": signing.encode_base64url(_int_bytes(numbers.n)),
        "e": signing.encode_base64url(_int_bytes(numbers.e)),
    }


class JwksCache:
    """Keys by kid, from a file or a URL, refreshed on demand and rate-limited."""

    def __init__(
        self,
        *,
        url: str | None = None,
        file: Path | None = None,
        refetch_seconds: float = 60.0,
        fetch_timeout: float = 2.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (url is None) == (file is None):
            raise ConfigError("a JWKS comes from exactly one of a URL or a file")
        self.url = url
        self.file = file
        self.refetch_seconds = refetch_seconds
        self._fetch_timeout = fetch_timeout
        self._clock = clock
        self._keys: Mapping[str, RSAPublicKey] = {}
        self._last_load: float | None = None
        self._lock = asyncio.Lock()
        if file is not None:
            self._keys = load_jwks_file(file)
            self._last_load = clock()

    def get(self, kid: str) -> RSAPublicKey | None:
        return self._keys.get(kid)

    @property
    def kids(self) -> frozenset[str]:
        return frozenset(self._keys)

    def refresh_due(self) -> bool:
        return self._last_load is None or self._clock() - self._last_load >= self.refetch_seconds

    async def ensure(self, kid: str, http: httpx.AsyncClient) -> bool:
        """Make `kid` known if a (rate-limited) reload can; True when it is known."""
        if kid in self._keys:
            return True
        async with self._lock:
            # Another request may have reloaded while this one waited for the lock.
            if kid in self._keys or not self.refresh_due():
                return kid in self._keys
            try:
                await self.refresh(http)
            except (GatewayError, ConfigError) as exc:
                _log.warning(
                    "jwks.refresh_failed", source=self.url or str(self.file), error=str(exc)
                )
        return kid in self._keys

    async def refresh(self, http: httpx.AsyncClient) -> None:
        """Reload now, ignoring the rate limit; on failure the old keys stay."""
        self._last_load = self._clock()  # a failed attempt also counts against the limit
        if self.file is not None:
            self._keys = await asyncio.to_thread(load_jwks_file, self.file)
        else:
            self._keys = await self._fetch(http)
        _log.info("jwks.loaded", source=self.url or str(self.file), kids=sorted(self._keys))

    async def _fetch(self, http: httpx.AsyncClient) -> dict[str, RSAPublicKey]:
        url = str(self.url)
        _, document = await get_json(
            http, url, what=f"JWKS fetch from {url}", timeout=self._fetch_timeout
        )
        try:
            return parse_jwks(document)
        except ConfigError as exc:
            raise GatewayError(f"JWKS from {url}: {exc}") from None


def _rsa_key(jwk: Mapping[str, object]) -> tuple[str, RSAPublicKey] | None:
    kid, n, e = jwk.get("kid"), jwk.get("n"), jwk.get("e")
    if jwk.get("kty") != "RSA" or jwk.get("use", "sig") != "sig":
        return None
    if jwk.get("alg", "RS256") != "RS256":
        return None
    if not (isinstance(kid, str) and kid and isinstance(n, str) and isinstance(e, str)):
        return None
    try:
        modulus = int.from_bytes(signing.decode_base64(n, what="n", urlsafe=True))
        exponent = int.from_bytes(signing.decode_base64(e, what="e", urlsafe=True))
        return kid, RSAPublicNumbers(exponent, modulus).public_key()
    except (MalformedHeader, ValueError):
        return None


def _int_bytes(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8 or 1, "big")
