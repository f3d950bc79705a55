"""Stripe's `Stripe-Signature` scheme: `t=<unix seconds>,v1=<hex HMAC-SHA256>` over
`"{t}.{body}"`, within the source's tolerance of now. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from porteiro.errors import MalformedHeader, MissingHeader, SignatureMismatch
from porteiro.model import InboundRequest
from porteiro.providers import signing

SIGNATURE_HEADER = "stripe-signature"


def parse_signature_header(value: str) -> tuple[int, list[bytes]]:
    """(t, decoded v1 signatures) of a `Stripe-Signature` value; exactly one `t`."""
    pairs = signing.parse_pairs(value)
    stamps = [item for key, item in pairs if key == "t"]
    if len(stamps) != 1:
        raise MalformedHeader("Stripe-Signature needs exactly one t=<unix seconds>")
    timestamp = signing.parse_timestamp(stamps[0], what="Stripe-Signature t")
    signatures = []
    for key, item in pairs:
        if key != "v1" or not item:
            continue
        try:
            signatures.append(signing.decode_hex(item, what="Stripe-Signature v1"))
        except MalformedHeader:
            continue  # can never match; must not spoil a good v1 beside it (SDK behaviour)
    return timestamp, signatures


def verify_signature(
    request: InboundRequest, now: datetime, keys: Sequence[bytes], tolerance_seconds: float
) -> None:
    """Raise unless the request's `Stripe-Signature` is fresh and made with one of `keys`."""
    header = request.header(SIGNATURE_HEADER)
    if header is None or not header.strip():
        raise MissingHeader("Stripe-Signature header is missing")
    timestamp, signatures = parse_signature_header(header)
    signing.check_timestamp(timestamp, now, tolerance_seconds)
    if not signatures:
        raise SignatureMismatch("Stripe-Signature carries no v1 signature")
    signing.verify_hmac(f"{timestamp}.".encode() + request.body, keys, signatures)
