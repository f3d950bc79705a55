"""A payment's lock held from another session (as a frozen worker's batch holds it),
taken by the store's own statements: a test holds exactly the key every apply takes."""

from __future__ import annotations

from typing import Any

import orjson
import psycopg

from porteiro.store.postgres import apply as pg_apply


def _keys(source: str, object_id: str) -> str:
    return orjson.dumps([{"n": 0, "source": source, "object_id": object_id}]).decode()


async def lock_payment(conn: psycopg.AsyncConnection[Any], source: str, object_id: str) -> None:
    """Take the payment's lock in `conn`'s transaction, waiting for it."""
    await conn.execute(pg_apply.LOCK, {"keys": _keys(source, object_id)})


async def try_lock_payment(conn: psycopg.AsyncConnection[Any], source: str, object_id: str) -> bool:
    """Take the payment's lock in `conn`'s transaction if it is free; whether it was."""
    cursor = await conn.execute(pg_apply.TRY_LOCK, {"keys": _keys(source, object_id)})
    return not await cursor.fetchall()  # TRY_LOCK returns the keys it could not take
