"""Fake Mercado Pago: payments with thin `payment.created` / `payment.updated` webhooks.

A notification carries no state, only `data.id`: the truth is moved forward BEFORE the
notification of each step is queued, so `GET /v1/payments/{id}` already answers (at least)
the state it announces when it arrives. Lifecycles: created (`pending`), then `approved`
(and refunds: `approved`/`partially_refunded`, then `refunded`), `rejected` or `cancelled`.
Signed by Porteiro's adapter (`x-signature` over `id:{data.id};request-id:...;ts:...;`,
`?data.id=...&type=payment`). Retries: every 15 minutes three times, then doubling (capped
at a day) for 3 days.

API (Bearer access token = `--api-key`): `GET /v1/payments/{id}`,
`GET /v1/payments/search` (`begin_date`, `end_date`, `range=date_created|date_last_updated`,
`offset`, `limit`, `external_reference`, `sort`/`criteria`), `POST /v1/payments`
(`X-Idempotency-Key`).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from porteiro.fakes.core import (
    FakeGateway,
    FakePayment,
    Outcome,
    Step,
    Webhook,
    parse_time,
    refund_steps,
)
from porteiro.fakes.idempotency import Verdict, respond
from porteiro.fakes.routes import api
from porteiro.model import PaymentState

LOCAL = timezone(timedelta(hours=-3))  # Mercado Pago answers in the account's zone
MAX_LIMIT = 1000


def _at(moment: datetime) -> str:
    return moment.astimezone(LOCAL).isoformat(timespec="milliseconds")


def _major(minor: int) -> float:
    return float(Decimal(minor).scaleb(-2))  # shortest repr: 123.45 stays "123.45"


class FakeMercadoPago(FakeGateway):
    name = "mercadopago"
    retry_schedule = (900.0, 900.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 57600.0,
                      86400.0, 86400.0)  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user_id = self.rng.randrange(10**8, 10**9)

    # -- the truth ----------------------------------------------------------------------

    def plan(self) -> list[Step]:
        steps: list[Step] = []
        ids = self.rng.sample(range(10**10, 10**11), self.scenario.payments)
        for payment in self.planned_payments(lambda index: str(ids[index])):
            self.add(payment)
            at = payment.created_at
            steps.append(Step(payment, at, partial(self._create, payment, at)))
            later = at + timedelta(seconds=2)
            status = {Outcome.FAILED: ("rejected", "cc_rejected_other_reason"),
                      Outcome.CANCELED: ("cancelled", "by_collector")}  # fmt: skip
            final = status.get(payment.outcome, ("approved", "accredited"))
            steps.append(Step(payment, later, partial(self._move, payment, later, *final)))
            steps += refund_steps(payment, later, self._refund)
        return steps

    def _resource(self, payment: FakePayment, at: datetime) -> dict[str, Any]:
        return {
            "id": int(payment.object_id), "date_created": _at(at), "date_approved": None,
            "date_last_updated": _at(at), "money_release_date": None,
            "operation_type": "regular_payment", "payment_method_id": "pix",
            "payment_type_id": "bank_transfer", "status": "pending",
            "status_detail": "pending_waiting_transfer", "currency_id": payment.currency,
            "description": f"Pedido {payment.reference}", "live_mode": False,
            "external_reference": payment.reference,
            "transaction_amount": _major(payment.amount), "transaction_amount_refunded": 0,
            "installments": 1, "captured": True, "collector_id": self.user_id, "refunds": [],
        }  # fmt: skip

    def _create(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        payment.native["payment"] = self._resource(payment, at)
        return [self._notice(payment, "payment.created", at)]

    def _move(self, payment: FakePayment, at: datetime, status: str, detail: str) -> list[Webhook]:
        resource = payment.native["payment"]
        resource.update(status=status, status_detail=detail, date_last_updated=_at(at))
        if status == "approved":
            resource["date_approved"] = _at(at)
        states = {"approved": PaymentState.PAID, "rejected": PaymentState.FAILED,
                  "cancelled": PaymentState.CANCELED}  # fmt: skip
        payment.state = states[status]
        return [self._notice(payment, "payment.updated", at)]

    def _refund(self, payment: FakePayment, share: int, at: datetime) -> list[Webhook]:
        resource = payment.native["payment"]
        payment.refunded_amount += share
        full = payment.refunded_amount >= payment.amount
        resource["refunds"].append({"id": self.rng.randrange(10**9, 10**10),
                                    "amount": _major(share), "date_created": _at(at)})  # fmt: skip
        resource.update(
            status="refunded" if full else "approved",
            status_detail="refunded" if full else "partially_refunded",
            transaction_amount_refunded=_major(payment.refunded_amount),
            date_last_updated=_at(at),
        )
        payment.state = PaymentState.REFUNDED if full else PaymentState.PARTIALLY_REFUNDED
        return [self._notice(payment, "payment.updated", at)]

    def _notice(self, payment: FakePayment, action: str, at: datetime) -> Webhook:
        notice_id = self.rng.randrange(10**10, 10**11)
        body = {"id": notice_id, "live_mode": False, "type": "payment", "date_created": _at(at),
                "user_id": self.user_id, "api_version": "v1", "action": action,
                "data": {"id": payment.object_id}}  # fmt: skip
        raw = json.dumps(body, separators=(",", ":")).encode()
        return Webhook(str(notice_id), action, payment.object_id, raw)

    # -- the API ------------------------------------------------------------------------

    def refusal(self, request: Request) -> Response | None:
        expected = self.settings.api_key
        header = request.headers.get("authorization", "")
        if header.startswith("Bearer ") and (expected is None or header == f"Bearer {expected}"):
            return None
        return _error(401, "unauthorized", "invalid access token")

    # Before GET /v1/payments/{id}, which would take "search" for an id.
    @api("GET", "/v1/payments/search")
    async def _search(self, request: Request) -> Response:
        query = request.query_params
        field = query.get("range", "date_created")
        if field not in ("date_created", "date_last_updated", "date_approved"):
            return _error(400, "bad_request", "range must be date_created or date_last_updated")
        start, end = parse_time(query.get("begin_date")), parse_time(query.get("end_date"))
        try:
            offset, limit = int(query.get("offset", "0")), int(query.get("limit", "30"))
        except ValueError:
            return _error(400, "bad_request", "offset and limit must be integers")
        if offset < 0 or not 1 <= limit <= MAX_LIMIT:
            return _error(400, "bad_request", f"limit must be 1..{MAX_LIMIT}")
        reference = query.get("external_reference")
        chosen = []
        for payment in self.payments.values():
            resource = payment.native.get("payment")
            moment = parse_time(resource.get(field)) if resource else None
            if resource is None or moment is None:
                continue
            if (start and moment < start) or (end and moment > end):
                continue
            if reference is not None and resource["external_reference"] != reference:
                continue
            chosen.append((moment, resource["id"], resource))
        descending = query.get("criteria", "asc") == "desc"
        chosen.sort(key=lambda item: (item[0], item[1]), reverse=descending)
        results = [resource for _, _, resource in chosen[offset : offset + limit]]
        paging = {"total": len(chosen), "limit": limit, "offset": offset}
        return JSONResponse({"paging": paging, "results": results})

    @api("GET", "/v1/payments/{id}")
    async def _get(self, request: Request) -> Response:
        missing = _error(404, "not_found", "Payment not found")
        return self.native_of(request.path_params["id"], "payment", missing)

    @api("POST", "/v1/payments")
    async def _post(self, request: Request) -> Response:
        try:
            params = json.loads(await request.body())
            amount = int(Decimal(str(params["transaction_amount"])).scaleb(2))
        except (ValueError, KeyError, TypeError, InvalidOperation):
            return _error(400, "bad_request", "transaction_amount is required")
        key = request.headers.get("x-idempotency-key")

        async def create() -> tuple[int, Any]:
            if amount < 1:
                return 400, {"message": "invalid transaction_amount", "error": "bad_request",
                             "status": 400, "cause": []}  # fmt: skip
            async with self.lock:
                now = self.now()
                payment = self.add(FakePayment(
                    object_id=str(self.api_rng.randrange(10**11, 10**12)),
                    reference=str(params.get("external_reference") or ""), amount=amount,
                    currency=str(params.get("currency_id") or "BRL"), created_at=now,
                    outcome=Outcome.PENDING, exists=True,
                ))  # fmt: skip
                resource = self._resource(payment, now)
                resource["description"] = params.get("description")
                resource["payment_method_id"] = params.get("payment_method_id", "pix")
                payment.native["payment"] = resource
            return 201, resource

        def refuse(verdict: Verdict) -> Response:
            if verdict is Verdict.CONFLICT:
                return _error(409, "conflict", "a request with this key is in progress")
            return _error(400, "bad_request", "X-Idempotency-Key already used with other data")

        return await respond(self.creates, request, key, params, create, refuse)


def _error(status: int, error: str, message: str) -> JSONResponse:
    body = {"message": message, "error": error, "status": status, "cause": []}
    return JSONResponse(body, status_code=status)
