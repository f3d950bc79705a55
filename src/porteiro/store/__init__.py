"""Stores: pick the implementation from the URL scheme."""

from __future__ import annotations

from porteiro.errors import ConfigError
from porteiro.store.base import Store


def open_store(url: str, *, quarantine_limit: int | None = None) -> Store:
    """Build (not yet open) the store for `url`: sqlite:///path or postgresql://...

    `quarantine_limit` (from the config) applies unless the URL sets its own.
    """
    if quarantine_limit is not None and "quarantine_limit=" not in url:
        url += ("&" if "?" in url else "?") + f"quarantine_limit={quarantine_limit}"
    if url.startswith("sqlite:"):
        from porteiro.store.sqlite.store import SqliteStore

        return SqliteStore.from_url(url)
    if url.startswith(("postgresql:", "postgres:")):
        from porteiro.store.postgres.store import PostgresStore

        return PostgresStore.from_url(url)
    raise ConfigError(f"unsupported store URL {url!r}: use sqlite:///path or postgresql://...")
