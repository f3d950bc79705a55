"""The gateway adapters porteiro knows, by the `provider` name a source configures.

A static table: every adapter is imported here, and nothing registers itself at import
time, so what is built in is readable in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers.adyen import AdyenProvider
from porteiro.providers.base import Provider
from porteiro.providers.mercadopago import MercadoPagoProvider
from porteiro.providers.pagarme import PagarmeProvider
from porteiro.providers.pix import PixProvider
from porteiro.providers.standard import StandardProvider
from porteiro.providers.stripe import StripeProvider

ProviderFactory = Callable[[SourceConfig], Provider]

PROVIDERS: Mapping[str, ProviderFactory] = {
    "adyen": AdyenProvider,
    "mercadopago": MercadoPagoProvider,
    "pagarme": PagarmeProvider,
    "pix": PixProvider,
    "standard": StandardProvider,
    "stripe": StripeProvider,
}


def build_provider(source: SourceConfig) -> Provider:
    try:
        factory = PROVIDERS[source.provider]
    except KeyError:
        raise ConfigError(
            f"source {source.name!r}: unknown provider {source.provider!r} "
            f"(known: {', '.join(sorted(PROVIDERS))})"
        ) from None
    return factory(source)
