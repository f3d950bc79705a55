"""Pre-signed webhook requests: raw HTTP/1.1 bytes, built before a run starts.

Bodies come from the adapters' own `sample_lifecycle` (realistic gateway payloads) for a
few template payments; each request then gets unique ids by byte substitution, which is
~100x cheaper than building every body afresh, and is signed with the adapter's real
scheme. Every request is signed with the time it is planned to be sent (open loop: start
+ i / rate), so a long run stays inside the 300 s signature tolerance.

Kinds: `stripe` (one event per delivery, lifecycles of 3 or 7 events per PaymentIntent),
`stripe-dup` (the same, 20 % of the requests re-sending an earlier event, re-signed as
Stripe's retries are) and `pix` (Efí hmac mode, several Pix items per delivery).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from porteiro.config import SourceConfig
from porteiro.providers import build_provider
from porteiro.providers.base import Provider, SamplePayment
from porteiro.providers.pix.samples import body as pix_body
from porteiro.providers.pix.samples import pix_item
from porteiro.providers.stripe.samples import signature_header
from porteiro.providers.stripe.webhook import SIGNATURE_HEADER

STRIPE_SECRET = "whsec_bench_0123456789abcdefghijklmnopqrstuv"
PIX_HMAC_TOKEN = "bench-pix-hmac-token-0123456789"
PIX_CHAVE = "3f6a1c9e-5b2d-4e8f-9a7c-1d2e3f4a5b6c"
PIX_ITEMS_PER_DELIVERY = 5
DUPLICATE_SHARE = 0.2
KINDS = ("stripe", "stripe-dup", "pix")
TEMPLATE_PAYMENTS = 16
_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class Batch:
    """Requests of one scenario and what they carry."""

    kind: str
    requests: list[bytes]
    events: int  # distinct events the requests carry
    duplicates: int  # requests that re-send an earlier event


def stripe_source() -> SourceConfig:
    return SourceConfig(name="stripe", provider="stripe", secrets=(STRIPE_SECRET,))


def pix_source() -> SourceConfig:
    options = {"hmac_token": PIX_HMAC_TOKEN, "allow_ips": ["127.0.0.1"], "keys": [PIX_CHAVE]}
    return SourceConfig(name="pix", provider="pix", options={**options, "confirm": False})


def run_tag(rng: random.Random) -> str:
    """Six random letters that keep the ids of two runs apart."""
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(6))


def build(
    kind: str, count: int, *, start: float, rate: float | None = None, seed: int = 1
) -> Batch:
    """`count` requests of `kind`; request i is signed for `start + i / rate` (or `start`)."""
    rng = random.Random(seed)
    tag = run_tag(rng)
    stamps = _stamps(count, start, rate)
    if kind == "pix":
        return _pix(count, tag, (datetime.fromtimestamp(at, UTC) for at in stamps), rng)
    if kind not in ("stripe", "stripe-dup"):
        raise ValueError(f"unknown request kind {kind!r} (known: {', '.join(KINDS)})")
    share = DUPLICATE_SHARE if kind == "stripe-dup" else 0.0
    return _stripe(kind, count, tag, stamps, share, rng)


def raw_request(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
    return _with_body(_head(method, target, headers), body)


def _head(method: str, target: str, headers: dict[str, str]) -> bytes:
    """The request line and `headers`, each line ending in CRLF; no Content-Length yet."""
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n").encode()


def _with_body(head: bytes, body: bytes) -> bytes:
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)


def write_file(requests: Sequence[bytes], path: Path) -> None:
    """Length-prefixed records (`<n>\\n<n bytes>`) for bench/wrk/presigned.lua."""
    with path.open("wb") as handle:
        for request in requests:
            handle.write(b"%d\n" % len(request))
            handle.write(request)


def _stamps(count: int, start: float, rate: float | None) -> Iterator[float]:
    """When each request is planned to be sent (unix seconds)."""
    for index in range(count):
        yield start + (index / rate if rate else 0.0)


def _unique(tag: str, number: int, width: int) -> str:
    """`tag` + `number` in hexadecimal, padded to `width` characters."""
    return (tag + format(number, "x").rjust(width - len(tag), "0"))[-width:]


# -- Stripe -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Lifecycle:
    bodies: list[bytes]
    intent: bytes  # the PaymentIntent id inside the bodies
    events: list[bytes]  # each body's evt_ id
    reference: bytes


def _stripe_templates(provider: Provider, rng: random.Random) -> list[_Lifecycle]:
    now = datetime.now(UTC)
    templates = []
    for number in range(TEMPLATE_PAYMENTS):
        intent = "pi_" + "".join(rng.choice(_ALNUM) for _ in range(24))
        reference = f"order-T{number:05d}"
        payment = SamplePayment(
            object_id=intent,
            reference=reference,
            amount=rng.randrange(990, 99_990),
            refund=number % 4 == 0,  # a quarter of the payments are refunded too
        )
        bodies = [bytes(b) for b in provider.sample_lifecycle(payment, now, rng)]
        events = [b[b.index(b'"evt_') + 1 : b.index(b'"', b.index(b'"evt_') + 1)] for b in bodies]
        templates.append(_Lifecycle(bodies, intent.encode(), events, reference.encode()))
    return templates


def _stripe(
    kind: str, count: int, tag: str, stamps: Iterator[float], share: float, rng: random.Random
) -> Batch:
    provider = build_provider(stripe_source())
    templates = _stripe_templates(provider, rng)
    sign = _stripe_signer(provider)
    requests: list[bytes] = []
    sent: list[bytes] = []  # bodies sent so far, for duplicates
    payment = events = duplicates = 0
    pending: list[bytes] = []
    for stamp in stamps:
        if sent and rng.random() < share:
            body = sent[rng.randrange(max(0, len(sent) - 2000), len(sent))]
            duplicates += 1
        else:
            if not pending:
                pending = _stripe_payment(templates[payment % len(templates)], tag, payment)
                payment += 1
            body = pending.pop(0)
            sent.append(body)
            events += 1
        requests.append(sign(body, int(stamp)))
    return Batch(kind, requests, events, duplicates)


def _stripe_signer(provider: Provider) -> Callable[[bytes, int], bytes]:
    """What `raw_request` makes of `provider.sign(body, at)`, byte for byte, at half the
    cost (a test compares the two): the headers the adapter puts before its signature
    are the same for every request, so they are joined once, and each request only adds
    the adapter's signature and its length. Building the requests is part of the
    benchmark's time budget (about 1.6 million a run)."""
    fixed = dict(provider.sign(b"", datetime.fromtimestamp(0, UTC)).headers)
    name = list(fixed)[-1]
    if name.lower() != SIGNATURE_HEADER:
        raise RuntimeError(f"the Stripe adapter no longer puts {SIGNATURE_HEADER} last")
    del fixed[name]
    head = _head("POST", "/webhooks/stripe", fixed) + f"{name}: ".encode()
    key = STRIPE_SECRET.encode()

    def sign(body: bytes, at: int) -> bytes:
        signature = signature_header(key, body, at).encode()
        return _with_body(b"%s%s\r\n" % (head, signature), body)

    return sign


