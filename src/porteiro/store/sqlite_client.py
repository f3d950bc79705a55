"""IdempotencyStore for SQLite: a mixin of SqliteStore (uses its `_write` / `_fetch`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from porteiro.store.client import IdempotencyKey, KeyState, key_from_row
from porteiro.store.rows import dump_json, encode_time

T = TypeVar("T")

_COLUMNS: Final = """source, key, operation, fingerprint, request, state, attempts,
    response_status, response_body, object_id, last_error, expected_at, created_at,
    updated_at"""

INSERT_KEY: Final = """
INSERT INTO idempotency_keys
    (source, key, operation, fingerprint, request, state, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)
ON CONFLICT (source, key) DO NOTHING"""

GET_KEY: Final = f"SELECT {_COLUMNS} FROM idempotency_keys WHERE source = ? AND key = ?"

START_ATTEMPT: Final = """
UPDATE idempotency_keys SET attempts = attempts + 1, updated_at = ?
WHERE source = ? AND key = ? AND state = 'pending'"""

NOTE_ERROR: Final = """
UPDATE idempotency_keys SET last_error = ?, updated_at = ?
WHERE source = ? AND key = ? AND state = 'pending'"""

FINISH: Final = """
UPDATE idempotency_keys
SET state = ?, response_status = ?, response_body = ?, object_id = ?,
    last_error = COALESCE(?, last_error),
    updated_at = ?
WHERE source = ? AND key = ? AND state = 'pending'"""

MARK_EXPECTED: Final = """
UPDATE idempotency_keys SET expected_at = ?, updated_at = ? WHERE source = ? AND key = ?"""

PENDING: Final = f"""
SELECT {_COLUMNS} FROM idempotency_keys
WHERE state = 'pending' AND (:source IS NULL OR source = :source)
  AND (:before IS NULL OR updated_at < :before)
ORDER BY updated_at, source, key
LIMIT :limit"""


class IdempotencySqliteMixin:
    if TYPE_CHECKING:  # provided by SqliteStore

        async def _write(self, fn: Callable[..., T], *args: Any) -> T: ...

        async def _fetch(
            self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
        ) -> list[Any]: ...

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
        at = encode_time(now)
        params = (source, key, operation, fingerprint, dump_json(request), at, at)
        return await self._write(_insert_then_read, params)

    async def get_idempotency_key(self, source: str, key: str) -> IdempotencyKey | None:
        found = await self._fetch(GET_KEY, (source, key))
        return key_from_row(found[0]) if found else None

    async def start_idempotent_attempt(
        self, source: str, key: str, now: datetime
    ) -> IdempotencyKey:
        return await self._write(
            _update_then_read, START_ATTEMPT, (encode_time(now), source, key), (source, key)
        )

    async def note_idempotent_error(self, source: str, key: str, error: str, now: datetime) -> None:
        await self._write(_execute, NOTE_ERROR, (error, encode_time(now), source, key))

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
        stored_body = None if body is None else dump_json(body)
        params = (state.value, status, stored_body, object_id, error, encode_time(now), source, key)
        return await self._write(_update_then_read, FINISH, params, (source, key))

    async def mark_idempotency_expected(self, source: str, key: str, now: datetime) -> None:
        at = encode_time(now)
        await self._write(_execute, MARK_EXPECTED, (at, at, source, key))

    async def pending_idempotency_keys(
        self, source: str | None, *, updated_before: datetime | None, limit: int
    ) -> Sequence[IdempotencyKey]:
        before = None if updated_before is None else encode_time(updated_before)
        found = await self._fetch(
            PENDING, {"source": source, "before": before, "limit": max(limit, 0)}
        )
        return [key_from_row(row) for row in found]


# -- on the store's thread ---------------------------------------------------------------


def _insert_then_read(
    db: sqlite3.Connection, params: tuple[Any, ...]
) -> tuple[IdempotencyKey, bool]:
    inserted = db.execute(INSERT_KEY, params).rowcount == 1
    return _read(db, (params[0], params[1])), inserted


def _update_then_read(
    db: sqlite3.Connection, sql: str, params: tuple[Any, ...], where: tuple[str, str]
) -> IdempotencyKey:
    db.execute(sql, params)
    return _read(db, where)


def _execute(db: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> None:
    db.execute(sql, params)


def _read(db: sqlite3.Connection, where: tuple[str, str]) -> IdempotencyKey:
    row = db.execute(GET_KEY, where).fetchone()
    if row is None:
        raise LookupError(f"no idempotency key {where[1]!r} for source {where[0]!r}")
    return key_from_row(row)
