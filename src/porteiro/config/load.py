"""Loading settings: the TOML file (`${ENV}` interpolation, environment overrides),
each table parsed and checked, unknown keys refused with their path."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from porteiro.config import (
    ADMIN_ROLES,
    DEFAULT_CONFIG_PATH,
    DEFAULT_STORE_URL,
    LEGACY_TOKEN_NAME,
    UI_LANGUAGES,
    AdminConfig,
    AdminToken,
    Config,
    DestinationConfig,
    HandlersConfig,
    ReconcileConfig,
    ServerConfig,
    SourceConfig,
    UiConfig,
    WorkerConfig,
    _number,
)
from porteiro.config.source_options import SOURCE_FIELDS, source_keys
from porteiro.config.values import (
    keys_of,
    opt_str,
    positive,
    refuse_unknown_keys,
    subtable,
    whole,
)
from porteiro.errors import ConfigError
from porteiro.model import Kind
from porteiro.retry import RetryPolicy

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
    "destinations", "handlers", "ui",
})  # fmt: skip


def parse_config(raw: Mapping[str, Any], env: Mapping[str, str]) -> Config:
    data = _interpolate(raw, env)
    if not isinstance(data, dict):
        raise ConfigError("configuration must be a table")
    refuse_unknown_keys("", data, _TABLES)
    store, admin, quarantine = (subtable(data, key) for key in ("store", "admin", "quarantine"))
    refuse_unknown_keys("[store]", store, {"url"})
    refuse_unknown_keys("[admin]", admin, {"token", "tokens", "listen", "metrics_token"})
    refuse_unknown_keys("[quarantine]", quarantine, {"limit"})
    store_url = env.get("PORTEIRO_STORE_URL") or opt_str(store, "url") or DEFAULT_STORE_URL
    admin_token = env.get("PORTEIRO_ADMIN_TOKEN") or opt_str(admin, "token")
    sources = {name: _source(name, table) for name, table in subtable(data, "sources").items()}
    return Config(
        store_url=store_url,
        admin_token=admin_token or None,
        admin=_admin(admin, legacy=admin_token or None),
        sources=sources,
        server=_server(subtable(data, "server")),
        worker=_worker(subtable(data, "worker")),
        quarantine_limit=whole(quarantine, "[quarantine]", "limit", 10_000, 1),
        reconcile=_reconcile(subtable(data, "reconcile")),
        destinations={
            name: _destination(name, table)
            for name, table in subtable(data, "destinations").items()
        },
        handlers=_handlers(subtable(data, "handlers")),
        ui=_ui(subtable(data, "ui")),
    )


def _admin(table: Mapping[str, Any], *, legacy: str | None) -> AdminConfig:
    """`[admin]`'s named tokens, listener and metrics token (`token` is read beside it,
    `legacy`: it must not share a name or a value with a named one, or the audit log
    could not say whose a request was)."""
    tokens: dict[str, AdminToken] = {}
    for name, entry in subtable(table, "tokens").items():
        where = f"[admin.tokens.{name}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table")
        refuse_unknown_keys(where, entry, {"token", "role"})
        token = opt_str(entry, "token")
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
    listen = opt_str(table, "listen")
    return AdminConfig(
        tokens=tokens,
        listen=None if not listen else _host_port("[admin] listen", listen),
        metrics_token=opt_str(table, "metrics_token") or None,
    )


def _host_port(where: str, value: str) -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets: `[::1]:9100`)."""
    host, _, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65_535:
        raise ConfigError(f'{where} must be "host:port" (e.g. "127.0.0.1:9100"), not {value!r}')
    return host, int(port)


def _handlers(table: Mapping[str, Any]) -> HandlersConfig:
    refuse_unknown_keys("[handlers]", table, keys_of(HandlersConfig))
    return HandlersConfig(module=opt_str(table, "module") or None)


_UI_FLAGS = ("enabled", "behind_tls_proxy")


