"""The built-in registry: every documented provider, and nothing registered on the side."""

from __future__ import annotations

import subprocess
import sys

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers import PROVIDERS, build_provider

DOCUMENTED = ["adyen", "mercadopago", "pagarme", "pix", "standard", "stripe"]


def test_every_documented_provider_is_built_in() -> None:
    # A fresh interpreter: importing the registry alone must list every adapter.
    code = "from porteiro.providers import PROVIDERS; print(*sorted(PROVIDERS))"
    listed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == DOCUMENTED
    assert sorted(PROVIDERS) == DOCUMENTED


def test_an_unknown_provider_is_a_config_error_naming_the_known_ones() -> None:
    source = SourceConfig(name="shop", provider="paypal")
    try:
        build_provider(source)
    except ConfigError as exc:
        assert "unknown provider 'paypal'" in str(exc)
        assert ", ".join(DOCUMENTED) in str(exc)
    else:
        raise AssertionError("an unknown provider was built")
