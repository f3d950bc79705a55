"""Who calls the admin API, and what they may do (docs/api.md, Authentication and roles).

A caller presents `Authorization: Bearer <token>`: `[admin] token` (an `operate` token
named `admin`) or one of `[admin.tokens.NAME]`, each with its role. Every route says what
it does: `read` (lists, shows) or `operate` (replay, DLQ replay, redrive, pause, resume).
A `read` token on an operate route gets a 403 and nothing happens. Each operate request
of a known caller is audited once (porteiro.audit): after its action, with how many
rows it changed (`ok`), or with nothing changed when refused (`forbidden` for the role,
`rejected` for a bad request or an unknown target), so an attempt beyond one's role
is on record too. Unauthenticated requests (401) are not: there is no one to name, and a
scanner must not be able to fill the table.

Tokens are compared in constant time, every one of them on each request; their values
are never logged, stored nor echoed.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from porteiro import audit
from porteiro.config import LEGACY_TOKEN_NAME, Config
from porteiro.errors import StoreUnavailable
from porteiro.http.params import BadRequest
from porteiro.http.receiver import BodyTooLarge, body_too_large, json_error
from porteiro.observability import logger
from porteiro.runtime import Runtime
from porteiro.store.audit import AuditEntry

READ, OPERATE = "read", "operate"
MAX_ADMIN_BODY = 1024 * 1024

Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Caller:
    name: str
    role: str


@dataclass(frozen=True, slots=True)
class Operated:
    """What an operate handler did: its answer, how many rows (events, outbox rows,
    destinations) it changed, and the selection it was given, for the audit row."""

    response: Response
    affected: int = 0
    parameters: Mapping[str, Any] = field(default_factory=dict)


OperateHandler = Callable[[Request], Awaitable[Operated]]


def bearer(request: Request) -> bytes | None:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip().encode("utf-8") if scheme.lower() == "bearer" else None


class Tokens:
    """The configured admin tokens, by value, with whose they are."""

    def __init__(self, config: Config) -> None:
        entries = [
            (named.token.encode("utf-8"), Caller(named.name, named.role))
            for named in config.admin.tokens.values()
        ]
        if config.admin_token is not None:
            entries.append((config.admin_token.encode("utf-8"), Caller(LEGACY_TOKEN_NAME, OPERATE)))
        self._entries = tuple(entries)

    @property
    def configured(self) -> bool:
        return bool(self._entries)

    def named(self, name: str) -> tuple[bytes, Caller] | None:
        """The token of that name and whose it is (the console's session key comes from
        it, porteiro.ui.session); None once the token is gone from the configuration."""
        for token, caller in self._entries:
            if caller.name == name:
                return token, caller
        return None

    def caller(self, presented: bytes | None) -> Caller | None:
        if presented is None:
            return None
        found = None
        # No early exit: the time taken says nothing of which token matched, if any.
        for token, caller in self._entries:
            if hmac.compare_digest(presented, token):
                found = caller
        return found


class Guard:
    """Wraps the admin routes' handlers: `read(handler)`, `operate(action, handler)`."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._tokens = Tokens(runtime.config)
        self._retry_after = {"Retry-After": str(runtime.config.server.retry_after_seconds)}

    def _caller(self, request: Request) -> Caller | Response:
        if not self._tokens.configured:
            return json_error(503, "admin API disabled: set [admin] token")
        caller = self._tokens.caller(bearer(request))
        if caller is None:
            return json_error(401, "missing or invalid admin token", {"WWW-Authenticate": "Bearer"})
        return caller

    def _failure(self, error: Exception) -> Response:
        if isinstance(error, BodyTooLarge):
            return body_too_large(MAX_ADMIN_BODY)
        if isinstance(error, BadRequest):
            return json_error(400, str(error))
        return json_error(503, "store unavailable", self._retry_after)

    def read(self, handler: Endpoint) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            caller = self._caller(request)
            if isinstance(caller, Response):
                return caller
            try:
                return await handler(request)
            except (BodyTooLarge, BadRequest, StoreUnavailable) as error:
                return self._failure(error)

        endpoint.__name__ = handler.__name__
        return endpoint

    def operate(self, action: str, handler: OperateHandler) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            caller = self._caller(request)
            if isinstance(caller, Response):
                return caller
            given = dict(request.path_params)
            if caller.role != OPERATE:
                await self._audit(caller, action, Operated(_forbidden(caller), 0, given))
                return _forbidden(caller)
            try:
                done = await handler(request)
            except StoreUnavailable as error:
                return self._failure(error)  # the store the audit row would go to is down
            except (BodyTooLarge, BadRequest) as error:
                done = Operated(self._failure(error), 0, given)
            await self._audit(caller, action, done)
            return done.response

        endpoint.__name__ = handler.__name__
        endpoint.audit_action = action  # type: ignore[attr-defined]
        return endpoint

    async def _audit(self, caller: Caller, action: str, done: Operated) -> None:
        await audit_operation(self._runtime, caller, action, done)


async def audit_operation(runtime: Runtime, caller: Caller, action: str, done: Operated) -> None:
    """The audit row of one operator action, by its answer's status: `ok`, `forbidden`
    (403) or `rejected` (another 4xx). The API's and the console's actions alike."""
    status = done.response.status_code
    outcome = "ok" if status < 400 else "forbidden" if status == 403 else "rejected"
    entry = AuditEntry(caller.name, action, done.parameters, done.affected, outcome)
    try:
        await audit.record(runtime.store, entry, runtime.clock())
    except StoreUnavailable:
        # The action is done (or refused) either way: its answer still goes back, and
        # this line keeps the record the table could not take.
        logger().error(
            "audit.unrecorded", action="audit.unrecorded", audit_action=action,
            token_name=caller.name, affected=done.affected, outcome=outcome,
        )  # fmt: skip


def _forbidden(caller: Caller) -> Response:
    return json_error(403, f"this token's role is {caller.role}; this route needs {OPERATE}")


def audit_action(endpoint: object) -> str | None:
    """The audit action an operate route's endpoint records (None: a read route)."""
    value = getattr(endpoint, "audit_action", None)
    return value if isinstance(value, str) else None


def metrics_guard(config: Config, metrics: Endpoint) -> Endpoint:
    """/metrics as is, or, with `[admin] metrics_token`, only for `Bearer <that token>`
    (a scraper's token, apart from the admin ones: it can read counts, nothing else)."""
    if config.admin.metrics_token is None:
        return metrics
    expected = config.admin.metrics_token.encode("utf-8")

    async def endpoint(request: Request) -> Response:
        presented = bearer(request)
        if presented is None or not hmac.compare_digest(presented, expected):
            return json_error(
                401, "missing or invalid metrics token", {"WWW-Authenticate": "Bearer"}
            )
        return await metrics(request)

    endpoint.__name__ = metrics.__name__
    return endpoint
