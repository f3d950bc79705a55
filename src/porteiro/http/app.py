"""The ASGI application: receiver, probes, metrics and admin API on one Starlette app.

`create_app` takes a built Runtime (nothing read from the environment); `asgi_app` is the
entry point for `uvicorn porteiro.http.app:asgi_app --factory` and the only place here that
reads the environment.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from porteiro.config.load import load_config, load_required_config
from porteiro.errors import StoreUnavailable
from porteiro.http.admin import AdminApi, http_error
from porteiro.http.admin_audit import audit_routes
from porteiro.http.admin_auth import Guard, metrics_guard
from porteiro.http.admin_console import console_routes as console_reads
from porteiro.http.admin_destinations import destination_routes
from porteiro.http.admin_reconcile import reconcile_routes
from porteiro.http.gctune import tune_for_throughput
from porteiro.http.receiver import Receiver, json_error, webhook_source
from porteiro.jobs.watch import check_roles
from porteiro.observability import configure_logging, logger, multiprocess
from porteiro.runtime import Runtime
from porteiro.store.migrations import SchemaMismatch
from porteiro.ui import console_routes

Background = Callable[[], Awaitable[None]]


class Probes:
    """/healthz, /readyz and /metrics: each bounded by the store timeout."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._timeout = runtime.config.server.store_timeout_seconds
        self._retry_after = {"Retry-After": str(runtime.config.server.retry_after_seconds)}
        runtime.metrics.declare(tuple(runtime.providers), tuple(runtime.config.destinations))

    async def healthz(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        # Ready means the store answers AND its schema is the one this code needs: a
        # downgrade or a migration under a running process makes every webhook fail.
        # The schema query is the ping (one small SELECT per probe, no cache to go stale).
        try:
            async with asyncio.timeout(self._timeout):
                await self._runtime.store.check_schema()
        except (StoreUnavailable, TimeoutError):
            return _json({"status": "unavailable"}, 503, self._retry_after)
        except SchemaMismatch:
            return _json({"status": "schema_mismatch"}, 503, self._retry_after)
        return _json({"status": "ready", "warnings": await self._unattended()})

    async def _unattended(self) -> list[dict[str, object]]:
        """Roles with work that no process runs (jobs/watch.py): warnings in the body, not
        a 503, since this process still acks (a balancer must not pull it for that).
        Best effort, like /metrics' counts: a slow read gives no warnings, not a failure."""
        runtime = self._runtime
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            async with asyncio.timeout(self._timeout):
                found = await check_roles(runtime.config, runtime.store, runtime.clock())
            return [each.to_json() for each in found]
        return []

    async def metrics(self, request: Request) -> Response:
        metrics = self._runtime.metrics
        # Best effort: a slow or down store must not make the scrape hang or fail (the
        # store gauges keep their last readings). The reads go through small indexes
        # of open rows: counting `done` read every stored event on every scrape (0.7-1 s
        # with 5 M stored, on PostgreSQL's parallel workers).
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            async with asyncio.timeout(self._timeout):
                metrics.readings.last = await self._runtime.store.metric_readings(
                    self._runtime.clock()
                )
        return Response(generate_latest(metrics.exposed()), media_type=CONTENT_TYPE_LATEST)


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(data), status_code=status, headers=headers, media_type="application/json"
    )


def create_app(
    runtime: Runtime,
    *,
    background: Sequence[Background] = (),
    migrate: bool = False,
) -> Starlette:
    """The whole HTTP surface. The lifespan opens the runtime (migrating if asked), runs
    each `background` coroutine (e.g. the worker) as a task, and on shutdown cancels them
    and closes the runtime."""
    receiver = Receiver(runtime)
    probes = Probes(runtime)
    pix_sources = frozenset(
        name for name, source in runtime.config.sources.items() if source.provider == "pix"
    )

    async def automatico(request: Request) -> Response:
        if request.path_params["source"] not in pix_sources:
            return json_error(404, "not found")
        return await receiver.handle(request)

    webhooks = [
        Route("/webhooks/{source}", receiver.handle, methods=["POST"]),
        Route("/webhooks/{source}/pix", receiver.handle, methods=["POST"]),
        # Pix Automático (BCB): {webhookUrl}/rec and {webhookUrl}/cobr, Pix sources only.
        Route("/webhooks/{source}/rec", automatico, methods=["POST"]),
        Route("/webhooks/{source}/cobr", automatico, methods=["POST"]),
    ]
    probe_routes = [
        Route("/healthz", probes.healthz, methods=["GET"]),
        Route("/readyz", probes.readyz, methods=["GET"]),
    ]
    # With [admin] listen, these are served by admin_app only: the webhook port answers
    # 404, so the operators' door is not the one the internet knocks on.
    admin = [] if runtime.config.admin.listen is not None else admin_routes(runtime, probes)
    routes = [*webhooks, *probe_routes, *admin]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start(migrate=migrate)
        tasks = [asyncio.create_task(_run(job), name=_name(job)) for job in background]
        for task in tasks:
            task.add_done_callback(_report_crash)
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await runtime.stop()

    # The router's own 404/405 answer JSON like every other error (api.http_error).
    errors = {HTTPException: http_error}
    return PorteiroApp(
        receiver, pix_sources, routes=routes, lifespan=lifespan, exception_handlers=errors
    )


