"""The storage verbs of the outgoing idempotent client (porteiro.client).

One row per (source, idempotency key): what was asked (operation, the request and its
fingerprint), how it went (state, attempts, the gateway's answer) and whether the
reconciler was told to expect the payment. The row is committed BEFORE the first attempt,
so a process that dies mid-request leaves a `pending` key that a restart resumes with the
same key instead of creating a second charge. Implemented once for both stores, over their
connection port, by store/client_verbs.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class IdempotencyStore(Protocol):
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

    async def get_idempotency_key(self, source: str, key: str) -> IdempotencyKey | None: ...

    async def start_idempotent_attempt(
        self, source: str, key: str, now: datetime
    ) -> IdempotencyKey:
        """Count one more attempt (committed before the request leaves) if the key is still
        pending; return the row either way."""

    async def note_idempotent_error(self, source: str, key: str, error: str, now: datetime) -> None:
        """Remember why the last attempt of a pending key failed (it stays pending)."""

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

    async def mark_idempotency_expected(self, source: str, key: str, now: datetime) -> None:
        """Record that the reconciler now expects the created payment."""

    async def pending_idempotency_keys(
        self, source: str | None, *, updated_before: datetime | None, limit: int
    ) -> Sequence[IdempotencyKey]:
        """Pending keys, oldest first (what a restart has to resume)."""


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
