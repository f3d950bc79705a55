"""What the Pix adapter reads from the PSP's API Pix (`PixPspApi`): a thin paid Pix is
confirmed against `GET /v2/pix/{e2eid}` (see the package docstring), a cob's status is
read for reconciliation, and the Pix received in a window are listed. The HTTP client
(token, TLS, GETs) is `PixApi`, in client.py; importable from here too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import GatewayError, NonRetryable, ParseError
from porteiro.model import WARNINGS_KEY, Kind, ParsedEvent
from porteiro.observability import logger
from porteiro.providers import fields
from porteiro.providers.api_json import listed
from porteiro.providers.pix.client import PixApi, client_tls
from porteiro.providers.pix.payload import (
    CURRENCY,
    RULE_HORARIO,
    format_valor,
    is_sent,
    item_events,
    minor_units,
    paid_event,
    rejection_reason,
)

MAX_PAGES = 10_000  # a bound on any window listing

__all__ = ["COB_KINDS", "PixApi", "PixPspApi", "client_tls", "cob_status_event", "confirmed"]

COB_KINDS: Mapping[str, Kind] = {
    "ATIVA": Kind.PAYMENT_CREATED,
    "CONCLUIDA": Kind.PAYMENT_PAID,
    "REMOVIDA_PELO_USUARIO_RECEBEDOR": Kind.PAYMENT_CANCELED,
    "REMOVIDA_PELO_PSP": Kind.PAYMENT_CANCELED,
}


class PixPspApi:
    """The PSP's API: confirmations, cob status reads and the Pix list."""

    source: SourceConfig
    api: PixApi | None
    keys: frozenset[str]
    clock: Callable[[], datetime]
    grace: timedelta

    window_scope = "money"

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        """Confirm a thin (paid) Pix with the PSP; see the module docstring."""
        if not event.thin:
            return event
        if self.api is None:
            raise NonRetryable("a thin Pix event but no PSP API is configured to confirm it")
        answer = await self.api.get_pix(event.dedup_key, http)
        if answer is None:
            raise GatewayError(f"the PSP does not know Pix {event.dedup_key} (yet)")
        return confirmed(event, answer, self.keys)

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """The cob's status (`GET /v2/cob/{txid}`) as a synthetic event; None without an
        API configured."""
        if self.api is None:
            return None
        cob = await self.api.get_cob(object_id, http)
        if cob is None:
            raise GatewayError(f"the PSP does not know cob {object_id}")
        return cob_status_event(object_id, cob, now=self.clock(), grace=self.grace)

    async def list_window(
        self, since: datetime, until: datetime, http: httpx.AsyncClient
    ) -> AsyncIterator[ParsedEvent]:
        """Every Pix received in [since, until) (`GET /v2/pix?inicio&fim`, paginated),
        with its devoluções: the callbacks' own events (endToEndId, `{rtrId}:{status}`).
        Read from the PSP's API, so already confirmed."""
        if self.api is None:
            raise GatewayError(
                f"source {self.source.name!r}: listing Pix needs api_base_url, client_id "
                "and client_secret"
            )
        inicio, fim = since.astimezone(UTC).isoformat(), until.astimezone(UTC).isoformat()
        for page in range(MAX_PAGES):
            body = await self.api.list_pix(inicio, fim, page, http)
            items = listed(body, "pix", error="GET /v2/pix: no pix list in the answer")
            for index, item in enumerate(items):
                for event in _listed_events(item, self.keys, since, until, index=index):
                    yield event
            if page + 1 >= _pages(body):
                return
        raise GatewayError(f"GET /v2/pix: more than {MAX_PAGES} pages")

    async def aclose(self) -> None:
        """Close the dedicated API client (the one holding our client certificate)."""
        if self.api is not None:
            await self.api.aclose()


def confirmed(event: ParsedEvent, answer: Mapping[str, Any], keys: frozenset[str]) -> ParsedEvent:
    """The paid event as the PSP confirms it, or NonRetryable naming every mismatch. The
    PSP's answer is read with the webhook's rules (ancillary deviations are warnings);
    a chave it leaves out is no mismatch (the PSP answers for our own account), one it
    names and that is not ours is."""
    e2eid = event.dedup_key
    try:
        sent = is_sent(answer, where=f"PSP Pix {e2eid}")
        fact = paid_event(answer, thin=False, where=f"PSP Pix {e2eid}")
    except ParseError as exc:
        raise GatewayError(f"unusable PSP answer: {exc}") from None
    problems = []
    if sent:
        problems.append("the PSP records it as a Pix sent, not received")
    if fact.dedup_key != e2eid:
        problems.append(f"the PSP answered for endToEndId {fact.dedup_key}")
    if fact.amount != event.amount:
        paid = format_valor(fact.amount or 0)
        claimed = format_valor(event.amount or 0)
        problems.append(f"valor {paid} at the PSP, {claimed} in the webhook")
    if fact.reference != event.reference:
        problems.append(f"txid {fact.reference!r} at the PSP, {event.reference!r} in the webhook")
    rejection = rejection_reason(answer, keys)
    if rejection is not None:
        problems.append(f"{rejection} at the PSP ({fact.data.get('chave')!r})")
    if problems:
        raise NonRetryable(f"Pix {e2eid} not confirmed by the PSP: " + "; ".join(problems))
    # The webhook's warnings stay; the PSP answer's own are added (each rule once).
    seen = {w["rule"] for w in event.warnings}
    extra = [w for w in fact.warnings if w["rule"] not in seen]
    data = {**fact.data, "confirmed": True, WARNINGS_KEY: [*event.warnings, *extra]}
    if not data[WARNINGS_KEY]:
        del data[WARNINGS_KEY]
    return replace(fact, data=data)


