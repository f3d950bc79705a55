"""Logging in and out of the console. The login form is guarded by a double-submit value
(a random cookie the form echoes) since there is no session yet to hold a CSRF token; a
failed login is logged without what was typed."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from porteiro.observability import logger
from porteiro.ui import session as sessions
from porteiro.ui.guard import COOKIE_PATH, LOGIN_COOKIE, ConsoleGuard, form_of, same_origin
from porteiro.ui.render import Renderer


class Login:
    def __init__(self, guard: ConsoleGuard, renderer: Renderer) -> None:
        self._guard = guard
        self._render = renderer

    def _form(self, request: Request, status: int = 200, error: str | None = None) -> Response:
        nonce = sessions.login_nonce()
        response = self._render.page(
            request,
            "login.html",
            {"nonce": nonce, "error": error, "enabled": self._guard.enabled},
            status=status,
        )
        response.set_cookie(
            LOGIN_COOKIE, nonce, max_age=3600, path=COOKIE_PATH,
            secure=self._guard.secure(request), httponly=True, samesite="strict",
        )  # fmt: skip
        return response

    async def form(self, request: Request) -> Response:
        if self._guard.viewer(request) is not None:
            return RedirectResponse("/ui/", status_code=303)
        return self._form(request)

    async def submit(self, request: Request) -> Response:
        form = await form_of(request)
        if not same_origin(request) or form is None:
            return self._form(request, 403, "refused")
        if not sessions.nonces_match(request.cookies.get(LOGIN_COOKIE), _text(form.get("nonce"))):
            return self._form(request, 403, "the form expired: try again")
        response = RedirectResponse("/ui/", status_code=303)
        caller = self._guard.login(_text(form.get("token")) or "", response, request)
        if caller is None:
            logger().warning("ui.login_failed", action="ui.login_failed", peer=_peer(request))
            return self._form(request, 401, "unknown token")
        response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
        logger().info("ui.login", action="ui.login", token_name=caller.name, role=caller.role)
        return response

    async def logout(self, request: Request) -> Response:
        viewer = self._guard.viewer(request)
        form = await form_of(request)
        response = RedirectResponse("/ui/login", status_code=303)
        if viewer is not None and form is not None and self._guard.csrf_ok(request, viewer, form):
            logger().info("ui.logout", action="ui.logout", token_name=viewer.caller.name)
            self._guard.logout(response, request)
            return response
        # No session, or a logout not from the console's own form: nothing to end.
        return response


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _peer(request: Request) -> str | None:
    return None if request.client is None else request.client.host
