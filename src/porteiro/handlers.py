"""In-process handlers: merchant code that runs INSIDE the ledger transaction.

A merchant module (named by `[handlers] module = "shop.payments"`) registers `async def`
handlers per event kind, either on a `Handlers` object it exposes as `handlers`:

    handlers = porteiro.Handlers()

    @handlers.on("payment.paid")
    async def paid(ctx: porteiro.HandlerContext) -> None:
        await ctx.execute("UPDATE orders SET status = 'paid' WHERE reference = %s",
                          (ctx.reference,))

or with the module-level `@porteiro.on("payment.paid")` marker (the module itself is then
the registry: no global state), or with a `register(handlers)` function.

The transaction rule: `ctx.execute` runs on the store's own connection, in the
transaction that marks the event done, so the handler's writes commit atomically with it
(exactly-once effect). A handler that raises rolls its event back (nothing of it, nor its
outbox rows, is kept); the event retries under the worker's policy, then dead-letters.
Handlers may await ONLY `ctx.execute`: on SQLite the transaction runs synchronously on the
store's thread, so a handler awaiting anything else (network, sleep) fails its event.
Placeholders are `%s` / `%(name)s` on both stores (rewritten for SQLite).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from porteiro.errors import ConfigError
from porteiro.model import Kind, Outcome, ParsedEvent, Payment, Verdict

# The store's side of the contract: a handler's context wraps its Executor, and
# `ctx.execute` returns its Result. Re-exported: merchants' code imports them from here.
from porteiro.store.apply import Executor as Executor
from porteiro.store.apply import Handle
from porteiro.store.apply import HandlerFailed as HandlerFailed
from porteiro.store.apply import Params as Params
from porteiro.store.apply import Result as Result

ANY_KIND = "*"
# Verdicts whose event changed something: only these run handlers and fan out.
EFFECTIVE = frozenset({Verdict.APPLIED, Verdict.ANOMALOUS})
_MARK = "__porteiro_kinds__"


@dataclass(frozen=True, slots=True)
class HandlerContext:
    """What a handler sees: the canonical event, the payment after it, the connection."""

    event_id: int  # Porteiro's event row id (forwarded payloads carry docs/destinations.md's id)
    source: str
    event: ParsedEvent
    payment: Payment
    verdict: Verdict
    executor: Executor

    @property
    def kind(self) -> str:
        return self.event.kind.value

    @property
    def object_id(self) -> str | None:
        return self.event.object_id

    @property
    def reference(self) -> str | None:
        return self.event.reference or self.payment.reference

    @property
    def amount(self) -> int | None:
        return self.event.amount

    @property
    def currency(self) -> str | None:
        return self.event.currency

    @property
    def dialect(self) -> str:
        """Which store runs the transaction: `sqlite` or `postgresql`."""
        return self.executor.dialect

    async def execute(self, sql: str, params: Params = ()) -> Result:
        return await self.executor.execute(sql, params)


Handler = Callable[[HandlerContext], Awaitable[None]]
H = TypeVar("H", bound=Handler)


def _check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    allowed = {kind.value for kind in Kind} | {ANY_KIND}
    wrong = sorted(set(kinds) - allowed)
    if not kinds or wrong:
        raise ValueError(f"handlers need kinds among {sorted(allowed)}; got {list(kinds)}")
    return tuple(kinds)


def _check_handler(handler: Callable[..., Any]) -> None:
    if not inspect.iscoroutinefunction(handler):
        name = getattr(handler, "__qualname__", repr(handler))
        raise TypeError(f"handler {name} must be an `async def` function")


class Handlers:
    """A registry of handlers per event kind (`"*"`: every kind)."""

    def __init__(self) -> None:
        self._by_kind: dict[str, list[Handler]] = {}

    def on(self, *kinds: str) -> Callable[[H], H]:
        checked = _check_kinds(kinds)

        def register(handler: H) -> H:
            for kind in checked:
                self.add(kind, handler)
            return handler

        return register

    def add(self, kind: str, handler: Handler) -> None:
        _check_kinds([kind])
        _check_handler(handler)
        self._by_kind.setdefault(kind, []).append(handler)

    def for_kind(self, kind: str) -> list[Handler]:
        """Registration order: the kind's own handlers, then the catch-all ones."""
        return [*self._by_kind.get(kind, ()), *self._by_kind.get(ANY_KIND, ())]

    def __len__(self) -> int:
        return sum(len(handlers) for handlers in self._by_kind.values())

    async def dispatch(self, ctx: HandlerContext) -> None:
        for handler in self.for_kind(ctx.kind):
            try:
                await handler(ctx)
            except Exception as exc:
                name = f"{handler.__module__}.{handler.__qualname__}"
                raise HandlerFailed(f"{name}: {type(exc).__name__}: {exc}") from exc


def on(*kinds: str) -> Callable[[H], H]:
    """Mark a module-level handler; `load_handlers` collects the marked functions of the
    configured module (the module is the registry: nothing global)."""
    checked = _check_kinds(kinds)

    def mark(handler: H) -> H:
        _check_handler(handler)
        setattr(handler, _MARK, (*getattr(handler, _MARK, ()), *checked))
        return handler

    return mark


def from_module(module: ModuleType) -> Handlers:
    """A module's handlers: its `handlers` object, its `register(handlers)`, and/or its
    functions marked with `@porteiro.on`."""
    found = getattr(module, "handlers", None)
    handlers = found if isinstance(found, Handlers) else Handlers()
    register = getattr(module, "register", None)
    if callable(register):
        register(handlers)
    for value in vars(module).values():
        for kind in getattr(value, _MARK, ()) if callable(value) else ():
            handlers.add(kind, value)
    return handlers


def load_handlers(module_name: str) -> Handlers:
    """Import the configured module (ConfigError if absent or if it registers nothing)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"[handlers] module {module_name!r} cannot be imported: {exc}") from exc
    handlers = from_module(module)
    if not handlers:
        raise ConfigError(f"[handlers] module {module_name!r} registers no handler")
    return handlers


def handle_for(handlers: Handlers, event_id: int, source: str, event: ParsedEvent) -> Handle | None:
    """The store-side call for one event (None when no handler wants its kind); it runs
    the handlers only for an effective verdict."""
    if not handlers.for_kind(event.kind.value):
        return None

    async def handle(outcome: Outcome, executor: Executor) -> None:
        verdict = outcome.transition.verdict
        if verdict in EFFECTIVE:
            ctx = HandlerContext(event_id, source, event, outcome.payment, verdict, executor)
            await handlers.dispatch(ctx)

    return handle
