"""Pagar.me's authentication: the RS256 `X-Webhook-Asymmetric-Signature` against the
JWKS (loaded beforehand, by `prepare` in api.py), or the legacy `X-Hub-Signature` HMAC
with the configured secrets. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from porteiro.errors import MalformedHeader, MissingHeader, SignatureMismatch, UnknownKey
from porteiro.model import InboundRequest
from porteiro.providers import signing

if TYPE_CHECKING:  # the cache fetches keys (api.py); verify only reads it
    from porteiro.providers.jwks import JwksCache

ASYMMETRIC_HEADER = "x-webhook-asymmetric-signature"
HUB_HEADER = "x-hub-signature"
HUB_ALGORITHMS = ("sha1", "sha256")


def parse_asymmetric_header(value: str) -> tuple[str, bytes]:
    """(kid, signature) of an `alg=RS256; kid=...; signature=...` header."""
    params = signing.parse_unique_pairs(value, separator=";")
    missing = [key for key in ("alg", "kid", "signature") if not params.get(key)]
    if missing:
        raise MalformedHeader(f"{ASYMMETRIC_HEADER} lacks {', '.join(missing)}")
    if params["alg"].upper() != "RS256":
        raise MalformedHeader(f"{ASYMMETRIC_HEADER}: unsupported alg (only RS256)")
    raw = signing.decode_base64(params["signature"], what="signature", urlsafe=True)
    return params["kid"], raw


def parse_hub_header(value: str) -> tuple[str, bytes]:
    """(algorithm, digest) of a `sha1=<hex>` / `sha256=<hex>` header."""
    algorithm, sep, digest = value.strip().partition("=")
    algorithm = algorithm.strip().lower()
    if not sep or algorithm not in HUB_ALGORITHMS:
        raise MalformedHeader(f"{HUB_HEADER} must be sha1=<hex> or sha256=<hex>")
    return algorithm, signing.decode_hex(digest, what=HUB_HEADER)


def verify_delivery(
    request: InboundRequest,
    keys: JwksCache,
    secrets: Sequence[bytes],
    *,
    require_asymmetric: bool,
) -> None:
    """Raise unless the request is signed: RS256 when it says so (or when required),
    else `X-Hub-Signature` with one of `secrets`."""
    asymmetric = request.header(ASYMMETRIC_HEADER)
    if asymmetric is not None:
        _verify_rs256(asymmetric, request.body, keys)
        return
    if require_asymmetric:
        raise MissingHeader(f"{ASYMMETRIC_HEADER} header is missing (required)")
    hub = request.header(HUB_HEADER)
    if hub is None or not hub.strip() or not secrets:
        raise MissingHeader(
            f"{ASYMMETRIC_HEADER} header is missing"
            + ("" if secrets else f" ({HUB_HEADER} needs secrets configured)")
        )
    algorithm, digest = parse_hub_header(hub)
    signing.verify_hmac(request.body, secrets, [digest], algorithm=algorithm)


def _verify_rs256(header: str, body: bytes, keys: JwksCache) -> None:
    kid, signature = parse_asymmetric_header(header)
    key = keys.get(kid)
    if key is None:
        raise UnknownKey(f"no JWKS key with kid {kid[:64]!r}")
    try:
        key.verify(signature, body, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, ValueError):
        raise SignatureMismatch("RS256 signature does not match the body") from None
