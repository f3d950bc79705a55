"""Pix webhook bodies (BCB API Pix `{"pix": [...]}`) into canonical events. Pure, no I/O.

One event per Pix item, de-duplicated on its `endToEndId` (structure validated per the
BCB: `E` + 8-digit ISPB + `yyyyMMddHHmm` + 11 alphanumerics), and one per devolução,
de-duplicated on `{rtrId}:{status}` so that a refund moving from EM_PROCESSAMENTO to
DEVOLVIDO is a new fact while a re-sent Pix item is a duplicate. The payment is the cob
(`txid`) when there is one, else the Pix itself. A paid item carries its endToEndId as
`settlement_id`, so a second Pix for an already paid cob is a "paid twice" anomaly.

Spoof defence (bacen/pix-api issue 239): an item whose `chave` is not one of the source's
keys is parsed as kind `other` with `data["rejected"]`, so it is stored, visible and
ignored by the worker, never paid. So are its devoluções.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from porteiro.errors import ParseError
from porteiro.model import Kind, ParsedEvent
from porteiro.providers import fields

CURRENCY = "BRL"
PAID_TYPE = "pix"
REJECTED_TYPE = "pix.rejected"
# EndToEndIdentification (pacs.008): the time part is checked for plausible fields.
E2E_ID = re.compile(
    r"E[0-9]{8}[0-9]{4}(0[1-9]|1[0-2])(0[1-9]|[12][0-9]|3[01])([01][0-9]|2[0-3])[0-5][0-9]"
    r"[A-Za-z0-9]{11}"
)
RTR_ID = re.compile(r"D[A-Za-z0-9]{31}")  # ReturnIdentification (pacs.004)
_VALOR = re.compile(r"[0-9]{1,10}\.[0-9]{2}")
REFUND_KINDS: Mapping[str, Kind] = {
    "DEVOLVIDO": Kind.PAYMENT_PARTIALLY_REFUNDED,  # the ledger sums them up to "refunded"
    "EM_PROCESSAMENTO": Kind.OTHER,
    "NAO_REALIZADO": Kind.OTHER,
}


def load_items(raw: bytes) -> list[Mapping[str, Any]]:
    """The `pix` array of a callback body."""
    items = fields.load_object(raw).get("pix")
    if not isinstance(items, list) or not items:
        raise ParseError('body must carry a non-empty "pix" array')
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ParseError(f"pix[{index}] must be a JSON object")
    return items


def delivery_events(
    items: Sequence[Mapping[str, Any]], keys: Collection[str], *, thin: bool
) -> list[ParsedEvent]:
    """Every event of a delivery; `thin` marks paid items that must be confirmed."""
    events: list[ParsedEvent] = []
    for index, item in enumerate(items):
        events.extend(item_events(item, keys, thin=thin, where=f"pix[{index}]"))
    return events


def item_events(
    item: Mapping[str, Any], keys: Collection[str], *, thin: bool, where: str = "pix"
) -> list[ParsedEvent]:
    paid = paid_event(item, thin=thin, where=where)
    rejection = rejection_reason(item, keys)
    events = [paid if rejection is None else _rejected(paid, rejection)]
    refunds = item.get("devolucoes") or []
    if not isinstance(refunds, list):
        raise ParseError(f"{where}.devolucoes must be an array")
    for index, refund in enumerate(refunds):
        event = refund_event(paid, refund, where=f"{where}.devolucoes[{index}]")
        events.append(event if rejection is None else _rejected(event, rejection))
    return events


def rejection_reason(item: Mapping[str, Any], keys: Collection[str]) -> str | None:
    """Why an item may not become a payment fact, or None. No keys: the check is off."""
    if not keys:
        return None
    chave = item.get("chave")
    if not isinstance(chave, str) or not chave:
        return "chave missing"
    return None if chave in keys else "chave not ours"


def paid_event(item: Mapping[str, Any], *, thin: bool, where: str = "pix") -> ParsedEvent:
    e2eid = end_to_end_id(item.get("endToEndId"), where=f"{where}.endToEndId")
    txid = fields.opt_str(item, "txid", where=where)
    chave = fields.opt_str(item, "chave", where=where)
    data: dict[str, Any] = {"settlement_id": e2eid, "end_to_end_id": e2eid}
    if chave is not None:
        data["chave"] = chave
    if txid is not None:
        data["txid"] = txid
    return ParsedEvent(
        dedup_key=e2eid,
        kind=Kind.PAYMENT_PAID,
        type=PAID_TYPE,
        object_id=txid or e2eid,
        reference=txid,
        amount=minor_units(item.get("valor"), where=f"{where}.valor"),
        currency=CURRENCY,
        occurred_at=fields.opt_rfc3339(item.get("horario"), field=f"{where}.horario"),
        thin=thin,
        data=data,
    )


def refund_event(paid: ParsedEvent, refund: Any, *, where: str) -> ParsedEvent:
    """One devolução of the Pix `paid` was parsed from, filed under the same payment."""
    if not isinstance(refund, dict):
        raise ParseError(f"{where} must be a JSON object")
    rtr_id = refund.get("rtrId")
    if not isinstance(rtr_id, str) or not RTR_ID.fullmatch(rtr_id):
        raise ParseError(f"{where}.rtrId must be a 32-character ReturnIdentification (D...)")
    status = fields.req_str(refund, "status", where=where, missing="is required")
    kind = REFUND_KINDS.get(status, Kind.OTHER)
    times = refund.get("horario")
    times = times if isinstance(times, dict) else {}
    moment = times.get("liquidacao") or times.get("solicitacao")
    data = {
        "end_to_end_id": paid.dedup_key,
        "rtr_id": rtr_id,
        "devolucao_id": refund.get("id"),
        "status": status,
        "chave": paid.data.get("chave"),
    }
    return ParsedEvent(
        dedup_key=f"{rtr_id}:{status}",
        kind=kind,
        type=f"pix.devolucao.{status}",
        object_id=paid.object_id,
        reference=paid.reference,
        amount=minor_units(refund.get("valor"), where=f"{where}.valor"),
        currency=CURRENCY,
        occurred_at=fields.opt_rfc3339(moment, field=f"{where}.horario"),
        data={key: value for key, value in data.items() if isinstance(value, str)},
    )


def end_to_end_id(value: Any, *, where: str = "endToEndId") -> str:
    if not isinstance(value, str) or not E2E_ID.fullmatch(value):
        raise ParseError(
            f"{where} must be a 32-character EndToEndId (E + ISPB + yyyyMMddHHmm + 11)"
        )
    return value


def minor_units(valor: Any, *, where: str = "valor") -> int:
    """`"110.00"` (reais, a decimal string) as 11000 centavos, exactly."""
    # Not mercadopago.to_minor: the BCB format is a string with exactly two decimals.
    if not isinstance(valor, str) or not _VALOR.fullmatch(valor):
        raise ParseError(f"{where} must be a decimal string such as 110.00")
    try:
        return int(Decimal(valor) * 100)
    except InvalidOperation:
        raise ParseError(f"{where} is not a decimal amount") from None


def format_valor(amount: int) -> str:
    """11000 centavos as `"110.00"`."""
    return f"{amount // 100}.{amount % 100:02d}"


def _rejected(event: ParsedEvent, reason: str) -> ParsedEvent:
    return ParsedEvent(
        dedup_key=event.dedup_key,
        kind=Kind.OTHER,
        type=REJECTED_TYPE,
        object_id=event.object_id,
        reference=event.reference,
        amount=event.amount,
        currency=event.currency,
        occurred_at=event.occurred_at,
        # No settlement id: a rejected item is no money movement of ours.
        data={**{k: v for k, v in event.data.items() if k != "settlement_id"}, "rejected": reason},
    )
