"""The audit log's storage verbs, part of the Store (store/base.py): one row per operator
action (who, what, with which selection, how many rows it changed, how it ended).
Written once for both stores over the connection port (store/port.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from porteiro.store import rows
from porteiro.store.port import Port
from porteiro.store.read_verbs import newest_first_page
from porteiro.store.records import Page
from porteiro.store.rows import Row


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An operator action to record. `token_name` is the admin token's name (or `cli`),
    never its value; `parameters` the selection the action was given (ids, filter,
    flags, destination): nothing secret is ever part of one."""

    token_name: str
    action: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    affected: int = 0
    outcome: str = "ok"  # "ok" | "forbidden" | "rejected"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime
    entry: AuditEntry


APPEND: Final = """
INSERT INTO audit_log (at, token_name, action, parameters, affected, outcome)
VALUES (%(at)s, %(token_name)s, %(action)s, %(parameters)s, %(affected)s, %(outcome)s)
RETURNING id"""

NEWEST: Final = "SELECT * FROM audit_log ORDER BY id DESC LIMIT %(limit)s"

OLDER: Final = """
SELECT * FROM audit_log WHERE id < %(before)s ORDER BY id DESC LIMIT %(limit)s"""


class AuditStore:
    _port: Port

    async def append_audit(self, entry: AuditEntry, now: datetime) -> int:
        """Store one entry at `now`; returns its id."""
        d = self._port.dialect
        params = {
            "at": d.time(now), "token_name": entry.token_name, "action": entry.action,
            "parameters": d.json(dict(entry.parameters)), "affected": entry.affected,
            "outcome": entry.outcome,
        }  # fmt: skip
        written = await self._port.write_returning(APPEND, [params])
        return int(written[0]["id"])

    async def list_audit(self, cursor: str | None, limit: int) -> Page[AuditRecord]:
        """Newest first; `cursor` is a page's `next` (ValueError when it is not one)."""
        before = rows.parse_cursor(cursor)
        params = {"before": before, "limit": max(limit, 0) + 1}
        found = await self._port.fetch(NEWEST if before is None else OLDER, params)
        return newest_first_page([record_from_row(row) for row in found], limit)


def audit_store(store: object) -> AuditStore:
    """`store` as an AuditStore (both built-in stores are), or TypeError."""
    if not isinstance(store, AuditStore):
        raise TypeError(f"{type(store).__name__} does not implement AuditStore")
    return store


def record_from_row(row: Row) -> AuditRecord:
    entry = AuditEntry(
        token_name=row["token_name"],
        action=row["action"],
        parameters=rows.load_json(row["parameters"]),
        affected=int(row["affected"]),
        outcome=row["outcome"],
    )
    return AuditRecord(id=int(row["id"]), at=rows.decode_time(row["at"]), entry=entry)
