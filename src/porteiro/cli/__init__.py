"""The `porteiro` command: thin click wrappers over the runtime, worker, replay and simulate.

The configuration and the environment are read here and nowhere else. Machine-readable
output (`--json`) goes to stdout one object per line; progress bars and logs go to stderr.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

import click

from porteiro.cli.audit import audit
from porteiro.cli.charge import charge
from porteiro.cli.config_check import config_group
from porteiro.cli.db import db
from porteiro.cli.destinations import destinations, relay
from porteiro.cli.events import dlq, events, payments, replay_command
from porteiro.cli.fake import fake_provider
from porteiro.cli.reconcile import reconcile
from porteiro.cli.serve import serve, worker
from porteiro.cli.simulate import simulate
from porteiro.errors import PorteiroError, StoreUnavailable
from porteiro.observability import configure_logging


@click.group()
@click.version_option(package_name="porteiro", prog_name="porteiro")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="TOML file (else $PORTEIRO_CONFIG, else ./porteiro.toml)",
)
def cli(config_path: str | None) -> None:
    """Porteiro: a durable, idempotent inbox for payment-gateway webhooks."""


for command in (
    config_group,
    serve,
    worker,
    db,
    events,
    dlq,
    replay_command,
    payments,
    simulate,
    fake_provider,
    reconcile,
    charge,
    destinations,
    relay,
    audit,
):
    cli.add_command(command)


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
        # A store that does not answer is the moment's failure (1, try again), not one
        # of the command or the configuration (2, fix it): docs/cli.md, Exit codes.
        sys.exit(1 if isinstance(exc, StoreUnavailable) else 2)
    sys.exit(code if isinstance(code, int) else 0)
