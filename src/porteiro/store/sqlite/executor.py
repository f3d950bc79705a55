"""SQLite: the connection a handler's `ctx.execute` runs on, inside the event's savepoint.

The transaction runs synchronously on the store's thread, so the handlers' coroutines are
driven without an event loop: `ctx.execute` never really suspends underneath.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from porteiro.store.apply import HandlerFailed, Params, Result

T = TypeVar("T")

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")


def sqlite_placeholders(sql: str) -> str:
    """`%s` -> `?`, `%(name)s` -> `:name`, `%%` -> `%`: one placeholder style for both."""

    def swap(match: re.Match[str]) -> str:
        text = match.group(0)
        if text == "%%":
            return "%"
        return "?" if text == "%s" else f":{match.group(1)}"

    return _PLACEHOLDER.sub(swap, sql)


def _handler_suspended() -> Exception:
    return HandlerFailed(
        "a handler awaited something other than ctx.execute inside the ledger transaction"
    )


def run_inline(
    awaitable: Awaitable[T], suspended: Callable[[], Exception] = _handler_suspended
) -> T:
    """Drive an awaitable that never really suspends (SQLite handlers: `ctx.execute` is
    synchronous underneath) without an event loop, on the store's thread; `suspended()`
    is raised when it does suspend."""
    steps = awaitable.__await__()
    try:
        steps.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    close = getattr(steps, "close", None)
    if close is not None:
        close()
    raise suspended()


class SqliteExecutor:
    """`ctx.execute` on the store's connection, inside the current savepoint."""

    dialect = "sqlite"

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def execute(self, sql: str, params: Params = ()) -> Result:
        cursor = self._db.execute(sqlite_placeholders(sql), params)
        found: list[Any] = cursor.fetchall() if cursor.description else []
        names = [column[0] for column in cursor.description or ()]
        return Result(cursor.rowcount, [dict(zip(names, row, strict=True)) for row in found])