def _ui(table: Mapping[str, Any]) -> UiConfig:
    where, defaults = "[ui]", UiConfig()
    refuse_unknown_keys(where, table, keys_of(UiConfig))
    enabled, proxied = (table.get(key, getattr(defaults, key)) for key in _UI_FLAGS)
    for key, value in zip(_UI_FLAGS, (enabled, proxied), strict=True):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} {key} must be true or false")
    timezone = opt_str(table, "timezone") or defaults.timezone
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f'{where} timezone: unknown time zone "{timezone}" (an IANA name such as '
            '"America/Sao_Paulo" or "UTC")'
        ) from None
    language = opt_str(table, "language") or defaults.language
    if language not in UI_LANGUAGES:
        raise ConfigError(f"{where} language must be one of {', '.join(UI_LANGUAGES)}")
    hours = table.get("session_hours", defaults.session_hours)
    return UiConfig(
        enabled=enabled,
        timezone=timezone,
        language=language,
        session_hours=_number(where, "session_hours", hours, above=0, high=24 * 30),
        behind_tls_proxy=proxied,
    )


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


def _source(name: str, table: Any) -> SourceConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"[sources.{name}] must be a table")
    provider = table.get("provider")
    if not isinstance(provider, str):
        raise ConfigError(f'[sources.{name}] needs provider = "..."')
    known = source_keys(provider)
    if known is not None:  # an unknown provider is porteiro.providers' error to report
        refuse_unknown_keys(f"[sources.{name}]", table, known)
    secrets = table.get("secrets", [])
    if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
        raise ConfigError(f"[sources.{name}] secrets must be a list of strings")
    return SourceConfig(
        name=name,
        provider=provider,
        secrets=tuple(s for s in secrets if s),
        tolerance_seconds=whole(table, f"[sources.{name}]", "tolerance_seconds", 300, 0),
        api_base_url=opt_str(table, "api_base_url"),
        api_key=opt_str(table, "api_key"),
        options={key: value for key, value in table.items() if key not in SOURCE_FIELDS},
    )


def _server(table: Mapping[str, Any]) -> ServerConfig:
    defaults = ServerConfig()
    where = "[server]"
    refuse_unknown_keys(where, table, keys_of(ServerConfig))
    timeout = table.get("store_timeout_seconds", defaults.store_timeout_seconds)
    retry_after = defaults.retry_after_seconds
    return ServerConfig(
        host=str(table.get("host", defaults.host)),
        port=whole(table, where, "port", defaults.port, 0, 65_535),
        max_body_bytes=whole(table, where, "max_body_bytes", defaults.max_body_bytes, 1),
        store_timeout_seconds=positive(where, "store_timeout_seconds", timeout),
        retry_after_seconds=whole(table, where, "retry_after_seconds", retry_after, 0),
        tls_cert_file=opt_str(table, "tls_cert_file") or None,
        tls_key_file=opt_str(table, "tls_key_file") or None,
        tls_client_ca_file=opt_str(table, "tls_client_ca_file") or None,
        max_inflight=whole(table, where, "max_inflight", defaults.max_inflight, 1),
        receivers=whole(table, where, "receivers", defaults.receivers, 1),
        header_timeout_seconds=_server_seconds(table, "header_timeout_seconds", defaults),
        body_timeout_seconds=_server_seconds(table, "body_timeout_seconds", defaults),
        linger_seconds=_server_seconds(table, "linger_seconds", defaults),
        linger_max_bytes=whole(table, where, "linger_max_bytes", defaults.linger_max_bytes, 0),
    )


def _server_seconds(table: Mapping[str, Any], key: str, defaults: ServerConfig) -> float:
    return positive("[server]", key, table.get(key, getattr(defaults, key)))


def _worker_flag(table: Mapping[str, Any], key: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"[worker] {key} must be true or false")
    return value


