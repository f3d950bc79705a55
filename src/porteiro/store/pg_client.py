"""IdempotencyStore for PostgreSQL: a mixin of PostgresStore (uses its `_connection` /
`_fetch`). The pool runs in autocommit, so each statement below is its own committed
transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from porteiro.store.client import IdempotencyKey, KeyState, key_from_row

_COLUMNS: Final = """source, key, operation, fingerprint, request, state, attempts,
    response_status, response_body, object_id, last_error, expected_at, created_at,
    updated_at"""

# One round trip: insert if new, then read whichever row is there now.
BEGIN: Final = f"""
WITH inserted AS (
    INSERT INTO idempotency_keys
        (source, key, operation, fingerprint, request, state, created_at, updated_at)
    VALUES (%(source)s, %(key)s, %(operation)s, %(fingerprint)s, %(request)s, 'pending',
            %(now)s, %(now)s)
    ON CONFLICT (source, key) DO NOTHING
    RETURNING {_COLUMNS}
)
SELECT true AS inserted, {_COLUMNS} FROM inserted
UNION ALL
SELECT false AS inserted, {_COLUMNS} FROM idempotency_keys
WHERE source = %(source)s AND key = %(key)s AND NOT EXISTS (SELECT 1 FROM inserted)"""

GET_KEY: Final = f"SELECT {_COLUMNS} FROM idempotency_keys WHERE source = %s AND key = %s"

START_ATTEMPT: Final = """
UPDATE idempotency_keys SET attempts = attempts + 1, updated_at = %s
WHERE source = %s AND key = %s AND state = 'pending'"""

NOTE_ERROR: Final = """
UPDATE idempotency_keys SET last_error = %s, updated_at = %s
WHERE source = %s AND key = %s AND state = 'pending'"""

FINISH: Final = """
UPDATE idempotency_keys
SET state = %s, response_status = %s, response_body = %s, object_id = %s,
    last_error = COALESCE(%s, last_error),
    updated_at = %s
WHERE source = %s AND key = %s AND state = 'pending'"""

MARK_EXPECTED: Final = """
UPDATE idempotency_keys SET expected_at = %s, updated_at = %s WHERE source = %s AND key = %s"""

PENDING: Final = f"""
SELECT {_COLUMNS} FROM idempotency_keys
WHERE state = 'pending' AND (%(source)s::text IS NULL OR source = %(source)s)
  AND (%(before)s::timestamptz IS NULL OR updated_at < %(before)s)
ORDER BY updated_at, source, key
LIMIT %(limit)s"""


class IdempotencyPgMixin:
    if TYPE_CHECKING:  # provided by PostgresStore

        def _connection(self) -> AbstractAsyncContextManager[AsyncConnection[DictRow]]: ...

        async def _fetch(
            self, query: Any, params: Sequence[Any] | dict[str, Any]
        ) -> list[DictRow]: ...

    async def begin_idempotency_key(
        self,
        source: str,
        key: str,
        *,
        operation: str,
        fingerprint: str,
        request: Mapping[str, Any],
        now: datetime,
    ) -> tuple[IdempotencyKey, bool]:
        params = {
            "source": source,
            "key": key,
            "operation": operation,
            "fingerprint": fingerprint,
            "request": Jsonb(dict(request)),
            "now": now,
        }
        found = await self._fetch(BEGIN, params)
        if not found:
            # A concurrent insert committed after this statement's snapshot: read it now.
            found = await self._fetch(GET_KEY, (source, key))
            return key_from_row(_only(found, source, key)), False
        return key_from_row(found[0]), bool(found[0]["inserted"])

    async def get_idempotency_key(self, source: str, key: str) -> IdempotencyKey | None:
        found = await self._fetch(GET_KEY, (source, key))
        return key_from_row(found[0]) if found else None

    async def start_idempotent_attempt(
        self, source: str, key: str, now: datetime
    ) -> IdempotencyKey:
        return await self._update_key_then_read(START_ATTEMPT, (now, source, key), source, key)

    async def note_idempotent_error(self, source: str, key: str, error: str, now: datetime) -> None:
        async with self._connection() as conn:
            await conn.execute(NOTE_ERROR, (error, now, source, key))

    async def finish_idempotency_key(
        self,
        source: str,
        key: str,
        *,
        state: KeyState,
        status: int | None,
        body: Any,
        object_id: str | None,
        error: str | None,
        now: datetime,
    ) -> IdempotencyKey:
        stored_body = None if body is None else Jsonb(body)
        params = (state.value, status, stored_body, object_id, error, now, source, key)
        return await self._update_key_then_read(FINISH, params, source, key)

    async def mark_idempotency_expected(self, source: str, key: str, now: datetime) -> None:
        async with self._connection() as conn:
            await conn.execute(MARK_EXPECTED, (now, now, source, key))

    async def pending_idempotency_keys(
        self, source: str | None, *, updated_before: datetime | None, limit: int
    ) -> Sequence[IdempotencyKey]:
        params = {"source": source, "before": updated_before, "limit": max(limit, 0)}
        return [key_from_row(row) for row in await self._fetch(PENDING, params)]

    async def _update_key_then_read(
        self, query: str, params: tuple[Any, ...], source: str, key: str
    ) -> IdempotencyKey:
        async with self._connection() as conn, conn.transaction():
            await conn.execute(query, params)
            cursor = await conn.execute(GET_KEY, (source, key))
            return key_from_row(_only(await cursor.fetchall(), source, key))


def _only(found: Sequence[DictRow], source: str, key: str) -> DictRow:
    if not found:
        raise LookupError(f"no idempotency key {key!r} for source {source!r}")
    return found[0]
