"""The storage verbs of the outgoing idempotent client (porteiro.client).

One row per (source, idempotency key): what was asked (operation, the request and its
fingerprint), how it went (state, attempts, the gateway's answer) and whether the
reconciler was told to expect the payment. The row is committed BEFORE the first attempt,
so a process that dies mid-request leaves a `pending` key that a restart resumes with the
same key instead of creating a second charge. Part of the Store (store/base.py), written
once for both stores over the connection port (store/port.py): each verb is one committed
statement, and a write that does not match (the key is settled already) reads the row as
it stands instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from porteiro.store.port import Params, Port
from porteiro.store.rows import Row, decode_optional_time, decode_time, load_json


class KeyState(StrEnum):
    PENDING = "pending"  # persisted; not known to be done (never tried, in flight, unresolved)
    SUCCEEDED = "succeeded"  # the gateway created the object (2xx): replay the answer
    FAILED = "failed"  # the gateway refused it for good (a non-retryable 4xx)


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    source: str
    key: str
    operation: str
    fingerprint: str  # sha256 of the canonical request
    request: Mapping[str, Any]  # what to send again on a resume
    state: KeyState
    attempts: int
    response_status: int | None
    response_body: Any
    object_id: str | None
    last_error: str | None
    expected_at: datetime | None  # when the reconciler was told to expect the payment
    created_at: datetime
    updated_at: datetime


_COLUMNS: Final = """source, key, operation, fingerprint, request, state, attempts,
    response_status, response_body, object_id, last_error, expected_at, created_at,
    updated_at"""

# An existing key returns nothing: the caller reads it (and learns it is not new).
INSERT_KEY: Final = f"""
INSERT INTO idempotency_keys
    (source, key, operation, fingerprint, request, state, created_at, updated_at)
VALUES (%(source)s, %(key)s, %(operation)s, %(fingerprint)s, %(request)s, 'pending',
        %(now)s, %(now)s)
ON CONFLICT (source, key) DO NOTHING
RETURNING {_COLUMNS}"""

GET_KEY: Final = f"""
SELECT {_COLUMNS} FROM idempotency_keys WHERE source = %(source)s AND key = %(key)s"""

START_ATTEMPT: Final = f"""
UPDATE idempotency_keys SET attempts = attempts + 1, updated_at = %(now)s
WHERE source = %(source)s AND key = %(key)s AND state = 'pending'
RETURNING {_COLUMNS}"""

NOTE_ERROR: Final = """
UPDATE idempotency_keys SET last_error = %(error)s, updated_at = %(now)s
WHERE source = %(source)s AND key = %(key)s AND state = 'pending'"""

FINISH: Final = f"""
UPDATE idempotency_keys
SET state = %(state)s, response_status = %(status)s, response_body = %(body)s,
    object_id = %(object_id)s, last_error = COALESCE(%(error)s, last_error),
    updated_at = %(now)s
WHERE source = %(source)s AND key = %(key)s AND state = 'pending'
RETURNING {_COLUMNS}"""

MARK_EXPECTED: Final = """
UPDATE idempotency_keys SET expected_at = %(now)s, updated_at = %(now)s
WHERE source = %(source)s AND key = %(key)s"""


def pending_query(*, of_source: bool, updated_before: bool) -> str:
    """Pending keys, oldest first; only a source's, only those untouched since a time."""
    where = "state = 'pending'"
    if of_source:
        where += " AND source = %(source)s"
    if updated_before:
        where += " AND updated_at < %(before)s"
    return f"""
SELECT {_COLUMNS} FROM idempotency_keys WHERE {where}
ORDER BY updated_at, source, key
LIMIT %(limit)s"""


class IdempotencyStore:
    _port: Port

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
        """Insert the key `pending` and COMMIT. Returns the row and whether it is new; an
        existing key comes back unchanged (the caller compares its fingerprint)."""
        d = self._port.dialect
        params = {
            "source": source, "key": key, "operation": operation,
            "fingerprint": fingerprint, "request": d.json(dict(request)), "now": d.time(now),
        }  # fmt: skip
        inserted = await self._port.write_returning(INSERT_KEY, [params])
        if inserted:
            return key_from_row(inserted[0]), True
        return await self._read(source, key), False

    async def get_idempotency_key(self, source: str, key: str) -> IdempotencyKey | None:
        found = await self._port.fetch_one(GET_KEY, {"source": source, "key": key})
        return None if found is None else key_from_row(found)

    async def start_idempotent_attempt(
        self, source: str, key: str, now: datetime
    ) -> IdempotencyKey:
        """Count one more attempt (committed before the request leaves) if the key is still
        pending; return the row either way."""
        params = {"source": source, "key": key, "now": self._port.dialect.time(now)}
        return await self._update_then_read(START_ATTEMPT, params)

    async def note_idempotent_error(self, source: str, key: str, error: str, now: datetime) -> None:
        """Remember why the last attempt of a pending key failed (it stays pending)."""
        params = {"source": source, "key": key, "error": error, "now": self._port.dialect.time(now)}
        await self._port.execute(NOTE_ERROR, params)

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
        """Settle a pending key (first writer wins; `error` None keeps the last attempt's
        error) and return the row as stored."""
        d = self._port.dialect
        params = {
            "source": source, "key": key, "state": state.value, "status": status,
            "body": None if body is None else d.json(body), "object_id": object_id,
            "error": error, "now": d.time(now),
        }  # fmt: skip
        return await self._update_then_read(FINISH, params)

    async def mark_idempotency_expected(self, source: str, key: str, now: datetime) -> None:
        """Record that the reconciler now expects the created payment."""
        params = {"source": source, "key": key, "now": self._port.dialect.time(now)}
        await self._port.execute(MARK_EXPECTED, params)

    async def pending_idempotency_keys(
        self, source: str | None, *, updated_before: datetime | None, limit: int
    ) -> Sequence[IdempotencyKey]:
        """Pending keys, oldest first (what a restart has to resume)."""
        d = self._port.dialect
        query = pending_query(
            of_source=source is not None, updated_before=updated_before is not None
        )
        params = {
            "source": source,
            "before": d.optional_time(updated_before),
            "limit": max(limit, 0),
        }
        return [key_from_row(row) for row in await self._port.fetch(query, params)]

    async def _update_then_read(self, query: str, params: Params) -> IdempotencyKey:
        """The row as `query` left it, or as it stands when it matched nothing."""
        updated = await self._port.write_returning(query, [params])
        if updated:
            return key_from_row(updated[0])
        return await self._read(params["source"], params["key"])

    async def _read(self, source: str, key: str) -> IdempotencyKey:
        found = await self._port.fetch_one(GET_KEY, {"source": source, "key": key})
        if found is None:
            raise LookupError(f"no idempotency key {key!r} for source {source!r}")
        return key_from_row(found)


def key_from_row(row: Row) -> IdempotencyKey:
    request = load_json(row["request"])
    body = row["response_body"]
    status = row["response_status"]
    return IdempotencyKey(
        source=row["source"],
        key=row["key"],
        operation=row["operation"],
        fingerprint=row["fingerprint"],
        request=request if isinstance(request, Mapping) else {},
        state=KeyState(row["state"]),
        attempts=int(row["attempts"]),
        response_status=None if status is None else int(status),
        response_body=None if body is None else load_json(body),
        object_id=row["object_id"],
        last_error=row["last_error"],
        expected_at=decode_optional_time(row["expected_at"]),
        created_at=decode_time(row["created_at"]),
        updated_at=decode_time(row["updated_at"]),
    )
