"""The connection port (store/port.py) on the SQLite store: reads on its thread, writes
in one IMMEDIATE transaction there (the store's `_fetch` / `_write`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from porteiro.store.dialect import SQLITE, Dialect
from porteiro.store.port import Params, Queries
from porteiro.store.rows import Row
from porteiro.store.sqlite.executor import run_inline

T = TypeVar("T")

Fetch = Callable[[str, Params], Awaitable[list[Any]]]
Write = Callable[..., Awaitable[Any]]


class SqlitePort:
    def __init__(self, fetch: Fetch, write: Write, wake: Callable[[], None]) -> None:
        self._fetch, self._write, self._wake = fetch, write, wake

    @property
    def dialect(self) -> Dialect:
        return SQLITE

    async def fetch(self, sql: str, params: Params) -> Sequence[Row]:
        found: list[Row] = await self._fetch(SQLITE.render(sql), params)
        return found

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        found = await self.fetch(sql, params)
        return found[0] if found else None

    async def execute(self, sql: str, params: Params) -> int:
        changed: int = await self._write(_rowcount, SQLITE.render(sql), params)
        return changed

    async def execute_many(self, sql: str, params: Sequence[Params]) -> None:
        if params:
            await self._write(_execute_many, SQLITE.render(sql), params)

    async def write_returning(self, sql: str, params: Sequence[Params]) -> Sequence[Row]:
        if not params:
            return []
        found: list[Row] = await self._write(_each, SQLITE.render(sql), params)
        return found

    async def transaction(self, work: Callable[[Queries], Awaitable[T]]) -> T:
        done: T = await self._write(_inline, work)
        return done

    async def wake_workers(self) -> None:
        self._wake()


class _InTransaction:
    """Queries on the store's thread inside `_write`'s transaction: async to share the
    verbs' code, synchronous underneath (run_inline drives them)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def fetch(self, sql: str, params: Params) -> Sequence[Row]:
        found: list[Row] = self._db.execute(SQLITE.render(sql), params).fetchall()
        return found

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        found = await self.fetch(sql, params)
        return found[0] if found else None

    async def execute(self, sql: str, params: Params) -> int:
        return _rowcount(self._db, SQLITE.render(sql), params)


# -- on the store's thread, inside the transaction `_write` opened -----------------------


def _rowcount(db: sqlite3.Connection, sql: str, params: Params) -> int:
    return db.execute(sql, params).rowcount


def _execute_many(db: sqlite3.Connection, sql: str, params: Sequence[Params]) -> None:
    db.executemany(sql, params)


def _each(db: sqlite3.Connection, sql: str, params: Sequence[Params]) -> list[sqlite3.Row]:
    found: list[sqlite3.Row] = []
    for one in params:
        found.extend(db.execute(sql, one).fetchall())
    return found


def _inline(db: sqlite3.Connection, work: Callable[[Queries], Awaitable[T]]) -> T:
    return run_inline(work(_InTransaction(db)), _suspended)


def _suspended() -> Exception:
    return RuntimeError("a SQLite transaction's work awaited something besides its queries")
