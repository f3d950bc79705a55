"""`config check`: say what is wrong with a configuration before anything runs on it, and
what would run; `--reach` also probes the store and each destination (cli.reach).

Exit codes: 0 all fine, 2 a configuration error (the one line `main` prints), 1 something
`--reach` could not reach or use. Secrets are never printed: URLs lose their password
and secret-looking query values, sources and destinations show no key or token.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import click

from porteiro.cli import _common as common
from porteiro.cli.reach import reach_all
from porteiro.config import Config, SourceConfig
from porteiro.config.load import config_file
from porteiro.handlers import load_handlers
from porteiro.providers import build_provider
from porteiro.providers.base import SupportsClose

# Query parameters whose values are credentials (e.g. a PostgreSQL `password=`).
_SECRET_WORDS = ("password", "secret", "token", "key", "auth")


@click.group("config")
def config_group() -> None:
    """The configuration file."""


@config_group.command("check")
@click.option("--reach", is_flag=True, help="also connect to the store and each destination")
@click.pass_context
def check(ctx: click.Context, reach: bool) -> None:
    """Parse and validate the configuration, print what would run; exit 2 if invalid."""
    config = common.config(ctx)
    _build_adapters(config)
    if config.handlers.module is not None:
        load_handlers(config.handlers.module)
    file = config_file(ctx.find_root().params.get("config_path"), os.environ)
    for line in summary(config, file):
        click.echo(line)
    if not reach:
        click.echo("configuration is valid (not reached: add --reach)")
        return
    failed = 0
    for reached in asyncio.run(reach_all(config)):
        click.echo(f"{reached.what}: {'ok' if reached.ok else 'FAILED'}, {reached.detail}")
        failed += not reached.ok
    if failed:
        click.echo(f"configuration is valid; {failed} could not be reached or used", err=True)
        ctx.exit(1)
    click.echo("configuration is valid; everything reached")


def _build_adapters(config: Config) -> None:
    """Build every source's adapter as `serve` would: key files read, options checked
    (a ConfigError is the one line and exit 2). Built and closed, nothing sent."""

    async def close_all() -> None:
        for source in config.sources.values():
            provider = build_provider(source)
            if isinstance(provider, SupportsClose):
                await provider.aclose()

    asyncio.run(close_all())


def summary(config: Config, file: Path | None) -> Iterator[str]:
    """What would run on `config`, one line per part, with no secret in it."""
    yield f"file: {file if file is not None else 'none (the environment only)'}"
    kind = "SQLite" if config.store_url.startswith("sqlite:") else "PostgreSQL"
    yield f"store: {without_credentials(config.store_url)} ({kind})"
    server = config.server
    scheme = "https" if server.tls_cert_file else "http"
    yield (
        f"server: {scheme}://{server.host}:{server.port}, {server.receivers} receiver(s), "
        f"admin API {_admin(config)}"
    )
    yield f"sources: {len(config.sources)}"
    for source in config.sources.values():
        yield f"  {source.name}: {source.provider}{_api(source)}"
    worker, retry = config.worker, config.worker.retry
    yield (
        f"worker: concurrency {worker.concurrency}, batch {worker.batch_size}, "
        f"lease {worker.lease_seconds:g} s, up to {retry.max_attempts} attempts"
    )
    relayed = "each relayed by one serve, worker or relay process"
    yield f"destinations: {len(config.destinations)} ({relayed})"
    for destination in config.destinations.values():
        target = (
            without_credentials(destination.url)
            if destination.url is not None
            else f"{without_credentials(destination.rabbitmq_url or '')} "
            f"exchange {destination.exchange}"
        )
        kinds = ", ".join(destination.kinds) or "every kind but other"
        yield f"  {destination.name}: {destination.transport} {target} ({kinds})"
    reconcile = config.reconcile
    yield (
        f"reconcile: every {reconcile.interval_seconds:g} s, {reconcile.batch_size} per source"
        if reconcile.enabled
        else "reconcile: off"
    )
    yield f"handlers: {config.handlers.module or 'none'}"


def _api(source: SourceConfig) -> str:
    if source.api_base_url is None:
        # With a key, the adapter calls the gateway's own API (its default base URL).
        return ", API the gateway's own" if source.api_key else ", no gateway API"
    return f", API {without_credentials(source.api_base_url)}"


def without_credentials(url: str) -> str:
    """`url` with its password and every secret-looking query value shown as ***, the
    rest as written (sqlite:///./porteiro.db stays that)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    location, mark, query = rest.partition("?")
    authority, slash, path = location.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.split(':', 1)[0]}:***@{host}"
    shown_query = "&".join(map(_shown_parameter, query.split("&"))) if mark else ""
    return f"{scheme}://{authority}{slash}{path}{mark}{shown_query}"


def _shown_parameter(parameter: str) -> str:
    key, equals, _ = parameter.partition("=")
    secret = equals and any(word in key.lower() for word in _SECRET_WORDS)
    return f"{key}=***" if secret else parameter


def _admin(config: Config) -> str:
    """Whether the admin API answers, with which token names and where (no token shown)."""
    names = sorted(config.admin.tokens)
    if config.admin_token:
        names.insert(0, "admin")
    if not names:
        return "off (no [admin] token)"
    where = ""
    if config.admin.listen is not None:
        host, port = config.admin.listen
        where = f" on {host}:{port} only"
    return f"on{where} (tokens: {', '.join(names)})"
