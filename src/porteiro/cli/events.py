"""`events`, `dlq`, `replay` and `payments`: looking at and redriving what was received."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import click
import orjson
from rich.table import Table

from porteiro import audit, replay
from porteiro.cli import _common as common
from porteiro.http import jsonview
from porteiro.model import EventStatus, Kind, StoredEvent
from porteiro.runtime import Runtime
from porteiro.store.base import EventFilter, Page


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
            common.json_line(jsonview.event_to_json(event))
    else:
        common.console().print(_events_table(events))


_limit_option = click.option(
    "--limit", type=click.IntRange(1, 10_000), default=50, show_default=True
)
_reference_option = click.option(
    "--reference", help="only events carrying this merchant's reference (exact)"
)
_cursor_option = click.option(
    "--cursor", help="the next page: the cursor a previous list printed on stderr"
)


@click.group()
def events() -> None:
    """Inspect stored events."""


@events.command("list")
@click.option("--source")
@click.option("--status", type=click.Choice([s.value for s in EventStatus]))
@common.kind_option
@click.option("--object-id")
@click.option("--dedup-key")
@_reference_option
@common.since_option
@common.until_option
@_limit_option
@_cursor_option
@common.json_option
@click.pass_context
def events_list(
    ctx: click.Context,
    source: str | None,
    status: str | None,
    kind: str | None,
    object_id: str | None,
    dedup_key: str | None,
    reference: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """Newest events first, filtered (the filters of GET /api/events)."""
    filter = EventFilter(
        source=source,
        status=EventStatus(status) if status else None,
        kind=Kind(kind) if kind else None,
        object_id=object_id,
        dedup_key=dedup_key,
        reference=reference,
        since=since,
        until=until,
    )
    _list(ctx, filter, cursor, limit, as_json)


def _list(
    ctx: click.Context, filter: EventFilter, cursor: str | None, limit: int, as_json: bool
) -> None:
    """One page of events, and on stderr (so `--json` stdout stays one event per line)
    the cursor of the next when there are more: a silent cut at `--limit` would read as
    "that is all there is"."""

    async def fetch(runtime: Runtime) -> Page[StoredEvent]:
        try:
            return await runtime.store.list_events(filter, cursor, limit)
        except ValueError as exc:  # a cursor the store cannot decode
            raise click.BadParameter(str(exc), param_hint="--cursor") from None

    page = common.run(common.config(ctx), fetch)
    _print_events(page.items, as_json)
    if page.next is not None:
        click.echo(
            f"more events than the {limit} shown: add --cursor {page.next} for the next ones,"
            " or a larger --limit",
            err=True,
        )


def _found(
    ctx: click.Context,
    fetch: Callable[[Runtime], Awaitable[dict[str, Any] | None]],
    missing: str,
) -> dict[str, Any]:
    """The view `fetch` builds of one stored thing; `missing` (exit 2) when there is none."""
    view = common.run(common.config(ctx), fetch)
    if view is None:
        raise common.NotFound(missing)
    return view


@events.command("show")
@click.argument("event_id", type=int)
@common.json_option
@click.pass_context
def events_show(ctx: click.Context, event_id: int, as_json: bool) -> None:
    """One event with every raw delivery that carried it."""

    async def fetch(runtime: Runtime) -> dict[str, Any] | None:
        event = await runtime.store.get_event(event_id)
        if event is None:
            return None
        deliveries = await runtime.store.event_deliveries(event_id)
        return jsonview.event_detail_to_json(event, deliveries)

    view = _found(ctx, fetch, f"no event {event_id}")
    if as_json:
        common.json_line(view)
    else:
        click.echo(orjson.dumps(view, option=orjson.OPT_INDENT_2).decode())


@click.group()
def dlq() -> None:
    """The dead-letter queue."""


@dlq.command("list")
@click.option("--source")
@_limit_option
@_cursor_option
@common.json_option
@click.pass_context
def dlq_list(
    ctx: click.Context, source: str | None, limit: int, cursor: str | None, as_json: bool
) -> None:
    """Dead events, newest first."""
    _list(ctx, EventFilter(source=source, status=EventStatus.DEAD), cursor, limit, as_json)


@dlq.command("replay")
@click.option("--source")
@common.kind_option
@common.since_option
@common.until_option
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
        with common.progress("dlq replay") as progress:
            report = await replay.redrive(runtime, filter, ids=ids or None, progress=progress)
        given = {"ids": list(ids), "source": source, "kind": kind, "since": since,
                 "until": until, "all": every or None}  # fmt: skip
        affected = len(report.event_ids)
        await audit.record_cli(runtime.store, "dlq.replay", given, affected, runtime.clock())
        return report

    report = common.run(common.config(ctx), work)
    _echo_report(report, dry_run=False)
    ctx.exit(_exit_code(report))


@click.command("replay")
@click.argument("ids", type=int, nargs=-1)
@click.option("--source")
@common.kind_option
@click.option("--status", type=click.Choice([s.value for s in EventStatus]))
@_reference_option
@common.since_option
@common.until_option
@click.option("--reparse/--no-reparse", default=True, help="re-parse raw deliveries (default)")
@click.option("--dry-run", is_flag=True, help="change nothing; show the transitions")
@common.json_option
@click.pass_context
def replay_command(
    ctx: click.Context,
    ids: tuple[int, ...],
    source: str | None,
    kind: str | None,
    status: str | None,
    reference: str | None,
    since: datetime | None,
    until: datetime | None,
    reparse: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Replay events by id or by filter, re-parsed with the current adapter code."""
    filter = EventFilter(
        source=source, status=EventStatus(status) if status else None,
        kind=Kind(kind) if kind else None, reference=reference, since=since, until=until,
    )  # fmt: skip
    if ids and filter != EventFilter():
        raise click.UsageError("give event ids or filter options, not both")
    if not ids and filter == EventFilter():
        raise click.UsageError("give event ids or at least one filter option")
    target: replay.Target = list(ids) if ids else filter
    action = replay.reparse if reparse else replay.requeue

    async def work(runtime: Runtime) -> replay.ReplayReport:
        with common.progress("replay") as progress:
            report = await action(runtime, target, dry_run=dry_run, progress=progress)
        given = {"ids": list(ids), "source": source, "kind": kind, "status": status,
                 "reference": reference, "since": since, "until": until, "reparse": reparse,
                 "dry_run": dry_run}  # fmt: skip
        affected = len(report.event_ids)
        await audit.record_cli(runtime.store, "replay", given, affected, runtime.clock())
        return report

    report = common.run(common.config(ctx), work)
    if dry_run and as_json:
        for planned in report.planned:
            common.json_line(replay.planned_to_json(planned))
    elif as_json:
        common.json_line(replay.report_to_json(report))
    else:
        _echo_report(report, dry_run=dry_run)
    ctx.exit(_exit_code(report))


