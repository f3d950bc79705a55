"""Numbered SQL migrations shipped inside the package, one folder per dialect.

Files are named `NNNN_name.sql` under `porteiro/store/migrations/<dialect>/`; the
version is the number as written ("0001"), applied in numeric order. Both stores use
this loader and record applied versions in their `schema_migrations` table.

`schema_mismatch` is the start-up and /readyz verdict: a process runs only on exactly
the schema its own migrations make, neither behind (`porteiro db upgrade`) nor ahead
(a newer release migrated it, and this code would misread its tables).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from porteiro.errors import PorteiroError

_FILE = re.compile(r"^(?P<version>\d+)_(?P<name>[A-Za-z0-9_]+)\.sql$")
_PACKAGE = "porteiro.store"


@dataclass(frozen=True, slots=True)
class Migration:
    version: str
    name: str
    sql: str


def load_migrations(dialect: str) -> list[Migration]:
    """Every migration of `dialect` ("sqlite" or "postgres"), oldest first."""
    folder = resources.files(_PACKAGE).joinpath("migrations").joinpath(dialect)
    if not folder.is_dir():
        raise ValueError(f"no migrations for dialect {dialect!r}")
    found: list[tuple[int, Migration]] = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match is None or not entry.is_file():
            continue
        version = match["version"]
        sql = entry.read_text(encoding="utf-8")
        found.append((int(version), Migration(version, match["name"], sql)))
    found.sort(key=lambda item: item[0])
    numbers = [number for number, _ in found]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"duplicate migration numbers for dialect {dialect!r}")
    return [migration for _, migration in found]


class SchemaMismatch(PorteiroError):
    """The database schema is not the one this code needs: the process must not start
    (exit 2) and /readyz answers 503. The message is the one line an operator reads."""


@cache
def known_versions(dialect: str) -> tuple[str, ...]:
    """The versions this code's migrations make, oldest first (read once: the files
    ship inside the package and cannot change under a running process)."""
    return tuple(migration.version for migration in load_migrations(dialect))


def schema_mismatch(applied: Collection[str], known: Sequence[str]) -> str | None:
    """None when the versions `applied` to a database are exactly the `known` ones, else
    the line that says what is wrong and what to run. Versions are compared as recorded
    ("0004"); a database is "at" the newest version up to which nothing is missing."""
    needs = _shown(known[-1]) if known else "0"
    unknown = sorted((version for version in applied if version not in known), key=_order)
    if unknown:
        newest = _shown(unknown[-1])
        return (
            f"the database schema is at version {newest}; this Porteiro needs {needs} "
            f"and does not know version {newest}: run the Porteiro release that migrated it"
        )
    at = "0"
    for version in known:
        if version not in applied:
            return (
                f"the database schema is at version {at}; this Porteiro needs {needs}: "
                "run `porteiro db upgrade`"
            )
        at = _shown(version)
    return None


def check_schema(applied: Collection[str], dialect: str) -> None:
    """Raise SchemaMismatch unless the versions `applied` to a `dialect` database are
    exactly this code's (Store.check_schema, at start-up and on every /readyz)."""
    problem = schema_mismatch(applied, known_versions(dialect))
    if problem is not None:
        raise SchemaMismatch(problem)


def _order(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (-1, version)


def _shown(version: str) -> str:
    # "0004" is shown as 4; a row someone wrote by hand ("v5") as it is.
    return str(int(version)) if version.isdigit() else version
