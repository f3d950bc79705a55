"""Idempotent creates as the gateways implement them, and the "lost response" fault.

`IdempotentCreates.run(key, params, create)`: the first request with a key runs `create`
and stores its status and body; the same key with the same params answers that stored
response again (Stripe: "including 500s"); the same key with other params is a mismatch;
the same key while the first is still running is a conflict. The caller maps mismatch and
conflict onto the gateway's own error shape.

`lose_response` emulates a create whose answer never arrives: the work is committed, then
the connection is closed with no response (uvicorn; elsewhere the request just hangs until
the client gives up, which a client sees as a timeout).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

RAW_SEND = "porteiro.fake.raw_send"


class Verdict(StrEnum):
    CREATED = "created"
    REPLAYED = "replayed"
    MISMATCH = "mismatch"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class Answer:
    verdict: Verdict
    status: int = 0
    body: Any = None


def fingerprint(params: Any) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


class IdempotentCreates:
    def __init__(self) -> None:
        self._done: dict[str, tuple[str, int, Any]] = {}
        self._running: dict[str, str] = {}
        self.lose_next = 0  # creates whose response is lost after the commit
        self.delay_seconds = 0.0  # time a create stays in flight

    async def run(
        self, key: str, params: Any, create: Callable[[], Awaitable[tuple[int, Any]]]
    ) -> Answer:
        print_ = fingerprint(params)
        stored = self._done.get(key)
        if stored is not None:
            if stored[0] != print_:
                return Answer(Verdict.MISMATCH)
            return Answer(Verdict.REPLAYED, stored[1], stored[2])
        if key in self._running:
            return Answer(Verdict.MISMATCH if self._running[key] != print_ else Verdict.CONFLICT)
        self._running[key] = print_
        try:
            if self.delay_seconds > 0:
                await asyncio.sleep(self.delay_seconds)
            status, body = await create()
            self._done[key] = (print_, status, body)
        finally:
            del self._running[key]
        return Answer(Verdict.CREATED, status, body)

    def take_lost(self) -> bool:
        """Whether this create's response is to be lost (consumes one)."""
        if self.lose_next <= 0:
            return False
        self.lose_next -= 1
        return True


async def respond(
    creates: IdempotentCreates,
    request: Request,
    key: str | None,
    params: Any,
    create: Callable[[], Awaitable[tuple[int, Any]]],
    refuse: Callable[[Verdict], Response],
    replay_headers: dict[str, str] | None = None,
) -> Response:
    """Run a create with the gateway's idempotency semantics and answer it (or lose the
    answer, when the lost-response fault is armed)."""
    if key is None:
        status, body = await create()
        verdict = Verdict.CREATED
    else:
        answer = await creates.run(key, params, create)
        if answer.verdict in (Verdict.MISMATCH, Verdict.CONFLICT):
            return refuse(answer.verdict)
        status, body, verdict = answer.status, answer.body, answer.verdict
    if verdict is Verdict.CREATED and creates.take_lost():
        return LostResponse()
    headers = dict(replay_headers or {}) if verdict is Verdict.REPLAYED else {}
    return JSONResponse(body, status_code=status, headers=headers)


class LostResponse(Response):
    """No answer at all: the connection is closed."""

    def __init__(self) -> None:
        super().__init__(b"", status_code=599)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await lose_response(scope, receive)


class KeepRawSend:
    """Outermost ASGI wrapper: remembers the server's own `send` in the scope, so a
    LostResponse can reach the connection under Starlette's wrapped `send`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[RAW_SEND] = send
        await self.app(scope, receive, send)


async def lose_response(scope: Scope, receive: Receive) -> None:
    """Close the client's connection without answering (after the work was committed)."""
    cycle = getattr(scope.get(RAW_SEND), "__self__", None)  # uvicorn's RequestResponseCycle
    transport = getattr(cycle, "transport", None)
    if transport is not None:
        transport.close()
    while True:  # returns once the server saw the disconnect (nothing is sent then)
        message = await receive()
        if message["type"] == "http.disconnect":
            return
