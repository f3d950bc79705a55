"""The services the tests use for real: PostgreSQL and RabbitMQ, promtool and Chromium.

PORTEIRO_TEST_PG (default postgresql://postgres@127.0.0.1:5432/test) names an admin
connection to PostgreSQL. Locally an unreachable service skips the tests that need it;
under CI=true it fails them.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import psycopg
import pytest

PG_ADMIN_URL = os.environ.get("PORTEIRO_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"
AMQP_HOST, AMQP_PORT = "127.0.0.1", 5672
AMQP_URL = f"amqp://guest:guest@{AMQP_HOST}:{AMQP_PORT}/"


def _unavailable(message: str) -> NoReturn:
    if IN_CI:
        pytest.fail(message + " (CI=true: services are required, never skipped)")
    pytest.skip(message + " (start it with scripts/ensure-services.sh)")


def require_postgres() -> None:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        _unavailable(f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {exc}")


def require_rabbitmq() -> None:
    try:
        with socket.create_connection((AMQP_HOST, AMQP_PORT), timeout=2):
            return
    except OSError as exc:
        _unavailable(f"RabbitMQ at {AMQP_HOST}:{AMQP_PORT} is unreachable: {exc}")


def require_promtool() -> str:
    """The path of promtool (Debian package prometheus), which tests the alert rules."""
    found = shutil.which("promtool")
    if found is None:
        _unavailable("promtool is not installed")
    return found


# Debian's chromium (scripts/ensure-services.sh installs it): Playwright drives it, so
# the suite downloads no browser of its own.
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def require_chromium() -> str:
    """The path of the Chromium the console's browser tests drive."""
    for path in (os.environ.get("PORTEIRO_TEST_CHROMIUM", ""), *CHROMIUM_PATHS):
        if path and os.access(path, os.X_OK):
            return path
    _unavailable("chromium is not installed (Debian package chromium)")


@contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped on exit."""
    require_postgres()
    name = f"porteiro_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
