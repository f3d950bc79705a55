"""`config check --reach`: can this configuration's store and destinations be reached
from here? Each probe is short and changes nothing: no migration, no message published,
no webhook posted, no SQLite file created."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aio_pika

from porteiro.cli import _common as common
from porteiro.config import Config, DestinationConfig
from porteiro.errors import PorteiroError
from porteiro.store import open_store
from porteiro.store.migrations import known_versions

# Long enough for a TLS handshake across a region, short enough that a check with a
# black-holed address ends in seconds.
REACH_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Reached:
    """One probe: what was tried and, when `ok` is False, why it is not usable."""

    what: str
    ok: bool
    detail: str


async def reach_all(config: Config) -> list[Reached]:
    """The store, then every destination, probed concurrently."""
    probes = [_reach_store(config), *map(_reach_destination, config.destinations.values())]
    return list(await asyncio.gather(*probes))


async def _reach_store(config: Config) -> Reached:
    if (file := _absent_sqlite_file(config.store_url)) is not None:
        # Opening it would create it: say what serve will do instead.
        return Reached("store", True, f"{file} does not exist yet; serve creates it")
    store = open_store(config.store_url)
    dialect = "sqlite" if config.store_url.startswith("sqlite:") else "postgres"
    try:
        await asyncio.wait_for(store.open(), REACH_TIMEOUT_SECONDS)
        try:
            await store.check_schema()
        finally:
            await store.close()
    except TimeoutError:
        return Reached("store", False, f"no answer within {REACH_TIMEOUT_SECONDS:g} s")
    except PorteiroError as exc:  # StoreUnavailable, SchemaMismatch
        return Reached("store", False, str(exc))
    return Reached("store", True, f"schema at version {_newest(known_versions(dialect))}")


def _absent_sqlite_file(store_url: str) -> Path | None:
    file = common.sqlite_file(store_url)
    return file if file is not None and not file.exists() else None


def _newest(versions: Sequence[str]) -> str:
    return str(int(versions[-1])) if versions and versions[-1].isdigit() else "0"


async def _reach_destination(destination: DestinationConfig) -> Reached:
    what = f"destination {destination.name}"
    try:
        if destination.url is not None:
            detail = await asyncio.wait_for(_connect(destination.url), REACH_TIMEOUT_SECONDS)
        else:
            detail = await _rabbitmq(destination.rabbitmq_url or "")
    except TimeoutError:
        return Reached(what, False, f"no answer within {REACH_TIMEOUT_SECONDS:g} s")
    except (OSError, ValueError, aio_pika.exceptions.AMQPError) as exc:
        return Reached(what, False, str(exc) or type(exc).__name__)
    return Reached(what, True, detail)


async def _connect(url: str) -> str:
    """A TCP connection (and for https the TLS handshake, certificate checked) to the
    destination's host, closed at once: a HEAD or OPTIONS would be a request the
    merchant's endpoint may count, log or refuse, and tells no more about the path."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    context = ssl.create_default_context() if secure else None
    _, writer = await asyncio.open_connection(parts.hostname, port, ssl=context)
    writer.close()
    await writer.wait_closed()
    return f"{'TLS' if secure else 'TCP'} connection to {parts.hostname}:{port}"


async def _rabbitmq(url: str) -> str:
    connection = await aio_pika.connect(url, timeout=REACH_TIMEOUT_SECONDS)
    await connection.close()
    return f"AMQP connection to {urlsplit(url).hostname}:{urlsplit(url).port or 5672}"
