"""Pagar.me: v5 RS256 webhooks against a JWKS, and the HMAC `X-Hub-Signature` variants.

Authentication (docs/gateways/pagarme.md), in this order:
- `X-Webhook-Asymmetric-Signature: alg=RS256; kid=<kid>; signature=<base64url>` when
  present: RSA PKCS#1 v1.5 SHA-256 over the raw body, with the JWK of that kid from
  `jwks_url` (default Pagar.me's) or `jwks_file`. Nothing is timestamped, so replays are
  stopped by de-duplication on the hook id, not here.
- else `X-Hub-Signature: sha1=<hex>` or `sha256=<hex>`, an HMAC of the raw body with any
  of `secrets` (legacy v4 uses the account API key as the secret); refused when
  `require_asymmetric = true`.

`verify` is pure: the JWKS is loaded by `prepare`, which the receiver awaits before
`verify`. It fetches the key set when the header names a kid the cache lacks, at most
once per `jwks_refetch_seconds` (default 60); an unknown kid then fails as UnknownKey.

Events: one per v5 delivery, keyed by the hook id. The payment is the ORDER, so charge
events are filed under `data.order.id` when present. Refund events carry the cumulative
refunded amount in `refunded_total` (the charge's `canceled_amount`; for `charge.refunded`
without it, the charge amount) and, in `amount`, the last transaction's amount when given.
Where the object's own `status` is further along than the event's name (`charge.created`
of a card captured at once: status `paid`), the status decides; an event named after a
money movement (paid, refunded, charged back, failed, canceled) keeps its name's meaning.
Legacy v4 postbacks (JSON or form-encoded, `current_status`) are keyed `{id}:{status}`.

What is read strictly and what is read past (issue 21's rule): ids, `type`, `status`,
amounts (integer centavos) decide money and fail the delivery when malformed; timestamps
(naive ones are UTC, as Pagar.me writes them), `code`, `currency`, the shape of
`last_transaction` / `charges` / `order` are ancillary: a deviation is read the way
Pagar.me means it and kept on the event as a warning (`RULES`).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers.jwks import JwksCache
from porteiro.providers.pagarme.api import PagarmeApi
from porteiro.providers.pagarme.samples import PagarmeSamples
from porteiro.providers.pagarme.signature import HUB_ALGORITHMS
from porteiro.providers.pagarme.webhook import PagarmeWebhook

DEFAULT_JWKS_URL = "https://hubapi.pagar.me/.well-known/jwks.json"


class PagarmeProvider(PagarmeWebhook, PagarmeApi, PagarmeSamples):
    """Pagar.me webhooks for one source."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self.require_asymmetric = _opt_bool(source, "require_asymmetric")
        self._signing_hub = _hub_algorithm(source)
        self.keys = _jwks_cache(source)
        self._secrets = [secret.encode() for secret in source.secrets]
        self._signing_key = _private_key(source)
        self._signing_kid = source.option_str("signing_kid") or "porteiro-test"


def _jwks_cache(source: SourceConfig) -> JwksCache:
    file = source.option_str("jwks_file")
    url = source.option_str("jwks_url")
    if file and url:
        raise ConfigError(f"source {source.name!r}: set jwks_url or jwks_file, not both")
    refetch = source.options.get("jwks_refetch_seconds", 60)
    if isinstance(refetch, bool) or not isinstance(refetch, int | float) or refetch < 0:
        raise ConfigError(f"source {source.name!r}: jwks_refetch_seconds must be a number")
    if file:
        return JwksCache(file=Path(file), refetch_seconds=float(refetch))
    return JwksCache(url=url or DEFAULT_JWKS_URL, refetch_seconds=float(refetch))


def _hub_algorithm(source: SourceConfig) -> str:
    """The HMAC `sign()` uses without a signing key: `sha256`, or `sha1` as Pagar.me signs
    v4 postbacks (`signing_hub_algorithm`); `verify` accepts either whatever this says."""
    value = source.option_str("signing_hub_algorithm") or "sha256"
    if value not in HUB_ALGORITHMS:
        raise ConfigError(f"source {source.name!r}: signing_hub_algorithm must be sha1 or sha256")
    return value


def _opt_bool(source: SourceConfig, key: str) -> bool:
    value = source.options.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"source {source.name!r}: {key} must be true or false")
    return value


def _private_key(source: SourceConfig) -> RSAPrivateKey | None:
    path = source.option_str("signing_key_file")
    if not path:
        return None
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"source {source.name!r}: signing_key_file: {exc}") from exc
    if not isinstance(key, RSAPrivateKey):
        raise ConfigError(f"source {source.name!r}: signing_key_file must be an RSA key")
    return key
