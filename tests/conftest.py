"""Shared fixtures: real SQLite files and a real PostgreSQL database per test.

PostgreSQL: each test gets a fresh database, created from the admin connection that
tests.support.services names and dropped after.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from porteiro.store import open_store
from porteiro.store.base import Store
from tests.support.services import fresh_database


@pytest.fixture(autouse=True)
def _clean_porteiro_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configuration is explicit: no test sees a developer's PORTEIRO_* variables (but
    the suite's own PORTEIRO_TEST_* settings: PG, CHROMIUM, SCREENSHOTS)."""
    for key in list(os.environ):
        if key.startswith("PORTEIRO_") and not key.startswith("PORTEIRO_TEST_"):
            monkeypatch.delenv(key, raising=False)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database, dropped after the test."""
    with fresh_database() as url:
        yield url


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
