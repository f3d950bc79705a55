"""Pix (Banco Central "API Pix" standard; Efí as the concrete PSP), provider "pix".

The PSP POSTs `{webhookUrl}/pix` with `{"pix": [...]}`: one event per Pix item and per
devolução (providers/pix_payload.py). Authentication (providers/pix_auth.py) is mTLS, or
Efí's skip-mTLS `?hmac=` secret plus a source-IP allow-list.

"Signature OK" is not "money arrived" (bacen/pix-api issue 239: a payer at the same PSP
can point their own key's webhook at our URL, so the delivery is authentic but the Pix
went to someone else). Two defences, both on by default:
- an item whose `chave` is not one of `keys` is parsed as kind `other` with
  `data["rejected"]`: stored, visible, ignored, never paid;
- with `confirm = true` paid items are thin, and the worker confirms each one with
  `GET /v2/pix/{e2eid}` at the PSP before the ledger sees it: same endToEndId, same
  amount, same txid, a chave of ours. Unknown to the PSP (404): GatewayError, retried (it
  may not be visible yet). Any mismatch: NonRetryable, dead-lettered for review.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from porteiro.config import DEFAULT_RECONCILE_GRACE_SECONDS, SourceConfig
from porteiro.errors import ConfigError, GatewayError, NonRetryable, ParseError
from porteiro.gateway_http import GatewayPolicy
from porteiro.model import WARNINGS_KEY, InboundRequest, Kind, ParsedEvent
from porteiro.observability import logger
from porteiro.providers import fields, pix_auth, pix_samples
from porteiro.providers.base import Ack, SamplePayment, SignedRequest
from porteiro.providers.pix_api import MAX_PAGES, PixApi, client_tls
from porteiro.providers.pix_payload import (
    AUTOMATICO_LISTS,
    CURRENCY,
    RULE_HORARIO,
    body_events,
    format_valor,
    is_sent,
    item_events,
    minor_units,
    paid_event,
    rejection_reason,
)

EFI_CLIENT_CN = "webhook.efipay.com.br"
COB_KINDS: Mapping[str, Kind] = {
    "ATIVA": Kind.PAYMENT_CREATED,
    "CONCLUIDA": Kind.PAYMENT_PAID,
    "REMOVIDA_PELO_USUARIO_RECEBEDOR": Kind.PAYMENT_CANCELED,
    "REMOVIDA_PELO_PSP": Kind.PAYMENT_CANCELED,
}


class PixProvider:
    """Pix callbacks for one source (one PSP account and its keys).

    `clock` tells when a cob lapsed (the BCB has no "expired" status: an `ATIVA` cob past
    `calendario.criacao + expiracao` + `reconcile_grace_seconds` is reported expired).
    The window list (`GET /v2/pix`) only holds money that moved: `window_scope` tells the
    reconciler not to call an unpaid cob "unknown to the gateway"."""

    window_scope = "money"

    def __init__(
        self, source: SourceConfig, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.source = source
        self.clock = clock or _utc_now
        self.grace = timedelta(
            seconds=source.option_number("reconcile_grace_seconds", DEFAULT_RECONCILE_GRACE_SECONDS)
        )
        self.keys = frozenset(_str_list(source, "keys"))
        self.confirm = _opt_bool(source, "confirm", default=True)
        self.auth = build_auth(source)
        self._hmac_tokens = _hmac_tokens(source)
        self.api = _build_api(source)
        if self.confirm and self.api is None:
            raise ConfigError(
                f"source {source.name!r}: confirm = true needs api_base_url, client_id and "
                "client_secret (or set confirm = false)"
            )
        if not self.keys:
            logger().warning(
                "pix source without keys: the chave check is off",
                action="pix.chave_check_off",
                source=source.name,
            )

    # -- the receiver's side -------------------------------------------------------------

    def verify(self, request: InboundRequest, now: datetime) -> None:
        self.auth.verify(request, now)

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        return body_events(request.body, self.keys, thin=self.confirm)

    def ack(self) -> Ack:
        return Ack()

    # -- the worker's side ---------------------------------------------------------------

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
            items = body.get("pix")
            if not isinstance(items, list):
                raise GatewayError("GET /v2/pix: no pix list in the answer")
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

    # -- simulation ----------------------------------------------------------------------

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
        chave = min(self.keys) if self.keys else pix_samples.SAMPLE_CHAVE
        return pix_samples.lifecycle(payment, chave, now, rng)


# -- confirmation and status ------------------------------------------------------------


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


def _route_of(body: bytes) -> str:
    """The suffix a PSP appends for this body: /rec and /cobr (Pix Automático), else /pix."""
    for name, route in AUTOMATICO_LISTS.items():
        if f'"{name}"'.encode() in body and b'"pix"' not in body:
            return f"/{route}"
    return "/pix"


def _pages(body: Mapping[str, Any]) -> int:
    parametros = body.get("parametros")
    paginacao = parametros.get("paginacao") if isinstance(parametros, dict) else None
    pages = paginacao.get("quantidadeDePaginas") if isinstance(paginacao, dict) else None
    return pages if isinstance(pages, int) and not isinstance(pages, bool) else 1


def _utc_now() -> datetime:
    return datetime.now(UTC)


# -- configuration ----------------------------------------------------------------------


def build_auth(source: SourceConfig) -> pix_auth.PixAuth:
    what = f"source {source.name!r}"
    tokens = tuple(token.encode() for token in _hmac_tokens(source))
    ca_file = source.option_str("mtls_ca_file")
    ca_certs = pix_auth.load_ca_file(ca_file, what=f"{what} mtls_ca_file") if ca_file else ()
    proxies = pix_auth.networks(
        _str_list(source, "trusted_proxies"), what=f"{what} trusted_proxies"
    )
    if not tokens and not ca_certs and not proxies:
        raise ConfigError(
            f"{what}: a pix source needs mtls_ca_file (Porteiro terminates TLS), "
            "trusted_proxies (a proxy verifies the certificate) or hmac_token (Efí skip-mTLS)"
        )
    default_ips = pix_auth.EFI_WEBHOOK_IPS if tokens else ()
    ips = _str_list(source, "allow_ips") if "allow_ips" in source.options else default_ips
    defaults = pix_auth.ProxyHeaders()
    headers = pix_auth.ProxyHeaders(
        verify=_lower(source, "client_verify_header", defaults.verify),
        subject=_lower(source, "client_subject_header", defaults.subject),
        cert=_lower(source, "client_cert_header", defaults.cert),
        client_ip=_lower(source, "client_ip_header", defaults.client_ip),
    )
    return pix_auth.PixAuth(
        hmac_tokens=tokens,
        allow_ips=pix_auth.networks(ips, what=f"{what} allow_ips"),
        trusted_proxies=proxies,
        ca_certs=ca_certs,
        allowed_cns=frozenset(_str_list(source, "allowed_cns")),
        headers=headers,
    )


def _build_api(source: SourceConfig) -> PixApi | None:
    client_id = source.option_str("client_id")
    client_secret = source.option_str("client_secret")
    if not source.api_base_url or not client_id or not client_secret:
        return None
    tls = client_tls(
        source.option_str("client_cert_file"),
        source.option_str("client_key_file"),
        source.option_str("api_ca_file"),
        what=f"source {source.name!r}",
    )
    policy = GatewayPolicy.for_source(source)
    return PixApi(source.api_base_url, client_id, client_secret, tls=tls, policy=policy)


def _hmac_tokens(source: SourceConfig) -> tuple[str, ...]:
    """`hmac_token` as one string or a list (several during a rotation)."""
    value = source.options.get("hmac_token")
    if isinstance(value, str):
        return (value,) if value else ()
    return _str_list(source, "hmac_token")


def _str_list(source: SourceConfig, key: str) -> tuple[str, ...]:
    value = source.options.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"source {source.name!r}: {key} must be a list of strings")
    return tuple(item for item in value if item)


def _opt_bool(source: SourceConfig, key: str, *, default: bool) -> bool:
    value = source.options.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"source {source.name!r}: {key} must be true or false")
    return value


def _lower(source: SourceConfig, key: str, default: str) -> str:
    return (source.option_str(key) or default).lower()
