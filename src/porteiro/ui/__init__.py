"""The operator's console at /ui (docs/ui.md): server-rendered pages over the admin
API's store reads and operations, htmx for the parts that refresh or act without a
reload, all assets in the package (no Node step to run it)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from porteiro.runtime import Runtime
from porteiro.ui.actions import Actions
from porteiro.ui.guard import ConsoleGuard
from porteiro.ui.login import Login
from porteiro.ui.pages import Pages
from porteiro.ui.render import Renderer


def console_routes(runtime: Runtime) -> list[BaseRoute]:
    """Every /ui route; none when `[ui] enabled = false`."""
    if not runtime.config.ui.enabled:
        return []
    renderer = Renderer(runtime.config.ui)
    guard = ConsoleGuard(runtime, renderer)
    pages, actions, login = (
        Pages(runtime, renderer),
        Actions(runtime, renderer),
        Login(guard, renderer),
    )
    page, act = guard.page, guard.action

    async def to_console(request: Request) -> Response:
        return RedirectResponse("/ui/", status_code=307)

    return [
        Route("/ui", to_console, methods=["GET"]),
        Route("/ui/login", login.form, methods=["GET"]),
        Route("/ui/login", login.submit, methods=["POST"]),
        Route("/ui/logout", login.logout, methods=["POST"]),
        Route("/ui/", page(pages.overview), methods=["GET"]),
        Route("/ui/live", page(pages.overview_live), methods=["GET"]),
        Route("/ui/payments", page(pages.payments), methods=["GET"]),
        Route("/ui/payments/{source}/{object_id:path}", page(pages.payment), methods=["GET"]),
        Route("/ui/events", page(pages.events), methods=["GET"]),
        Route("/ui/events/{id}", page(pages.event), methods=["GET"]),
        Route(
            "/ui/events/{id}/replay", act("event.replay", actions.replay_event), methods=["POST"]
        ),
        Route("/ui/dlq", page(pages.dlq), methods=["GET"]),
        Route("/ui/dlq/preview", page(actions.preview_dlq), methods=["GET"]),
        Route("/ui/dlq/replay", act("dlq.replay", actions.replay_dlq), methods=["POST"]),
        Route("/ui/destinations", page(pages.destinations), methods=["GET"]),
        Route("/ui/destinations/{name}", page(pages.destination), methods=["GET"]),
        *[
            Route(
                f"/ui/destinations/{{name}}/{verb}",
                act(f"destination.{verb}", actions.destination(verb)),
                methods=["POST"],
            )
            for verb in ("pause", "resume", "redrive")
        ],
        Route("/ui/reconciliation", page(pages.reconciliation), methods=["GET"]),
        Route("/ui/reconciliation/{id}", page(pages.report), methods=["GET"]),
        Route(
            "/ui/reconciliation/{id}/ingest",
            act("reconcile.ingest", actions.ingest_missing),
            methods=["POST"],
        ),
        Route("/ui/quarantine", page(pages.quarantine), methods=["GET"]),
        Route("/ui/audit", page(pages.audit), methods=["GET"]),
        Mount("/ui/static", StaticFiles(packages=[("porteiro.ui", "static")]), name="ui-static"),
    ]
