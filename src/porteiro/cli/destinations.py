"""`porteiro destinations ...` (operate merchant delivery) and `porteiro relay` (run the
relays standalone). Registered on the main CLI by cli.py.

Self-contained on purpose (no import of porteiro.cli, which imports this module): the
configuration is read here from the root command's --config, like every command does.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TypeVar

import click
from rich.table import Table

from porteiro import audit
from porteiro.cli import _common as common
from porteiro.config import Config
from porteiro.runtime import check_schema_at_start, utc_now
from porteiro.sinks import operations
from porteiro.store import open_store
from porteiro.store.outbox import DestinationState, OutboxStatus, OutboxStore, outbox_store

T = TypeVar("T")


@asynccontextmanager
async def _outbox(
    config: Config, *, migrate: bool = False, check_schema: bool = False
) -> AsyncIterator[OutboxStore]:
    store = open_store(config.store_url, quarantine_limit=config.quarantine_limit)
    try:
        await store.open()
        if migrate:
            await store.upgrade()
        if check_schema:  # `relay`: refuse a schema this code cannot run on (exit 2)
            await check_schema_at_start(store)
        yield outbox_store(store)
    finally:
        await store.close()


def _run(config: Config, work: Callable[[OutboxStore], Awaitable[T]]) -> T:
    return common.run_within(_outbox(config), work)


def _audited(
    config: Config,
    action: str,
    given: dict[str, object],
    work: Callable[[OutboxStore], Awaitable[T]],
    affected: Callable[[T], int] = lambda _: 1,
) -> T:
    """`work`, then its audit row (token name `cli`): `affected` rows from its result."""

    async def run(store: OutboxStore) -> T:
        result = await work(store)
        await audit.record_cli(store, action, dict(given), affected(result), utc_now())
        return result

    return _run(config, run)


def _config_for_destination(ctx: click.Context, name: str) -> Config:
    """The configuration, once NAME is known to be one of its destinations (else a usage
    error before any store is opened)."""
    config = common.config(ctx)
    operations.configured(config.destinations, name)
    return config


def _switch(
    ctx: click.Context,
    name: str,
    action: str,
    change: Callable[[OutboxStore, str, datetime], Awaitable[DestinationState]],
) -> None:
    """NAME's state changed by `change` (operations.pause or .resume), audited as `action`."""
    config = _config_for_destination(ctx, name)
    _audited(config, action, {"name": name}, lambda store: change(store, name, utc_now()))


@click.group()
def destinations() -> None:
    """Merchant delivery: destinations, their outbox and dead letters."""


@destinations.command("list")
@common.json_option
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every configured destination with its state and backlog."""
    config = common.config(ctx)
    views = _run(config, lambda store: operations.overview(store, config.destinations))
    if as_json:
        for view in views:
            common.json_line(operations.view_to_json(view))
        return
    table = Table("name", "transport", "status", "pending", "delivering", "done", "dead")
    table.add_column("target / reason", overflow="fold")
    for view in views:
        backlog = view.backlog
        note = view.state.disabled_reason or view.target
        if view.state.circuit_open_until is not None:
            note += f" (circuit open until {view.state.circuit_open_until:%H:%M:%S})"
        table.add_row(
            view.config.name, view.config.transport, view.status, str(backlog["pending"]),
            str(backlog["delivering"]), str(backlog["done"]), str(backlog["dead"]), note,
        )  # fmt: skip
    common.console().print(table)


@destinations.command()
@click.argument("name")
@click.pass_context
def pause(ctx: click.Context, name: str) -> None:
    """Stop sending to NAME; its events accumulate in the outbox."""
    _switch(ctx, name, "destination.pause", operations.pause)
    click.echo(f"{name}: paused (events accumulate; `porteiro destinations resume {name}`)")


@destinations.command()
@click.argument("name")
@click.pass_context
def resume(ctx: click.Context, name: str) -> None:
    """Send to NAME again (also re-enables it after a 410 and closes its circuit)."""
    _switch(ctx, name, "destination.resume", operations.resume)
    click.echo(f"{name}: active")


@destinations.command()
@click.argument("name")
@click.option("--status", type=click.Choice([s.value for s in OutboxStatus]))
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@common.json_option
@click.pass_context
def outbox(ctx: click.Context, name: str, status: str | None, limit: int, as_json: bool) -> None:
    """NAME's outbox rows, newest first."""
    config = _config_for_destination(ctx, name)
    chosen = None if status is None else OutboxStatus(status)
    page = _run(config, lambda store: store.list_outbox(name, chosen, None, limit))
    if as_json:
        for row in page.items:
            common.json_line(operations.row_to_json(row))
        return
    table = Table("id", "event", "source", "object", "kind", "status", "tries", "next try")
    table.add_column("last status / error", overflow="fold", max_width=50)
    for row in page.items:
        last = " ".join(part for part in (row.last_status, row.last_error) if part)
        table.add_row(
            str(row.id), str(row.event_id), row.source, row.object_id, row.kind,
            row.status.value, str(row.attempts),
            row.next_attempt_at.isoformat(timespec="seconds"), last,
        )  # fmt: skip
    common.console().print(table)


@destinations.command()
@click.argument("name")
@click.option("--id", "ids", type=int, multiple=True, help="only these outbox rows")
@click.pass_context
def redrive(ctx: click.Context, name: str, ids: Sequence[int]) -> None:
    """Make NAME's dead rows pending again (they then block nothing behind them)."""
    config = _config_for_destination(ctx, name)
    with common.progress("redrive") as progress:
        moved = _audited(
            config,
            "destination.redrive",
            {"name": name, "ids": list(ids) or None},
            lambda store: operations.redrive(
                store, name, utc_now(), ids=list(ids) or None, progress=progress
            ),
            affected=lambda moved: moved,
        )
    click.echo(f"{name}: {moved} dead row(s) pending again")


@click.command("relay")
@click.option(
    "--destination", "names", multiple=True, help="only these destinations (default: all)"
)
@click.option("--migrate/--no-migrate", default=None, help="default: on for SQLite only")
@click.option("--poll-interval", type=float, default=0.5, show_default=True)
@click.option("--lease-seconds", type=click.FloatRange(min=0.3), default=None, hidden=True)
@click.pass_context
def relay(
    ctx: click.Context,
    names: Sequence[str],
    migrate: bool | None,
    poll_interval: float,
    lease_seconds: float | None,
) -> None:
    """Run the outbox relays without a worker. Each destination's relay runs in one
    process at a time (this one, a `worker` or a `serve`): this process takes those whose
    lease is free, and the others when their holder stops."""
    from porteiro.jobs.lease import DEFAULT_LEASE_SECONDS, new_holder_id
    from porteiro.jobs.roles import relay_jobs

    config = common.config(ctx)
    chosen = [operations.configured(config.destinations, name) for name in names] or list(
        config.destinations.values()
    )
    if not chosen:
        raise click.UsageError("no [destinations.NAME] in the configuration")
    should_migrate = config.store_url.startswith("sqlite:") if migrate is None else migrate

    async def run() -> None:
        async with _outbox(config, migrate=should_migrate, check_schema=True) as store:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            jobs = relay_jobs(
                store, chosen, utc_now, holder=new_holder_id(), poll_interval=poll_interval,
                lease_seconds=lease_seconds or DEFAULT_LEASE_SECONDS,
            )  # fmt: skip
            click.echo(f"relaying to {', '.join(d.name for d in chosen)}", err=True)
            await asyncio.gather(*(job(stop) for job in jobs))

    asyncio.run(run())
