"""The connection port (store/port.py) on the PostgreSQL store: each call on a pooled
connection (the store's `_connection`, autocommit), several statements pipelined inside
one transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from porteiro.store.dialect import POSTGRES, Dialect
from porteiro.store.port import Params, Queries
from porteiro.store.postgres import queries as q
from porteiro.store.rows import Row

T = TypeVar("T")
Connection = AsyncConnection[DictRow]


class PgPort:
    def __init__(self, connection: Callable[[], AbstractAsyncContextManager[Connection]]) -> None:
        self._connection = connection

    @property
    def dialect(self) -> Dialect:
        return POSTGRES

    async def fetch(self, sql: str, params: Params) -> Sequence[Row]:
        async with self._connection() as conn:
            return await _OnConnection(conn).fetch(sql, params)

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        async with self._connection() as conn:
            return await _OnConnection(conn).fetch_one(sql, params)

    async def execute(self, sql: str, params: Params) -> int:
        async with self._connection() as conn:
            return await _OnConnection(conn).execute(sql, params)

    async def execute_many(self, sql: str, params: Sequence[Params]) -> None:
        if not params:
            return
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.executemany(sql, params)

    async def write_returning(self, sql: str, params: Sequence[Params]) -> Sequence[Row]:
        if not params:
            return []
        if len(params) == 1:  # one statement: its own transaction (autocommit)
            return await self.fetch(sql, params[0])
        found: list[Row] = []
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.executemany(sql, params, returning=True)
            async for result in cursor.results():
                found.extend(await result.fetchall())
        return found

    async def transaction(self, work: Callable[[Queries], Awaitable[T]]) -> T:
        async with self._connection() as conn, conn.transaction():
            return await work(_OnConnection(conn))

    async def wake_workers(self) -> None:
        async with self._connection() as conn:
            await conn.execute(q.NOTIFY)


class _OnConnection:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def fetch(self, sql: str, params: Params) -> Sequence[Row]:
        cursor = await self._conn.execute(sql, params)
        return await cursor.fetchall()

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        cursor = await self._conn.execute(sql, params)
        return await cursor.fetchone()

    async def execute(self, sql: str, params: Params) -> int:
        cursor = await self._conn.execute(sql, params)
        return cursor.rowcount
