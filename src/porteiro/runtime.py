"""What a running Porteiro process holds: config, store, adapters, HTTP client, metrics.

Built once by an entry point (CLI command or ASGI factory) and passed explicitly to the
receiver, the worker and the admin API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from porteiro.config import Config
from porteiro.errors import StoreUnavailable
from porteiro.observability import Metrics, logger
from porteiro.providers import build_provider
from porteiro.providers.base import Provider, SupportsClose
from porteiro.store import open_store
from porteiro.store.base import Store


def utc_now() -> datetime:
    return datetime.now(UTC)


async def check_schema_at_start(store: Store) -> None:
    """What a long-running command (serve, worker, relay) checks before it runs: raise
    SchemaMismatch, whose message is the one line the CLI prints before exiting 2, on a
    schema this code cannot run on. A store that does not answer yet is no verdict: the
    process starts as it always did during an outage, and /readyz, which checks the
    schema on every probe, answers 503 until the store is back with the right one."""
    try:
        await store.check_schema()
    except StoreUnavailable:
        logger().warning(
            "store unreachable at start: schema not checked, /readyz checks it",
            action="store.schema_unchecked",
        )


@dataclass
class Runtime:
    config: Config
    store: Store
    providers: Mapping[str, Provider]
    http: httpx.AsyncClient
    metrics: Metrics = field(default_factory=Metrics)
    clock: Callable[[], datetime] = utc_now

    @classmethod
    def build(cls, config: Config, store: Store | None = None) -> Runtime:
        """Build adapters and clients; nothing is opened yet (see `start`)."""
        providers = {name: build_provider(source) for name, source in config.sources.items()}
        return cls(
            config=config,
            store=store
            if store is not None
            else open_store(config.store_url, quarantine_limit=config.quarantine_limit),
            providers=providers,
            http=httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0)),
        )

    async def start(self, *, migrate: bool = False) -> None:
        await self.store.open()
        if migrate:
            await self.store.upgrade()

    async def stop(self) -> None:
        for provider in self.providers.values():
            # Adapters with clients of their own (Pix: a client certificate) close them.
            if isinstance(provider, SupportsClose):
                await provider.aclose()
        await self.http.aclose()
        await self.store.close()
