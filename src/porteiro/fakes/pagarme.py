"""Fake Pagar.me (API v5 "core"): orders with one charge, and their webhooks.

Lifecycles: `order.created`; then paid (`charge.paid` + `order.paid`; refunds:
`charge.partial_canceled`, then `charge.refunded`), failed (`charge.payment_failed` +
`order.payment_failed`) or canceled (`order.canceled`). A full refund cancels the charge
and the order (Pagar.me calls a refund a cancellation): read the charge's
`canceled_amount` to tell refunded from canceled. Signed by Porteiro's adapter:
`X-Hub-Signature: sha256=...` with `--secret`, or RS256 (`X-Webhook-Asymmetric-Signature`,
kid `fake-provider`) with `--signing-key-file`, whose public key the fake serves at
`/.well-known/jwks.json` (point Porteiro's `jwks_url` there). Retries: unpublished;
assumed exponential from 1 minute, capped at 6 hours, for a day.

API (HTTP Basic, the secret key `--api-key` as user; Porteiro's `api_base_url` is
`{fake}/core/v5`): `GET /core/v5/orders/{id}`, `GET /core/v5/charges/{id}`,
`GET /core/v5/charges` (`created_since`, `created_until`, `page` from 1, `size`),
`POST /core/v5/orders` (`Idempotency-Key`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from porteiro.errors import ConfigError
from porteiro.fakes.core import (
    FakeGateway,
    FakePayment,
    Outcome,
    Step,
    Webhook,
    basic_user,
    card_steps,
    exponential,
    iso,
    parse_time,
    random_id,
)
from porteiro.fakes.idempotency import Verdict, respond
from porteiro.fakes.routes import api
from porteiro.model import PaymentState
from porteiro.providers.signing import encode_base64url

KID = "fake-provider"
MAX_SIZE = 100


class FakePagarme(FakeGateway):
    name = "pagarme"
    retry_schedule = exponential(60.0, 2.0, 6 * 3600.0, 86400.0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.charges: dict[str, FakePayment] = {}  # charge id -> its order's payment
        self.account = {"id": "acc_" + random_id(self.rng, 16), "name": "Porteiro fake"}

    def source_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"signing_kid": KID}
        if self.settings.signing_key_file:
            options["signing_key_file"] = self.settings.signing_key_file
        return options

    # -- the truth ----------------------------------------------------------------------

    def plan(self) -> list[Step]:
        steps: list[Step] = []
        for payment in self.planned_payments(lambda _: "or_" + random_id(self.rng, 16)):
            self.add(payment)
            at = payment.created_at
            steps.append(Step(payment, at, partial(self._create, payment, at, self.rng)))
            steps += card_steps(payment, at, self._fail, self._cancel, self._pay, self._refund)
        return steps

    def _create(self, payment: FakePayment, at: datetime, rng: random.Random) -> list[Webhook]:
        charge_id = "ch_" + random_id(rng, 16)
        charge: dict[str, Any] = {
            "id": charge_id, "code": payment.reference,
            "amount": payment.amount, "paid_amount": 0, "canceled_amount": 0,
            "currency": payment.currency, "payment_method": "pix", "status": "pending",
            "created_at": iso(at), "updated_at": iso(at), "last_transaction": None,
        }  # fmt: skip
        order = {
            "id": payment.object_id, "code": payment.reference, "amount": payment.amount,
            "currency": payment.currency, "closed": True, "status": "pending",
            "created_at": iso(at), "updated_at": iso(at), "items": [
                {"amount": payment.amount, "description": "Pedido", "quantity": 1}],
        }  # fmt: skip
        payment.native.update(order=order, charge=charge)
        self.charges[charge_id] = payment
        return [self._hook(payment, "order.created", self._order(payment), at)]

    def _order(self, payment: FakePayment) -> dict[str, Any]:
        return {**payment.native["order"], "charges": [self._charge(payment, with_order=False)]}

    def _charge(self, payment: FakePayment, *, with_order: bool = True) -> dict[str, Any]:
        charge = dict(payment.native["charge"])
        if with_order:
            order = payment.native["order"]
            charge["order"] = {key: order[key] for key in ("id", "code", "status", "amount")}
        return charge

    def _set(self, payment: FakePayment, at: datetime, order: str, **charge: Any) -> None:
        payment.native["order"].update(status=order, updated_at=iso(at))
        payment.native["charge"].update(updated_at=iso(at), **charge)

    def _transaction(self, status: str, amount: int) -> dict[str, Any]:
        return {"id": "tran_" + random_id(self.rng, 16), "status": status,
                "success": status != "failed", "amount": amount}  # fmt: skip

    def _pay(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        self._set(payment, at, "paid", status="paid", paid_amount=payment.amount,
                  last_transaction=self._transaction("captured", payment.amount))  # fmt: skip
        payment.state = PaymentState.PAID
        return self._charge_and_order_hooks(payment, "paid", at)

    def _fail(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        self._set(payment, at, "failed", status="failed",
                  last_transaction=self._transaction("failed", payment.amount))  # fmt: skip
        payment.state = PaymentState.FAILED
        return self._charge_and_order_hooks(payment, "payment_failed", at)

    def _cancel(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        self._set(payment, at, "canceled", status="canceled")
        payment.state = PaymentState.CANCELED
        return [self._hook(payment, "order.canceled", self._order(payment), at)]

    def _refund(self, payment: FakePayment, share: int, at: datetime) -> list[Webhook]:
        payment.refunded_amount += share
        full = payment.refunded_amount >= payment.amount
        self._set(payment, at, "canceled" if full else "paid",
                  status="canceled" if full else "paid",
                  canceled_amount=payment.refunded_amount,
                  last_transaction=self._transaction("refunded", share))  # fmt: skip
        payment.state = PaymentState.REFUNDED if full else PaymentState.PARTIALLY_REFUNDED
        kind = "charge.refunded" if full else "charge.partial_canceled"
        return [self._hook(payment, kind, self._charge(payment), at)]

    def _charge_and_order_hooks(
        self, payment: FakePayment, what: str, at: datetime
    ) -> list[Webhook]:
        """`charge.{what}` then `order.{what}`: Pagar.me tells both when a charge settles."""
        return [
            self._hook(payment, f"charge.{what}", self._charge(payment), at),
            self._hook(payment, f"order.{what}", self._order(payment), at),
        ]

    def _hook(
        self, payment: FakePayment, kind: str, data: Mapping[str, Any], at: datetime
    ) -> Webhook:
        hook_id = "hook_" + random_id(self.ids_for(payment), 16)
        body = {"id": hook_id, "account": self.account, "type": kind, "created_at": iso(at),
                "data": data}  # fmt: skip
        return Webhook(hook_id, kind, payment.object_id, json.dumps(body).encode())

    # -- the API ------------------------------------------------------------------------

    def refusal(self, request: Request) -> Response | None:
        user = basic_user(request.headers.get("authorization", ""))
        if user is not None and (self.settings.api_key in (None, user)):
            return None
        return _error(401, "Authorization has been denied for this request.")

    @api("GET", "/.well-known/jwks.json", public=True)
    async def _jwks(self, _: Request) -> Response:
        if not self.settings.signing_key_file:
            return JSONResponse({"keys": []})
        key = _load_key(self.settings.signing_key_file)
        numbers = key.public_key().public_numbers()

        def b64(value: int) -> str:
            return encode_base64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))

        jwk = {"kty": "RSA", "kid": KID, "use": "sig", "alg": "RS256",
               "n": b64(numbers.n), "e": b64(numbers.e)}  # fmt: skip
        return JSONResponse({"keys": [jwk]})

    @api("GET", "/core/v5/orders/{id}")
    async def _get_order(self, request: Request) -> Response:
        return self._get_payment(request, self.payments, "Order", self._order)

    @api("GET", "/core/v5/charges/{id}")
    async def _get_charge(self, request: Request) -> Response:
        return self._get_payment(request, self.charges, "Charge", self._charge)

    def _get_payment(
        self,
        request: Request,
        by_id: Mapping[str, FakePayment],
        what: str,
        view: Callable[[FakePayment], dict[str, Any]],
    ) -> Response:
        """GET of an order or a charge by its id: 401 without the key, 404 for an id
        unknown or not created yet."""
        payment = by_id.get(request.path_params["id"])
        if payment is None or not payment.exists:
            return _error(404, f"{what} not found")
        return JSONResponse(view(payment))

    @api("GET", "/core/v5/charges")
    async def _list_charges(self, request: Request) -> Response:
        query = request.query_params
        since, until = (
            parse_time(query.get("created_since")),
            parse_time(query.get("created_until")),
        )
        try:
            page, size = int(query.get("page", "1")), int(query.get("size", "10"))
        except ValueError:
            return _error(422, "page and size must be integers")
        if page < 1 or not 1 <= size <= MAX_SIZE:
            return _error(422, f"page must be >= 1 and size 1..{MAX_SIZE}")
        chosen = []
        for payment in self.charges.values():
            created = parse_time(payment.native["charge"]["created_at"])
            if not payment.exists or created is None:
                continue
            if (since and created < since) or (until and created > until):
                continue
            chosen.append((created, payment.native["charge"]["id"], payment))
        chosen.sort(key=lambda item: (item[0], item[1]), reverse=True)  # newest first
        data = [self._charge(p) for _, _, p in chosen[(page - 1) * size : page * size]]
        paging: dict[str, Any] = {"total": len(chosen)}
        params = {k: v for k, v in query.items() if k != "page"}
        if page * size < len(chosen):
            paging["next"] = f"{request.url.path}?{urlencode({**params, 'page': page + 1})}"
        if page > 1:
            paging["previous"] = f"{request.url.path}?{urlencode({**params, 'page': page - 1})}"
        return JSONResponse({"data": data, "paging": paging})

    @api("POST", "/core/v5/orders")
    async def _post_order(self, request: Request) -> Response:
        try:
            params = json.loads(await request.body())
            items = params["items"]
            amount = sum(int(item["amount"]) * int(item.get("quantity", 1)) for item in items)
        except (ValueError, KeyError, TypeError):
            return _error(422, "The request is invalid.", {"order.items": ["required"]})
        key = request.headers.get("idempotency-key")

        async def create() -> tuple[int, Any]:
            if amount < 1:
                return 422, {"message": "The request is invalid.",
                             "errors": {"order.items": ["amount must be positive"]}}  # fmt: skip
            async with self.lock:
                now = self.now()
                payment = self.add(FakePayment(
                    object_id="or_" + random_id(self.api_rng, 16),
                    reference=str(params.get("code") or ""), amount=amount,
                    currency=str(params.get("currency") or "BRL"), created_at=now,
                    outcome=Outcome.PENDING, exists=True,
                ))  # fmt: skip
                self._create(payment, now, self.api_rng)
            return 200, self._order(payment)

        def refuse(verdict: Verdict) -> Response:
            if verdict is Verdict.CONFLICT:
                return _error(409, "A request with this Idempotency-Key is in progress.")
            return _error(400, "Idempotency-Key already used with a different request.")

        return await respond(self.creates, request, key, params, create, refuse)


def _load_key(path: str) -> RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"signing key file: {exc}") from exc
    if not isinstance(key, RSAPrivateKey):
        raise ConfigError("signing key file must hold an RSA private key")
    return key


def _error(status: int, message: str, errors: Mapping[str, Any] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"message": message}
    if errors:
        body["errors"] = dict(errors)
    return JSONResponse(body, status_code=status)
