"""Every documented provider is registered without importing its module by hand."""

from __future__ import annotations

import subprocess
import sys

DOCUMENTED = ["adyen", "mercadopago", "pagarme", "pix", "standard", "stripe"]


def test_every_documented_provider_is_built_in() -> None:
    # A fresh interpreter: other tests import adapter modules, which registers them anyway.
    code = "from porteiro.providers.base import known_providers; print(*known_providers())"
    listed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == DOCUMENTED
