"""The audit-log verbs (store/audit.py), written once for both stores over the connection
port (store/port.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from porteiro.store import rows
from porteiro.store.audit import AuditEntry, AuditRecord
from porteiro.store.base import Page
from porteiro.store.port import Port
from porteiro.store.read_verbs import newest_first_page
from porteiro.store.rows import Row

APPEND: Final = """
INSERT INTO audit_log (at, token_name, action, parameters, affected, outcome)
VALUES (%(at)s, %(token_name)s, %(action)s, %(parameters)s, %(affected)s, %(outcome)s)
RETURNING id"""

NEWEST: Final = "SELECT * FROM audit_log ORDER BY id DESC LIMIT %(limit)s"

OLDER: Final = """
SELECT * FROM audit_log WHERE id < %(before)s ORDER BY id DESC LIMIT %(limit)s"""


class AuditVerbs:
    _port: Port

    async def append_audit(self, entry: AuditEntry, now: datetime) -> int:
        d = self._port.dialect
        params = {
            "at": d.time(now), "token_name": entry.token_name, "action": entry.action,
            "parameters": d.json(dict(entry.parameters)), "affected": entry.affected,
            "outcome": entry.outcome,
        }  # fmt: skip
        written = await self._port.write_returning(APPEND, [params])
        return int(written[0]["id"])

    async def list_audit(self, cursor: str | None, limit: int) -> Page[AuditRecord]:
        before = rows.parse_cursor(cursor)
        params = {"before": before, "limit": max(limit, 0) + 1}
        found = await self._port.fetch(NEWEST if before is None else OLDER, params)
        return newest_first_page([record_from_row(row) for row in found], limit)


def record_from_row(row: Row) -> AuditRecord:
    entry = AuditEntry(
        token_name=row["token_name"],
        action=row["action"],
        parameters=rows.load_json(row["parameters"]),
        affected=int(row["affected"]),
        outcome=row["outcome"],
    )
    return AuditRecord(id=int(row["id"]), at=rows.decode_time(row["at"]), entry=entry)
