"""The shop's payment handlers: run inside Porteiro's ledger transaction, so an order's
status changes exactly once per applied event, atomically with it."""

from __future__ import annotations

from pathlib import Path

import porteiro

SCHEMA = Path(__file__).with_name("schema.sql")

handlers = porteiro.Handlers()


def schema_sql() -> str:
    """The `orders` DDL (one statement, valid on SQLite and PostgreSQL)."""
    return SCHEMA.read_text()


@handlers.on("payment.paid")
async def paid(ctx: porteiro.HandlerContext) -> None:
    await ctx.execute(
        "UPDATE orders SET status = 'paid', paid_events = paid_events + 1, last_event = %s"
        " WHERE reference = %s",
        (f"evt_{ctx.event_id}", ctx.reference),
    )


@handlers.on("payment.refunded", "payment.partially_refunded")
async def refunded(ctx: porteiro.HandlerContext) -> None:
    status = "refunded" if ctx.payment.state.value == "refunded" else "partially_refunded"
    await ctx.execute(
        "UPDATE orders SET status = %s, last_event = %s WHERE reference = %s",
        (status, f"evt_{ctx.event_id}", ctx.reference),
    )


@handlers.on("payment.failed", "payment.canceled")
async def released(ctx: porteiro.HandlerContext) -> None:
    await ctx.execute(
        "UPDATE orders SET status = 'canceled', last_event = %s"
        " WHERE reference = %s AND status = 'pending'",
        (f"evt_{ctx.event_id}", ctx.reference),
    )
