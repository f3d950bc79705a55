"""Who is looking at the console, and what they may do.

An operator logs in with one of the admin tokens (porteiro.http.admin_auth) and gets a
session cookie (porteiro.ui.session): HttpOnly, SameSite=Strict, Secure when the request
came over TLS, Path=/ui. Every page needs a session; every action (a POST) also needs the
session's CSRF token (form field `csrf` or header `X-CSRF-Token`, which htmx sends from
<body hx-headers>), a same-origin request, and an `operate` token. Each action of a
logged-in operator is audited exactly like the API's (`audit_operation`): done,
`forbidden` for a `read` token, `rejected` for a bad request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qsl, urlsplit

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from porteiro.errors import StoreUnavailable
from porteiro.http.admin_auth import OPERATE, Caller, Operated, Tokens, audit_operation
from porteiro.http.params import BadRequest
from porteiro.http.receiver import BodyTooLarge, read_capped
from porteiro.observability import logger
from porteiro.runtime import Runtime
from porteiro.ui import session as sessions
from porteiro.ui.render import Renderer

SESSION_COOKIE = "porteiro_session"
LOGIN_COOKIE = "porteiro_login"
COOKIE_PATH = "/ui"
# A form posts a few ids and filters: nothing near this.
MAX_FORM_BYTES = 64 * 1024
FORM_TYPE = "application/x-www-form-urlencoded"


@dataclass(frozen=True, slots=True)
class Viewer:
    caller: Caller
    session: sessions.Session
    csrf: str

    @property
    def can_operate(self) -> bool:
        return self.caller.role == OPERATE


Page = Callable[[Request, Viewer], Awaitable[Response]]
Action = Callable[[Request, Viewer, FormData], Awaitable[Operated]]
Endpoint = Callable[[Request], Awaitable[Response]]


class ConsoleGuard:
    def __init__(self, runtime: Runtime, renderer: Renderer) -> None:
        self._runtime = runtime
        self._tokens = Tokens(runtime.config)
        self._render = renderer
        self._lifetime = timedelta(hours=runtime.config.ui.session_hours)
        self._proxied = runtime.config.ui.behind_tls_proxy

    def secure(self, request: Request) -> bool:
        """Whether cookies get `Secure`: over TLS, or always behind a TLS-ending proxy."""
        return self._proxied or request.url.scheme == "https"

    @property
    def enabled(self) -> bool:
        """No admin token configured: no one can log in (the console says so)."""
        return self._tokens.configured

    # -- sessions ----------------------------------------------------------------------

    def login(self, presented: str, response: Response, request: Request) -> Caller | None:
        """Open a session for the token `presented`, as a cookie on `response`."""
        caller = self._tokens.caller(presented.strip().encode("utf-8"))
        if caller is None:
            return None
        named = self._tokens.named(caller.name)
        assert named is not None  # the token was just found by its value
        opened = sessions.new_session(caller.name, self._runtime.clock(), self._lifetime)
        response.set_cookie(
            SESSION_COOKIE,
            sessions.session_cookie(opened, named[0]),
            max_age=int(self._lifetime.total_seconds()),
            path=COOKIE_PATH,
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )
        return caller

    def logout(self, response: Response, request: Request) -> None:
        response.delete_cookie(
            SESSION_COOKIE,
            path=COOKIE_PATH,
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )

    def viewer(self, request: Request) -> Viewer | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        name = None if cookie is None else sessions.claimed_name(cookie)
        named = None if name is None else self._tokens.named(name)
        if cookie is None or named is None:
            return None
        token, caller = named
        opened = sessions.open_session(cookie, token, self._runtime.clock())
        if opened is None:
            return None
        return Viewer(caller, opened, sessions.csrf_token(opened, token))

    def csrf_ok(self, request: Request, viewer: Viewer, form: FormData) -> bool:
        presented = request.headers.get("x-csrf-token") or form.get("csrf")
        named = self._tokens.named(viewer.caller.name)
        return (
            named is not None
            and isinstance(presented, str)
            and sessions.csrf_matches(viewer.session, named[0], presented)
        )

    # -- wrappers ----------------------------------------------------------------------

    def page(self, handler: Page) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            viewer = self.viewer(request)
            if viewer is None:
                return _to_login(request)
            request.state.viewer = viewer
            try:
                return await handler(request, viewer)
            except BadRequest as error:
                return self.problem(request, 400, str(error))
            except StoreUnavailable:
                return self.unavailable(request)

        endpoint.__name__ = handler.__name__
        return endpoint

    def action(self, name: str, handler: Action) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            if not same_origin(request):
                return self.problem(request, 403, "cross-origin request refused")
            viewer = self.viewer(request)
            if viewer is None:
                if request.headers.get("hx-request") == "true":
                    return _to_login(request)  # the whole page goes to the login form
                return self.problem(request, 401, "log in again: the session has ended")
            request.state.viewer = viewer
            form = await form_of(request)
            if form is None:
                return self.problem(request, 413, "form too large")
            if not self.csrf_ok(request, viewer, form):
                logger().warning("ui.csrf_refused", action="ui.csrf_refused", ui_action=name)
                return self.problem(request, 403, "missing or wrong CSRF token")
            given = dict(request.path_params)
            if not viewer.can_operate:
                refused = self.problem(request, 403, "this token's role is read")
                await audit_operation(
                    self._runtime, viewer.caller, name, Operated(refused, 0, given)
                )
                return refused
            try:
                done = await handler(request, viewer, form)
            except StoreUnavailable:
                return self.unavailable(request)
            except BadRequest as error:
                done = Operated(self.problem(request, 400, str(error)), 0, given)
            await audit_operation(self._runtime, viewer.caller, name, done)
            return done.response

        endpoint.__name__ = handler.__name__
        endpoint.audit_action = name  # type: ignore[attr-defined]
        return endpoint

    def problem(self, request: Request, status: int, message: str) -> Response:
        return self._render.problem(request, status, message)

    def unavailable(self, request: Request) -> Response:
        response = self.problem(request, 503, "store unavailable")
        response.headers["Retry-After"] = str(self._runtime.config.server.retry_after_seconds)
        return response


def same_origin(request: Request) -> bool:
    """A browser says where a POST comes from (Sec-Fetch-Site, Origin): refuse another
    site's. A request with neither header (a script, curl) still needs the CSRF token."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def form_of(request: Request) -> FormData | None:
    """The posted form (application/x-www-form-urlencoded, as htmx and plain forms send
    it), read while counting; None past MAX_FORM_BYTES. Another encoding reads as empty:
    the CSRF check then refuses it."""
    try:
        raw = await read_capped(request, request.headers.get("content-length"), MAX_FORM_BYTES)
    except BodyTooLarge:
        return None
    if request.headers.get("content-type", "").split(";")[0].strip() != FORM_TYPE:
        return FormData()
    try:
        fields = parse_qsl(raw.decode("utf-8", errors="replace"), True, max_num_fields=200)
    except ValueError:  # too many fields
        return FormData()
    pairs: list[tuple[str, str | UploadFile]] = list(fields)
    return FormData(pairs)


def _to_login(request: Request) -> Response:
    if request.headers.get("hx-request") == "true":
        # htmx follows a redirect inside the fragment: ask it for a full page instead.
        return Response(status_code=204, headers={"HX-Redirect": "/ui/login"})
    return RedirectResponse("/ui/login", status_code=303)
