"""Adyen's authentication: HTTP Basic on the request (when configured) and each item's
`hmacSignature`, an HMAC-SHA256 of eight of its values joined by ':'. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from porteiro.errors import ConfigError, MalformedHeader, MissingHeader, SignatureMismatch
from porteiro.providers import signing

AUTHORIZATION_HEADER = "authorization"
SIGNED_FIELDS = (
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
    "value",
    "currency",
    "eventCode",
    "success",
)
_DIGEST_SIZE = 32  # HMAC-SHA256


def decode_key(secret: str) -> bytes:
    """The HMAC key of a Customer Area hex key (64 hex characters in practice)."""
    try:
        key = signing.decode_hex(secret, what="HMAC key")
    except MalformedHeader:
        raise ConfigError(
            "an Adyen HMAC key must be hexadecimal (from the Customer Area)"
        ) from None
    if not key:
        raise ConfigError("an Adyen HMAC key may not be empty")
    return key


def signing_string(item: Mapping[str, Any]) -> str:
    """The 8 signed values of a NotificationRequestItem, joined by ':' (no escaping)."""
    amount = item.get("amount")
    if amount is None:
        amount = {}
    if not isinstance(amount, dict):
        raise MalformedHeader("amount must be an object")
    values = {**item, "value": amount.get("value"), "currency": amount.get("currency")}
    return ":".join(_signed_text(name, values.get(name)) for name in SIGNED_FIELDS)


def verify_basic(header: str | None, basic: Sequence[bytes]) -> None:
    """Raise unless `header` is HTTP Basic with one of the `basic` "user:password"s."""
    if header is None:
        raise MissingHeader("Authorization header (HTTP Basic) is missing")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        raise MalformedHeader("Authorization must be Basic <base64>")
    given = signing.decode_base64(token, what="Authorization")
    if not signing.any_match(basic, [given]):
        raise SignatureMismatch("HTTP Basic credentials do not match")


def verify_item(index: int, item: Mapping[str, Any], keys: Sequence[bytes]) -> None:
    """Raise unless item `index` carries an `hmacSignature` made with one of `keys`."""
    extra = item.get("additionalData")
    if extra is not None and not isinstance(extra, dict):
        raise MalformedHeader(f"item {index}: additionalData must be an object")
    given = (extra or {}).get("hmacSignature")
    if given is None or (isinstance(given, str) and not given.strip()):
        raise MissingHeader(f"item {index}: additionalData.hmacSignature is missing")
    if not isinstance(given, str):
        raise MalformedHeader(f"item {index}: hmacSignature must be a string")
    signature = signing.decode_base64(given, what=f"item {index} hmacSignature")
    if len(signature) != _DIGEST_SIZE:
        raise MalformedHeader(f"item {index}: hmacSignature is not a SHA-256 digest")
    message = signed_message(item)
    expected = [signing.hmac_digest(key, message) for key in keys]
    if not signing.any_match(expected, [signature]):
        raise SignatureMismatch(f"item {index}: hmacSignature matches no configured key")


def _signed_text(name: str, value: object) -> str:
    # The Python SDK applies str(): strings as is, numbers in decimal, booleans "True".
    if value is None:
        return ""
    if isinstance(value, str | int | float):
        return str(value)
    raise MalformedHeader(f"{name} must be a string or a number to be signed")


def signed_message(item: Mapping[str, Any]) -> bytes:
    """The signing string as the bytes the HMAC is made over."""
    try:
        return signing_string(item).encode("utf-8")
    except (UnicodeEncodeError, ValueError):  # lone surrogates; ints past str() limits
        raise MalformedHeader("signed fields are not encodable text") from None
