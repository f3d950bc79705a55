"""Pages from the package's Jinja2 templates, with the headers every console answer has.

Autoescaping is on for every template and undefined names fail (StrictUndefined): a
value from a gateway (a reference, a header, a body) is always text on the page, never
markup. The Content-Security-Policy allows scripts and styles from /ui/static only: no
inline script, no inline style, no eval (htmx is configured without it in base.html).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from porteiro.config import UiConfig
from porteiro.ui import format
from porteiro.ui.labels import labels

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    # Pages show payments and raw deliveries: no copy kept by a browser or a proxy.
    "Cache-Control": "no-store",
}


def secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


class Renderer:
    def __init__(self, ui: UiConfig) -> None:
        self._environment = jinja2.Environment(
            loader=jinja2.PackageLoader("porteiro.ui", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=["jinja2.ext.do"],
        )
        self.zone = ZoneInfo(ui.timezone)
        self.language = ui.language
        t = labels(ui.language)
        language, zone = ui.language, self.zone
        self._environment.globals.update(
            t=t,
            language=language,
            timezone=ui.timezone,
            money=lambda amount, currency: format.money(amount, currency, language),
            when=lambda value: format.local_time(value, zone),
            iso=format.iso,
            age=format.age,
            age_since=format.age_since,
            percent=lambda ratio: format.percent(ratio, language),
            ms=format.milliseconds,
        )

    def page(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any],
        *,
        status: int = 200,
        now: datetime | None = None,
    ) -> Response:
        """The template rendered with `context` and the request's viewer (request.state);
        an htmx request for a page's part gets the part alone where the template has one."""
        values = {
            "request": request,
            "viewer": getattr(request.state, "viewer", None),
            "htmx": request.headers.get("hx-request") == "true",
            "now": now,
            **context,
        }
        html = self._environment.get_template(template).render(values)
        return secure(HTMLResponse(html, status_code=status))

    def problem(self, request: Request, status: int, message: str) -> Response:
        """A page (or, to htmx, a fragment) saying what went wrong, in the console's words."""
        return self.page(request, "problem.html", {"message": message}, status=status)
