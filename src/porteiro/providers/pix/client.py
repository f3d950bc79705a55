"""The PSP's API Pix client: OAuth2 client credentials, `GET /v2/pix/{e2eid}`,
`GET /v2/cob/{txid}`, `GET /v2/pix?inicio&fim` (paginated, for window audits).

The token comes from `POST {base}/oauth/token` (HTTP basic auth `client_id:client_secret`,
`{"grant_type": "client_credentials"}`) and is cached until shortly before it expires;
one refetch is tried when the API answers 401 (the PSP revoked it early). PSPs such as Efí
also require the caller's own client certificate on every call: with `client_cert_file`
the client uses a dedicated httpx client holding that certificate (the runtime's shared
client has none), built lazily inside the running event loop and closed by `aclose`;
it goes through porteiro.outgoing.gateway_http (rate limit, retries of 429/5xx) with `policy`.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from porteiro.errors import ConfigError, GatewayError
from porteiro.outgoing.gateway_http import GatewayPolicy, GatewayTransport

TOKEN_PATH = "/oauth/token"
DEFAULT_TOKEN_SECONDS = 3600
PIX_PAGE = 1000  # itensPorPagina: the largest page PSPs accept
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
