"""`porteiro audit list`: who did what (porteiro.audit), newest first. Registered on the
main CLI by cli/__init__.py."""

from __future__ import annotations

import click
from rich.table import Table

from porteiro.audit import record_to_json
from porteiro.cli import _common as common
from porteiro.runtime import Runtime
from porteiro.store.audit import AuditRecord, audit_store
from porteiro.store.base import Page


@click.group()
def audit() -> None:
    """The audit log: every operator action (API and CLI), by whom."""


@audit.command("list")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--cursor", help="the next page: the cursor a previous list printed on stderr")
@common.json_option
@click.pass_context
def audit_list(ctx: click.Context, limit: int, cursor: str | None, as_json: bool) -> None:
    """Operator actions, newest first."""

    async def fetch(runtime: Runtime) -> Page[AuditRecord]:
        try:
            return await audit_store(runtime.store).list_audit(cursor, limit)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--cursor") from exc

    page = common.run(common.config(ctx), fetch)
    if page.next is not None:
        click.echo(f"more records: add --cursor {page.next} for the next ones", err=True)
    if as_json:
        for record in page.items:
            common.json_line(record_to_json(record))
        return
    table = Table("id", "at", "token", "action", "affected", "outcome")
    table.add_column("parameters", overflow="fold")
    for record in page.items:
        entry = record.entry
        table.add_row(
            str(record.id), record.at.isoformat(timespec="seconds"), entry.token_name,
            entry.action, str(entry.affected), entry.outcome,
            " ".join(f"{key}={value}" for key, value in entry.parameters.items()),
        )  # fmt: skip
    common.console().print(table)
