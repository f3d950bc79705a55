"""Statements on the database behind a store URL, as an operator (or a test) runs them."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import psycopg


def sqlite_path(store_url: str) -> str:
    return store_url.removeprefix("sqlite:///").partition("?")[0]


def query(store_url: str, sql: str) -> list[tuple[Any, ...]]:
    """The rows `sql` selects in the store's database."""
    if store_url.startswith("sqlite"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as db:
            return list(db.execute(sql).fetchall())
    with psycopg.connect(store_url) as conn:
        return list(conn.execute(sql.encode()).fetchall())


def execute(store_url: str, script: str) -> None:
    """Run `script` (one or more statements) and commit it."""
    if store_url.startswith("sqlite"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as db:
            db.executescript(script)
        return
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(script.encode())


def status_counts(store_url: str) -> dict[str, int]:
    """How many events are in each status."""
    return dict(query(store_url, "SELECT status, count(*) FROM events GROUP BY status"))


def assert_applied_exactly_once(store_url: str, events: int) -> None:
    """The ledger holds `events` distinct events, each applied once."""
    [(total, distinct)] = query(
        store_url, "SELECT count(*), count(DISTINCT event_id) FROM transitions"
    )
    assert distinct == events, f"{distinct} of {events} events reached the ledger"
    assert total == events, f"{total - events} events were applied more than once"
