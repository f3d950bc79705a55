"""`porteiro reconcile`: window audits, one stale cycle, or the stale loop on its own.

    porteiro reconcile --source S --since T1 --until T2 [--no-ingest] [--out DIR] [--json]
    porteiro reconcile --stale          one stale cycle over every source
    porteiro reconcile --loop           the stale cycle every [reconcile] interval_seconds

Registered in cli.py. The configuration is read here, at the entry point.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from porteiro.cli import _common as common
from porteiro.config import Config
from porteiro.reconcile.reconciler import Reconciler
from porteiro.reconcile.report import AuditReport, StaleReport
from porteiro.runtime import Runtime, check_schema_at_start, utc_now

T = TypeVar("T")


def _with_reconciler(config: Config, work: Callable[[Reconciler], Awaitable[T]]) -> T:
    async def run() -> T:
        runtime = Runtime.build(config)
        try:
            # The embedded SQLite store migrates itself (as `serve` does); PostgreSQL
            # does not. Either way no audit runs on a schema this code cannot read
            # (exit 2, one line: `--loop` is a long-running process like `worker`).
            await runtime.start(migrate=config.store_url.startswith("sqlite:"))
            await check_schema_at_start(runtime.store)
        except BaseException:
            await runtime.stop()
            raise
        reconciler = Reconciler(runtime)
        try:
            return await work(reconciler)
        finally:
            await reconciler.aclose()
            await runtime.stop()

    return asyncio.run(run())


@click.command("reconcile")
@click.option("--source", help="the source to audit (a window audit needs it)")
@click.option("--since", callback=common.when, help="window start (ISO 8601 or an age: 24h)")
@click.option("--until", callback=common.when, help="window end, excluded (default: now)")
@click.option("--ingest/--no-ingest", default=True, help="store what is missing (default)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="report folder")
@click.option("--json", "as_json", is_flag=True, help="the report as JSON on stdout")
@click.option("--stale", is_flag=True, help="run one stale cycle over every source")
@click.option("--loop", is_flag=True, help="run the stale cycle until interrupted")
@click.pass_context
def reconcile(
    ctx: click.Context,
    source: str | None,
    since: datetime | None,
    until: datetime | None,
    ingest: bool,
    out_dir: str | None,
    as_json: bool,
    stale: bool,
    loop: bool,
) -> None:
    """Ask the gateways about what their webhooks never said."""
    config = common.config(ctx)
    if stale or loop:
        if source or since:
            raise click.UsageError("--stale/--loop run over every source: no window options")
        if loop:
            _with_reconciler(config, _loop)
            return
        cycle = _with_reconciler(config, lambda r: r.stale_cycle(r.runtime.clock()))
        _echo_stale(cycle, as_json)
        return
    if source is None or since is None:
        raise click.UsageError("a window audit needs --source and --since (or use --stale)")
    if source not in config.sources:
        raise click.UsageError(
            f"unknown source {source!r} (configured: {', '.join(config.sources)})"
        )
    end = until or utc_now()
    if end <= since:
        raise click.UsageError("--until must be after --since")
    folder = out_dir or config.reconcile.reports_dir

    async def audit(reconciler: Reconciler) -> AuditReport:
        with _progress(f"reconcile {source}") as progress:
            return await reconciler.audit_window(
                source, since, end, ingest=ingest, progress=progress, out_dir=folder
            )

    report = _with_reconciler(config, audit)
    _echo_audit(report, as_json)


async def _loop(reconciler: Reconciler) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await reconciler.run(stop)


class _progress:  # used like a function
    """A rich bar on stderr (hidden off a terminal): listing first, then comparing."""

    def __init__(self, description: str) -> None:
        console = Console(stderr=True)
        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, disable=not console.is_terminal,
        )  # fmt: skip
        self._task = self._bar.add_task(description, total=None)
        self._description = description

    def __enter__(self) -> Callable[[int, int | None], None]:
        self._bar.__enter__()
        return self.update

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)

    def update(self, done: int, total: int | None) -> None:
        phase = "listing" if total is None else "comparing"
        self._bar.update(
            self._task, completed=done, total=total, description=f"{self._description}: {phase}"
        )


def _echo_audit(report: AuditReport, as_json: bool) -> None:
    if as_json:
        click.echo(orjson.dumps(report.to_json()).decode())
        return
    console = common.console()
    summary = report.summary()
    table = Table("source", "window", "listed", "payments", "missing", "divergent", "unknown",
                  "ingested", "seconds")  # fmt: skip
    table.add_row(
        report.source, f"{summary['since']} .. {summary['until']}", str(report.listed),
        str(report.gateway_payments), str(len(report.missing)), str(len(report.divergent)),
        str(len(report.unknown)), str(report.ingested), str(summary["seconds"]),
    )  # fmt: skip
    console.print(table)
    if report.note:
        click.echo(f"{report.source}: {report.note}")
    findings = report.findings()
    if findings:
        detail = Table("category", "object", "dedup key", "type", "gateway", "store", "ingested")
        for f in findings[:50]:
            detail.add_row(
                f.category, f.object_id or "", f.dedup_key or "", f.type or "",
                f.gateway_state or "", f.store_state or "", "yes" if f.ingested else "",
            )  # fmt: skip
        console.print(detail)
        if len(findings) > 50:
            click.echo(f"... {len(findings) - 50} more in the report files")
    click.echo(f"report {report.id}: {', '.join(report.files) or 'saved in the store'}")


def _echo_stale(report: StaleReport, as_json: bool) -> None:
    if as_json:
        click.echo(orjson.dumps(report.to_json()).decode())
        return
    table = Table("source", "checked", "answered", "new events", "duplicates", "errors", "note")
    for cycle in report.sources:
        row: dict[str, Any] = cycle.to_json()
        table.add_row(
            cycle.source, str(cycle.checked), str(cycle.found), str(cycle.new),
            str(cycle.duplicates), str(len(cycle.errors)), row["note"] or "",
        )  # fmt: skip
    common.console().print(table)
    click.echo(f"{report.checked} stale payments checked")
