"""The `porteiro` command: thin click wrappers over the runtime, worker, replay and simulate.

The configuration and the environment are read here and nowhere else. Machine-readable
output (`--json`) goes to stdout one object per line; progress bars and logs go to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from porteiro import jsonview, replay
from porteiro.cli_charge import charge
from porteiro.cli_destinations import destinations, relay
from porteiro.cli_fake import fake_provider
from porteiro.cli_reconcile import reconcile
from porteiro.config import Config, load_config
from porteiro.errors import ConfigError, PorteiroError
from porteiro.gctune import tune_for_throughput
from porteiro.model import EventStatus, Kind, StoredEvent
from porteiro.observability import configure_logging, logger
from porteiro.providers import build_provider
from porteiro.runtime import Runtime, check_schema_at_start, utc_now
from porteiro.simulate import build_plan, send
from porteiro.store import open_store
from porteiro.store.base import EventFilter
from porteiro.worker import Worker

T = TypeVar("T")
_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def _config(ctx: click.Context) -> Config:
    return load_config(ctx.find_root().params.get("config_path"), os.environ)


@asynccontextmanager
async def _runtime(
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


def _run(config: Config, work: Callable[[Runtime], Awaitable[T]]) -> T:
    async def run() -> T:
        async with _runtime(config) as runtime:
            return await work(runtime)

    return asyncio.run(run())


def _when(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    """ISO 8601 (naive means UTC) or a relative age such as 30m, 2h, 7d."""
    if value is None:
        return None
    relative = _RELATIVE.match(value)
    if relative:
        return utc_now() - timedelta(**{_UNITS[relative[2]]: int(relative[1])})
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            "use ISO 8601 (2024-11-28T16:00) or an age (30m, 2h, 7d)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _migrate_default(config: Config, migrate: bool | None) -> bool:
    # The embedded SQLite store migrates itself; PostgreSQL deployments run `db upgrade`.
    return config.store_url.startswith("sqlite:") if migrate is None else migrate


def _prepare_schema(config: Config, migrate: bool) -> None:
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


def _console() -> Console:
    # Off a terminal (pipes, CI logs) rich would squeeze tables into 80 columns.
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _json_line(value: Any) -> None:
    click.echo(orjson.dumps(value).decode())


@contextmanager
def _progress(description: str) -> Iterator[Callable[[int, int], None]]:
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
since_option = click.option("--since", callback=_when, help="received at or after (ISO or 2h)")
until_option = click.option("--until", callback=_when, help="received before (ISO or 2h)")
json_option = click.option("--json", "as_json", is_flag=True, help="JSON lines on stdout")


@click.group()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="TOML file (else $PORTEIRO_CONFIG, else ./porteiro.toml)",
)
def cli(config_path: str | None) -> None:
    """Porteiro: a durable, idempotent inbox for payment-gateway webhooks."""


# -- processes ---------------------------------------------------------------------------


@cli.command()
@click.option("--host", help="bind address (default: [server] host)")
@click.option("--port", type=int, help="port (default: [server] port; 0 picks a free one)")
@click.option("--worker/--no-worker", "with_worker", default=True, help="run a worker in-process")
@click.option("--migrate/--no-migrate", default=None, help="default: on for SQLite only")
@click.option(
    "--receivers",
    type=click.IntRange(min=1),
    help="processes sharing the port (default: [server] receivers); each runs a worker "
    "unless --no-worker",
)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str | None,
    port: int | None,
    with_worker: bool,
    migrate: bool | None,
    receivers: int | None,
) -> None:
    """Run the receiver, the admin API and (by default) a worker in one process."""
    import uvicorn

    from porteiro.http_limits import BoundedHttpToolsProtocol
    from porteiro.tls import uvicorn_options

    config = _config(ctx)
    _prepare_schema(config, _migrate_default(config, migrate))
    processes = receivers or config.server.receivers
    # {} unless [server] tls_cert_file is set
    tls = uvicorn_options(config)
    options: dict[str, Any] = {
        "host": host or config.server.host,
        "port": config.server.port if port is None else port,
        # uvloop (uvicorn[standard]) when importable: a faster event loop on the ack
        # path. httptools, with the header/body deadlines and the lingering close that
        # uvicorn lacks (porteiro.http_limits, [server] header_timeout_seconds...).
        "loop": "uvloop" if _importable("uvloop") else "asyncio",
        "http": BoundedHttpToolsProtocol,
        # No WebSocket route exists; uvicorn's WebSocket protocol would still take
        # upgrade requests and log their URL and headers (query tokens) at DEBUG.
        "ws": "none",
        "log_config": None,
        "access_log": False,
        # The TCP peer as it is: which proxies may speak for a client is a per-source
        # setting (Pix `trusted_proxies`), so the adapter reads X-Forwarded-For itself.
        # uvicorn's default would rewrite the peer from that header for any request
        # from 127.0.0.1, and a Pix source behind a local nginx would then see the
        # client's address instead of its trusted proxy's.
        "proxy_headers": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": 10,
        **tls,
    }
    scheme = "https" if tls else "http"
    if processes > 1:
        _serve_many(ctx, config, options, processes, scheme, with_worker)
        return

    from porteiro.app import Background, create_app
    from porteiro.reconcile import background as reconcile_background
    from porteiro.sinks.relay import relay_jobs

    runtime = Runtime.build(config)
    background: list[Background] = [Worker(runtime).run] if with_worker else []
    background += reconcile_background(runtime)  # off with [reconcile] enabled = false
    background += relay_jobs(runtime) if with_worker else []  # [destinations.*]
    app = create_app(runtime, background=background)  # migrated by _prepare_schema
    server_config = _with_limits(uvicorn.Config(app, **options), config)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:  # the bound address, so `--port 0` tells where it went
                bound = self.servers[0].sockets[0].getsockname()
                _log_listening(f"{scheme}://{bound[0]}:{bound[1]}")

    tune_for_throughput()
    _Server(server_config).run()


def _with_limits(server_config: Any, config: Config) -> Any:
    """uvicorn's Config with the HTTP door's limits, and this process allowed enough
    open files for them to matter: 1,000+ connections need more than a soft limit of
    1,024 (receiver processes inherit it)."""
    from porteiro.http_limits import ConnectionLimits, raise_open_files_limit, set_limits

    raise_open_files_limit()
    return set_limits(server_config, ConnectionLimits.of(config.server))


def _log_listening(url: str, receivers: int | None = None) -> None:
    # A log line like every other (JSON on stderr), not text on stdout.
    text = f"porteiro listening on {url}" + (f" ({receivers} receivers)" if receivers else "")
    logger().info(text, action="server.listening", url=url, receivers=receivers or 1)


def _serve_many(
    ctx: click.Context,
    config: Config,
    options: dict[str, Any],
    processes: int,
    scheme: str,
    with_worker: bool,
) -> None:
    """N receiver processes on one listening socket (uvicorn's supervisor restarts a dead
    one). Each builds its app with `porteiro.app:receiver_process_app` from the same
    configuration, passed down in the environment; `serve` migrated and checked the
    schema once, before."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    config_path = ctx.find_root().params.get("config_path")
    if config_path:
        os.environ["PORTEIRO_CONFIG"] = os.path.abspath(config_path)
    os.environ["PORTEIRO_SERVE_WORKER"] = "1" if with_worker else "0"
    server_config = uvicorn.Config(
        "porteiro.app:receiver_process_app", factory=True, workers=processes, **options
    )
    server_config = _with_limits(server_config, config)
    sock = server_config.bind_socket()
    bound = sock.getsockname()
    _log_listening(f"{scheme}://{bound[0]}:{bound[1]}", processes)
    Multiprocess(server_config, sockets=[sock]).run()


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@cli.command()
@click.option("--migrate/--no-migrate", default=None, help="default: on for SQLite only")
@click.option("--debug-pause-after-claim", type=float, default=0.0, hidden=True)
@click.option("--debug-pause-in-apply", type=float, default=0.0, hidden=True)
@click.pass_context
def worker(
    ctx: click.Context,
    migrate: bool | None,
    debug_pause_after_claim: float,
    debug_pause_in_apply: float,
) -> None:
    """Run a standalone worker (PostgreSQL deployments run many)."""
    config = _config(ctx)

    async def run() -> None:
        should_migrate = _migrate_default(config, migrate)
        async with _runtime(config, migrate=should_migrate, check_schema=True) as runtime:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            await Worker(
                runtime,
                pause_after_claim=debug_pause_after_claim,
                pause_in_apply=debug_pause_in_apply,
            ).run(stop)

    tune_for_throughput()
    asyncio.run(run())


