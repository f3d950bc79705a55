"""The shared engine of `porteiro fake-provider`: the truth and the gateway seam.

The fake owns the TRUTH: payments whose lifecycles are drawn from the seed. A lifecycle is
a list of `Step`s; applying a step moves the payment forward (the API answers the new
state at once) and returns the webhooks the gateway emits for it, built from the truth at
that moment, so ids, amounts and states always agree between API and webhooks. The
emitter (fakes/emitter.py) applies the steps and delivers their webhooks with faults.

Each gateway (fakes/stripe.py, ...) subclasses `FakeGateway`: it plans the steps, keeps
its API objects, serves its API routes (its handlers marked `@api`, fakes/routes.py,
behind its `refusal` of bad credentials) and signs with Porteiro's own adapter. The app
around the routes and the /_fake control API are in fakes/control.py.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from porteiro.config import SourceConfig
from porteiro.fakes.idempotency import IdempotentCreates
from porteiro.fakes.routes import marked_routes
from porteiro.fakes.scenario import Scenario
from porteiro.model import PaymentState
from porteiro.providers import build_provider
from porteiro.providers.base import Provider, SignedRequest

_ALNUM = string.ascii_letters + string.digits


class Outcome(StrEnum):
    """How a planned payment's life ends."""

    PAID = "paid"
    PARTIALLY_REFUNDED = "partially_refunded"
    REFUNDED = "refunded"
    FAILED = "failed"
    CANCELED = "canceled"
    EXPIRED = "expired"  # Pix: a cob never paid
    PENDING = "pending"  # created through the API: no lifecycle, stays pending


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a fake needs besides the scenario (mostly from CLI flags)."""

    webhook_url: str
    secret: str
    api_key: str | None = None  # None: any credential is accepted
    signing_key_file: str | None = None  # Pagar.me RS256
    pix_key: str = "3f6a1c9e-5b2d-4e8f-9a7c-1d2e3f4a5b6c"
    basic_auth: str | None = None  # Adyen "user:password"
    hold: bool = False


@dataclass
class FakePayment:
    """One payment of the truth. `native` holds the gateway's own objects."""

    object_id: str
    reference: str
    amount: int
    currency: str
    created_at: datetime
    outcome: Outcome
    state: PaymentState = PaymentState.PENDING
    refunded_amount: int = 0
    expires_at: datetime | None = None
    native: dict[str, Any] = field(default_factory=dict)
    exists: bool = False  # False until its first step happened

    def canonical(self, now: datetime) -> PaymentState:
        """The state now: an unpaid payment past its expiry is expired (Pix cobs)."""
        if self.state is PaymentState.PENDING and self.expires_at and now >= self.expires_at:
            return PaymentState.EXPIRED
        return self.state

    def to_json(self, now: datetime) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "object_id": self.object_id,
            "state": self.canonical(now).value,
            "amount": self.amount,
            "currency": self.currency,
            "refunded_amount": self.refunded_amount,
            "reference": self.reference,
            "created_at": iso(self.created_at),
            "outcome": self.outcome.value,
        }
        if self.expires_at is not None:
            answer["expires_at"] = iso(self.expires_at)
        return answer


@dataclass(frozen=True, slots=True)
class Webhook:
    """One notification the gateway sends (and re-sends on failure)."""

    event_id: str  # the gateway's event id: what Porteiro de-duplicates on
    type: str
    object_id: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Step:
    """One thing that happens to a payment; `apply` moves the truth and returns the
    webhooks it emits."""

    payment: FakePayment
    at: datetime
    apply: Callable[[], Sequence[Webhook]]


