"""Settings: a TOML file with `${ENV}` interpolation, plus a few environment overrides.

Read only at entry points (CLI, ASGI factory), never at import time: `load_config` takes
the environment as an argument so tests pass their own.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from porteiro.errors import ConfigError
from porteiro.model import Kind
from porteiro.retry import RetryPolicy
from porteiro.source_options import SOURCE_FIELDS, source_keys

DEFAULT_CONFIG_PATH = "porteiro.toml"
DEFAULT_STORE_URL = "sqlite:///./porteiro.db"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One webhook source: a URL segment bound to a provider and its secrets.

    `options` keeps every provider-specific key (e.g. `jwks_url`, `basic_auth`) as given,
    and the reconciler's (`reconcile_grace_seconds`, `pending_max_age_seconds`,
    `api_rate_per_second`...; docs/reconciliation.md): the keys porteiro.source_options
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


def config_file(path: str | Path | None, env: Mapping[str, str]) -> Path | None:
    """The file `load_config` reads: `path`, else PORTEIRO_CONFIG, else ./porteiro.toml if
    it exists; None when there is none (every setting is then a default or the env's)."""
    chosen = path or env.get("PORTEIRO_CONFIG")
    if chosen is not None:
        return Path(chosen)
    default = Path(DEFAULT_CONFIG_PATH)
    return default if default.exists() else None


def load_config(path: str | Path | None, env: Mapping[str, str]) -> Config:
    """Load `path` (or PORTEIRO_CONFIG, or ./porteiro.toml if it exists)."""
    file = config_file(path, env)
    return parse_config({} if file is None else _read_toml(file), env)


NO_CONFIG = (
    "no configuration: pass --config FILE, set $PORTEIRO_CONFIG or create ./porteiro.toml"
    " (porteiro.example.toml is one for development)"
)


def load_required_config(path: str | Path | None, env: Mapping[str, str]) -> Config:
    """`load_config`, refusing (ConfigError) when there is no configuration at all: no
    file and no PORTEIRO_STORE_URL. The defaults would quietly create ./porteiro.db
    wherever the process was started."""
    if config_file(path, env) is None and not env.get("PORTEIRO_STORE_URL"):
        raise ConfigError(NO_CONFIG)
    return load_config(path, env)


# The file's top-level tables.
_TABLES = frozenset({
    "store", "admin", "sources", "server", "worker", "quarantine", "reconcile",
    "destinations", "handlers",
})  # fmt: skip


def parse_config(raw: Mapping[str, Any], env: Mapping[str, str]) -> Config:
    data = _interpolate(raw, env)
    if not isinstance(data, dict):
        raise ConfigError("configuration must be a table")
    _refuse_unknown_keys("", data, _TABLES)
    store, admin, quarantine = (_table(data, key) for key in ("store", "admin", "quarantine"))
    _refuse_unknown_keys("[store]", store, {"url"})
    _refuse_unknown_keys("[admin]", admin, {"token", "tokens", "listen", "metrics_token"})
    _refuse_unknown_keys("[quarantine]", quarantine, {"limit"})
    store_url = env.get("PORTEIRO_STORE_URL") or _opt_str(store, "url") or DEFAULT_STORE_URL
    admin_token = env.get("PORTEIRO_ADMIN_TOKEN") or _opt_str(admin, "token")
    sources = {name: _source(name, table) for name, table in _table(data, "sources").items()}
    return Config(
        store_url=store_url,
        admin_token=admin_token or None,
        admin=_admin(admin, legacy=admin_token or None),
        sources=sources,
        server=_server(_table(data, "server")),
        worker=_worker(_table(data, "worker")),
        quarantine_limit=_whole(quarantine, "[quarantine]", "limit", 10_000, 1),
        reconcile=_reconcile(_table(data, "reconcile")),
        destinations={
            name: _destination(name, table) for name, table in _table(data, "destinations").items()
        },
        handlers=_handlers(_table(data, "handlers")),
    )


def _admin(table: Mapping[str, Any], *, legacy: str | None) -> AdminConfig:
    """`[admin]`'s named tokens, listener and metrics token (`token` is read beside it,
    `legacy`: it must not share a name or a value with a named one, or the audit log
    could not say whose a request was)."""
    tokens: dict[str, AdminToken] = {}
    for name, entry in _table(table, "tokens").items():
        where = f"[admin.tokens.{name}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table")
        _refuse_unknown_keys(where, entry, {"token", "role"})
        token = _opt_str(entry, "token")
        if not token:
            raise ConfigError(f'{where} needs token = "..."')
        role = entry.get("role", "read")
        if role not in ADMIN_ROLES:
            raise ConfigError(f"{where} role must be one of {', '.join(ADMIN_ROLES)}")
        tokens[name] = AdminToken(name=name, token=token, role=role)
    if legacy is not None and LEGACY_TOKEN_NAME in tokens:
        raise ConfigError(
            f"[admin.tokens.{LEGACY_TOKEN_NAME}]: the name is [admin] token's; choose another"
        )
    values = [entry.token for entry in tokens.values()] + ([legacy] if legacy else [])
    if len(set(values)) != len(values):
        raise ConfigError("[admin]: two admin tokens have the same value; give each its own")
    listen = _opt_str(table, "listen")
    return AdminConfig(
        tokens=tokens,
        listen=None if not listen else _host_port("[admin] listen", listen),
        metrics_token=_opt_str(table, "metrics_token") or None,
    )


