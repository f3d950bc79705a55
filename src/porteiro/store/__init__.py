"""Stores: pick the implementation from the URL scheme."""

from __future__ import annotations

from porteiro.errors import ConfigError
from porteiro.store.base import Store


def open_store(url: str) -> Store:
    """Build (not yet open) the store for `url`: sqlite:///path or postgresql://..."""
    if url.startswith("sqlite:"):
        from porteiro.store.sqlite import SqliteStore

        return SqliteStore.from_url(url)
    if url.startswith(("postgresql:", "postgres:")):
        from porteiro.store.postgres import PostgresStore

        return PostgresStore.from_url(url)
    raise ConfigError(f"unsupported store URL {url!r}: use sqlite:///path or postgresql://...")
