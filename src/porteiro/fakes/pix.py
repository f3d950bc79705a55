"""Fake PSP with the BCB "API Pix" (Efí flavour): cobs, Pix received, devoluções.

Lifecycles: a cob (`PUT /cob` equivalent, no webhook) is paid by one Pix before it
expires, then possibly refunded by one or two devoluções; or it is never paid and expires.
Expiry is not a status (BCB spec): the cob stays `ATIVA` and `calendario.criacao +
calendario.expiracao` tells when it lapsed; the truth's canonical state is `expired` from
that moment. Callbacks are the BCB `{"pix": [...]}` bodies (Porteiro's pix.samples
helpers): the paid Pix, then per devolução the Pix re-sent with that one devolução
(`DEVOLVIDO`), as Efí's live deliveries do. They are sent in Efí's skip-mTLS mode: the
registered URL carries `?hmac=<token>&ignorar=` so Efí appends no `/pix` and Porteiro's
adapter signs with `hmac=<--secret>&ignorar=/pix`. Efí's retry schedule is unpublished:
exponential from 30 s, capped at 1 hour, for a day (an assumption).

API (`/oauth/token` with HTTP Basic `client_id:client_secret` = `--api-key`, then Bearer):
`PUT/GET /v2/cob/{txid}`, `GET /v2/pix/{e2eid}`, `GET /v2/pix?inicio&fim` (paginated),
`GET/PUT /v2/pix/{e2eid}/devolucao/{id}`.
"""

from __future__ import annotations

import json
import random
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from porteiro.config import SourceConfig
from porteiro.errors import ParseError
from porteiro.fakes.core import (
    FakeGateway,
    FakePayment,
    Outcome,
    Step,
    Webhook,
    basic_credentials,
    exponential,
    iso,
    parse_time,
    random_id,
    refund_steps,
)
from porteiro.fakes.idempotency import Verdict, respond
from porteiro.fakes.routes import api
from porteiro.model import PaymentState
from porteiro.providers.pix.payload import format_valor, minor_units
from porteiro.providers.pix.samples import EFI_ISPB, body, pix_item, transaction_id

ERROR_BASE = "https://pix.bcb.gov.br/api/v2/error/"
TXID = re.compile(r"[a-zA-Z0-9]{26,35}")
DEVOLUCAO_ID = re.compile(r"[a-zA-Z0-9]{1,35}")
MAX_PAGE = 1000
_EMV_HEAD, _EMV_TAIL = "00020101021226830014BR.GOV.BCB.PIX2561", "5204000053039865802BR"


