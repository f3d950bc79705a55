"""`porteiro fake-provider`: serve a fake gateway (API + signed webhooks with faults)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click
import uvicorn

from porteiro.errors import ConfigError
from porteiro.fakes.core import Settings
from porteiro.fakes.scenario import load_toml, parse_delay, scenario_from
from porteiro.fakes.server import GATEWAYS, FakeServer


@click.command("fake-provider")
@click.option("--provider", required=True, type=click.Choice(sorted(GATEWAYS)))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8100, show_default=True)
@click.option("--webhook-url", required=True, help="Porteiro's /webhooks/{source} URL")
@click.option("--secret", required=True, help="webhook secret / Adyen hex key / Pix hmac token")
@click.option("--api-key", help="credential the API expects (default: accept any)")
@click.option("--signing-key-file", help="Pagar.me: RSA private key PEM; signs RS256")
@click.option("--basic-auth", help='Adyen: "user:password" sent as HTTP Basic auth')
@click.option("--payments", type=int, help="how many payments (default 20)")
@click.option("--duplicate-rate", type=float, help="share of webhooks sent twice")
@click.option("--drop-rate", type=float, help="share of webhooks never sent")
@click.option("--reorder/--no-reorder", default=None, help="shuffle the send order")
@click.option("--delay-ms", help="MIN:MAX delay of each first attempt, in ms")
@click.option("--time-factor", type=float, help="divide the retry schedule by this")
@click.option("--seed", type=int, help="same seed, same payments, faults and order")
@click.option("--scenario", "scenario_file", type=click.Path(dir_okay=False))
@click.option("--pix-key", help="Pix: the chave the cobs are paid to")
@click.option("--expire-unpaid", type=float, help="Pix: share of cobs that expire unpaid")
@click.option("--cob-expiration", type=int, help="Pix: calendario.expiracao (seconds)")
@click.option("--window-seconds", type=int, help="payments created within this long ago")
@click.option("--concurrency", type=int, help="webhooks in flight at once (default 8)")
@click.option("--hold", is_flag=True, help="wait for POST /_fake/start before emitting")
@click.option("--exit-when-done", is_flag=True, help="stop once every webhook is settled")
def fake_provider(
    provider: str,
    host: str,
    port: int,
    webhook_url: str,
    secret: str,
    api_key: str | None,
    signing_key_file: str | None,
    basic_auth: str | None,
    scenario_file: str | None,
    pix_key: str | None,
    hold: bool,
    exit_when_done: bool,
    **flags: Any,
) -> None:
    """Serve a fake PROVIDER gateway that owns N payments and delivers their webhooks."""
    try:
        raw = load_toml(scenario_file) if scenario_file else {}
        if isinstance(flags.get("delay_ms"), str):
            flags["delay_ms"] = parse_delay(flags["delay_ms"])
        scenario = scenario_from(raw, flags)
        settings = Settings(
            webhook_url=webhook_url, secret=secret, api_key=api_key,
            signing_key_file=signing_key_file, basic_auth=basic_auth, hold=hold,
            **({"pix_key": pix_key} if pix_key else {}),
        )  # fmt: skip
        server = FakeServer(provider, scenario, settings)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    asyncio.run(_serve(server, host, port, exit_when_done))


async def _serve(server: FakeServer, host: str, port: int, exit_when_done: bool) -> None:
    config = uvicorn.Config(
        server.app(), host=host, port=port, log_level="warning", access_log=False
    )
    web = uvicorn.Server(config)
    click.echo(
        f"fake {server.gateway.name} on http://{host}:{port} "
        f"({len(server.gateway.payments)} payments) -> {server.gateway.settings.webhook_url}",
        err=True,
    )
    serving = asyncio.create_task(web.serve())
    if exit_when_done:
        waiting = asyncio.create_task(server.wait_done())
        await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
        web.should_exit = True
        summary = server.state()["webhooks"]
        click.echo(json.dumps({"done": server.emitter.done, **summary}), err=False)
    await serving
