"""The benchmark's pre-signed requests (bench/requests.py) are what the adapters sign.

Stripe requests are assembled from a once-joined header block and the adapter's own
`signature_header` (building millions of them is part of `make bench`'s time budget);
they must equal, byte for byte, `raw_request` of the adapter's `sign()`, and the Stripe
adapter must accept them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from bench import requests as presigned

from porteiro.model import InboundRequest
from porteiro.providers import build_provider

START = 1_796_000_000.25  # a fractional start: the signature's t= is the whole second


def _split(raw: bytes) -> tuple[dict[str, str], bytes]:
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")[1:]
    headers = dict(line.split(": ", 1) for line in lines)
    return headers, body


@pytest.mark.parametrize("kind", ["stripe", "stripe-dup"])
def test_stripe_requests_equal_what_the_adapter_signs(kind: str) -> None:
    provider = build_provider(presigned.stripe_source())
    rate = 700.0  # several requests per second of signature time, and second boundaries
    batch = presigned.build(kind, 2_000, start=START, rate=rate, seed=7)

    for index, raw in enumerate(batch.requests):
        _, body = _split(raw)
        at = datetime.fromtimestamp(START + index / rate, UTC)
        signed = provider.sign(body, at)
        expected = presigned.raw_request("POST", "/webhooks/stripe", dict(signed.headers), body)
        assert raw == expected, index
    bodies = {_split(raw)[1] for raw in batch.requests}
    assert len(bodies) == batch.events == len(batch.requests) - batch.duplicates
    assert (batch.duplicates > 0) == (kind == "stripe-dup")


def test_stripe_requests_pass_the_adapters_verification() -> None:
    provider = build_provider(presigned.stripe_source())
    batch = presigned.build("stripe", 50, start=START, rate=10.0, seed=3)
    for index, raw in enumerate(batch.requests):
        headers, body = _split(raw)
        at = datetime.fromtimestamp(START + index / 10.0 + 1, UTC)
        request = InboundRequest(
            source="stripe",
            method="POST",
            path="/webhooks/stripe",
            query="",
            headers=tuple((name.lower(), value) for name, value in headers.items()),
            body=body,
            peer="127.0.0.1",
            received_at=at,
        )
        provider.verify(request, at)  # raises on a bad signature
