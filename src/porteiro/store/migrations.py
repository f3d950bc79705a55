"""Numbered SQL migrations shipped inside the package, one folder per dialect.

Files are named `NNNN_name.sql` under `porteiro/store/migrations/<dialect>/`; the
version is the number as written ("0001"), applied in numeric order. Both stores use
this loader and record applied versions in their `schema_migrations` table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

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
