"""The keys a `[sources.NAME]` table may carry, per provider: one list, so that a typo
(`secret = ...` for `secrets`) stops start-up instead of being silently ignored.

Pure data. tests/unit/test_config_unknown_keys.py scans the source tree for every option
key read from a `SourceConfig` and fails when one is missing here, so this list cannot
drift from the code that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping

# Read by porteiro.config into SourceConfig's own fields; every other key lands in
# `SourceConfig.options`.
SOURCE_FIELDS = frozenset({"provider", "secrets", "tolerance_seconds", "api_base_url", "api_key"})

# Options every source may carry, whatever its provider.
COMMON_OPTIONS = frozenset({
    # porteiro.http.redact: more header / query parameter names whose values are credentials.
    "secret_headers", "secret_params",
    # porteiro.reconcile.reconciler (SourcePolicy): when the stale cycle asks about a pending
    # payment.
    "reconcile_grace_seconds", "pending_max_age_seconds",
    # porteiro.outgoing.gateway_http (GatewayPolicy): every call to the gateway's API (reconciler,
    # enrichment, Pix API).
    "api_rate_per_second", "api_max_attempts", "api_max_retry_after_seconds",
    "api_timeout_seconds",
})  # fmt: skip

# Options each provider reads on top of the common ones.
PROVIDER_OPTIONS: Mapping[str, frozenset[str]] = {
    "adyen": frozenset({
        # porteiro.providers.adyen: HTTP Basic credentials every delivery must carry (the
        # fake gateway, porteiro.fakes.adyen, sets it too), and the capture mode.
        "basic_auth", "capture",
        # porteiro.providers.adyen (simulated payloads), porteiro.outgoing.adyen (creation).
        "merchant_account",
    }),
    "mercadopago": frozenset({
        # porteiro.providers.mercadopago: legacy IPN hints and their fetch budget.
        "accept_ipn", "ipn_hints_per_minute", "ipn_hint_burst",
        # porteiro.providers.mercadopago: minor-unit overrides per currency.
        "currency_exponents",
    }),
    "pagarme": frozenset({
        # porteiro.providers.pagarme: where the JWKS that verifies RS256 deliveries comes
        # from, and whether HMAC-only deliveries are refused.
        "jwks_url", "jwks_file", "jwks_refetch_seconds", "require_asymmetric",
        # porteiro.providers.pagarme (and porteiro.fakes.pagarme): how `porteiro simulate`
        # and the fake gateway sign deliveries.
        "signing_key_file", "signing_kid", "signing_hub_algorithm",
    }),
    "pix": frozenset({
        # porteiro.providers.pix and porteiro.outgoing.pix: the chaves this source receives
        # on, and whether each Pix is confirmed against the PSP's API.
        "keys", "confirm",
        # porteiro.providers.pix and porteiro.outgoing.pix: the PSP API's OAuth2 client and
        # its TLS.
        "client_id", "client_secret", "client_cert_file", "client_key_file", "api_ca_file",
        # porteiro.providers.pix (pix_auth): how a delivery is authenticated. porteiro.http.tls
        # also adds `mtls_ca_file` to the CAs `porteiro serve` trusts.
        "hmac_token", "allow_ips", "mtls_ca_file", "allowed_cns", "trusted_proxies",
        "client_verify_header", "client_subject_header", "client_cert_header",
        "client_ip_header",
    }),
    "standard": frozenset(),
    "stripe": frozenset({
        # porteiro.providers.stripe: metadata keys tried, in order, for the merchant
        # reference.
        "reference_metadata_keys",
    }),
}  # fmt: skip


def source_keys(provider: str) -> frozenset[str] | None:
    """Every key a `[sources.NAME]` table of `provider` accepts; None for a provider this
    list does not know (its own error comes from porteiro.providers)."""
    options = PROVIDER_OPTIONS.get(provider)
    if options is None:
        return None
    return SOURCE_FIELDS | COMMON_OPTIONS | options