def _exit_code(report: replay.ReplayReport) -> int:
    """2 when an id given does not exist (as `events show`), else 1 when a delivery still
    fails to parse (the replay ran, and did not do all it was asked), else 0."""
    if report.missing:
        return 2
    return 1 if report.failures else 0


def _echo_report(report: replay.ReplayReport, *, dry_run: bool) -> None:
    if dry_run:
        table = Table("event", "dedup key", "kind", "object", "from", "to", "verdict")
        for p in report.planned:
            event = "new" if p.event_id is None else str(p.event_id)
            table.add_row(
                event, p.dedup_key, p.kind, p.object_id or "", p.from_state or "-",
                p.to_state or "-", p.verdict,
            )  # fmt: skip
        common.console().print(table)
        click.echo(f"dry run: {len(report.planned)} events, nothing changed")
    else:
        click.echo(
            f"{len(report.event_ids)} events due again ({report.deliveries} re-parsed deliveries)"
        )
    for delivery_id, reason in report.failures:
        click.echo(f"delivery {delivery_id} still fails to parse: {reason}", err=True)
    if report.missing:
        click.echo(f"no such events: {', '.join(map(str, report.missing))}", err=True)


@click.group()
def payments() -> None:
    """Canonical payment state."""


@payments.command("show")
@click.argument("source")
@click.argument("object_id")
@common.json_option
@click.pass_context
def payments_show(ctx: click.Context, source: str, object_id: str, as_json: bool) -> None:
    """A payment's state, amounts and full transition history."""

    async def fetch(runtime: Runtime) -> dict[str, Any] | None:
        payment = await runtime.store.get_payment(source, object_id)
        if payment is None:
            return None
        history = await runtime.store.payment_history(source, object_id)
        return jsonview.payment_to_json(payment, history)

    view = _found(ctx, fetch, f"no payment {object_id!r} from source {source!r}")
    if as_json:
        common.json_line(view)
        return
    fields = ("state", "amount", "currency", "refunded_amount", "reference", "version")
    click.echo(f"{source}/{object_id}: " + ", ".join(f"{key} {view[key]}" for key in fields))
    table = Table("at", "from", "to", "verdict", "event", "note")
    for entry in view["history"]:
        table.add_row(
            str(entry["at"]), entry["from"] or "-", entry["to"], entry["verdict"],
            str(entry["event_id"]), entry["note"] or "",
        )  # fmt: skip
    common.console().print(table)
