"""Settings: a TOML file with `${ENV}` interpolation, plus a few environment overrides.

Read only at entry points (CLI, ASGI factory), never at import time: `load_config` takes
the environment as an argument so tests pass their own.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porteiro.errors import ConfigError
from porteiro.retry import RetryPolicy

DEFAULT_CONFIG_PATH = "porteiro.toml"
DEFAULT_STORE_URL = "sqlite:///./porteiro.db"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One webhook source: a URL segment bound to a provider and its secrets.

    `options` keeps every provider-specific key (e.g. `jwks_url`, `basic_auth`) as given.
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


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 1024 * 1024
    # Upper bound for the durable write behind an ack: past it the gateway gets a 503
    # and retries, instead of a hung connection.
    store_timeout_seconds: float = 0.8
    retry_after_seconds: int = 5
    # TLS termination by `porteiro serve` (porteiro.tls): needed for Pix mTLS without a
    # proxy. The client CA bundle adds to every source's `mtls_ca_file`.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    # Ingest saturation guard: past this many requests in flight per receiver process, a
    # webhook gets 503 + Retry-After at once instead of queueing behind the store.
    max_inflight: int = 1024
    # Receiver processes sharing the port (`porteiro serve --receivers` overrides).
    receivers: int = 1


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    concurrency: int = 4
    batch_size: int = 32
    lease_seconds: float = 60.0
    poll_interval_seconds: float = 1.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass(frozen=True, slots=True)
class Config:
    store_url: str = DEFAULT_STORE_URL
    admin_token: str | None = None
    sources: Mapping[str, SourceConfig] = field(default_factory=dict)
    server: ServerConfig = field(default_factory=ServerConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    quarantine_limit: int = 10_000


def load_config(path: str | Path | None, env: Mapping[str, str]) -> Config:
    """Load `path` (or PORTEIRO_CONFIG, or ./porteiro.toml if it exists)."""
    chosen = path or env.get("PORTEIRO_CONFIG")
    raw: dict[str, Any] = {}
    if chosen is not None:
        raw = _read_toml(Path(chosen))
    elif Path(DEFAULT_CONFIG_PATH).exists():
        raw = _read_toml(Path(DEFAULT_CONFIG_PATH))
    return parse_config(raw, env)


def parse_config(raw: Mapping[str, Any], env: Mapping[str, str]) -> Config:
    data = _interpolate(raw, env)
    if not isinstance(data, dict):
        raise ConfigError("configuration must be a table")
    store = _table(data, "store")
    admin = _table(data, "admin")
    store_url = env.get("PORTEIRO_STORE_URL") or _opt_str(store, "url") or DEFAULT_STORE_URL
    admin_token = env.get("PORTEIRO_ADMIN_TOKEN") or _opt_str(admin, "token")
    sources = {name: _source(name, table) for name, table in _table(data, "sources").items()}
    return Config(
        store_url=store_url,
        admin_token=admin_token or None,
        sources=sources,
        server=_server(_table(data, "server")),
        worker=_worker(_table(data, "worker")),
        quarantine_limit=int(_table(data, "quarantine").get("limit", 10_000)),
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


_SOURCE_KEYS = {"provider", "secrets", "tolerance_seconds", "api_base_url", "api_key"}


def _source(name: str, table: Any) -> SourceConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"[sources.{name}] must be a table")
    provider = table.get("provider")
    if not isinstance(provider, str):
        raise ConfigError(f'[sources.{name}] needs provider = "..."')
    secrets = table.get("secrets", [])
    if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
        raise ConfigError(f"[sources.{name}] secrets must be a list of strings")
    return SourceConfig(
        name=name,
        provider=provider,
        secrets=tuple(s for s in secrets if s),
        tolerance_seconds=int(table.get("tolerance_seconds", 300)),
        api_base_url=_opt_str(table, "api_base_url"),
        api_key=_opt_str(table, "api_key"),
        options={key: value for key, value in table.items() if key not in _SOURCE_KEYS},
    )


def _server(table: Mapping[str, Any]) -> ServerConfig:
    defaults = ServerConfig()
    return ServerConfig(
        host=str(table.get("host", defaults.host)),
        port=int(table.get("port", defaults.port)),
        max_body_bytes=int(table.get("max_body_bytes", defaults.max_body_bytes)),
        store_timeout_seconds=float(
            table.get("store_timeout_seconds", defaults.store_timeout_seconds)
        ),
        retry_after_seconds=int(table.get("retry_after_seconds", defaults.retry_after_seconds)),
        tls_cert_file=_opt_str(table, "tls_cert_file") or None,
        tls_key_file=_opt_str(table, "tls_key_file") or None,
        tls_client_ca_file=_opt_str(table, "tls_client_ca_file") or None,
        max_inflight=_at_least_one(table, "max_inflight", defaults.max_inflight),
        receivers=_at_least_one(table, "receivers", defaults.receivers),
    )


def _at_least_one(table: Mapping[str, Any], key: str, default: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"[server] {key} must be a whole number >= 1")
    return value


def _worker(table: Mapping[str, Any]) -> WorkerConfig:
    defaults = WorkerConfig()
    retry_table = _table(table, "retry")
    retry_defaults = RetryPolicy()
    return WorkerConfig(
        concurrency=int(table.get("concurrency", defaults.concurrency)),
        batch_size=int(table.get("batch_size", defaults.batch_size)),
        lease_seconds=float(table.get("lease_seconds", defaults.lease_seconds)),
        poll_interval_seconds=float(
            table.get("poll_interval_seconds", defaults.poll_interval_seconds)
        ),
        retry=RetryPolicy(
            max_attempts=int(retry_table.get("max_attempts", retry_defaults.max_attempts)),
            base_delay_seconds=float(
                retry_table.get("base_delay_seconds", retry_defaults.base_delay_seconds)
            ),
            multiplier=float(retry_table.get("multiplier", retry_defaults.multiplier)),
            max_delay_seconds=float(
                retry_table.get("max_delay_seconds", retry_defaults.max_delay_seconds)
            ),
            jitter=float(retry_table.get("jitter", retry_defaults.jitter)),
        ),
    )
