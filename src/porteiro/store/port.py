"""The connection port: the few async calls the cold verbs (reconcile, idempotency keys,
the outbox's operator verbs) are written over, once for both stores. Each store offers
it on its own connection (store/sqlite/port.py, store/postgres/port.py); queries are written
in the port's dialect (store/dialect.py) and rendered by the port.

Every call is its own transaction (a write is committed when it returns), except inside
`transaction`, and raises StoreUnavailable when the database cannot be reached, as the
store's other calls do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from porteiro.store.dialect import Dialect
from porteiro.store.rows import Row

T = TypeVar("T")
Params = dict[str, Any]


class Queries(Protocol):
    async def fetch(self, sql: str, params: Params) -> Sequence[Row]:
        """Every row of one query, as mappings by column name."""

    async def fetch_one(self, sql: str, params: Params) -> Row | None:
        """The first row of one query, or None."""

    async def execute(self, sql: str, params: Params) -> int:
        """One write: how many rows it changed."""


class Port(Queries, Protocol):
    @property
    def dialect(self) -> Dialect: ...

    async def execute_many(self, sql: str, params: Sequence[Params]) -> None:
        """One write per parameter set, all in one transaction."""

    async def write_returning(self, sql: str, params: Sequence[Params]) -> Sequence[Row]:
        """One write with RETURNING per parameter set, all in one transaction: every row
        they returned, in order."""

    async def transaction(self, work: Callable[[Queries], Awaitable[T]]) -> T:
        """`work`'s queries in ONE transaction, committed when it returns (rolled back
        when it raises). `work` awaits nothing but its queries: on SQLite it runs on the
        store's thread, where nothing else can be awaited."""

    async def wake_workers(self) -> None:
        """Tell idle workers that new events may be due (after the commit)."""
