"""`serve` and `worker`: the long-running processes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

import click

from porteiro.cli import _common as common
from porteiro.config import Config
from porteiro.http.gctune import tune_for_throughput
from porteiro.jobs.lease import DEFAULT_LEASE_SECONDS
from porteiro.jobs.roles import ROLES_ENV, Roles, background, until_cancelled
from porteiro.observability import logger, multiprocess
from porteiro.runtime import Runtime
from porteiro.worker import Worker


def _role_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--relay/--no-relay, --reconcile/--no-reconcile and the (hidden) lease length: the
    singleton jobs a `serve` or `worker` process competes for (porteiro.jobs.roles)."""
    for option in (
        click.option(
            "--lease-seconds", type=click.FloatRange(min=0.3), default=DEFAULT_LEASE_SECONDS,
            hidden=True, help="a singleton job's lease: how soon a dead holder's job moves",
        ),
        click.option(
            "--reconcile/--no-reconcile", "with_reconcile", default=True,
            help="compete for the reconciler's stale cycle (one process runs it)",
        ),
        click.option(
            "--relay/--no-relay", "with_relay", default=True,
            help="compete for the destinations' relays (one process runs each)",
        ),
    ):  # fmt: skip
        command = option(command)
    return command


@click.command()
@click.option("--host", help="bind address (default: [server] host)")
@click.option("--port", type=int, help="port (default: [server] port; 0 picks a free one)")
@click.option(
    "--worker/--no-worker",
    "with_worker",
    default=True,
    help="also run the worker, relays and reconciler (--no-worker: receiver only)",
)
@_role_options
@click.option("--migrate/--no-migrate", default=None, help="default: on for SQLite only")
@click.option(
    "--receivers",
    type=click.IntRange(min=1),
    help="processes sharing the port (default: [server] receivers); each takes the same roles",
)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str | None,
    port: int | None,
    with_worker: bool,
    with_relay: bool,
    with_reconcile: bool,
    lease_seconds: float,
    migrate: bool | None,
    receivers: int | None,
) -> None:
    """Run the receiver and the admin API, and (by default) the worker, the relays and
    the reconciler: alone, or beside other `serve` and `worker` processes (each relay and
    the reconciler run in one process at a time)."""
    import uvicorn

    from porteiro.http.limits import BoundedHttpToolsProtocol
    from porteiro.http.tls import uvicorn_options

    config = common.config(ctx)
    common.prepare_schema(config, common.migrate_default(config, migrate))
    processes = receivers or config.server.receivers
    # {} unless [server] tls_cert_file is set
    tls = uvicorn_options(config)
    options: dict[str, Any] = {
        "host": host or config.server.host,
        "port": config.server.port if port is None else port,
        # uvloop (uvicorn[standard]) when importable: a faster event loop on the ack
        # path. httptools, with the header/body deadlines and the lingering close that
        # uvicorn lacks (porteiro.http.limits, [server] header_timeout_seconds...).
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
    roles = Roles(
        worker=with_worker,
        relay=with_worker and with_relay,
        reconcile=with_worker and with_reconcile,
        lease_seconds=lease_seconds,
    )
    if processes > 1:
        if config.admin.listen is not None:  # one process can bind it: admin_listener
            raise click.UsageError("[admin] listen needs one receiver process (receivers = 1)")
        _serve_many(ctx, config, options, processes, scheme, roles)
        return

    from porteiro.http.app import create_app

    runtime = Runtime.build(config)
    jobs = [until_cancelled(work) for work in background(runtime, roles)]
    app = create_app(runtime, background=jobs)  # migrated by common.prepare_schema
    server_config = _with_limits(uvicorn.Config(app, **options), config)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:  # the bound address, so `--port 0` tells where it went
                bound = self.servers[0].sockets[0].getsockname()
                _log_listening(f"{scheme}://{bound[0]}:{bound[1]}")

    tune_for_throughput()
    if config.admin.listen is None:
        _Server(server_config).run()
        return
    from porteiro.http.admin_listener import admin_server, run_both
    from porteiro.http.app import admin_app

    host, admin_port = config.admin.listen
    run_both(_Server(server_config), admin_server(admin_app(runtime), host, admin_port, options))


def _with_limits(server_config: Any, config: Config) -> Any:
    """uvicorn's Config with the HTTP door's limits, and this process allowed enough
    open files for them to matter: 1,000+ connections need more than a soft limit of
    1,024 (receiver processes inherit it)."""
    from porteiro.http.limits import ConnectionLimits, raise_open_files_limit, set_limits

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
    roles: Roles,
) -> None:
    """N receiver processes on one listening socket (uvicorn's supervisor restarts a dead
    one). Each builds its app with `porteiro.http.app:receiver_process_app` from the same
    configuration, passed down in the environment; `serve` migrated and checked the
    schema once, before."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    config_path = ctx.find_root().params.get("config_path")
    if config_path:
        os.environ["PORTEIRO_CONFIG"] = os.path.abspath(config_path)
    os.environ[ROLES_ENV] = roles.to_env()
    server_config = uvicorn.Config(
        "porteiro.http.app:receiver_process_app", factory=True, workers=processes, **options
    )
    server_config = _with_limits(server_config, config)
    sock = server_config.bind_socket()
    bound = sock.getsockname()
    _log_listening(f"{scheme}://{bound[0]}:{bound[1]}", processes)
    # Before the receivers start: each writes its metrics there, /metrics sums them.
    with multiprocess.for_receivers():
        Multiprocess(server_config, sockets=[sock]).run()


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@click.command()
@click.option("--migrate/--no-migrate", default=None, help="default: on for SQLite only")
@_role_options
@click.option("--debug-pause-after-claim", type=float, default=0.0, hidden=True)
@click.option("--debug-pause-in-apply", type=float, default=0.0, hidden=True)
@click.pass_context
def worker(
    ctx: click.Context,
    migrate: bool | None,
    with_relay: bool,
    with_reconcile: bool,
    lease_seconds: float,
    debug_pause_after_claim: float,
    debug_pause_in_apply: float,
) -> None:
    """Run a worker without a receiver, and (by default) compete for the relays and the
    reconciler (PostgreSQL deployments run many, on any number of machines)."""
    roles = Roles(relay=with_relay, reconcile=with_reconcile, lease_seconds=lease_seconds)
    config = common.config(ctx)

    async def run() -> None:
        should_migrate = common.migrate_default(config, migrate)
        async with common.runtime(config, migrate=should_migrate, check_schema=True) as runtime:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            events = Worker(
                runtime,
                pause_after_claim=debug_pause_after_claim,
                pause_in_apply=debug_pause_in_apply,
                presence_seconds=lease_seconds,
            )
            work = background(runtime, roles, worker=events.run)
            await asyncio.gather(*(each(stop) for each in work))

    tune_for_throughput()
    try:
        asyncio.run(run())
    finally:
        multiprocess.process_exited()  # its live gauges leave a shared directory's sums