@cli.group()
def db() -> None:
    """Database schema."""


@db.command()
@click.pass_context
def upgrade(ctx: click.Context) -> None:
    """Apply pending migrations."""
    config = _config(ctx)

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


# -- events, dlq, replay -------------------------------------------------------------------


def _events_table(events: Sequence[StoredEvent]) -> Table:
    table = Table("id", "source", "kind", "type", "object", "status", "tries", "dups", "received")
    table.add_column("last error", overflow="fold", max_width=40)
    for e in events:
        table.add_row(
            str(e.id), e.source, e.kind.value, e.type, e.object_id or "", e.status.value,
            str(e.attempts), str(e.duplicates), e.received_at.isoformat(timespec="seconds"),
            e.last_error or "",
        )  # fmt: skip
    return table


def _print_events(events: Sequence[StoredEvent], as_json: bool) -> None:
    if as_json:
        for event in events:
            _json_line(jsonview.event_to_json(event))
    else:
        _console().print(_events_table(events))


@cli.group()
def events() -> None:
    """Inspect stored events."""


@events.command("list")
@click.option("--source")
@click.option("--status", type=click.Choice([s.value for s in EventStatus]))
@kind_option
@click.option("--object-id")
@click.option("--dedup-key")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@click.pass_context
def events_list(
    ctx: click.Context,
    source: str | None,
    status: str | None,
    kind: str | None,
    object_id: str | None,
    dedup_key: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Newest events first, filtered."""
    filter = EventFilter(
        source=source,
        status=EventStatus(status) if status else None,
        kind=Kind(kind) if kind else None,
        object_id=object_id,
        dedup_key=dedup_key,
    )

    async def fetch(runtime: Runtime) -> Sequence[StoredEvent]:
        return (await runtime.store.list_events(filter, None, limit)).items

    _print_events(_run(_config(ctx), fetch), as_json)


@events.command("show")
@click.argument("event_id", type=int)
@json_option
@click.pass_context
def events_show(ctx: click.Context, event_id: int, as_json: bool) -> None:
    """One event with every raw delivery that carried it."""

    async def fetch(runtime: Runtime) -> dict[str, Any] | None:
        event = await runtime.store.get_event(event_id)
        if event is None:
            return None
        deliveries = await runtime.store.event_deliveries(event_id)
        return jsonview.event_detail_to_json(event, deliveries)

    view = _run(_config(ctx), fetch)
    if view is None:
        raise click.ClickException(f"no event {event_id}")
    if as_json:
        _json_line(view)
    else:
        click.echo(orjson.dumps(view, option=orjson.OPT_INDENT_2).decode())


@cli.group()
def dlq() -> None:
    """The dead-letter queue."""


@dlq.command("list")
@click.option("--source")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@click.pass_context
def dlq_list(ctx: click.Context, source: str | None, limit: int, as_json: bool) -> None:
    """Dead events, newest first."""
    filter = EventFilter(source=source, status=EventStatus.DEAD)

    async def fetch(runtime: Runtime) -> Sequence[StoredEvent]:
        return (await runtime.store.list_events(filter, None, limit)).items

    _print_events(_run(_config(ctx), fetch), as_json)


@dlq.command("replay")
@click.option("--source")
@kind_option
@since_option
@until_option
@click.option("--id", "ids", type=int, multiple=True, help="only these events (repeatable)")
@click.option("--all", "every", is_flag=True, help="every dead event (no filter given)")
@click.pass_context
def dlq_replay(
    ctx: click.Context,
    source: str | None,
    kind: str | None,
    since: datetime | None,
    until: datetime | None,
    ids: tuple[int, ...],
    every: bool,
) -> None:
    """Make dead events due again (unparseable deliveries are re-parsed)."""
    selected = bool(ids) or any(value is not None for value in (source, kind, since, until))
    # As the API: a redrive of the whole DLQ is said, never the result of a forgotten flag.
    if every and selected:
        raise click.UsageError("--all cannot be combined with --id or a filter")
    if not every and not selected:
        raise click.UsageError(
            "give --id or a filter (--source, --kind, --since, --until), or --all"
        )
    filter = EventFilter(
        source=source, status=EventStatus.DEAD, kind=Kind(kind) if kind else None,
        since=since, until=until,
    )  # fmt: skip

    async def work(runtime: Runtime) -> replay.ReplayReport:
        with _progress("dlq replay") as progress:
            return await replay.redrive(runtime, filter, ids=ids or None, progress=progress)

    report = _run(_config(ctx), work)
    _echo_report(report, dry_run=False)


@cli.command("replay")
@click.argument("ids", type=int, nargs=-1)
@click.option("--source")
@kind_option
@click.option("--status", type=click.Choice([s.value for s in EventStatus]))
@since_option
@until_option
@click.option("--reparse/--no-reparse", default=True, help="re-parse raw deliveries (default)")
@click.option("--dry-run", is_flag=True, help="change nothing; show the transitions")
@json_option
@click.pass_context
def replay_command(
    ctx: click.Context,
    ids: tuple[int, ...],
    source: str | None,
    kind: str | None,
    status: str | None,
    since: datetime | None,
    until: datetime | None,
    reparse: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Replay events by id or by filter, re-parsed with the current adapter code."""
    filter = EventFilter(
        source=source, status=EventStatus(status) if status else None,
        kind=Kind(kind) if kind else None, since=since, until=until,
    )  # fmt: skip
    if ids and filter != EventFilter():
        raise click.UsageError("give event ids or filter options, not both")
    if not ids and filter == EventFilter():
        raise click.UsageError("give event ids or at least one filter option")
    target: replay.Target = list(ids) if ids else filter
    action = replay.reparse if reparse else replay.requeue

    async def work(runtime: Runtime) -> replay.ReplayReport:
        with _progress("replay") as progress:
            return await action(runtime, target, dry_run=dry_run, progress=progress)

    report = _run(_config(ctx), work)
    if dry_run and as_json:
        for planned in report.planned:
            _json_line(replay.planned_to_json(planned))
    elif as_json:
        _json_line(replay.report_to_json(report))
    else:
        _echo_report(report, dry_run=dry_run)


def _echo_report(report: replay.ReplayReport, *, dry_run: bool) -> None:
    if dry_run:
        table = Table("event", "dedup key", "kind", "object", "from", "to", "verdict")
        for p in report.planned:
            event = "new" if p.event_id is None else str(p.event_id)
            table.add_row(
                event, p.dedup_key, p.kind, p.object_id or "", p.from_state or "-",
                p.to_state or "-", p.verdict,
            )  # fmt: skip
        _console().print(table)
        click.echo(f"dry run: {len(report.planned)} events, nothing changed")
    else:
        click.echo(
            f"{len(report.event_ids)} events due again ({report.deliveries} re-parsed deliveries)"
        )
    for delivery_id, reason in report.failures:
        click.echo(f"delivery {delivery_id} still fails to parse: {reason}", err=True)
    if report.missing:
        click.echo(f"no such events: {', '.join(map(str, report.missing))}", err=True)


# -- payments, simulate ------------------------------------------------------------------


@cli.group()
def payments() -> None:
    """Canonical payment state."""


@payments.command("show")
@click.argument("source")
@click.argument("object_id")
@json_option
@click.pass_context
def payments_show(ctx: click.Context, source: str, object_id: str, as_json: bool) -> None:
    """A payment's state, amounts and full transition history."""

    async def fetch(runtime: Runtime) -> dict[str, Any] | None:
        payment = await runtime.store.get_payment(source, object_id)
        if payment is None:
            return None
        history = await runtime.store.payment_history(source, object_id)
        return jsonview.payment_to_json(payment, history)

    view = _run(_config(ctx), fetch)
    if view is None:
        raise click.ClickException(f"no payment {object_id!r} from source {source!r}")
    if as_json:
        _json_line(view)
        return
    fields = ("state", "amount", "currency", "refunded_amount", "reference", "version")
    click.echo(f"{source}/{object_id}: " + ", ".join(f"{key} {view[key]}" for key in fields))
    table = Table("at", "from", "to", "verdict", "event", "note")
    for entry in view["history"]:
        table.add_row(
            str(entry["at"]), entry["from"] or "-", entry["to"], entry["verdict"],
            str(entry["event_id"]), entry["note"] or "",
        )  # fmt: skip
    _console().print(table)


@cli.command()
@click.argument("source_arg", metavar="[SOURCE]", required=False)
@click.option("--url", help="Porteiro's base URL (default: from [server])")
@click.option("--source", "source_opt", help="a source of the configuration (or SOURCE)")
@click.option("--count", type=click.IntRange(0), default=10, show_default=True, help="payments")
@click.option(
    "--duplicates",
    type=click.FloatRange(0),
    default=0.0,
    help="extra copies: 0.3 = 30%% of deliveries twice, 3 = every delivery 4 times",
)
@click.option("--shuffle", is_flag=True, help="send in random order across payments")
@click.option("--concurrency", type=click.IntRange(1), default=4, show_default=True)
@click.option("--refunds", type=click.FloatRange(0, 1), default=0.0, help="fraction refunded")
@click.option("--lifecycle", is_flag=True, help="every payment's whole lifecycle, refunds too")
@click.option("--seed", type=int, help="reproducible payloads and order")
@click.pass_context
def simulate(
    ctx: click.Context,
    source_arg: str | None,
    url: str | None,
    source_opt: str | None,
    count: int,
    duplicates: float,
    shuffle: bool,
    concurrency: int,
    refunds: float,
    lifecycle: bool,
    seed: int | None,
) -> None:
    """Send correctly signed webhooks of SOURCE's gateway to a Porteiro."""
    source_name = source_arg or source_opt
    if source_name is None:
        raise click.UsageError("name the source: porteiro simulate SOURCE")
    if lifecycle:
        refunds = 1.0
    config = _config(ctx)
    source = config.sources.get(source_name)
    if source is None:
        raise ConfigError(
            f"unknown source {source_name!r} (configured: {', '.join(config.sources)})"
        )
    provider = build_provider(source)
    rng = random.Random(seed)
    plan = build_plan(
        provider, count=count, duplicates=duplicates, shuffle=shuffle, refunds=refunds,
        now=utc_now(), rng=rng,
    )  # fmt: skip
    base = url or f"http://{config.server.host}:{config.server.port}"

    async def run() -> Any:
        with _progress("simulate") as progress:
            sent = 0

            def on_sent(_status: int) -> None:
                nonlocal sent
                sent += 1
                progress(sent, len(plan.deliveries))

            return await send(
                plan, provider, url=base, source=source_name, concurrency=concurrency,
                clock=utc_now, on_sent=on_sent,
            )  # fmt: skip

    report = asyncio.run(run())
    click.echo(f"{count} payments to {base}/webhooks/{source_name}: {report.summary()}")
    if not report.all_ok:
        ctx.exit(1)


cli.add_command(fake_provider)
cli.add_command(reconcile)
cli.add_command(charge)
cli.add_command(destinations)
cli.add_command(relay)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: logging set up here; Porteiro errors without traceback."""
    level = os.environ.get("PORTEIRO_LOG_LEVEL", "INFO").upper()
    configure_logging(level, json=not sys.stderr.isatty())
    # One INFO line per simulated request or gateway call drowns the useful ones.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        code = cli.main(args=argv, prog_name="porteiro", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except PorteiroError as exc:
        click.echo(f"porteiro: error: {exc}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