class FakePix(FakeGateway):
    name = "pix"
    retry_schedule = exponential(30.0, 2.0, 3600.0, 86400.0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pix: dict[str, dict[str, Any]] = {}  # by endToEndId
        self.tokens: set[str] = set()

    def source_config(self) -> SourceConfig:
        options = {"hmac_token": self.settings.secret, "keys": [self.settings.pix_key],
                   "confirm": False}  # fmt: skip
        return SourceConfig(name="fake", provider="pix", options=options)

    # -- the truth ----------------------------------------------------------------------

    def plan(self) -> list[Step]:
        steps: list[Step] = []
        expiracao = self.scenario.cob_expiration
        planned = self.planned_payments(lambda _: random_id(self.rng, 32), pix=True, lead=0.0)
        for payment in planned:
            self.add(payment)
            payment.expires_at = payment.created_at + timedelta(seconds=expiracao)
            self._cob(payment, expiracao)
            steps.append(Step(payment, payment.created_at, list))
            if payment.outcome is Outcome.EXPIRED:
                continue
            paid_at = payment.created_at + timedelta(
                seconds=self.rng.uniform(0.5, min(5.0, expiracao / 2))
            )
            steps.append(Step(payment, paid_at, partial(self._pay, payment, paid_at)))
            steps += refund_steps(payment, paid_at, self._refund, first=1.0, every=1.0)
        return steps

    def _cob(
        self, payment: FakePayment, expiracao: int, extra: Mapping[str, Any] | None = None
    ) -> None:
        txid = payment.object_id
        location = f"pix.example.com/qr/v2/{random_id(self.api_rng, 32).lower()}"
        payment.native["cob"] = {
            "calendario": {"criacao": iso(payment.created_at), "expiracao": expiracao},
            "txid": txid, "revisao": 0, "status": "ATIVA",
            "loc": {"id": self.api_rng.randrange(1, 10**6), "location": location,
                    "tipoCob": "cob", "criacao": iso(payment.created_at)},
            "location": location, "valor": {"original": format_valor(payment.amount)},
            "chave": self.settings.pix_key, "solicitacaoPagador": f"Pedido {payment.reference}",
            "pixCopiaECola": f"{_EMV_HEAD}{location}{_EMV_TAIL}",
            **(extra or {}),
        }  # fmt: skip

    def _pay(self, payment: FakePayment, at: datetime) -> list[Webhook]:
        item = pix_item(
            txid=payment.object_id, amount=payment.amount, chave=self.settings.pix_key, at=at,
            rng=self.rng,
        )  # fmt: skip
        item["infoPagador"] = f"Pedido {payment.reference}"
        self.pix[item["endToEndId"]] = {**item, "devolucoes": []}
        cob = payment.native["cob"]
        cob["status"] = "CONCLUIDA"
        cob["pix"] = [item]
        payment.native["e2eid"] = item["endToEndId"]
        payment.state = PaymentState.PAID
        return [Webhook(item["endToEndId"], "pix", payment.object_id, body(item))]

    def _refund(self, payment: FakePayment, share: int, at: datetime) -> list[Webhook]:
        e2eid = payment.native["e2eid"]
        refund = self._devolucao(e2eid, random_id(self.rng, 12), share, at, self.rng)
        item = {key: value for key, value in self.pix[e2eid].items() if key != "devolucoes"}
        event_id = f"{refund['rtrId']}:{refund['status']}"
        return [
            Webhook(
                event_id, "pix.devolucao", payment.object_id, body({**item, "devolucoes": [refund]})
            )
        ]

    def _devolucao(
        self, e2eid: str, refund_id: str, share: int, at: datetime, rng: random.Random
    ) -> dict[str, Any]:
        """Record a settled devolução of `share` on the Pix and move the truth."""
        refund = {
            "id": refund_id,
            "rtrId": transaction_id("D", EFI_ISPB, at, rng),
            "valor": format_valor(share),
            "horario": {"solicitacao": iso(at), "liquidacao": iso(at + timedelta(seconds=1))},
            "status": "DEVOLVIDO",
            "natureza": "ORIGINAL",
        }
        pix = self.pix[e2eid]
        pix["devolucoes"].append(refund)
        payment = self.payments[pix["txid"]]
        payment.refunded_amount += share
        for cob_pix in payment.native["cob"].get("pix", []):
            if cob_pix["endToEndId"] == e2eid:
                cob_pix["devolucoes"] = list(pix["devolucoes"])
        full = payment.refunded_amount >= payment.amount
        payment.state = PaymentState.REFUNDED if full else PaymentState.PARTIALLY_REFUNDED
        return refund

    # -- the API ------------------------------------------------------------------------

    @api("POST", "/oauth/token", public=True)
    async def _token(self, request: Request) -> Response:
        header = request.headers.get("authorization", "")
        given, expected = basic_credentials(header), self.settings.api_key
        if given is None or (expected is not None and given != expected):
            return _problem(401, "AcessoNegado", "invalid client credentials")
        raw = await request.body()
        try:
            grant = json.loads(raw or b"{}").get("grant_type")
        except (ValueError, AttributeError):
            grant = None
        if grant != "client_credentials":
            return _problem(400, "RequisicaoInvalida", "grant_type must be client_credentials")
        token = secrets.token_urlsafe(24)
        self.tokens.add(token)
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                  "scope": "cob.read cob.write pix.read pix.write webhook.read"}  # fmt: skip
        return JSONResponse(answer)

    def refusal(self, request: Request) -> Response | None:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if token in self.tokens or (self.settings.api_key is None and bool(token)):
            return None
        return _problem(401, "AcessoNegado", "invalid token")

    @api("GET", "/v2/cob/{txid}")
    async def _get_cob(self, request: Request) -> Response:
        missing = _problem(404, "CobNaoEncontrado", "cob not found")
        return self.native_of(request.path_params["txid"], "cob", missing)

    @api("PUT", "/v2/cob/{txid}")
    async def _put_cob(self, request: Request) -> Response:
        txid = request.path_params["txid"]
        if not TXID.fullmatch(txid):
            return _problem(400, "CobOperacaoInvalida", "txid must be 26 to 35 letters and digits")
        try:
            params = json.loads(await request.body())
            amount = minor_units(params["valor"]["original"], where="valor.original")
            expiracao = int(params.get("calendario", {}).get("expiracao", 86400))
        except (ValueError, KeyError, TypeError, AttributeError, ParseError) as exc:
            return _problem(400, "CobOperacaoInvalida", f"invalid cob: {exc}")
        if txid in self.payments and self.payments[txid].outcome is not Outcome.PENDING:
            return _problem(400, "CobOperacaoInvalida", "txid already used by another cob")

        async def create() -> tuple[int, Any]:
            async with self.lock:
                now = self.now()
                payment = self.add(FakePayment(
                    object_id=txid, reference=txid, amount=amount, currency="BRL",
                    created_at=now, outcome=Outcome.PENDING, exists=True,
                    expires_at=now + timedelta(seconds=expiracao),
                ))  # fmt: skip
                extra = {k: params[k] for k in ("devedor", "infoAdicionais") if k in params}
                self._cob(payment, expiracao, extra)
                if isinstance(params.get("chave"), str):
                    payment.native["cob"]["chave"] = params["chave"]
            return 201, payment.native["cob"]

        def refuse(verdict: Verdict) -> Response:
            if verdict is Verdict.CONFLICT:
                return _problem(409, "CobOperacaoInvalida", "a cob with this txid is being created")
            return _problem(400, "CobOperacaoInvalida", "txid already used with other data")

        return await respond(self.creates, request, txid, params, create, refuse)

    @api("GET", "/v2/pix/{e2eid}")
    async def _get_pix(self, request: Request) -> Response:
        pix = self.pix.get(request.path_params["e2eid"])
        if pix is None:
            return _problem(404, "PixNaoEncontrado", "pix not found")
        return JSONResponse(pix)

    @api("GET", "/v2/pix")
    async def _list_pix(self, request: Request) -> Response:
        query = request.query_params
        start, end = parse_time(query.get("inicio")), parse_time(query.get("fim"))
        if start is None or end is None or end < start:
            return _problem(
                400, "ConsultaInvalida", "inicio and fim must be RFC 3339, fim >= inicio"
            )
        try:
            page = int(query.get("paginacao.paginaAtual", "0"))
            size = int(query.get("paginacao.itensPorPagina", "100"))
        except ValueError:
            return _problem(400, "ConsultaInvalida", "paginacao must be integers")
        if page < 0 or not 1 <= size <= MAX_PAGE:
            return _problem(400, "ConsultaInvalida", f"itensPorPagina must be 1..{MAX_PAGE}")
        chosen = sorted(
            (pix for pix in self.pix.values() if _within(pix["horario"], start, end)
             and _matches(pix, query)),
            key=lambda pix: (pix["horario"], pix["endToEndId"]),
        )  # fmt: skip
        total = len(chosen)
        pages = (total + size - 1) // size
        paginacao = {"paginaAtual": page, "itensPorPagina": size,
                     "quantidadeDePaginas": pages, "quantidadeTotalDeItens": total}  # fmt: skip
        body = {"parametros": {"inicio": query["inicio"], "fim": query["fim"],
                               "paginacao": paginacao},
                "pix": chosen[page * size : (page + 1) * size]}  # fmt: skip
        return JSONResponse(body)

    @api("GET", "/v2/pix/{e2eid}/devolucao/{id}")
    async def _get_devolucao(self, request: Request) -> Response:
        pix = self.pix.get(request.path_params["e2eid"])
        found = [
            r for r in (pix or {}).get("devolucoes", []) if r["id"] == request.path_params["id"]
        ]
        if not found:
            return _problem(404, "DevolucaoNaoEncontrada", "devolucao not found")
        return JSONResponse(found[0])

    @api("PUT", "/v2/pix/{e2eid}/devolucao/{id}")
    async def _put_devolucao(self, request: Request) -> Response:
        e2eid, refund_id = request.path_params["e2eid"], request.path_params["id"]
        pix = self.pix.get(e2eid)
        if pix is None:
            return _problem(404, "PixNaoEncontrado", "pix not found")
        if not DEVOLUCAO_ID.fullmatch(refund_id):
            return _problem(400, "DevolucaoInvalida", "id must be 1 to 35 letters and digits")
        try:
            params = json.loads(await request.body())
            share = minor_units(params["valor"], where="valor")
        except (ValueError, KeyError, TypeError, ParseError) as exc:
            return _problem(400, "DevolucaoInvalida", f"invalid devolucao: {exc}")
        refunded = sum(minor_units(r["valor"]) for r in pix["devolucoes"])
        key = f"{e2eid}/{refund_id}"

        async def create() -> tuple[int, Any]:
            if share < 1 or refunded + share > minor_units(pix["valor"]):
                body = {"type": ERROR_BASE + "DevolucaoInvalida", "title": "DevolucaoInvalida",
                        "status": 400, "detail": "valor exceeds what can be refunded"}  # fmt: skip
                return 400, body
            async with self.lock:
                refund = self._devolucao(e2eid, refund_id, share, self.now(), self.api_rng)
            return 201, refund

        def refuse(verdict: Verdict) -> Response:
            return _problem(409 if verdict is Verdict.CONFLICT else 400, "DevolucaoInvalida",
                            "devolucao id already used with other data")  # fmt: skip

        return await respond(self.creates, request, key, params, create, refuse)


def _within(horario: str, start: datetime, end: datetime) -> bool:
    moment = parse_time(horario)
    return moment is not None and start <= moment <= end


def _matches(pix: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    if "txid" in query and pix.get("txid") != query["txid"]:
        return False
    for name, field in (("txIdPresente", "txid"), ("devolucaoPresente", "devolucoes")):
        wanted = query.get(name)
        if wanted in ("true", "false") and bool(pix.get(field)) != (wanted == "true"):
            return False
    return True


def _problem(status: int, kind: str, detail: str) -> JSONResponse:
    body = {"type": ERROR_BASE + kind, "title": kind, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status)
