"""Settings: a TOML file with `${ENV}` interpolation, plus a few environment overrides.

Read only at entry points (CLI, ASGI factory), never at import time: `load_config` takes
the environment as an argument so tests pass their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from porteiro.errors import ConfigError
from porteiro.retry import RetryPolicy

DEFAULT_CONFIG_PATH = "porteiro.toml"
DEFAULT_STORE_URL = "sqlite:///./porteiro.db"


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One webhook source: a URL segment bound to a provider and its secrets.

    `options` keeps every provider-specific key (e.g. `jwks_url`, `basic_auth`) as given,
    and the reconciler's (`reconcile_grace_seconds`, `pending_max_age_seconds`,
    `api_rate_per_second`...; docs/reconciliation.md): the keys porteiro.config.source_options
    declares for the provider, any other being refused when the file is read.
    """

    name: str
    provider: str
    secrets: tuple[str, ...] = ()
    tolerance_seconds: int = 300
    api_base_url: str | None = None
    api_key: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def option_str(self, key: str) -> str | None:
        value = self.options.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigError(f"source {self.name!r}: {key} must be a string")
        return value

    def option_number(self, key: str, default: float) -> float:
        """An optional non-negative number (e.g. `reconcile_grace_seconds`)."""
        return _number(f"source {self.name!r}:", key, self.options.get(key, default))


# Reconciliation keys of a source's options, with their defaults (docs/reconciliation.md).
DEFAULT_RECONCILE_GRACE_SECONDS = 300.0  # past a payment's expiry, before asking
DEFAULT_PENDING_MAX_AGE_SECONDS = 86_400.0  # pending longer than this: ask anyway


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 1024 * 1024
    # Upper bound for the durable write behind an ack: past it the gateway gets a 503
    # and retries, instead of a hung connection.
    store_timeout_seconds: float = 0.8
    retry_after_seconds: int = 5
    # TLS termination by `porteiro serve` (porteiro.http.tls): needed for Pix mTLS without a
    # proxy. The client CA bundle adds to every source's `mtls_ca_file`.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    # Ingest saturation guard: past this many requests in flight per receiver process, a
    # webhook gets 503 + Retry-After at once instead of queueing behind the store.
    max_inflight: int = 1024
    # Receiver processes sharing the port (`porteiro serve --receivers` overrides).
    receivers: int = 1
    # The HTTP door (porteiro.http.limits): how long a client may take to send its
    # headers, then its body (past it: 408 and close), and after an early answer (413...)
    # how long and how much of the rest of its body is read and dropped before closing.
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    linger_seconds: float = 5.0
    linger_max_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    concurrency: int = 4  # enrichment calls (thin events) in flight per worker
    batch_size: int = 256  # events claimed, and applied in one transaction, at a time
    lease_seconds: float = 60.0
    poll_interval_seconds: float = 1.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    prefetch: bool = True  # claim the next batch while a full one applies
    gather_ms: float = 10.0  # after a partial batch, wait this long before claiming again


@dataclass(frozen=True, slots=True)
class ReconcileConfig:
    """`[reconcile]`: the stale-pending cycle `serve` runs in the background (per-source
    keys such as `reconcile_grace_seconds` live in each source's options)."""

    enabled: bool = True
    interval_seconds: float = 60.0
    # Status reads per source and cycle, at most (the rest wait for the next cycle).
    batch_size: int = 100
    # Where `porteiro reconcile` writes its JSON and CSV reports.
    reports_dir: str = "./reconcile-reports"


