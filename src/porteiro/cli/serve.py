"""`serve` and `worker`: the long-running processes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from typing import Any

import click

from porteiro.cli import _common as common
from porteiro.config import Config
from porteiro.http.gctune import tune_for_throughput
from porteiro.observability import logger
from porteiro.runtime import Runtime
from porteiro.worker import Worker


@click.command()
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
    if processes > 1:
        _serve_many(ctx, config, options, processes, scheme, with_worker)
        return

    from porteiro.http.app import Background, create_app
    from porteiro.reconcile.reconciler import background as reconcile_background
    from porteiro.sinks.relay import relay_jobs

    runtime = Runtime.build(config)
    background: list[Background] = [Worker(runtime).run] if with_worker else []
    background += reconcile_background(runtime)  # off with [reconcile] enabled = false
    background += relay_jobs(runtime) if with_worker else []  # [destinations.*]
    app = create_app(runtime, background=background)  # migrated by common.prepare_schema
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
    with_worker: bool,
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
    os.environ["PORTEIRO_SERVE_WORKER"] = "1" if with_worker else "0"
    server_config = uvicorn.Config(
        "porteiro.http.app:receiver_process_app", factory=True, workers=processes, **options
    )
    server_config = _with_limits(server_config, config)
    sock = server_config.bind_socket()
    bound = sock.getsockname()
    _log_listening(f"{scheme}://{bound[0]}:{bound[1]}", processes)
    Multiprocess(server_config, sockets=[sock]).run()


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@click.command()
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
    config = common.config(ctx)

    async def run() -> None:
        should_migrate = common.migrate_default(config, migrate)
        async with common.runtime(config, migrate=should_migrate, check_schema=True) as runtime:
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
