"""run_held: a transaction begun and committed on the store's thread, filled on the loop's.

Real SQLite files and a real second connection holding the write lock, as another
process would.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from porteiro.store.sqlite.held import run_held
from porteiro.store.sqlite.store import _connect

BUSY_TIMEOUT = 0.3


@pytest.fixture
def path(tmp_path: Path) -> Path:
    db = sqlite3.connect(tmp_path / "held.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    db.execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER"
        " REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    db.close()
    return tmp_path / "held.db"


@pytest.fixture
def thread() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(1, thread_name_prefix="test-sqlite")
    yield executor
    executor.shutdown(wait=True)


@pytest.fixture
def db(path: Path, thread: ThreadPoolExecutor) -> Iterator[sqlite3.Connection]:
    connection = thread.submit(_connect, str(path), BUSY_TIMEOUT).result()
    yield connection
    connection.close()


def rows(path: Path, table: str = "parent") -> list[int]:
    """What another connection (another process) sees committed."""
    reader = sqlite3.connect(path)
    try:
        return [row[0] for row in reader.execute(f"SELECT id FROM {table} ORDER BY id")]
    finally:
        reader.close()


def insert(db: sqlite3.Connection, *ids: int) -> int:
    for parent in ids:
        db.execute("INSERT INTO parent (id) VALUES (?)", (parent,))
    return threading.get_ident()


async def test_statements_run_on_the_loop_thread_and_are_committed(
    path: Path, db: sqlite3.Connection, thread: ThreadPoolExecutor
) -> None:
    ran_on = await run_held(db, thread, insert, 1, 2)
    assert ran_on == threading.get_ident()  # the loop's thread, not the store's
    assert rows(path) == [1, 2]
    assert not db.in_transaction


async def test_the_loop_runs_on_while_begin_waits_for_the_lock(
    path: Path, db: sqlite3.Connection, thread: ThreadPoolExecutor
) -> None:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await run_held(db, thread, insert, 1)
    finally:
        ticker.cancel()
        holder.execute("ROLLBACK")
        holder.close()
    assert ticks >= 10  # ~30 in the 0.3 s busy wait: the loop was never blocked
    assert rows(path) == []
    await run_held(db, thread, insert, 3)  # the connection is usable again
    assert rows(path) == [3]


async def test_failing_statements_roll_back_the_whole_transaction(
    path: Path, db: sqlite3.Connection, thread: ThreadPoolExecutor
) -> None:
    def half_then_fail(connection: sqlite3.Connection) -> None:
        insert(connection, 1)
        insert(connection, 1)  # primary key conflict

    with pytest.raises(sqlite3.IntegrityError):
        await run_held(db, thread, half_then_fail)
    assert rows(path) == []
    assert not db.in_transaction
    await run_held(db, thread, insert, 2)
    assert rows(path) == [2]


class SlowRollback(sqlite3.Connection):
    """A connection whose ROLLBACK takes a while, as on a busy disk."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "ROLLBACK":
            time.sleep(0.2)
        return super().execute(sql, *args)


async def test_a_failure_is_raised_only_once_the_transaction_is_rolled_back(
    path: Path, thread: ThreadPoolExecutor
) -> None:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, factory=SlowRollback)
    try:

        def fail(connection: sqlite3.Connection) -> None:
            insert(connection, 1)
            raise ValueError("bad row")

        with pytest.raises(ValueError, match="bad row"):
            await run_held(db, thread, fail)
        assert not db.in_transaction  # the next statement on it starts afresh
        await run_held(db, thread, insert, 2)
        assert rows(path) == [2]
    finally:
        db.close()


async def test_a_failed_commit_raises_and_rolls_back(
    path: Path, db: sqlite3.Connection, thread: ThreadPoolExecutor
) -> None:
    def orphan(connection: sqlite3.Connection) -> None:
        insert(connection, 1)
        # A deferred foreign key is only checked by COMMIT, on the store's thread.
        connection.execute("INSERT INTO child (id, parent_id) VALUES (1, 99)")

    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await run_held(db, thread, orphan)
    assert rows(path) == [] and rows(path, "child") == []
    assert not db.in_transaction


async def test_cancelled_while_waiting_for_the_lock_runs_nothing(
    path: Path, db: sqlite3.Connection, thread: ThreadPoolExecutor
) -> None:
    ran = threading.Event()

    def mark(connection: sqlite3.Connection) -> None:
        ran.set()
        insert(connection, 1)

    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    waiting = asyncio.create_task(run_held(db, thread, mark))
    await asyncio.sleep(0.05)
    waiting.cancel()
    holder.execute("ROLLBACK")  # now the store's thread gets its BEGIN through
    holder.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(run_held(db, thread, insert, 2), 5)  # the thread is free again
    assert not ran.is_set()
    assert rows(path) == [2]