def _host_port(where: str, value: str) -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets: `[::1]:9100`)."""
    host, _, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65_535:
        raise ConfigError(f'{where} must be "host:port" (e.g. "127.0.0.1:9100"), not {value!r}')
    return host, int(port)


def _handlers(table: Mapping[str, Any]) -> HandlersConfig:
    _refuse_unknown_keys("[handlers]", table, _keys_of(HandlersConfig))
    return HandlersConfig(module=_opt_str(table, "module") or None)


def _keys_of(settings: type, *, besides: Iterable[str] = ()) -> frozenset[str]:
    """The keys of a table read into the dataclass `settings`: its fields' names, which
    the loaders below read one by one."""
    return frozenset(item.name for item in fields(settings)) - set(besides)


def _refuse_unknown_keys(where: str, table: Mapping[str, Any], known: Iterable[str]) -> None:
    """A ConfigError naming every key of `table` (the table at `where`; "" for the top
    level) that is not in `known`, by its path, with the closest known key when one is
    close: a typo (`[server] prot`) stops start-up instead of being silently ignored."""
    choices = sorted(known)
    unknown = [key for key in table if key not in choices]
    if not unknown:
        return
    problems, far = [], False
    for key in unknown:
        close = difflib.get_close_matches(key, choices, n=1)
        far = far or not close
        hint = f", did you mean `{close[0]}`?" if close else ""
        problems.append(f"{_key_path(where, key, table[key])}: unknown key{hint}")
    # Without a close match, the whole list is the most useful hint.
    known_list = f" (known: {', '.join(choices)})" if far else ""
    raise ConfigError("; ".join(problems) + known_list)


def _key_path(where: str, key: str, value: Any) -> str:
    """`[server] prot`; at the top level, the key as the file spells it (`[sever]`)."""
    if where:
        return f"{where} {key}"
    return f"[{key}]" if isinstance(value, dict) else key


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _interpolate(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _ENV_REF.sub(lambda match: _env_value(match.group(1), env), value)
    if isinstance(value, dict):
        return {key: _interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolate(item, env) for item in value]
    return value


def _env_value(name: str, env: Mapping[str, str]) -> str:
    try:
        return env[name]
    except KeyError:
        raise ConfigError(f"environment variable {name} is referenced but not set") from None


def _table(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{key}] must be a table")
    return value


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{key} must be a string")
    return value


def _source(name: str, table: Any) -> SourceConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"[sources.{name}] must be a table")
    provider = table.get("provider")
    if not isinstance(provider, str):
        raise ConfigError(f'[sources.{name}] needs provider = "..."')
    known = source_keys(provider)
    if known is not None:  # an unknown provider is porteiro.providers' error to report
        _refuse_unknown_keys(f"[sources.{name}]", table, known)
    secrets = table.get("secrets", [])
    if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
        raise ConfigError(f"[sources.{name}] secrets must be a list of strings")
    return SourceConfig(
        name=name,
        provider=provider,
        secrets=tuple(s for s in secrets if s),
        tolerance_seconds=_whole(table, f"[sources.{name}]", "tolerance_seconds", 300, 0),
        api_base_url=_opt_str(table, "api_base_url"),
        api_key=_opt_str(table, "api_key"),
        options={key: value for key, value in table.items() if key not in SOURCE_FIELDS},
    )


def _server(table: Mapping[str, Any]) -> ServerConfig:
    defaults = ServerConfig()
    where = "[server]"
    _refuse_unknown_keys(where, table, _keys_of(ServerConfig))
    timeout = table.get("store_timeout_seconds", defaults.store_timeout_seconds)
    retry_after = defaults.retry_after_seconds
    return ServerConfig(
        host=str(table.get("host", defaults.host)),
        port=_whole(table, where, "port", defaults.port, 0, 65_535),
        max_body_bytes=_whole(table, where, "max_body_bytes", defaults.max_body_bytes, 1),
        store_timeout_seconds=_positive(where, "store_timeout_seconds", timeout),
        retry_after_seconds=_whole(table, where, "retry_after_seconds", retry_after, 0),
        tls_cert_file=_opt_str(table, "tls_cert_file") or None,
        tls_key_file=_opt_str(table, "tls_key_file") or None,
        tls_client_ca_file=_opt_str(table, "tls_client_ca_file") or None,
        max_inflight=_whole(table, where, "max_inflight", defaults.max_inflight, 1),
        receivers=_whole(table, where, "receivers", defaults.receivers, 1),
        header_timeout_seconds=_server_seconds(table, "header_timeout_seconds", defaults),
        body_timeout_seconds=_server_seconds(table, "body_timeout_seconds", defaults),
        linger_seconds=_server_seconds(table, "linger_seconds", defaults),
        linger_max_bytes=_whole(table, where, "linger_max_bytes", defaults.linger_max_bytes, 0),
    )


def _server_seconds(table: Mapping[str, Any], key: str, defaults: ServerConfig) -> float:
    return _positive("[server]", key, table.get(key, getattr(defaults, key)))


def _worker_flag(table: Mapping[str, Any], key: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"[worker] {key} must be true or false")
    return value


def _worker(table: Mapping[str, Any]) -> WorkerConfig:
    defaults = WorkerConfig()
    where = "[worker]"
    _refuse_unknown_keys(where, table, _keys_of(WorkerConfig))
    lease = table.get("lease_seconds", defaults.lease_seconds)
    poll = table.get("poll_interval_seconds", defaults.poll_interval_seconds)
    return WorkerConfig(
        concurrency=_whole(table, where, "concurrency", defaults.concurrency, 1),
        batch_size=_whole(table, where, "batch_size", defaults.batch_size, 1),
        lease_seconds=_positive(where, "lease_seconds", lease),
        poll_interval_seconds=_positive(where, "poll_interval_seconds", poll),
        prefetch=_worker_flag(table, "prefetch", defaults.prefetch),
        gather_ms=_number(where, "gather_ms", table.get("gather_ms", defaults.gather_ms), 0, 1000),
        retry=_retry_policy(where, _table(table, "retry")),
    )


def _reconcile(table: Mapping[str, Any]) -> ReconcileConfig:
    _refuse_unknown_keys("[reconcile]", table, _keys_of(ReconcileConfig))
    defaults = ReconcileConfig()
    enabled = table.get("enabled", defaults.enabled)
    interval = table.get("interval_seconds", defaults.interval_seconds)
    if not isinstance(enabled, bool):
        raise ConfigError("[reconcile] enabled must be true or false")
    return ReconcileConfig(
        enabled=enabled,
        interval_seconds=_positive("[reconcile]", "interval_seconds", interval),
        batch_size=_whole(table, "[reconcile]", "batch_size", defaults.batch_size, 1),
        reports_dir=_opt_str(table, "reports_dir") or defaults.reports_dir,
    )


def _destination(name: str, table: Any) -> DestinationConfig:
    where = f"[destinations.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    _refuse_unknown_keys(where, table, _keys_of(DestinationConfig, besides={"name"}))
    url, rabbitmq_url = _opt_str(table, "url") or None, _opt_str(table, "rabbitmq_url") or None
    if (url is None) == (rabbitmq_url is None):
        raise ConfigError(f"{where} needs exactly one of url or rabbitmq_url")
    secret = _opt_str(table, "secret") or None
    if url is not None and (secret is None or not secret.startswith("whsec_")):
        raise ConfigError(f'{where} needs secret = "whsec_..." (Standard Webhooks) for url')
    defaults = DestinationConfig(name=name)
    rate = table.get("rate_per_second")
    return DestinationConfig(
        name=name,
        url=url,
        secret=secret,
        rabbitmq_url=rabbitmq_url,
        exchange=_opt_str(table, "exchange") or defaults.exchange,
        kinds=_destination_kinds(where, table.get("kinds", [])),
        rate_per_second=None if rate is None else _positive(where, "rate_per_second", rate),
        concurrency=_whole(table, where, "concurrency", defaults.concurrency, 1),
        timeout_seconds=_positive(where, "timeout_seconds", table.get("timeout_seconds", 10.0)),
        lease_seconds=_positive(where, "lease_seconds", table.get("lease_seconds", 60.0)),
        circuit_failures=_whole(table, where, "circuit_failures", defaults.circuit_failures, 1),
        circuit_cooldown_seconds=_positive(
            where, "circuit_cooldown_seconds", table.get("circuit_cooldown_seconds", 30.0)
        ),
        retry=_retry_policy(where, _table(table, "retry")),
    )


def _destination_kinds(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where} kinds must be a list of strings")
    allowed = {kind.value for kind in Kind} - {Kind.OTHER.value}
    wrong = sorted(set(value) - allowed)
    if wrong:
        raise ConfigError(f"{where} unknown kind(s) {', '.join(wrong)}")
    return tuple(value)


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


def _whole(
    table: Mapping[str, Any],
    where: str,
    key: str,
    default: int,
    low: int,
    high: int | None = None,
) -> int:
    """The table's whole number `key` (or `default`) within `low`..`high`."""
    return int(_number(where, key, table.get(key, default), low, high, whole=True))


def _positive(where: str, key: str, value: Any) -> float:
    return _number(where, key, value, above=0)


def _retry_policy(where: str, table: Mapping[str, Any]) -> RetryPolicy:
    """The `retry` sub-table of the table at `where` (`[worker]` -> `[worker.retry]`)."""
    _refuse_unknown_keys(f"{where[:-1]}.retry]", table, _keys_of(RetryPolicy))
    defaults = RetryPolicy()
    try:
        policy = RetryPolicy(
            max_attempts=int(table.get("max_attempts", defaults.max_attempts)),
            base_delay_seconds=float(table.get("base_delay_seconds", defaults.base_delay_seconds)),
            multiplier=float(table.get("multiplier", defaults.multiplier)),
            max_delay_seconds=float(table.get("max_delay_seconds", defaults.max_delay_seconds)),
            jitter=float(table.get("jitter", defaults.jitter)),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where} retry: {exc}") from None
    delays = (policy.base_delay_seconds, policy.max_delay_seconds)
    if policy.max_attempts < 1 or min(delays) < 0 or not 0 <= policy.jitter < 1:
        raise ConfigError(f"{where} retry: max_attempts >= 1, delays >= 0, 0 <= jitter < 1")
    return policy