def _worker(table: Mapping[str, Any]) -> WorkerConfig:
    defaults = WorkerConfig()
    where = "[worker]"
    refuse_unknown_keys(where, table, keys_of(WorkerConfig))
    lease = table.get("lease_seconds", defaults.lease_seconds)
    poll = table.get("poll_interval_seconds", defaults.poll_interval_seconds)
    return WorkerConfig(
        concurrency=whole(table, where, "concurrency", defaults.concurrency, 1),
        batch_size=whole(table, where, "batch_size", defaults.batch_size, 1),
        lease_seconds=positive(where, "lease_seconds", lease),
        poll_interval_seconds=positive(where, "poll_interval_seconds", poll),
        prefetch=_worker_flag(table, "prefetch", defaults.prefetch),
        gather_ms=_number(where, "gather_ms", table.get("gather_ms", defaults.gather_ms), 0, 1000),
        retry=_retry_policy(where, subtable(table, "retry")),
    )


def _reconcile(table: Mapping[str, Any]) -> ReconcileConfig:
    refuse_unknown_keys("[reconcile]", table, keys_of(ReconcileConfig))
    defaults = ReconcileConfig()
    enabled = table.get("enabled", defaults.enabled)
    interval = table.get("interval_seconds", defaults.interval_seconds)
    if not isinstance(enabled, bool):
        raise ConfigError("[reconcile] enabled must be true or false")
    return ReconcileConfig(
        enabled=enabled,
        interval_seconds=positive("[reconcile]", "interval_seconds", interval),
        batch_size=whole(table, "[reconcile]", "batch_size", defaults.batch_size, 1),
        reports_dir=opt_str(table, "reports_dir") or defaults.reports_dir,
    )


def _destination(name: str, table: Any) -> DestinationConfig:
    where = f"[destinations.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    refuse_unknown_keys(where, table, keys_of(DestinationConfig, besides={"name"}))
    url, rabbitmq_url = opt_str(table, "url") or None, opt_str(table, "rabbitmq_url") or None
    if (url is None) == (rabbitmq_url is None):
        raise ConfigError(f"{where} needs exactly one of url or rabbitmq_url")
    secret = opt_str(table, "secret") or None
    if url is not None and (secret is None or not secret.startswith("whsec_")):
        raise ConfigError(f'{where} needs secret = "whsec_..." (Standard Webhooks) for url')
    defaults = DestinationConfig(name=name)
    rate = table.get("rate_per_second")
    return DestinationConfig(
        name=name,
        url=url,
        secret=secret,
        rabbitmq_url=rabbitmq_url,
        exchange=opt_str(table, "exchange") or defaults.exchange,
        kinds=_destination_kinds(where, table.get("kinds", [])),
        rate_per_second=None if rate is None else positive(where, "rate_per_second", rate),
        concurrency=whole(table, where, "concurrency", defaults.concurrency, 1),
        timeout_seconds=positive(where, "timeout_seconds", table.get("timeout_seconds", 10.0)),
        lease_seconds=positive(where, "lease_seconds", table.get("lease_seconds", 60.0)),
        circuit_failures=whole(table, where, "circuit_failures", defaults.circuit_failures, 1),
        circuit_cooldown_seconds=positive(
            where, "circuit_cooldown_seconds", table.get("circuit_cooldown_seconds", 30.0)
        ),
        retry=_retry_policy(where, subtable(table, "retry")),
    )


def _destination_kinds(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where} kinds must be a list of strings")
    allowed = {kind.value for kind in Kind} - {Kind.OTHER.value}
    wrong = sorted(set(value) - allowed)
    if wrong:
        raise ConfigError(f"{where} unknown kind(s) {', '.join(wrong)}")
    return tuple(value)


def _retry_policy(where: str, table: Mapping[str, Any]) -> RetryPolicy:
    """The `retry` sub-table of the table at `where` (`[worker]` -> `[worker.retry]`)."""
    refuse_unknown_keys(f"{where[:-1]}.retry]", table, keys_of(RetryPolicy))
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
