"""Shared fixtures: real SQLite files and a real PostgreSQL database per test.

PostgreSQL: PORTEIRO_TEST_PG (default postgresql://postgres@127.0.0.1:5432/test) names an
admin connection; each test gets a fresh database created from it and dropped after.
Locally an unreachable server skips those tests; under CI=true it fails them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from porteiro.store import open_store
from porteiro.store.base import Store

PG_ADMIN_URL = os.environ.get("PORTEIRO_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(autouse=True)
def _clean_porteiro_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configuration is explicit: no test sees a developer's PORTEIRO_* variables."""
    for key in list(os.environ):
        if key.startswith("PORTEIRO_") and key != "PORTEIRO_TEST_PG":
            monkeypatch.delenv(key, raising=False)


def _pg_reachable() -> str | None:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc)
    return None


def require_postgres() -> None:
    problem = _pg_reachable()
    if problem is None:
        return
    message = f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {problem}"
    if IN_CI:
        pytest.fail(message + " (CI=true: services are required, never skipped)")
    pytest.skip(message)


def _db_url(name: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database, dropped after the test."""
    require_postgres()
    name = f"porteiro_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _db_url(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'porteiro.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test using it runs once per store implementation."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'porteiro.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An opened, migrated store of each kind."""
    opened = open_store(store_url)
    await opened.open()
    await opened.upgrade()
    try:
        yield opened
    finally:
        await opened.close()
