"""The connection port (store/port.py) on the PostgreSQL store: each call on a pooled
connection (the store's `_connection`, autocommit), several statements pipelined inside
one transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from porteiro.store import pg_queries as q
from porteiro.store.dialect import POSTGRES, Dialect
from porteiro.store.port import Params
from porteiro.store.rows import Row

Connection = AsyncConnection[DictRow]


class PgPort:
    def __init__(self, connection: Callable[[], AbstractAsyncContextManager[Connection]]) -> None:
        self._connection = connection

    @property
    def dialect(self) -> Dialect:
        return POSTGRES

    async def fetch(self, sql: str, params: Params) -> Sequence[Row]:
        async with self._connection() as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall()

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        async with self._connection() as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchone()

    async def execute(self, sql: str, params: Params) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(sql, params)
            return cursor.rowcount

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

    async def wake_workers(self) -> None:
        async with self._connection() as conn:
            await conn.execute(q.NOTIFY)
