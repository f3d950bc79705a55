"""Mercado Pago: `x-signature` over a manifest, thin notifications enriched from the API.

Authentication (Mercado Pago's webhook docs, "validate the origin"):
`x-signature: ts=<ts>,v1=<hex>`, HMAC-SHA256 keyed with the secret (UTF-8) over
`id:{data.id};request-id:{x-request-id};ts:{ts};`, built as Mercado Pago's own validator
builds it: `data.id` from the QUERY STRING and `x-request-id` trimmed,
a pair with an absent or blank value dropped (the trailing `;` stays), `ts` verbatim.
`data.id` is lower-cased as the docs ask; the id as received (what the official SDK signs)
is accepted too. `ts` may be seconds or milliseconds (above 10^11: ms) and must be within
`tolerance_seconds` of now, both ways. Any configured secret may match (rotation).

The signature covers neither body nor state, so a notification is only a hint: `parse`
makes one THIN event (keyed by the body's notification `id`, else `{type}:{action}:{data.id}`)
filed under the signed query `data.id`, for the `payment` and `order` (Orders API) topics;
other topics are non-thin `other` (ignored, with the reason in the event's `note`).

Legacy IPN (`?topic=payment&id=123`, or a `{"resource", "topic"}` body) cannot be
authenticated at all (Mercado Pago: its x-signature does not validate with the secret), so
`verify` lets a request that is recognisably IPN-only through and `parse` makes it an
UNVERIFIED hint: thin, carrying nothing the ledger uses, keyed `ipn:{topic}:{id}:{minute}`
(a flood of one id is one event), admitted through a per-source token bucket (beyond it the
hint is stored, ignored, and not fetched), and a 404 on its id is dead at once (no retries,
no payment). `merchant_order` and `chargebacks` IPN are ignored: each payment sends its own.

`enrich` reads `GET /v1/payments/{id}` or `GET /v1/orders/{id}` (payload.py maps
them).
"""

from __future__ import annotations

from collections.abc import Mapping

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers.base import signing_keys
from porteiro.providers.mercadopago.api import MercadoPagoApi
from porteiro.providers.mercadopago.samples import MercadoPagoSamples
from porteiro.providers.mercadopago.webhook import HintBudget, MercadoPagoWebhook

# ISO 4217 minor-unit exponents of the currencies Mercado Pago settles in. Any other
# currency is taken as 2; the `currency_exponents` option overrides or extends this.
CURRENCY_EXPONENTS: Mapping[str, int] = {
    "ARS": 2, "BRL": 2, "CLP": 0, "COP": 2, "MXN": 2, "PEN": 2, "UYU": 2, "USD": 2,
}  # fmt: skip
DEFAULT_IPN_PER_MINUTE = 60.0  # new unverified hints (distinct ids) fetched per minute
DEFAULT_IPN_BURST = 60


class MercadoPagoProvider(MercadoPagoWebhook, MercadoPagoApi, MercadoPagoSamples):
    """Mercado Pago webhooks (and legacy IPN, as unverified hints) for one source."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = signing_keys(source)
        self.exponents = {**CURRENCY_EXPONENTS, **_exponent_option(source)}
        self.accept_ipn = source.options.get("accept_ipn", True)
        if not isinstance(self.accept_ipn, bool):
            raise ConfigError(f"source {source.name!r}: accept_ipn must be true or false")
        per_minute = source.option_number("ipn_hints_per_minute", DEFAULT_IPN_PER_MINUTE)
        burst = source.options.get("ipn_hint_burst", DEFAULT_IPN_BURST)
        if type(burst) is not int or burst < 1:
            raise ConfigError(f"source {source.name!r}: ipn_hint_burst must be an integer >= 1")
        self.hints = HintBudget(per_minute, burst)


def _exponent_option(source: SourceConfig) -> dict[str, int]:
    table = source.options.get("currency_exponents", {})
    valid = isinstance(table, dict) and all(
        isinstance(code, str) and type(exp) is int and 0 <= exp <= 4 for code, exp in table.items()
    )
    if not valid:
        raise ConfigError(f"source {source.name!r}: currency_exponents must map ISO codes to 0..4")
    return {code.upper(): exp for code, exp in table.items()}