def admin_routes(runtime: Runtime, probes: Probes) -> list[BaseRoute]:
    """/metrics, every /api route and the console (/ui)."""
    guard = Guard(runtime)
    return [
        *console_routes(runtime),
        Route("/metrics", metrics_guard(runtime.config, probes.metrics), methods=["GET"]),
        *AdminApi(runtime).routes(guard),
        *destination_routes(runtime, guard),
        *reconcile_routes(runtime, guard),
        *audit_routes(runtime, guard),
        *console_reads(runtime, guard),
    ]


def admin_app(runtime: Runtime) -> Starlette:
    """The `[admin] listen` listener's app: /metrics, /api, /ui and the probes, no webhooks.
    No lifespan: it runs beside create_app's app, on the same runtime and event loop,
    whose lifespan opens and closes the runtime (porteiro.cli.serve)."""
    probes = Probes(runtime)
    routes = [
        Route("/healthz", probes.healthz, methods=["GET"]),
        Route("/readyz", probes.readyz, methods=["GET"]),
        *admin_routes(runtime, probes),
    ]
    application = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    application.router.redirect_slashes = False  # as PorteiroApp: no open redirect
    return application


class PorteiroApp(Starlette):
    """Starlette, except that POST /webhooks/{source}[/pix] (and a Pix source's /rec and
    /cobr) goes straight to the receiver, before Starlette's middleware stack and router:
    a profile showed them at about a tenth of the ack's CPU. The webhook routes stay in
    the route table (OpenAPI lists them, and a path the fast path does not take still
    reaches them: /rec and /cobr of a source that is not Pix, which answer 404)."""

    def __init__(
        self, receiver: Receiver, pix_sources: frozenset[str] = frozenset(), **options: Any
    ) -> None:
        super().__init__(**options)
        # Starlette answers a path with a stray trailing slash with a 307 to an absolute
        # URL built from the request's Host header (an open redirect for whoever sets
        # it); every route here is spelled one way, so the other spelling is a 404.
        self.router.redirect_slashes = False
        self._receiver = receiver
        self._pix_sources = pix_sources

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            source = webhook_source(path, scope.get("root_path", ""))
            if source is not None and (
                source in self._pix_sources or not _automatico_route(path, source)
            ):
                await self._receiver.asgi(scope, receive, send, source)
                return
        try:
            await super().__call__(scope, receive, send)
        except ClientDisconnect:
            # The client left mid-body, or was cut at [server] body_timeout_seconds
            # (porteiro.http.limits): no one to answer, and no server error to log.
            return


def _automatico_route(path: str, source: str) -> bool:
    """Whether the path is /webhooks/{source}/rec or /cobr (not a source named so)."""
    tail = path.rsplit("/", 1)[-1]
    return tail != source and tail in ("rec", "cobr")


async def _run(job: Background) -> None:
    await job()


def _name(job: Background) -> str:
    return f"porteiro:{getattr(job, '__qualname__', type(job).__name__)}"


def _report_crash(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        logger().error(
            "background.crashed",
            action="background.crashed",
            task=task.get_name(),
            error=f"{type(error).__name__}: {error}",
            exc_info=error,
        )


def asgi_app() -> Starlette:
    """`uvicorn porteiro.http.app:asgi_app --factory`: config from PORTEIRO_CONFIG / env.

    Migrates on start only for the embedded SQLite default; PostgreSQL is migrated on
    purpose with `porteiro db upgrade`.
    """
    env = dict(os.environ)
    configure_logging(env.get("PORTEIRO_LOG_LEVEL", "INFO"))
    config = load_required_config(None, env)
    return create_app(Runtime.build(config), migrate=config.store_url.startswith("sqlite:"))


def receiver_process_app() -> Starlette:
    """One of `porteiro serve --receivers N`'s processes (uvicorn factory): the config
    from PORTEIRO_CONFIG / env like `asgi_app`, the roles `serve` chose from
    PORTEIRO_SERVE_ROLES (jobs/roles.py); no migration (the parent ran it once, before
    starting the receivers)."""
    from porteiro.jobs.roles import Roles, background, until_cancelled

    env = dict(os.environ)
    atexit.register(multiprocess.process_exited)  # its live gauges leave the sums
    configure_logging(env.get("PORTEIRO_LOG_LEVEL", "INFO").upper())
    runtime = Runtime.build(load_config(None, env))
    jobs = [until_cancelled(work) for work in background(runtime, Roles.from_env(env))]
    app = create_app(runtime, background=jobs)
    tune_for_throughput()
    return app
