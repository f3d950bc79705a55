"""The PSP's API Pix, and what the adapter reads from it.

The client: OAuth2 client credentials, `GET /v2/pix/{e2eid}`, `GET /v2/cob/{txid}`,
`GET /v2/pix?inicio&fim` (paginated, for window audits).

The token comes from `POST {base}/oauth/token` (HTTP basic auth `client_id:client_secret`,
`{"grant_type": "client_credentials"}`) and is cached until shortly before it expires;
one refetch is tried when the API answers 401 (the PSP revoked it early). PSPs such as Efí
also require the caller's own client certificate on every call: with `client_cert_file`
the client uses a dedicated httpx client holding that certificate (the runtime's shared
client has none), built lazily inside the running event loop and closed by `aclose`;
it goes through porteiro.outgoing.gateway_http (rate limit, retries of 429/5xx) with `policy`.

The adapter's side (`PixPspApi`): a thin paid Pix is confirmed against
`GET /v2/pix/{e2eid}` (see the package docstring), a cob's status is read for
reconciliation, and the Pix received in a window are listed.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError, GatewayError, NonRetryable, ParseError
from porteiro.model import WARNINGS_KEY, Kind, ParsedEvent
from porteiro.observability import logger
from porteiro.outgoing.gateway_http import GatewayPolicy, GatewayTransport
from porteiro.providers import fields
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

TOKEN_PATH = "/oauth/token"
DEFAULT_TOKEN_SECONDS = 3600
PIX_PAGE = 1000  # itensPorPagina: the largest page PSPs accept
MAX_PAGES = 10_000  # a bound on any window listing
# Refresh this long before the PSP's expiry, so a token never dies in flight.
TOKEN_MARGIN_SECONDS = 60.0


class PixApi:
    """The PSP's API Pix for one source."""

    def __init__(
        self,
        base_url: str,
        client_id: str,
        client_secret: str,
        *,
        tls: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
        policy: GatewayPolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._policy = policy or GatewayPolicy()
        self._auth = (client_id, client_secret)
        self._tls = tls
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self._own: httpx.AsyncClient | None = None
        self.token_fetches = 0  # observable for tests and debugging

    async def get_pix(self, e2eid: str, http: httpx.AsyncClient) -> Mapping[str, Any] | None:
        """The Pix as the PSP records it, or None if the PSP does not know it (404)."""
        return await self._get(f"/v2/pix/{quote(e2eid, safe='')}", http)

    async def get_cob(self, txid: str, http: httpx.AsyncClient) -> Mapping[str, Any] | None:
        """The cob (immediate charge) with its status and Pix, or None (404)."""
        return await self._get(f"/v2/cob/{quote(txid, safe='')}", http)

    async def list_pix(
        self, inicio: str, fim: str, page: int, http: httpx.AsyncClient
    ) -> Mapping[str, Any]:
        """One page (from 0) of the Pix received in [inicio, fim] (RFC 3339)."""
        params = {
            "inicio": inicio,
            "fim": fim,
            "paginacao.paginaAtual": str(page),
            "paginacao.itensPorPagina": str(PIX_PAGE),
        }
        found = await self._get("/v2/pix", http, params)
        if found is None:
            raise GatewayError("GET /v2/pix: 404")
        return found

    async def aclose(self) -> None:
        if self._own is not None:
            await self._own.aclose()
            self._own = None

    async def _get(
        self, path: str, http: httpx.AsyncClient, params: Mapping[str, str] | None = None
    ) -> Mapping[str, Any] | None:
        client = self._client(http)
        url = self.base_url + path
        for attempt in (1, 2):
            token = await self._access_token(client)
            try:
                response = await client.get(
                    url, params=params, headers={"authorization": f"Bearer {token}"}
                )
            except httpx.HTTPError as exc:
                raise GatewayError(f"GET {path} failed: {exc}") from exc
            if response.status_code == 401 and attempt == 1:
                self._forget(token)
                continue
            if response.status_code == 404:
                return None
            if response.is_error:
                raise GatewayError(f"GET {path}: HTTP {response.status_code}")
            return _json_object(response, f"GET {path}")
        raise GatewayError(f"GET {path}: the PSP refused a fresh token (HTTP 401)")

    async def _access_token(self, client: httpx.AsyncClient) -> str:
        # One fetch at a time: concurrent confirmations share the token it brings.
        async with self._lock:
            if self._token is not None and self._clock() < self._expires_at:
                return self._token
            try:
                response = await client.post(
                    self.base_url + TOKEN_PATH,
                    auth=self._auth,
                    json={"grant_type": "client_credentials"},
                )
            except httpx.HTTPError as exc:
                raise GatewayError(f"POST {TOKEN_PATH} failed: {exc}") from exc
            self.token_fetches += 1
            if response.is_error:
                raise GatewayError(f"POST {TOKEN_PATH}: HTTP {response.status_code}")
            body = _json_object(response, f"POST {TOKEN_PATH}")
            token = body.get("access_token")
            if not isinstance(token, str) or not token:
                raise GatewayError(f"POST {TOKEN_PATH}: no access_token in the answer")
            lifetime = body.get("expires_in", DEFAULT_TOKEN_SECONDS)
            if isinstance(lifetime, bool) or not isinstance(lifetime, int | float):
                lifetime = DEFAULT_TOKEN_SECONDS
            margin = min(TOKEN_MARGIN_SECONDS, lifetime / 2)
            self._token = token
            self._expires_at = self._clock() + lifetime - margin
            return token

    def _forget(self, token: str) -> None:
        if self._token == token:
            self._token = None

    def _client(self, shared: httpx.AsyncClient) -> httpx.AsyncClient:
        if self._tls is None:
            return shared
        if self._own is None:
            inner = httpx.AsyncHTTPTransport(verify=self._tls)
            self._own = httpx.AsyncClient(
                transport=GatewayTransport(inner, self._policy),
                timeout=httpx.Timeout(self._policy.timeout_seconds, connect=3.0),
            )
        return self._own


def client_tls(
    cert_file: str | None, key_file: str | None, ca_file: str | None, *, what: str
) -> ssl.SSLContext | None:
    """TLS settings for calling the PSP: our client certificate, and the CA bundle that
    issued the PSP's server certificate (default: the system's)."""
    if cert_file is None and ca_file is None:
        return None
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if cert_file is not None:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{what}: cannot load the API TLS files: {exc}") from None
    return context


def _json_object(response: httpx.Response, what: str) -> Mapping[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise GatewayError(f"{what}: not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise GatewayError(f"{what}: expected a JSON object")
    return body


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
