"""Realistic Pix callbacks for `porteiro simulate`, the fakes and the tests.

Bodies are shaped like the BCB spec's `pixWebhook` examples and Efí's deliveries: a cob
paid by one Pix; with a refund, the same Pix item re-sent with its `devolucoes` (a partial
DEVOLVIDO, then a second one for the rest; a refund may first show as EM_PROCESSAMENTO).
Ids follow the BCB structure: endToEndId `E` + payer's ISPB + `yyyyMMddHHmm` (UTC) + 11
alphanumerics; rtrId the same with `D` and the receiving PSP's ISPB.

`PixSamples.sign` delivers a body as the PSP would: with Efí's `?hmac=` secret, or with
a trusted proxy's verified-client headers (plain mTLS cannot be produced by signing).
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers.base import SamplePayment, SignedRequest
from porteiro.providers.pix import auth as pix_auth
from porteiro.providers.pix.payload import AUTOMATICO_LISTS, format_valor

# Real ISPBs: Banco do Brasil, Itaú, Caixa, Santander, Nu Pagamentos.
PAYER_ISPBS = ("00000000", "60701190", "00360305", "90400888", "18236120")
EFI_ISPB = "09089356"
SAMPLE_CHAVE = "3f6a1c9e-5b2d-4e8f-9a7c-1d2e3f4a5b6c"  # a random-key (EVP) shape
_ALNUM = string.ascii_letters + string.digits
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def sample_txid(object_id: str) -> str:
    """The cob txid `simulate` uses for a planned payment: the object id's letters and
    digits, padded to the 26 characters a cob txid needs (at most 35)."""
    letters = _NOT_ALNUM.sub("", object_id)
    return (letters + "0" * 26)[: max(26, min(len(letters), 35))]


def transaction_id(prefix: str, ispb: str, at: datetime, rng: random.Random) -> str:
    """An endToEndId (prefix E) or rtrId (prefix D)."""
    stamp = at.astimezone(UTC).strftime("%Y%m%d%H%M")
    return prefix + ispb + stamp + "".join(rng.choice(_ALNUM) for _ in range(11))


def pix_item(
    *,
    txid: str | None,
    amount: int,
    chave: str,
    at: datetime,
    rng: random.Random,
    e2eid: str | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "endToEndId": e2eid or transaction_id("E", rng.choice(PAYER_ISPBS), at, rng),
        "txid": txid,
        "chave": chave,
        "valor": format_valor(amount),
        "horario": _rfc3339(at),
        "infoPagador": "Pedido pago via Porteiro simulate",
    }
    if txid is None:
        del item["txid"]
    return item


def devolucao(amount: int, at: datetime, rng: random.Random, status: str) -> dict[str, Any]:
    times = {"solicitacao": _rfc3339(at)}
    if status == "DEVOLVIDO":
        times["liquidacao"] = _rfc3339(at + timedelta(seconds=1))
    return {
        "id": "".join(rng.choice(_ALNUM) for _ in range(12)),
        "rtrId": transaction_id("D", EFI_ISPB, at, rng),
        "valor": format_valor(amount),
        "horario": times,
        "status": status,
    }


def body(*items: Mapping[str, Any]) -> bytes:
    return json.dumps({"pix": list(items)}, separators=(",", ":")).encode()


def lifecycle(
    payment: SamplePayment, chave: str, now: datetime, rng: random.Random
) -> Sequence[bytes]:
    """Bodies for one cob: paid, then (refund) a partial devolução and the rest."""
    start = now.astimezone(UTC) - timedelta(minutes=5)
    paid = pix_item(
        txid=sample_txid(payment.object_id), amount=payment.amount, chave=chave, at=start,
        rng=rng,
    )  # fmt: skip
    bodies = [body(paid)]
    if not payment.refund:
        return bodies
    part = max(1, payment.amount // 3)
    first = devolucao(part, start + timedelta(minutes=1), rng, "DEVOLVIDO")
    second = devolucao(payment.amount - part, start + timedelta(minutes=2), rng, "DEVOLVIDO")
    paid_at = first["horario"]["solicitacao"]
    if rng.random() < 0.5:  # the first refund was also notified while in flight
        pending = {**first, "status": "EM_PROCESSAMENTO", "horario": {"solicitacao": paid_at}}
        bodies.append(body({**paid, "devolucoes": [pending]}))
    bodies.append(body({**paid, "devolucoes": [first]}))
    # Efí's resend carries every refund of the Pix; its live deliveries one each.
    rest = [first, second] if rng.random() < 0.5 else [second]
    bodies.append(body({**paid, "devolucoes": rest}))
    return bodies


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


EFI_CLIENT_CN = "webhook.efipay.com.br"


class PixSamples:
    """Callbacks as the PSP delivers them, and payment lifecycles."""

    source: SourceConfig
    auth: pix_auth.PixAuth
    keys: frozenset[str]
    _hmac_tokens: tuple[str, ...]

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        """A delivery as the PSP sends it. hmac mode: the URL registered at Efí as
        `...?hmac=<token>&ignorar=` with Efí's `/pix` appended to it. Trusted-proxy mode:
        the proxy's verified-client headers (accepted only from a trusted address).
        Plain mTLS cannot be produced by signing a body."""
        headers = {"content-type": "application/json"}
        route = _route_of(body)
        if self._hmac_tokens:
            query = f"hmac={quote(self._hmac_tokens[0], safe='')}&ignorar={route}"
            return SignedRequest(body=body, headers=headers, query=query)
        if self.auth.trusted_proxies:
            cn = min(self.auth.allowed_cns) if self.auth.allowed_cns else EFI_CLIENT_CN
            headers[self.auth.headers.verify] = "SUCCESS"
            headers[self.auth.headers.subject] = f"CN={cn},O=Efi S.A. - Instituicao de Pagamento"
            return SignedRequest(body=body, headers=headers, path_suffix=route)
        raise ConfigError(
            f"source {self.source.name!r}: mTLS deliveries cannot be simulated by signing; "
            "configure hmac_token, or trusted_proxies and send from a trusted address"
        )

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        chave = min(self.keys) if self.keys else SAMPLE_CHAVE
        return lifecycle(payment, chave, now, rng)


def _route_of(body: bytes) -> str:
    """The suffix a PSP appends for this body: /rec and /cobr (Pix Automático), else /pix."""
    for name, route in AUTOMATICO_LISTS.items():
        if f'"{name}"'.encode() in body and b'"pix"' not in body:
            return f"/{route}"
    return "/pix"
