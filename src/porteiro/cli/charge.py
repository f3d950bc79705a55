"""`porteiro charge create|resume`: the outgoing idempotent client for operators.

`create` stores the key before the first attempt and prints the created object's id,
the key, the attempts and whether the answer was replayed from the store. If it ends
unresolved (exit 3) or the process dies, run it again with the printed `--key` (or
`charge resume`): never with a new key, or the gateway may create a second charge.
Exit codes: 0 created, 1 refused by the gateway (the key is `failed`), 2 usage or
configuration error (incl. a key reused for another request), 3 unresolved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import click
import orjson

from porteiro.cli import _common as common
from porteiro.config import Config
from porteiro.errors import PorteiroError
from porteiro.outgoing.client import (
    DEFAULT_POLICY,
    CreateRejected,
    CreateResult,
    CreateUnresolved,
    PaymentClient,
)
from porteiro.runtime import Runtime

T = TypeVar("T")
EXIT_REJECTED, EXIT_UNRESOLVED = 1, 3


def _with_client(
    ctx: click.Context, source: str, options: Mapping[str, Any],
    work: Callable[[PaymentClient], Awaitable[T]],
) -> T:  # fmt: skip
    config: Config = common.config(ctx)

    async def run() -> T:
        runtime = Runtime.build(config)
        # The embedded SQLite store migrates itself; PostgreSQL runs `db upgrade`.
        await runtime.start(migrate=config.store_url.startswith("sqlite:"))
        client = None
        try:
            client = PaymentClient.from_runtime(runtime, source, **options)
            return await work(client)
        finally:
            if client is not None:
                await client.aclose()
            await runtime.stop()

    return asyncio.run(run())


def _policy_options(max_attempts: int | None, timeout: float | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if max_attempts is not None:
        options["policy"] = replace(DEFAULT_POLICY, max_attempts=max_attempts)
    if timeout is not None:
        options["timeout_seconds"] = timeout
    return options


def _report(result: CreateResult, as_json: bool) -> None:
    if as_json:
        click.echo(orjson.dumps(result.to_json()).decode())
        return
    how = "replayed from the store" if result.replayed else f"{result.attempts} attempt(s)"
    click.echo(f"{result.object_id}  key={result.key}  {how}"
               + ("" if result.expected else "  (not registered with the reconciler)"))  # fmt: skip


def _failure(ctx: click.Context, exc: PorteiroError, as_json: bool) -> None:
    code = EXIT_REJECTED if isinstance(exc, CreateRejected) else EXIT_UNRESOLVED
    if as_json:
        payload: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc),
                                   "key": getattr(exc, "key", None)}  # fmt: skip
        if isinstance(exc, CreateRejected):
            payload.update(status=exc.status, body=exc.body)
        click.echo(orjson.dumps(payload).decode())
    else:
        click.echo(f"porteiro: {exc}", err=True)
    ctx.exit(code)


@click.group()
def charge() -> None:
    """Create charges at a gateway with a persisted idempotency key."""


max_attempts_option = click.option(
    "--max-attempts", type=click.IntRange(min=1), help="attempts in this run (default 5)"
)
timeout_option = click.option(
    "--timeout", type=click.FloatRange(min=0.1), help="seconds per attempt (default 10)"
)
json_option = click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")


@charge.command("create")
@click.option("--source", required=True, help="a configured source (stripe, pix, ...)")
@click.option("--amount", type=click.IntRange(min=1), required=True, help="minor units")
@click.option("--currency", default="BRL", show_default=True)
@click.option("--reference", required=True, help="the merchant's order id")
@click.option("--key", help="idempotency key (default: a new UUID, printed)")
@click.option("--expires-in", type=click.IntRange(min=1), help="seconds until it lapses")
@click.option("--extra", help="JSON object merged into the gateway's request body")
@max_attempts_option
@timeout_option
@json_option
@click.pass_context
def create(
    ctx: click.Context, source: str, amount: int, currency: str, reference: str,
    key: str | None, expires_in: int | None, extra: str | None, max_attempts: int | None,
    timeout: float | None, as_json: bool,
) -> None:  # fmt: skip
    """Create a payment / order / Pix cob once, whatever fails on the way."""
    fields: dict[str, Any] = {}
    if extra is not None:
        try:
            fields = orjson.loads(extra)
        except orjson.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--extra") from None
        if not isinstance(fields, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--extra")

    async def work(client: PaymentClient) -> CreateResult:
        return await client.create_payment(
            amount, currency, reference, key=key, expires_in=expires_in, extra=fields
        )

    try:
        result = _with_client(ctx, source, _policy_options(max_attempts, timeout), work)
    except (CreateRejected, CreateUnresolved) as exc:
        _failure(ctx, exc, as_json)
        return
    _report(result, as_json)


@charge.command("resume")
@click.option("--source", required=True)
@click.option("--key", help="one key (default: every pending key of the source)")
@max_attempts_option
@timeout_option
@json_option
@click.pass_context
def resume(
    ctx: click.Context, source: str, key: str | None, max_attempts: int | None,
    timeout: float | None, as_json: bool,
) -> None:  # fmt: skip
    """Continue keys left pending by a crash or an unresolved create (same keys)."""

    async def work(client: PaymentClient) -> dict[str, CreateResult | PorteiroError]:
        if key is None:
            return await client.resume_pending()
        try:
            return {key: await client.resume(key)}
        except (CreateRejected, CreateUnresolved) as exc:
            return {key: exc}

    outcomes = _with_client(ctx, source, _policy_options(max_attempts, timeout), work)
    worst = 0
    for outcome in outcomes.values():
        if isinstance(outcome, CreateResult):
            _report(outcome, as_json)
            continue
        code = EXIT_REJECTED if isinstance(outcome, CreateRejected) else EXIT_UNRESOLVED
        worst = max(worst, code)
        if as_json:
            click.echo(orjson.dumps({"error": type(outcome).__name__, "message": str(outcome),
                                     "key": getattr(outcome, "key", None)}).decode())  # fmt: skip
        else:
            click.echo(f"porteiro: {outcome}", err=True)
    if not outcomes and not as_json:
        click.echo("no pending keys")
    ctx.exit(worst)
