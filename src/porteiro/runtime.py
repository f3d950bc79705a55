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
from porteiro.observability import Metrics
from porteiro.providers.base import Provider, build_provider
from porteiro.store import open_store
from porteiro.store.base import Store


def utc_now() -> datetime:
    return datetime.now(UTC)


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
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
        await self.http.aclose()
        await self.store.close()
