"""One fake gateway run: the gateway's truth, its emitter and its HTTP app together.

`FakeServer(provider, scenario, settings)` plans the truth at once (so `/_fake/state` and
the API answer from the first request on) and starts emitting webhooks when the app
starts (or on `POST /_fake/start` with `hold`). `app()` is a plain ASGI app: serve it
with uvicorn (`porteiro fake-provider`) or in a test with tests/live_server.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette

from porteiro.errors import ConfigError
from porteiro.fakes.control import build_app, control_routes
from porteiro.fakes.core import FakeGateway, Settings
from porteiro.fakes.emitter import Emitter
from porteiro.fakes.idempotency import KeepRawSend
from porteiro.fakes.scenario import Scenario

# provider name -> "module:class" (imported on demand)
GATEWAYS: Mapping[str, str] = {
    "stripe": "porteiro.fakes.stripe:FakeStripe",
    "pix": "porteiro.fakes.pix:FakePix",
    "mercadopago": "porteiro.fakes.mercadopago:FakeMercadoPago",
    "pagarme": "porteiro.fakes.pagarme:FakePagarme",
    "adyen": "porteiro.fakes.adyen:FakeAdyen",
}


def gateway_class(provider: str) -> type[FakeGateway]:
    try:
        module_name, _, class_name = GATEWAYS[provider].partition(":")
    except KeyError:
        known = ", ".join(sorted(GATEWAYS))
        raise ConfigError(f"unknown fake provider {provider!r} (known: {known})") from None
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, FakeGateway)):
        raise ConfigError(f"{GATEWAYS[provider]} is not a fake gateway")
    return cls


class FakeServer:
    def __init__(
        self,
        provider: str,
        scenario: Scenario,
        settings: Settings,
        *,
        start: datetime | None = None,
    ) -> None:
        self.gateway = gateway_class(provider)(scenario, settings, start or datetime.now(UTC))
        self.steps = self.gateway.plan()
        self.emitter = Emitter(self.gateway, scenario)
        self._task: asyncio.Task[None] | None = None
        if not settings.hold:
            self.emitter.start()

    def state(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        return {
            "provider": self.gateway.name,
            "payments": self.gateway.state_json(now),
            "webhooks": self.emitter.state(),
            "done": self.emitter.done,
        }

    def faults(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Arm API faults: `lose_create_responses` (int), `create_delay_ms` (int)."""
        creates = self.gateway.creates
        for key in body:
            if key not in ("lose_create_responses", "create_delay_ms"):
                raise ValueError(f"unknown fault {key!r}")
        lost, delay = body.get("lose_create_responses"), body.get("create_delay_ms")
        for name, value in (("lose_create_responses", lost), ("create_delay_ms", delay)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{name} must be a whole number")
        if isinstance(lost, int):
            creates.lose_next = lost
        if isinstance(delay, int):
            creates.delay_seconds = delay / 1000.0
        return {
            "lose_create_responses": creates.lose_next,
            "create_delay_ms": int(creates.delay_seconds * 1000),
        }

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Emit webhooks while the context is open (the app's lifespan uses it)."""
        self._task = asyncio.create_task(self.emitter.run(self.steps))
        try:
            yield
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_done(self) -> None:
        await self.emitter.wait_done()

    def starlette(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            async with self.running():
                yield

        control = control_routes(
            self.state, self.emitter.start, lambda: self.emitter.done, self.faults
        )
        return build_app([*control, *self.gateway.routes()], lifespan=lifespan)

    def app(self) -> KeepRawSend:
        return KeepRawSend(self.starlette())