@dataclass(frozen=True, slots=True)
class DestinationConfig:
    """`[destinations.NAME]`: one merchant system Porteiro forwards events to.

    Exactly one transport: `url` (signed HTTP POST, Standard Webhooks with the `whsec_`
    `secret`) or `rabbitmq_url` + `exchange` (a durable topic exchange). `kinds` empty
    means every kind but `other`. Failures retry under `retry` (`[destinations.NAME.retry]`,
    the worker's keys) and then dead-letter in this destination's outbox.
    """

    name: str
    url: str | None = None
    secret: str | None = None
    rabbitmq_url: str | None = None
    exchange: str = "porteiro.events"
    kinds: tuple[str, ...] = ()
    rate_per_second: float | None = None  # None: no rate limit
    concurrency: int = 4
    timeout_seconds: float = 10.0
    # A claimed row comes back to any relay after this long (a relay that died).
    lease_seconds: float = 60.0
    # Circuit breaker: open after this many consecutive failures, for the cool-down.
    circuit_failures: int = 5
    circuit_cooldown_seconds: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def transport(self) -> str:
        return "http" if self.url is not None else "rabbitmq"

    def wants(self, kind: str) -> bool:
        return kind != "other" and (not self.kinds or kind in self.kinds)


@dataclass(frozen=True, slots=True)
class HandlersConfig:
    """`[handlers]`: the merchant module whose in-process handlers run inside the ledger
    transaction (docs/handlers.md); None: no handlers."""

    module: str | None = None


# What an admin API token may do: `read` looks (lists, shows), `operate` also acts
# (replay, DLQ replay, redrive, pause, resume); docs/api.md, Roles.
ADMIN_ROLES = ("read", "operate")
# The name `[admin] token` goes by in the audit log: it is an operate token.
LEGACY_TOKEN_NAME = "admin"


@dataclass(frozen=True, slots=True)
class AdminToken:
    """`[admin.tokens.NAME]`: a named bearer token with a role (one of ADMIN_ROLES). The
    name, never the token, is what the audit log and the logs show."""

    name: str
    token: str
    role: str = "read"


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """`[admin]` besides its `token` (Config.admin_token): named tokens, the separate
    admin listener (`listen = "host:port"`: /api and /metrics only there, not on the
    webhook port) and the token /metrics asks for when set."""

    tokens: Mapping[str, AdminToken] = field(default_factory=dict)
    listen: tuple[str, int] | None = None
    metrics_token: str | None = None


# The operator's console (/ui) speaks these; docs/ui.md.
UI_LANGUAGES = ("pt", "en")


@dataclass(frozen=True, slots=True)
class UiConfig:
    """`[ui]`: the console at /ui (served where /api is). Times are shown in `timezone`
    (an IANA name), labels in `language`; a login lasts `session_hours`. With
    `behind_tls_proxy`, the session cookie is Secure even though the request reached
    Porteiro over plain HTTP (from a proxy that terminated TLS)."""

    enabled: bool = True
    timezone: str = "America/Sao_Paulo"
    language: str = "pt"
    session_hours: float = 8.0
    behind_tls_proxy: bool = False


@dataclass(frozen=True, slots=True)
class Config:
    store_url: str = DEFAULT_STORE_URL
    admin_token: str | None = None
    admin: AdminConfig = field(default_factory=AdminConfig)
    sources: Mapping[str, SourceConfig] = field(default_factory=dict)
    server: ServerConfig = field(default_factory=ServerConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    quarantine_limit: int = 10_000
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)
    destinations: Mapping[str, DestinationConfig] = field(default_factory=dict)
    handlers: HandlersConfig = field(default_factory=HandlersConfig)
    ui: UiConfig = field(default_factory=UiConfig)


def _number(
    where: str,
    key: str,
    value: Any,
    low: float = 0,
    high: float | None = None,
    *,
    above: float | None = None,
    whole: bool = False,
) -> float:
    """`value` as a number within `low`..`high` (or strictly `above`), else a ConfigError
    that names the key and the rule. TOML's booleans are not numbers here; text that
    reads as one is (a number from the environment: `port = "${PORT}"`)."""
    if isinstance(value, str):
        value = _from_text(value)
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        fits = False
    elif above is not None:
        fits = value > above
    else:
        fits = low <= value and (high is None or value <= high)
    if not fits:
        if above is not None:
            rule = f"> {above:g}"
        else:
            rule = f">= {low:g}" if high is None else f"from {low:g} to {high:g}"
        raise ConfigError(f"{where} {key} must be a {'whole ' if whole else ''}number {rule}")
    return float(value)


def _from_text(text: str) -> int | float | str:
    """The number `text` spells (an int where it is one), else the text unchanged."""
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:
            continue
    return text