class FakeGateway:
    """Base of every fake gateway: truth, planning helpers, auth, signing."""

    name = ""
    retry_schedule: Sequence[float] = ()  # seconds between attempts, before compression

    def __init__(self, scenario: Scenario, settings: Settings, start: datetime) -> None:
        self.scenario = scenario
        self.settings = settings
        self.start = start
        self.rng = random.Random(scenario.seed)
        # API creates draw their ids here: they must not disturb the seeded sequence.
        self.api_rng = random.Random()
        self.payments: dict[str, FakePayment] = {}
        self.provider: Provider = build_provider(self.source_config())
        self.lock = asyncio.Lock()  # API writes vs the emitter's steps
        self.creates = IdempotentCreates()
        self.creates.lose_next = scenario.lose_create_responses
        self.creates.delay_seconds = scenario.create_delay_ms / 1000.0

    # -- to override ------------------------------------------------------------------

    def source_config(self) -> SourceConfig:
        """The SourceConfig Porteiro's adapter signs with (from the CLI flags)."""
        return SourceConfig(
            name="fake",
            provider=self.name,
            secrets=(self.settings.secret,),
            options=self.source_options(),
        )

    def source_options(self) -> dict[str, Any]:
        """The provider options of `source_config`: none unless the gateway needs some."""
        return {}

    def plan(self) -> list[Step]:
        raise NotImplementedError

    def routes(self) -> list[BaseRoute]:
        """The API: this gateway's handlers marked `@api`, in the order they are defined
        (Starlette tries them in order), each behind `refusal` unless marked public."""
        return marked_routes(self, self.refusal)

    def refusal(self, request: Request) -> Response | None:
        """The gateway's answer to a request without valid credentials; None lets it in."""
        raise NotImplementedError

    def sign(self, webhook: Webhook, now: datetime) -> SignedRequest:
        return self.provider.sign(webhook.body, now)

    # -- helpers ----------------------------------------------------------------------

    def planned_payments(
        self, id_for: Callable[[int], str], *, pix: bool = False, lead: float = 30.0
    ) -> list[FakePayment]:
        """The scenario's payments: ids, references, amounts, outcomes, created within
        the window and at least `lead` seconds before the start (room for their steps)."""
        scenario, rng = self.scenario, self.rng
        planned = []
        for index in range(scenario.payments):
            created = self.start - timedelta(seconds=rng.uniform(0, scenario.window_seconds))
            planned.append(
                FakePayment(
                    object_id=id_for(index),
                    reference=f"order-{scenario.seed}-{index:05d}",
                    amount=rng.randint(scenario.amount_min, scenario.amount_max),
                    currency=scenario.currency.upper(),
                    created_at=created.replace(microsecond=0) - timedelta(seconds=lead),
                    outcome=draw_outcome(scenario, rng, pix=pix),
                )
            )
        return planned

    def ids_for(self, payment: FakePayment) -> random.Random:
        return self.api_rng if payment.outcome is Outcome.PENDING else self.rng

    def now(self) -> datetime:
        return datetime.now(UTC)

    def add(self, payment: FakePayment) -> FakePayment:
        self.payments[payment.object_id] = payment
        return payment

    def authorized(self, request: Request) -> bool:
        """Bearer (or Basic user) credential check; without --api-key anything goes."""
        expected = self.settings.api_key
        if expected is None:
            return True
        header = request.headers.get("authorization", "")
        if header == f"Bearer {expected}":
            return True
        return basic_user(header) == expected

    def existing(self, object_id: str) -> FakePayment | None:
        """The payment the API answers for: known, and its first step happened."""
        payment = self.payments.get(object_id)
        return payment if payment is not None and payment.exists else None

    def native_of(self, object_id: str, key: str, missing: Response) -> Response:
        """GET of an existing payment: its native `key` object, else `missing` (a 404)."""
        payment = self.existing(object_id)
        return missing if payment is None else JSONResponse(payment.native[key])

    def state_json(self, now: datetime) -> list[dict[str, Any]]:
        return [p.to_json(now) for p in self.payments.values() if p.exists]


def draw_outcome(scenario: Scenario, rng: random.Random, *, pix: bool) -> Outcome:
    roll = rng.random()
    if pix:
        unpaid = roll < scenario.expire_unpaid
        if unpaid:
            return Outcome.EXPIRED
    else:
        if roll < scenario.fail_rate:
            return Outcome.FAILED
        if roll < scenario.fail_rate + scenario.cancel_rate:
            return Outcome.CANCELED
    if rng.random() < scenario.refund_rate:
        return Outcome.REFUNDED if rng.random() < 0.5 else Outcome.PARTIALLY_REFUNDED
    return Outcome.PAID


def refund_shares(payment: FakePayment) -> list[int]:
    """The refunds of a refunded outcome: a third, then (fully) the rest."""
    part = max(1, payment.amount // 3)
    if payment.outcome is Outcome.PARTIALLY_REFUNDED:
        return [part]
    if payment.outcome is Outcome.REFUNDED:
        return [part, payment.amount - part] if payment.amount > part else [part]
    return []


# What a step does to a payment at a moment (and, for a refund, with a share).
Move = Callable[[FakePayment, datetime], Sequence[Webhook]]
Refund = Callable[[FakePayment, int, datetime], Sequence[Webhook]]


def refund_steps(
    payment: FakePayment, after: datetime, refund: Refund, *, first: float = 2.0, every: float = 2.0
) -> list[Step]:
    """`refund_shares(payment)` as steps: the first `first` seconds `after` (the payment),
    the next `every` seconds apart."""
    steps = []
    for index, share in enumerate(refund_shares(payment)):
        when = after + timedelta(seconds=first + every * index)
        steps.append(Step(payment, when, partial(refund, payment, share, when)))
    return steps


def card_steps(
    payment: FakePayment, created: datetime, fail: Move, cancel: Move, pay: Move, refund: Refund
) -> list[Step]:
    """A card payment's life after its creation: two seconds later it fails, is canceled
    or is paid, as its outcome says; a paid one's refunds follow (`refund_steps`)."""
    later = created + timedelta(seconds=2)
    if payment.outcome is Outcome.FAILED:
        return [Step(payment, later, partial(fail, payment, later))]
    if payment.outcome is Outcome.CANCELED:
        return [Step(payment, later, partial(cancel, payment, later))]
    return [
        Step(payment, later, partial(pay, payment, later)),
        *refund_steps(payment, later, refund),
    ]


def exponential(first: float, factor: float, cap: float, total: float) -> tuple[float, ...]:
    """Delays from `first`, times `factor`, capped, until they add up to `total`."""
    delays: list[float] = []
    delay = first
    while sum(delays) < total:
        delays.append(min(delay, cap))
        delay *= factor
    return tuple(delays)


def random_id(rng: random.Random, length: int = 24) -> str:
    return "".join(rng.choice(_ALNUM) for _ in range(length))


def basic_credentials(header: str) -> str | None:
    """`user:password` of an HTTP Basic `authorization` header, or None."""
    if not header.startswith("Basic "):
        return None
    try:
        return base64.b64decode(header[6:], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def basic_user(header: str) -> str | None:
    credentials = basic_credentials(header)
    return None if credentials is None else credentials.partition(":")[0]


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def unix(moment: datetime) -> int:
    return int(moment.timestamp())


def parse_time(text: str | None) -> datetime | None:
    """An ISO 8601 / RFC 3339 time (Z or offset; a naive one is UTC), or None."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
