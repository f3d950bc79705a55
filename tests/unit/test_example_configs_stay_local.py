"""The shipped example configuration, and every configuration the docs show with
development credentials written out, call no gateway on the internet: `make run` plus
`porteiro simulate` must not send a fake token to api.mercadopago.com and retry for a day.

A source's gateway calls go to its `api_base_url` (else, with an `api_key`, the adapter's
default: the real gateway) and, for Pagar.me without a `jwks_file`, to its JWKS URL.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from porteiro.config import SourceConfig
from porteiro.config.load import load_config, parse_config
from porteiro.providers.mercadopago import api as mercadopago_api
from porteiro.providers.pagarme import DEFAULT_JWKS_URL
from porteiro.providers.pagarme import api as pagarme_api
from porteiro.providers.stripe import api as stripe_api

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
DEFAULT_API_BASE_URLS = {
    "stripe": stripe_api.DEFAULT_API_BASE_URL,
    "pagarme": pagarme_api.DEFAULT_API_BASE_URL,
    "mercadopago": mercadopago_api.DEFAULT_API_BASE_URL,
}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def gateway_urls(source: SourceConfig) -> list[str]:
    """Where the adapter of `source` may send requests."""
    urls = []
    if source.api_base_url:
        urls.append(source.api_base_url)
    elif source.api_key and source.provider in DEFAULT_API_BASE_URLS:
        urls.append(DEFAULT_API_BASE_URLS[source.provider])
    if source.provider == "pagarme" and not source.option_str("jwks_file"):
        urls.append(source.option_str("jwks_url") or DEFAULT_JWKS_URL)
    return urls


def off_this_machine(source: SourceConfig) -> list[str]:
    return [url for url in gateway_urls(source) if urlsplit(url).hostname not in LOOPBACK]


def test_the_default_api_of_a_source_with_a_key_is_the_real_gateway() -> None:
    """What the scan relies on: a key without a base URL means the gateway's own API."""
    source = SourceConfig(name="mp", provider="mercadopago", api_key="TEST-token")
    assert off_this_machine(source) == ["https://api.mercadopago.com"]
    assert off_this_machine(SourceConfig(name="pm", provider="pagarme")) == [DEFAULT_JWKS_URL]


def test_the_example_config_calls_nothing_off_this_machine() -> None:
    config = load_config(ROOT / "porteiro.example.toml", {})
    assert {source.provider for source in config.sources.values()} >= {"mercadopago", "stripe"}
    assert {name: off_this_machine(s) for name, s in config.sources.items()} == {
        name: [] for name in config.sources
    }


def _documented_sources() -> Iterator[tuple[str, SourceConfig, str]]:
    """(page, source, its TOML block) for every source of every ```toml block in docs/."""
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for block in re.findall(r"```toml\n(.*?)```", page.read_text(), re.S):
            raw = tomllib.loads(block)
            if "sources" not in raw:
                continue
            env = {name: "from-the-environment" for name in _ENV_REF.findall(block)}
            for source in parse_config(raw, env).sources.values():
                yield str(page.relative_to(ROOT)), source, block


def _has_written_out_credentials(source: SourceConfig, block: str) -> bool:
    """An `api_key` or `client_secret` given as text, not as a ${VAR} of the environment."""
    table = tomllib.loads(block)["sources"][source.name]
    written = [table.get("api_key"), table.get("client_secret")]
    return any(isinstance(value, str) and not _ENV_REF.search(value) for value in written)


def test_no_documented_config_sends_written_out_credentials_off_this_machine() -> None:
    documented = list(_documented_sources())
    assert len(documented) > 5  # the scan reads the gateway pages' examples
    wrong = [
        f"{page}: [sources.{source.name}] -> {off_this_machine(source)}"
        for page, source, block in documented
        if _has_written_out_credentials(source, block) and off_this_machine(source)
    ]
    assert wrong == []
