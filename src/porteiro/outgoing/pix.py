"""Pix (BCB API Pix): `PUT /v2/cob/{txid}` with a txid the client chooses.

API Pix has no idempotency header: the client-chosen id in the path is the key (`POST
/cob`, where the PSP picks the txid, is not idempotent and never used here). The txid is
derived from the idempotency key (`pix_txid`), so a restart that resumes the key PUTs the
same cob again instead of creating a second one. OAuth2 client credentials, the token
cache and the PSP's client certificate come from the Pix adapter's PixApi (source
options `client_id`, `client_secret`, `client_cert_file`, `client_key_file`,
`api_ca_file`). The chave is `extra["chave"]` or the source's first `keys` entry.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError, ParseError
from porteiro.outgoing.request import CreateRequest, GatewayReply, InvalidRequest, merge
from porteiro.providers.fields import parse_rfc3339
from porteiro.providers.pix.client import PixApi, client_tls
from porteiro.providers.pix.payload import format_valor

TXID_LENGTH = 35  # BCB: a cob's txid is 26 to 35 letters and digits
DEFAULT_EXPIRACAO = 86400  # BCB: a cob without calendario.expiracao lasts a day
REFUSALS = frozenset({400, 409, 422})  # "txid already used", as PSPs spell it


def pix_txid(key: str) -> str:
    """The cob txid for an idempotency key: 35 lower-case base32 characters of its
    SHA-256, the same on every run (so it can be computed from the key alone)."""
    digest = hashlib.sha256(key.encode()).digest()
    return base64.b32encode(digest).decode().lower()[:TXID_LENGTH]


class PixCobApi(PixApi):
    """PixApi plus the one write the client needs (same token and TLS handling)."""

    async def put_cob(
        self, txid: str, body: Mapping[str, Any], http: httpx.AsyncClient, wait: float
    ) -> httpx.Response:
        client = self._client(http)
        url = f"{self.base_url}/v2/cob/{quote(txid, safe='')}"
        for attempt in (1, 2):
            token = await self._access_token(client)
            headers = {"authorization": f"Bearer {token}"}
            response = await client.put(url, json=dict(body), headers=headers, timeout=wait)
            if response.status_code == 401 and attempt == 1:
                self._forget(token)  # revoked early: one fresh token, then the answer stands
                continue
            return response
        return response


class PixCreate:
    operation = "pix.cob.put"

    def __init__(self, source: SourceConfig) -> None:
        client_id = source.option_str("client_id")
        client_secret = source.option_str("client_secret")
        if not source.api_base_url or not client_id or not client_secret:
            raise ConfigError(
                f"source {source.name!r}: Pix cobs need api_base_url, client_id and client_secret"
            )
        tls = client_tls(
            source.option_str("client_cert_file"), source.option_str("client_key_file"),
            source.option_str("api_ca_file"), what=f"source {source.name!r}",
        )  # fmt: skip
        self.api = PixCobApi(source.api_base_url, client_id, client_secret, tls=tls)
        keys = source.options.get("keys", [])
        self.chave = (
            keys[0] if isinstance(keys, list) and keys and isinstance(keys[0], str) else None
        )

    def check(self, request: CreateRequest) -> None:
        if request.currency != "BRL":
            raise InvalidRequest("Pix is in BRL")
        if not (isinstance(request.extra.get("chave"), str) or self.chave):
            raise InvalidRequest("a cob needs a chave: extra['chave'] or the source's keys")

    async def send(
        self, request: CreateRequest, key: str, http: httpx.AsyncClient, wait: float
    ) -> GatewayReply:
        body: dict[str, Any] = {
            "valor": {"original": format_valor(request.amount)}, "chave": self.chave,
            "solicitacaoPagador": f"Pedido {request.reference}"[:140],
            "infoAdicionais": [{"nome": "pedido", "valor": request.reference[:200]}],
        }  # fmt: skip
        if request.expires_in is not None:
            body["calendario"] = {"expiracao": request.expires_in}
        txid, sent = pix_txid(key), merge(body, request.extra)
        reply = GatewayReply.of(await self.api.put_cob(txid, sent, http, wait))
        if reply.status in REFUSALS:
            # Whether a PSP replays a PUT on an existing txid is not specified: some refuse
            # it. A cob that matches what we sent is the one an earlier attempt created.
            existing = await self.api.get_cob(txid, http)
            if existing is not None and _same_cob(existing, sent):
                return GatewayReply(200, dict(existing))
        return reply

    def object_id(self, body: Mapping[str, Any], key: str) -> str | None:
        found = body.get("txid")
        return found if isinstance(found, str) and found else pix_txid(key)

    def expires_at(self, request: CreateRequest, body: Mapping[str, Any]) -> datetime | None:
        """The cob's own `calendario.criacao + expiracao` (expiry is not a cob status)."""
        calendario = body.get("calendario")
        if not isinstance(calendario, Mapping):
            return request.expires_at
        seconds = calendario.get("expiracao", DEFAULT_EXPIRACAO)
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            return request.expires_at
        try:
            created = parse_rfc3339(calendario.get("criacao"), field="calendario.criacao")
        except ParseError:
            return request.expires_at
        return created + timedelta(seconds=seconds)

    async def aclose(self) -> None:
        await self.api.aclose()


def _same_cob(cob: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
    """The stored cob is ours: same amount and chave (what a PSP cannot change)."""
    valor, ours = cob.get("valor"), sent.get("valor")
    if not isinstance(valor, Mapping) or not isinstance(ours, Mapping):
        return False
    return valor.get("original") == ours.get("original") and cob.get("chave") == sent.get("chave")
