"""Fake Stripe: PaymentIntents with their charges, refunds and v1 snapshot events.

Lifecycles: `payment_intent.created`; then paid (`payment_intent.succeeded` +
`charge.succeeded`, then per refund `refund.created` + `charge.refunded`), failed
(`payment_intent.payment_failed` + `charge.failed`; the intent goes back to
`requires_payment_method` with `last_payment_error`, as Stripe does), or canceled
(`payment_intent.canceled`). Webhooks are signed by Porteiro's Stripe adapter
(`Stripe-Signature`, re-signed on every attempt as Stripe does). Retries: exponential from
1 minute, capped at 12 hours, for 3 days.

API (Bearer or Basic with the secret key): `GET /v1/payment_intents/{id}`
(`expand[]=latest_charge`), `GET /v1/charges/{id}`, `GET /v1/events/{id}`,
`GET /v1/events` (`created[gte|lte|gt|lt]`, `limit`, `starting_after`, `type`; newest
first), `POST /v1/payment_intents` (form-encoded, `Idempotency-Key`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from porteiro.fakes.core import (
    FakeGateway,
    FakePayment,
    Outcome,
    Step,
    Webhook,
    card_steps,
    exponential,
    random_id,
    unix,
)
from porteiro.fakes.idempotency import Verdict, respond
from porteiro.fakes.routes import api
from porteiro.model import PaymentState

API_VERSION = "2024-06-20"
_DECLINE = {"code": "card_declined", "decline_code": "generic_decline",
            "message": "Your card was declined.", "type": "card_error"}  # fmt: skip


class FakeStripe(FakeGateway):
    name = "stripe"
    retry_schedule = exponential(60.0, 2.0, 12 * 3600.0, 3 * 86400.0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.charges: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []  # in creation order
        self.events_by_id: dict[str, dict[str, Any]] = {}

    # -- the truth ----------------------------------------------------------------------

    def plan(self) -> list[Step]:
        steps: list[Step] = []
        for payment in self.planned_payments(lambda _: "pi_" + random_id(self.rng)):
            self.add(payment)
            at = payment.created_at
            steps.append(Step(payment, at, partial(self._create, payment, at)))
            steps += card_steps(payment, at, self._fail, self._cancel, self._pay, self._refund)
        return steps

    def _create(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        ids = self.ids_for(payment)
        metadata = {"order_id": payment.reference}
        intent: dict[str, Any] = {
            "id": payment.object_id, "object": "payment_intent", "amount": payment.amount,
            "amount_capturable": 0, "amount_received": 0, "capture_method": "automatic_async",
            "client_secret": f"{payment.object_id}_secret_{random_id(ids)}",
            "confirmation_method": "automatic", "created": unix(at),
            "currency": payment.currency.lower(), "customer": None, "description": None,
            "last_payment_error": None, "latest_charge": None, "livemode": False,
            "metadata": metadata, "payment_method": None, "payment_method_types": ["card"],
            "status": "requires_payment_method", "canceled_at": None,
            "cancellation_reason": None,
        }  # fmt: skip
        payment.native["intent"] = intent
        return [self._event("payment_intent.created", payment, intent, at)]

    def _charge(self, payment: FakePayment, at: datetime, *, paid: bool) -> dict[str, Any]:
        ids = self.ids_for(payment)
        intent = payment.native["intent"]
        charge: dict[str, Any] = {
            "id": "ch_" + random_id(ids), "object": "charge", "amount": payment.amount,
            "amount_captured": payment.amount if paid else 0, "amount_refunded": 0,
            "balance_transaction": "txn_" + random_id(ids) if paid else None,
            "captured": paid, "created": unix(at), "currency": intent["currency"],
            "disputed": False, "failure_code": None if paid else _DECLINE["code"],
            "failure_message": None if paid else _DECLINE["message"], "livemode": False,
            "metadata": intent["metadata"], "paid": paid, "payment_intent": payment.object_id,
            "payment_method": "pm_" + random_id(ids), "refunded": False,
            "status": "succeeded" if paid else "failed",
            "outcome": {"network_status": "approved_by_network" if paid else "declined_by_network",
                        "type": "authorized" if paid else "issuer_declined"},
        }  # fmt: skip
        self.charges[charge["id"]] = charge
        intent["latest_charge"] = charge["id"]
        intent["payment_method"] = charge["payment_method"]
        return charge

    def _pay(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        charge = self._charge(payment, at, paid=True)
        intent = payment.native["intent"]
        intent.update(status="succeeded", amount_received=payment.amount)
        payment.state = PaymentState.PAID
        return [
            self._event("payment_intent.succeeded", payment, intent, at),
            self._event("charge.succeeded", payment, charge, at),
        ]

    def _fail(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        charge = self._charge(payment, at, paid=False)
        intent = payment.native["intent"]
        error = {**_DECLINE, "charge": charge["id"]}
        intent.update(status="requires_payment_method", last_payment_error=error)
        payment.state = PaymentState.FAILED
        return [
            self._event("payment_intent.payment_failed", payment, intent, at),
            self._event("charge.failed", payment, charge, at),
        ]

    def _cancel(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        intent = payment.native["intent"]
        intent.update(status="canceled", canceled_at=unix(at), cancellation_reason="abandoned")
        payment.state = PaymentState.CANCELED
        return [self._event("payment_intent.canceled", payment, intent, at)]

    def _refund(self, payment: FakePayment, share: int, at: datetime) -> list[Webhook]:
        ids = self.ids_for(payment)
        charge = self.charges[payment.native["intent"]["latest_charge"]]
        refund = {
            "id": "re_" + random_id(ids), "object": "refund", "amount": share,
            "balance_transaction": "txn_" + random_id(ids), "charge": charge["id"],
            "created": unix(at), "currency": charge["currency"], "metadata": {},
            "payment_intent": payment.object_id, "reason": "requested_by_customer",
            "status": "succeeded",
        }  # fmt: skip
        before = {"amount_refunded": charge["amount_refunded"], "refunded": charge["refunded"]}
        charge["amount_refunded"] += share
        charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        payment.refunded_amount = charge["amount_refunded"]
        payment.state = (
            PaymentState.REFUNDED if charge["refunded"] else PaymentState.PARTIALLY_REFUNDED
        )
        return [
            self._event("refund.created", payment, refund, at),
            self._event("charge.refunded", payment, charge, at, previous=before),
        ]

    def _event(
        self,
        event_type: str,
        payment: FakePayment,
        obj: Mapping[str, Any],
        at: datetime,
        previous: Mapping[str, Any] | None = None,
    ) -> Webhook:
        ids = self.ids_for(payment)
        data: dict[str, Any] = {"object": json.loads(json.dumps(obj))}  # a snapshot
        if previous is not None:
            data["previous_attributes"] = dict(previous)
        event_id = "evt_" + random_id(ids)
        event: dict[str, Any] = {
            "id": event_id, "object": "event", "api_version": API_VERSION,
            "created": unix(at), "data": data, "livemode": False, "pending_webhooks": 1,
            "request": {"id": "req_" + random_id(ids, 14), "idempotency_key": None},
            "type": event_type,
        }  # fmt: skip
        self.events.append(event)
        self.events_by_id[event_id] = event
        body = json.dumps(event, indent=2).encode()  # Stripe pretty-prints
        return Webhook(event_id, event_type, payment.object_id, body)

    # -- the API ------------------------------------------------------------------------

    def refusal(self, request: Request) -> Response | None:
        return None if self.authorized(request) else _unauthorized()

    @api("GET", "/v1/payment_intents/{id}")
    async def _get_intent(self, request: Request) -> Response:
        payment = self.existing(request.path_params["id"])
        if payment is None:
            return _missing("payment_intent", request.path_params["id"])
        intent = dict(payment.native["intent"])
        charge_id = intent.get("latest_charge")
        if charge_id and "latest_charge" in request.query_params.getlist("expand[]"):
            intent["latest_charge"] = self.charges[charge_id]
        return JSONResponse(intent)

    @api("GET", "/v1/charges/{id}")
    async def _get_charge(self, request: Request) -> Response:
        return self._get_stored(request, self.charges, "charge")

    @api("GET", "/v1/events/{id}")
    async def _get_event(self, request: Request) -> Response:
        return self._get_stored(request, self.events_by_id, "event")

    def _get_stored(
        self, request: Request, objects: Mapping[str, dict[str, Any]], what: str
    ) -> Response:
        """GET of a stored object by its id: Stripe's 404 if unknown."""
        found = objects.get(request.path_params["id"])
        if found is None:
            return _missing(what, request.path_params["id"])
        return JSONResponse(found)

    @api("GET", "/v1/events")
    async def _list_events(self, request: Request) -> Response:
        query = request.query_params
        try:
            limit = int(query.get("limit", "10"))
            bounds = {op: int(query[f"created[{op}]"]) for op in ("gte", "lte", "gt", "lt")
                      if f"created[{op}]" in query}  # fmt: skip
            if "created" in query:
                bounds["eq"] = int(query["created"])
        except ValueError:
            return _invalid("created and limit must be integers")
        if not 1 <= limit <= 100:
            return _invalid("limit must be between 1 and 100")
        kind = query.get("type")
        chosen = [
            event for event in reversed(self.events)
            if _in_bounds(event["created"], bounds) and (kind is None or event["type"] == kind)
        ]  # fmt: skip
        # Newest first; events of the same second keep a stable (reverse creation) order.
        chosen.sort(key=lambda event: event["created"], reverse=True)
        after = query.get("starting_after")
        if after:
            ids = [event["id"] for event in chosen]
            if after not in ids:
                return _invalid(f"starting_after: no such event {after!r} in this list")
            chosen = chosen[ids.index(after) + 1 :]
        page = chosen[:limit]
        body = {"object": "list", "data": page, "has_more": len(chosen) > limit,
                "url": "/v1/events"}  # fmt: skip
        return JSONResponse(body)

    @api("POST", "/v1/payment_intents")
    async def _create_intent(self, request: Request) -> Response:
        try:  # Stripe's API takes application/x-www-form-urlencoded parameters
            params = dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))
        except (UnicodeDecodeError, ValueError):
            return _invalid("the body must be form-encoded parameters")
        key = request.headers.get("idempotency-key")

        async def create() -> tuple[int, Any]:
            return await self._api_create(params)

        def refuse(verdict: Verdict) -> Response:
            if verdict is Verdict.CONFLICT:
                message = ("There is currently another in-progress request using this "
                           f"Idempotent Key: {key}. Please try again later.")  # fmt: skip
                return _error(409, "idempotency_error", "idempotency_key_in_use", message)
            message = ("Keys for idempotent requests can only be used with the same parameters "
                       f"they were first used with. Try using a key other than '{key}' if you "
                       "meant to execute a different request.")  # fmt: skip
            return _error(400, "idempotency_error", None, message)

        return await respond(self.creates, request, key, params, create, refuse,
                             {"idempotent-replayed": "true"})  # fmt: skip

    async def _api_create(self, params: Mapping[str, str]) -> tuple[int, Any]:
        try:
            amount = int(params.get("amount", ""))
        except ValueError:
            amount = 0
        currency = params.get("currency", "")
        if amount < 1 or len(currency) != 3:
            error = {"type": "invalid_request_error", "code": "parameter_missing",
                     "message": "amount (>= 1) and currency are required"}  # fmt: skip
            return 400, {"error": error}
        metadata = {key[9:-1]: value for key, value in params.items()
                    if key.startswith("metadata[") and key.endswith("]")}  # fmt: skip
        async with self.lock:
            now = self.now()
            payment = self.add(
                FakePayment(
                    object_id="pi_" + random_id(self.api_rng),
                    reference=metadata.get("order_id", ""),
                    amount=amount,
                    currency=currency.upper(),
                    created_at=now,
                    outcome=Outcome.PENDING,
                    exists=True,
                )
            )
            self._create(payment, now)
            payment.native["intent"]["metadata"] = metadata
            payment.native["intent"]["description"] = params.get("description")
        return 200, payment.native["intent"]


def _in_bounds(created: int, bounds: Mapping[str, int]) -> bool:
    tests = {
        "gte": lambda limit: created >= limit,
        "lte": lambda limit: created <= limit,
        "gt": lambda limit: created > limit,
        "lt": lambda limit: created < limit,
        "eq": lambda limit: created == limit,
    }
    return all(tests[op](limit) for op, limit in bounds.items())


def _error(status: int, kind: str, code: str | None, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "code": code, "message": message}}, status)


def _unauthorized() -> JSONResponse:
    return _error(401, "invalid_request_error", None, "Invalid API Key provided")


def _missing(what: str, object_id: str) -> JSONResponse:
    return _error(
        404, "invalid_request_error", "resource_missing", f"No such {what}: '{object_id}'"
    )


def _invalid(message: str) -> JSONResponse:
    return _error(400, "invalid_request_error", None, message)
