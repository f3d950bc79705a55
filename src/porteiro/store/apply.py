"""The callbacks' types: what an applied event's in-process handlers get from the store.

`apply_many` runs each event's handlers inside the event's part of the transaction, on
the store's own connection, wrapped in an `Executor`. The store defines that contract
here (and the merchant-facing `porteiro.handlers` builds on it), so the store depends on
nothing above it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from porteiro.errors import PorteiroError
from porteiro.model import Outcome

# Placeholders are psycopg style on both stores: `%s` with a sequence, `%(name)s` with a
# mapping (SQLite's executor rewrites them).
Params = Sequence[Any] | Mapping[str, Any]


class HandlerFailed(PorteiroError):
    """A handler raised: its event rolls back and retries (the message names the handler)."""


@dataclass(frozen=True, slots=True)
class Result:
    """What `ctx.execute` returns: rows as dicts (empty for writes) and the row count."""

    rowcount: int
    rows: list[dict[str, Any]] = field(default_factory=list)


class Executor(Protocol):
    """The store's connection inside the ledger transaction (built by the store)."""

    @property
    def dialect(self) -> str: ...

    async def execute(self, sql: str, params: Params = ()) -> Result: ...


# An event's handlers, called with the ledger's outcome and the store's connection.
Handle = Callable[[Outcome, Executor], Awaitable[None]]
