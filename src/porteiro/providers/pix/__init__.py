"""Pix (Banco Central "API Pix" standard; Efí as the concrete PSP), provider "pix".

The PSP POSTs `{webhookUrl}/pix` with `{"pix": [...]}`: one event per Pix item and per
devolução (payload.py). Authentication (auth.py) is mTLS, or Efí's skip-mTLS `?hmac=`
secret plus a source-IP allow-list.

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

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from porteiro.config import DEFAULT_RECONCILE_GRACE_SECONDS, SourceConfig
from porteiro.errors import ConfigError
from porteiro.observability import logger
from porteiro.outgoing.gateway_http import GatewayPolicy
from porteiro.providers.pix import auth as pix_auth
from porteiro.providers.pix.api import PixApi, PixPspApi, client_tls
from porteiro.providers.pix.samples import PixSamples
from porteiro.providers.pix.webhook import PixWebhook


class PixProvider(PixWebhook, PixPspApi, PixSamples):
    """Pix callbacks for one source (one PSP account and its keys).

    `clock` tells when a cob lapsed (the BCB has no "expired" status: an `ATIVA` cob past
    `calendario.criacao + expiracao` + `reconcile_grace_seconds` is reported expired).
    The window list (`GET /v2/pix`) only holds money that moved: `window_scope` tells the
    reconciler not to call an unpaid cob "unknown to the gateway"."""

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


def _utc_now() -> datetime:
    return datetime.now(UTC)


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