def _stripe_payment(template: _Lifecycle, tag: str, number: int) -> list[bytes]:
    intent = b"pi_" + _unique(tag, number, len(template.intent) - 3).encode()
    reference = f"order-{number}".encode()
    bodies = []
    for step, (body, event) in enumerate(zip(template.bodies, template.events, strict=True)):
        unique = b"evt_" + _unique(tag, number * 8 + step, len(event) - 4).encode()
        replaced = body.replace(event, unique).replace(template.intent, intent)
        bodies.append(replaced.replace(template.reference, reference))
    return bodies


# -- Pix --------------------------------------------------------------------------------


def _pix(count: int, tag: str, stamps: Iterator[datetime], rng: random.Random) -> Batch:
    provider = build_provider(pix_source())
    template_at = datetime.now(UTC)
    template = pix_item(txid="T" * 26, amount=1, chave=PIX_CHAVE, at=template_at, rng=rng)
    e2e_prefix = str(template["endToEndId"])[:21]  # E + ISPB + yyyyMMddHHmm
    requests = []
    number = 0
    for stamp in stamps:
        items = []
        for _ in range(PIX_ITEMS_PER_DELIVERY):
            amount = rng.randrange(100, 50_000)
            items.append(
                {
                    **template,
                    "endToEndId": e2e_prefix + _unique(tag, number, 11),
                    "txid": "cob" + _unique(tag, number, 26),
                    "valor": f"{amount // 100}.{amount % 100:02d}",
                }
            )
            number += 1
        body = pix_body(*items)
        signed = provider.sign(body, stamp)
        target = f"/webhooks/pix{signed.path_suffix}?{signed.query}"
        requests.append(raw_request("POST", target, dict(signed.headers), body))
    return Batch("pix", requests, number, 0)
