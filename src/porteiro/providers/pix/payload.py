"""Pix webhook bodies (BCB API Pix `{"pix": [...]}`) into canonical events. Pure, no I/O.

One event per Pix item, de-duplicated on its `endToEndId`, and one per devolução,
de-duplicated on `{rtrId}:{status}` so that a refund moving from EM_PROCESSAMENTO to
DEVOLVIDO is a new fact while a re-sent Pix item is a duplicate. The payment is the cob
(`txid`) when there is one, else the Pix itself. A paid item carries its endToEndId as
`settlement_id`, so a second Pix for an already paid cob is a "paid twice" anomaly.

What decides money is read strictly (the item's endToEndId as a non-empty string, its
`valor` in the BCB format, its direction, a devolução's rtrId, valor and status); what is
ancillary is read the way the PSP means it, with a warning on the event (see
docs/gateways/pix.md, "What Porteiro reads strictly, what it reads past"):
- an endToEndId or rtrId that is not the schema's 32 letters and digits (Efí's own
  examples carry 26- and 30-character ids): `pix.end_to_end_id_shape`, `pix.rtr_id_shape`;
- `devolucoes` sent as one object (the BCB spec's own example): `pix.devolucoes_not_array`;
- an unreadable `horario`: `pix.horario_format`;
- no `chave` (optional in the schema) while the source has keys: `pix.chave_absent`.
One item that cannot be read becomes one dead event of its own (`fields.each_item`); the
other items of the delivery apply.

Direction: Efí posts the results of Pix the account *sent* (`"tipo": "SOLICITACAO"`,
`status` REALIZADO / NAO_REALIZADO, `gnExtras.idEnvio`) to the same webhook. Those are
recorded as kind `other`, type `pix.enviado.<status>`, never as money received. A `tipo`
Porteiro does not know leaves the direction unknown: that item is dead-lettered alone.

Spoof defence (bacen/pix-api issue 239): an item whose `chave` is present and not one of
the source's keys is parsed as kind `other` with `data["rejected"]`, so it is stored,
visible and ignored by the worker, never paid. So are its devoluções.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from porteiro.errors import ParseError
from porteiro.model import Kind, ParsedEvent
from porteiro.providers import fields

CURRENCY = "BRL"
PAID_TYPE = "pix"
REJECTED_TYPE = "pix.rejected"
SENT_TYPE = "pix.enviado"
SENT_TIPO = "SOLICITACAO"  # Efí: a Pix this account sent
# EndToEndIdentification (pacs.008) as the BCB structures it: E + ISPB + yyyyMMddHHmm +
# 11 alphanumerics. Not required (Efí's own ids deviate): what simulate produces.
E2E_ID = re.compile(
    r"E[0-9]{8}[0-9]{4}(0[1-9]|1[0-2])(0[1-9]|[12][0-9]|3[01])([01][0-9]|2[0-3])[0-5][0-9]"
    r"[A-Za-z0-9]{11}"
)
RTR_ID = re.compile(r"D[A-Za-z0-9]{31}")  # ReturnIdentification (pacs.004), as simulated
SCHEMA_ID = re.compile(r"[a-zA-Z0-9]{32}")  # the OpenAPI's EndToEndId and rtrId schemas
_VALOR = re.compile(r"[0-9]{1,10}\.[0-9]{2}")
REFUND_KINDS: Mapping[str, Kind] = {
    "DEVOLVIDO": Kind.PAYMENT_PARTIALLY_REFUNDED,  # the ledger sums them up to "refunded"
    "EM_PROCESSAMENTO": Kind.OTHER,
    "NAO_REALIZADO": Kind.OTHER,
}

RULE_E2E_SHAPE = "pix.end_to_end_id_shape"
RULE_RTR_SHAPE = "pix.rtr_id_shape"
RULE_DEVOLUCOES = "pix.devolucoes_not_array"
RULE_HORARIO = "pix.horario_format"
RULE_CHAVE_ABSENT = "pix.chave_absent"
RULE_VALOR = "pix.valor_format"  # only where the amount decides nothing (a Pix sent)
RULE_AUTOMATICO_NOT_ARRAY = "pix.automatico_not_array"

# Pix Automático callbacks: the body's list and the route it is posted to.
AUTOMATICO_LISTS: Mapping[str, str] = {"recs": "rec", "cobsr": "cobr"}
AUTOMATICO_TYPE = "pix.automatico"
AUTOMATICO_NOTE = "Pix Automático: stored, not interpreted yet"

Warnings = list[dict[str, str]]


def body_events(raw: bytes, keys: Collection[str], *, thin: bool) -> list[ParsedEvent]:
    """Every event of a callback body: `{"pix": [...]}` (POST {webhookUrl}/pix), or Pix
    Automático's `{"recs": [...]}` (/rec) and `{"cobsr": [...]}` (/cobr). The body says
    which it is, wherever the PSP put the route (in the path, or after Efí's `ignorar=`)."""
    body = fields.load_object(raw)
    if "pix" not in body:
        for name, route in AUTOMATICO_LISTS.items():
            if name in body:
                return automatico_events(body[name], route)
    return delivery_events(pix_items(body), keys, thin=thin)


def load_items(raw: bytes) -> list[Any]:
    """The `pix` array of a callback body (its items are read one by one)."""
    return pix_items(fields.load_object(raw))


def pix_items(body: Mapping[str, Any]) -> list[Any]:
    items = body.get("pix")
    if not isinstance(items, list) or not items:
        raise ParseError('body must carry a non-empty "pix" array')
    return items


def delivery_events(
    items: Sequence[Any], keys: Collection[str], *, thin: bool
) -> list[ParsedEvent]:
    """Every event of a delivery; `thin` marks paid items that must be confirmed. An item
    that cannot be read is one dead event of its own."""

    def read(item: Any, where: str) -> list[ParsedEvent]:
        return item_events(item, keys, thin=thin, where=where)

    return fields.each_item(items, read, where="pix")


def item_events(
    item: Any, keys: Collection[str], *, thin: bool, where: str = "pix"
) -> list[ParsedEvent]:
    """The events of one Pix item: the Pix (paid, rejected or sent) and its devoluções,
    each devolução that cannot be read dead on its own."""
    if not isinstance(item, dict):
        raise ParseError(f"{where} must be a JSON object")
    if is_sent(item, where=where):
        return [sent_event(item, where=where)]
    paid = paid_event(item, thin=thin, where=where)
    warnings: Warnings = []
    if keys and item.get("chave") in (None, ""):
        detail = f"{where} has no chave: the key check could not be made"
        warnings.append(fields.warning(RULE_CHAVE_ABSENT, detail))
    refunds_at = f"{where}.devolucoes"
    refunds = _refund_list(item.get("devolucoes"), where=refunds_at, warnings=warnings)
    paid = fields.with_warnings(paid, warnings)
    rejection = rejection_reason(item, keys)
    events = [paid if rejection is None else _rejected(paid, rejection)]

    def read(refund: Any, at: str) -> list[ParsedEvent]:
        return [refund_event(paid, refund, where=at)]

    for event in fields.each_item(refunds, read, where=refunds_at):
        keep = rejection is None or event.error is not None
        events.append(event if keep else _rejected(event, rejection or ""))
    return events


def _refund_list(value: Any, *, where: str, warnings: Warnings) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        # The BCB spec's own example (pixWebhook1) sends the array as one object.
        detail = f"{where} is one object, not an array: read as a list of one"
        warnings.append(fields.warning(RULE_DEVOLUCOES, detail))
    return [value]  # anything else: one unreadable devolução (refund_event says why)


def is_sent(item: Mapping[str, Any], *, where: str = "pix") -> bool:
    """Whether the item is a Pix this account sent (Efí), not one it received. Direction
    decides money: read strictly."""
    tipo = item.get("tipo")
    extras = item.get("gnExtras")
    id_envio = extras.get("idEnvio") if isinstance(extras, dict) else None
    if tipo is None or tipo == "":
        return id_envio is not None  # gnExtras.idEnvio names a Pix sent, whatever else
    if tipo == SENT_TIPO:
        return True
    if isinstance(tipo, str):
        raise ParseError(f"{where}.tipo {tipo[:40]!r} is not a direction Porteiro knows")
    raise ParseError(f"{where}.tipo must be a string")


def rejection_reason(item: Mapping[str, Any], keys: Collection[str]) -> str | None:
    """Why an item may not become a payment fact, or None. No keys: the check is off. A
    missing `chave` (optional in the BCB schema) is no reason: only a chave present and
    not ours is (see docs/gateways/pix.md for what that trades)."""
    if not keys:
        return None
    chave = item.get("chave")
    if chave is None or chave == "":
        return None
    return None if chave in keys else "chave not ours"


def paid_event(item: Mapping[str, Any], *, thin: bool, where: str = "pix") -> ParsedEvent:
    warnings: Warnings = []
    e2eid = end_to_end_id(item.get("endToEndId"), where=f"{where}.endToEndId", warnings=warnings)
    txid = fields.opt_str(item, "txid", where=where)
    chave = fields.opt_str(item, "chave", where=where)
    data: dict[str, Any] = {"settlement_id": e2eid, "end_to_end_id": e2eid}
    if chave is not None:
        data["chave"] = chave
    if txid is not None:
        data["txid"] = txid
    amount = minor_units(item.get("valor"), where=f"{where}.valor")
    occurred = _horario(item.get("horario"), f"{where}.horario", warnings)
    event = ParsedEvent(
        dedup_key=e2eid,
        kind=Kind.PAYMENT_PAID,
        type=PAID_TYPE,
        object_id=txid or e2eid,
        reference=txid,
        amount=amount,
        currency=CURRENCY,
        occurred_at=occurred,
        thin=thin,
        data=data,
    )
    return fields.with_warnings(event, warnings)


def sent_event(item: Mapping[str, Any], *, where: str = "pix") -> ParsedEvent:
    """A Pix this account sent (Efí `tipo: SOLICITACAO`): recorded, never money received.
    Keyed by what was sent (idEnvio, else endToEndId) and its status, so REALIZADO after
    EM_PROCESSAMENTO is a new fact and a re-sent result a duplicate."""
    warnings: Warnings = []
    extras = item.get("gnExtras")
    extras = extras if isinstance(extras, dict) else {}
    id_envio = extras.get("idEnvio")
    id_envio = id_envio if isinstance(id_envio, str) and id_envio else None
    raw_e2e = item.get("endToEndId")
    e2eid = None
    if raw_e2e not in (None, ""):
        e2eid = end_to_end_id(raw_e2e, where=f"{where}.endToEndId", warnings=warnings)
    if id_envio is None and e2eid is None:
        raise ParseError(f"{where}: a Pix sent with neither gnExtras.idEnvio nor endToEndId")
    status = item.get("status")
    status = status if isinstance(status, str) and status else "desconhecido"
    amount = None
    try:
        amount = minor_units(item.get("valor"), where=f"{where}.valor")
    except ParseError as exc:
        warnings.append(fields.warning(RULE_VALOR, f"{exc}: a Pix sent, amount not kept"))
    erro = extras.get("erro")
    data: dict[str, Any] = {
        "direction": "sent",
        "not_applied": "a Pix this account sent: recorded, never money received",
        "status": status,
    }
    if id_envio is not None:
        data["id_envio"] = id_envio
    if e2eid is not None:
        data["end_to_end_id"] = e2eid
    if isinstance(erro, dict) and isinstance(erro.get("codigo"), str):
        data["erro_codigo"] = erro["codigo"]
    event = ParsedEvent(
        dedup_key=f"{SENT_TYPE}:{id_envio or e2eid}:{status}",
        kind=Kind.OTHER,
        type=f"{SENT_TYPE}.{status}",
        object_id=None,  # no payment of ours: the ledger has nothing to do with it
        amount=amount,
        currency=CURRENCY,
        occurred_at=_horario(item.get("horario"), f"{where}.horario", warnings),
        data=data,
    )
    return fields.with_warnings(event, warnings)


def refund_event(paid: ParsedEvent, refund: Any, *, where: str) -> ParsedEvent:
    """One devolução of the Pix `paid` was parsed from, filed under the same payment."""
    if not isinstance(refund, dict):
        raise ParseError(f"{where} must be a JSON object")
    warnings: Warnings = []
    rtr_id = refund.get("rtrId")
    if not isinstance(rtr_id, str) or not rtr_id:
        raise ParseError(f"{where}.rtrId must be a non-empty string (the ReturnIdentification)")
    if not SCHEMA_ID.fullmatch(rtr_id):
        detail = f"{where}.rtrId has {len(rtr_id)} characters, not the schema's 32 letters/digits"
        warnings.append(fields.warning(RULE_RTR_SHAPE, detail))
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
    event = ParsedEvent(
        dedup_key=f"{rtr_id}:{status}",
        kind=kind,
        type=f"pix.devolucao.{status}",
        object_id=paid.object_id,
        reference=paid.reference,
        amount=minor_units(refund.get("valor"), where=f"{where}.valor"),
        currency=CURRENCY,
        occurred_at=_horario(moment, f"{where}.horario", warnings),
        data={key: value for key, value in data.items() if isinstance(value, str)},
    )
    return fields.with_warnings(event, warnings)


def end_to_end_id(
    value: Any, *, where: str = "endToEndId", warnings: Warnings | None = None
) -> str:
    """The de-duplication key: any non-empty string. One that is not the schema's 32
    letters and digits is a warning (when `warnings` is given), not a failure."""
    if not isinstance(value, str) or not value.strip():
        raise ParseError(f"{where} must be a non-empty string (the EndToEndId)")
    if warnings is not None and not SCHEMA_ID.fullmatch(value):
        detail = f"{where} has {len(value)} characters, not the schema's 32 letters/digits"
        warnings.append(fields.warning(RULE_E2E_SHAPE, detail))
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


def _horario(value: Any, field: str, warnings: Warnings) -> datetime | None:
    return fields.lenient_time(value, field=field, rule=RULE_HORARIO, warnings=warnings, naive=UTC)


def _rejected(event: ParsedEvent, reason: str) -> ParsedEvent:
    """`event` kept for review as kind other: its identity, amount and time stay; what
    would move money or ask for more (a refunded total, thin, an error) does not."""
    return replace(
        event,
        kind=Kind.OTHER,
        type=REJECTED_TYPE,
        refunded_total=None,
        thin=False,
        error=None,
        # No settlement id: a rejected item is no money movement of ours.
        data={**{k: v for k, v in event.data.items() if k != "settlement_id"}, "rejected": reason},
    )


# -- Pix Automático ------------------------------------------------------------------------


def automatico_events(items: Any, route: str) -> list[ParsedEvent]:
    """Pix Automático notifications (`rec`: recurrences, `cobr`: recurring charges), one
    event each, kind `other`: stored and visible, not interpreted yet (no payment moves)."""
    warnings: Warnings = []
    name = next(key for key, value in AUTOMATICO_LISTS.items() if value == route)
    if isinstance(items, dict):
        detail = f"{name} is one object, not an array: read as a list of one"
        warnings.append(fields.warning(RULE_AUTOMATICO_NOT_ARRAY, detail))
        items = [items]
    if not isinstance(items, list) or not items:
        raise ParseError(f'body must carry a non-empty "{name}" array')

    def read(item: Any, where: str) -> list[ParsedEvent]:
        return [fields.with_warnings(automatico_event(item, route, where=where), warnings)]

    return fields.each_item(items, read, where=name)


def automatico_event(item: Any, route: str, *, where: str) -> ParsedEvent:
    """One recurrence (`idRec`) or recurring charge (`txid`), keyed by its id, status and
    latest `atualizacao` time (and, for a charge, its latest attempt's status), so each
    change is a new event and a re-sent notification a duplicate."""
    if not isinstance(item, dict):
        raise ParseError(f"{where} must be a JSON object")
    id_field = "idRec" if route == "rec" else "txid"
    ident = fields.req_str(item, id_field, where=where)
    status = fields.opt_str(item, "status", where=where) or "desconhecido"
    warnings: Warnings = []
    updates = item.get("atualizacao")
    last = updates[-1] if isinstance(updates, list) and updates else None
    stamp = last.get("data") if isinstance(last, dict) else None
    stamp = stamp if isinstance(stamp, str) else None
    parts = [ident, status, stamp or ""]
    attempts = item.get("tentativas")
    attempt = attempts[-1] if isinstance(attempts, list) and attempts else None
    if route == "cobr" and isinstance(attempt, dict) and isinstance(attempt.get("status"), str):
        parts.append(attempt["status"])
    data: dict[str, Any] = {"not_interpreted": AUTOMATICO_NOTE, "status": status}
    data["id_rec" if route == "rec" else "txid"] = ident
    if route == "cobr" and isinstance(item.get("idRec"), str):
        data["id_rec"] = item["idRec"]
    event = ParsedEvent(
        dedup_key=f"{AUTOMATICO_TYPE}.{route}:" + ":".join(parts),
        kind=Kind.OTHER,
        type=f"{AUTOMATICO_TYPE}.{route}.{status}",
        object_id=None,
        occurred_at=_horario(stamp, f"{where}.atualizacao.data", warnings),
        data=data,
    )
    return fields.with_warnings(event, warnings)
