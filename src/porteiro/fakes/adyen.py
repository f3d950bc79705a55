"""Fake Adyen: Standard webhooks (one NotificationRequestItem per delivery), no status read.

Lifecycles (automatic capture, Adyen's default): `AUTHORISATION` success `true` (paid),
then per refund a `REFUND` modification (its own pspReference, the payment's as
`originalReference`); or `AUTHORISATION` success `false` (failed). Adyen cancels only
authorised-but-uncaptured payments, which automatic capture never leaves, so the cancel
rate counts as failures here. Items are HMAC-signed by Porteiro's adapter with the hex key
`--secret` (`additionalData.hmacSignature`), with HTTP Basic auth when `--basic-auth` is
given. The event id is Porteiro's de-duplication key `{pspReference}:{eventCode}:{success}`
(Adyen items carry no id of their own). Retries: 3 at once, then 2, 5, 10, 15, 30 minutes,
1, 2, 4, 8 hours, then every 8 hours up to 30 days.

API: like the real Checkout API there is no status read. `POST /v71/payments`
(`Idempotency-Key`, `X-API-Key` = `--api-key`) answers `Authorised` at once.
"""

from __future__ import annotations

import json
import random
import string
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from porteiro.fakes.core import FakeGateway, FakePayment, Outcome, Step, Webhook, refund_steps
from porteiro.fakes.idempotency import Verdict, respond
from porteiro.fakes.routes import api
from porteiro.model import PaymentState

MERCHANT = "PorteiroFake"
ZONE = timezone(timedelta(hours=1))  # Adyen dates carry an offset
_PSP = string.ascii_uppercase + string.digits
_QUEUE = (120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0)


def _schedule() -> tuple[float, ...]:
    delays = [0.0, 0.0, 0.0, *_QUEUE]
    while sum(delays) < 30 * 86400:
        delays.append(28800.0)
    return tuple(delays)


class FakeAdyen(FakeGateway):
    name = "adyen"
    retry_schedule = _schedule()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    def source_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"merchant_account": MERCHANT}
        if self.settings.basic_auth:
            options["basic_auth"] = self.settings.basic_auth
        return options

    def psp(self, rng: random.Random) -> str:
        return "".join(rng.choice(_PSP) for _ in range(16))

    def plan(self) -> list[Step]:
        steps: list[Step] = []
        for payment in self.planned_payments(lambda _: self.psp(self.rng)):
            self.add(payment)
            at = payment.created_at + timedelta(seconds=1)
            steps.append(Step(payment, at, partial(self._authorise, payment, at)))
            steps += refund_steps(payment, at, self._refund)
        return steps

    def _item(self, payment: FakePayment, code: str, value: int, success: bool,
              at: datetime) -> dict[str, Any]:  # fmt: skip
        return {
            "additionalData": {}, "amount": {"currency": payment.currency, "value": value},
            "eventCode": code, "eventDate": at.astimezone(ZONE).isoformat(timespec="seconds"),
            "merchantAccountCode": MERCHANT, "merchantReference": payment.reference,
            "paymentMethod": "visa", "pspReference": payment.object_id,
            "success": "true" if success else "false",
        }  # fmt: skip

    def _authorise(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        success = payment.outcome not in (Outcome.FAILED, Outcome.CANCELED)
        item = self._item(payment, "AUTHORISATION", payment.amount, success, at)
        if success:
            item["additionalData"] = {"authCode": f"{self.rng.randrange(10**6):06d}",
                                      "cardSummary": "1111"}  # fmt: skip
            item["operations"] = ["CANCEL", "CAPTURE", "REFUND"]
        else:
            item["reason"] = "Refused"
        payment.state = PaymentState.PAID if success else PaymentState.FAILED
        return [self._webhook(payment, item)]

    def _refund(self, payment: FakePayment, share: int, at: datetime) -> list[Webhook]:
        item = self._item(payment, "REFUND", share, True, at)
        item["originalReference"] = payment.object_id
        item["pspReference"] = self.psp(self.rng)
        payment.refunded_amount += share
        full = payment.refunded_amount >= payment.amount
        payment.state = PaymentState.REFUNDED if full else PaymentState.PARTIALLY_REFUNDED
        return [self._webhook(payment, item)]

    def _webhook(self, payment: FakePayment, item: dict[str, Any]) -> Webhook:
        event_id = f"{item['pspReference']}:{item['eventCode']}:{item['success']}"
        body = {"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}
        raw = json.dumps(body, separators=(",", ":")).encode()  # signed by sign()
        return Webhook(event_id, item["eventCode"], payment.object_id, raw)

    # -- the API ------------------------------------------------------------------------

    def refusal(self, request: Request) -> Response | None:
        expected = self.settings.api_key
        if expected is not None and request.headers.get("x-api-key") != expected:
            return _error(401, "000", "HTTP Status Response - Unauthorized", "security")
        return None

    @api("POST", "/v71/payments")
    async def _post(self, request: Request) -> Response:
        try:
            params = json.loads(await request.body())
            amount = int(params["amount"]["value"])
            currency = str(params["amount"]["currency"])
            reference = str(params["reference"])
        except (ValueError, KeyError, TypeError):
            return _error(422, "702", "Required field missing: amount or reference", "validation")
        key = request.headers.get("idempotency-key")

        async def create() -> tuple[int, Any]:
            async with self.lock:
                payment = self.add(FakePayment(
                    object_id=self.psp(self.api_rng), reference=reference, amount=amount,
                    currency=currency, created_at=self.now(), outcome=Outcome.PENDING,
                    state=PaymentState.PAID, exists=True,
                ))  # fmt: skip
            body = {"pspReference": payment.object_id, "resultCode": "Authorised",
                    "amount": {"currency": currency, "value": amount},
                    "merchantReference": reference}  # fmt: skip
            return 200, body

        def refuse(verdict: Verdict) -> Response:
            if verdict is Verdict.CONFLICT:
                return _error(409, "704", "request already processed or in progress", "validation")
            return _error(422, "704", "Idempotency-Key used with a different request", "validation")

        headers = {"idempotency-key": key} if key else {}
        response = await respond(self.creates, request, key, params, create, refuse, headers)
        if key:
            response.headers["idempotency-key"] = key  # Adyen echoes it
        return response


def _error(status: int, code: str, message: str, kind: str) -> JSONResponse:
    body = {"status": status, "errorCode": code, "message": message, "errorType": kind}
    return JSONResponse(body, status_code=status)
