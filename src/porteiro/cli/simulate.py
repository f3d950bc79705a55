"""`simulate`: correctly signed webhooks of a source's gateway, sent to a Porteiro."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import click

from porteiro.cli import _common as common
from porteiro.errors import ConfigError
from porteiro.fakes.simulate import build_plan, send
from porteiro.providers import build_provider
from porteiro.runtime import utc_now


@click.command()
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
    config = common.config(ctx)
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
        with common.progress("simulate") as progress:
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