def cob_status_event(
    txid: str,
    cob: Mapping[str, Any],
    *,
    now: datetime | None = None,
    grace: timedelta = timedelta(0),
) -> ParsedEvent:
    """The cob's state. Expiry is no status in the BCB spec: an `ATIVA` cob past
    `calendario.criacao + expiracao + grace` (with `now` given) is `payment.expired`,
    dated at its expiry."""
    status = cob.get("status")
    if not isinstance(status, str) or not status:
        raise GatewayError(f"cob {txid}: no status in the PSP's answer")
    pix = [item for item in cob.get("pix") or [] if isinstance(item, dict)]
    valor = cob.get("valor")
    original = valor.get("original") if isinstance(valor, dict) else None
    calendario = cob.get("calendario")
    calendario = calendario if isinstance(calendario, dict) else {}
    created = calendario.get("criacao")
    moment = pix[-1].get("horario") if status == "CONCLUIDA" and pix else created
    warnings: list[dict[str, str]] = []
    try:
        amount = None if original is None else minor_units(original, where="valor.original")
    except ParseError as exc:
        raise GatewayError(f"cob {txid}: {exc}") from None
    occurred = _lenient(moment, "horario", warnings)
    expires = _expiry(calendario, warnings)
    kind, label = COB_KINDS.get(status, Kind.OTHER), status
    if status == "ATIVA" and now is not None and expires is not None and now > expires + grace:
        kind, label, occurred = Kind.PAYMENT_EXPIRED, "expired", expires
    e2eids = [item["endToEndId"] for item in pix if isinstance(item.get("endToEndId"), str)]
    status_event = ParsedEvent(
        dedup_key=f"reconcile:{txid}:{label}",
        kind=kind,
        type=f"cob.{label}",
        object_id=txid,
        reference=txid,
        amount=amount,
        currency=CURRENCY,
        occurred_at=occurred,
        # No settlement id: the cob's Pix are facts of their own (and paid twice, if so).
        data={"origin": "reconcile", "status": status, "pix": e2eids},
    )
    return fields.with_warnings(status_event, warnings)


def _expiry(calendario: Mapping[str, Any], warnings: list[dict[str, str]]) -> datetime | None:
    created = _lenient(calendario.get("criacao"), "calendario.criacao", warnings)
    seconds = calendario.get("expiracao", 86400)  # the BCB default: one day
    if created is None or isinstance(seconds, bool) or not isinstance(seconds, int):
        return None
    return created + timedelta(seconds=seconds)


def _lenient(value: Any, field: str, warnings: list[dict[str, str]]) -> datetime | None:
    return fields.lenient_time(value, field=field, rule=RULE_HORARIO, warnings=warnings, naive=UTC)


def _listed_events(
    item: Any, keys: frozenset[str], since: datetime, until: datetime, *, index: int = 0
) -> list[ParsedEvent]:
    """One item of `GET /v2/pix`, read with the webhook's rules. An item that cannot be
    read is logged and skipped (it cannot be compared with anything stored), the page's
    other items still count; a devolução that cannot be read is dropped the same way."""
    where = f"GET /v2/pix pix[{index}]"
    try:
        events = item_events(item, keys, thin=False, where=where)
    except ParseError as exc:
        logger().warning(
            "pix.listed_item_unreadable", action="pix.listed_item_unreadable", error=str(exc)
        )
        return []
    readable = [e for e in events if e.error is None]
    for dropped in (e for e in events if e.error is not None):
        logger().warning(
            "pix.listed_item_unreadable", action="pix.listed_item_unreadable", error=dropped.error
        )
    paid = events[0]
    if paid.occurred_at is not None and not since <= paid.occurred_at < until:
        return []  # the list's bounds are inclusive
    return [replace(e, data={**e.data, "confirmed": True, "origin": "reconcile"}) for e in readable]


def _pages(body: Mapping[str, Any]) -> int:
    parametros = body.get("parametros")
    paginacao = parametros.get("paginacao") if isinstance(parametros, dict) else None
    pages = paginacao.get("quantidadeDePaginas") if isinstance(paginacao, dict) else None
    return pages if isinstance(pages, int) and not isinstance(pages, bool) else 1
