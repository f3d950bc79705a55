"""`db`: the database schema."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import click

from porteiro.cli import _common as common
from porteiro.store import open_store


@click.group()
def db() -> None:
    """Database schema."""


@db.command()
@click.pass_context
def upgrade(ctx: click.Context) -> None:
    """Apply pending migrations."""
    config = common.config(ctx)

    async def run() -> Sequence[str]:
        store = open_store(config.store_url)
        await store.open()
        try:
            applied = await store.upgrade()
            # A database a newer release migrated has nothing to apply, and is still not
            # "up to date" for this code: say so (exit 2) rather than report success.
            await store.check_schema()
            return applied
        finally:
            await store.close()

    applied = asyncio.run(run())
    click.echo(f"applied {', '.join(applied)}" if applied else "database is up to date")
