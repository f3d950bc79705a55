"""What every `porteiro` command shares: the configuration (read here and nowhere
else), a runtime for one command, time options, and output (`--json` lines on stdout;
progress and logs on stderr)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from porteiro.config import Config
from porteiro.config.load import load_required_config
from porteiro.errors import ConfigError, PorteiroError
from porteiro.model import Kind
from porteiro.runtime import Runtime, check_schema_at_start, utc_now
from porteiro.store import open_store
from porteiro.store.sqlite.store import SqliteStore

T = TypeVar("T")
R = TypeVar("R")
_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class NotFound(PorteiroError):
    """An event or payment that does not exist: exit 2, as a wrong argument."""


def config(ctx: click.Context) -> Config:
    """The configuration; a ConfigError (exit 2) when there is none at all, rather than
    defaults that would quietly create ./porteiro.db wherever the command was run."""
    loaded = load_required_config(ctx.find_root().params.get("config_path"), os.environ)
    file = sqlite_file(loaded.store_url)
    if file is not None and not file.parent.is_dir():
        # sqlite3 would only say "unable to open database file".
        raise ConfigError(f"the SQLite store's folder {file.parent} does not exist")
    return loaded


def sqlite_file(store_url: str) -> Path | None:
    """The database file a SQLite store URL names (None: another store, or :memory:)."""
    store = open_store(store_url)  # built from the URL, not opened
    if isinstance(store, SqliteStore) and store.path != ":memory:":
        return Path(store.path)
    return None


@asynccontextmanager
async def runtime(
    config: Config, *, migrate: bool = False, check_schema: bool = False
) -> AsyncIterator[Runtime]:
    runtime = Runtime.build(config)
    try:
        # Inside the try: a start that fails (or refuses the schema) still closes the
        # pool, so a refusal prints its one line and nothing about unclosed resources.
        await runtime.start(migrate=migrate)
        if check_schema:
            await check_schema_at_start(runtime.store)
        yield runtime
    finally:
        await runtime.stop()


def run(config: Config, work: Callable[[Runtime], Awaitable[T]]) -> T:
    return run_within(runtime(config), work)


def run_within(resource: AbstractAsyncContextManager[R], work: Callable[[R], Awaitable[T]]) -> T:
    """A command's one event loop: `work` on what `resource` opens, closed when it ends."""

    async def run() -> T:
        async with resource as opened:
            return await work(opened)

    return asyncio.run(run())


def parse_when(value: str, now: datetime) -> datetime:
    """ISO 8601 (naive means UTC) or an age before `now` such as 30m, 2h, 7d."""
    relative = _RELATIVE.match(value)
    if relative:
        return now - timedelta(**{_UNITS[relative[2]]: int(relative[1])})
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: use ISO 8601 (2024-11-28T16:00) or an age (30m, 2h, 7d)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def when(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    """A click callback for `--since` / `--until`: see parse_when."""
    return None if value is None else parse_when(value, utc_now())


def migrate_default(config: Config, migrate: bool | None) -> bool:
    # The embedded SQLite store migrates itself; PostgreSQL deployments run `db upgrade`.
    return config.store_url.startswith("sqlite:") if migrate is None else migrate


def prepare_schema(config: Config, migrate: bool) -> None:
    """`serve`'s first step, before uvicorn: migrate if asked, then refuse a schema this
    code cannot run on (SchemaMismatch: one line, exit 2, in `main`). Here and not in
    the app's lifespan, where a refusal would be uvicorn's traceback and exit 3."""

    async def run() -> None:
        store = open_store(config.store_url, quarantine_limit=config.quarantine_limit)
        try:
            await store.open()
            if migrate:
                await store.upgrade()
            await check_schema_at_start(store)
        finally:
            await store.close()

    asyncio.run(run())


def console() -> Console:
    # Off a terminal (pipes, CI logs) rich would squeeze tables into 80 columns.
    console = Console()
    return console if console.is_terminal else Console(width=200)


def json_line(value: Any) -> None:
    click.echo(orjson.dumps(value).decode())


@contextmanager
def progress(description: str) -> Iterator[Callable[[int, int], None]]:
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(
        *columns, TimeElapsedColumn(), console=console, disable=not console.is_terminal
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


kind_option = click.option("--kind", type=click.Choice([k.value for k in Kind]))
since_option = click.option("--since", callback=when, help="received at or after (ISO or 2h)")
until_option = click.option("--until", callback=when, help="received before (ISO or 2h)")
json_option = click.option("--json", "as_json", is_flag=True, help="JSON lines on stdout")
