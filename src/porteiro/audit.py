"""Who did what: every operator action (an admin API operate route, the CLI's replay, DLQ
replay and destination commands) is appended to the store's audit log and logged as one
JSON line, `action: audit.<action>` (docs/operations.md, Who did what).

The token's name is recorded, never its value; the parameters are the action's selection
(ids, filter, flags, destination), which holds nothing secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from porteiro.observability import logger
from porteiro.store.audit import AuditEntry, AuditRecord, audit_store

# The token name of the CLI's actions: it has the files (the config, the store), not a token.
CLI_TOKEN_NAME = "cli"


async def record(store: object, entry: AuditEntry, now: datetime) -> int:
    """Append `entry` at `now` and log it; returns the row's id."""
    audit_id = await audit_store(store).append_audit(entry, now)
    logger().info(
        f"audit.{entry.action}",
        action=f"audit.{entry.action}",
        audit_id=audit_id,
        token_name=entry.token_name,
        parameters=dict(entry.parameters),
        affected=entry.affected,
        outcome=entry.outcome,
    )
    return audit_id


async def record_cli(
    store: object, action: str, parameters: dict[str, Any], affected: int, now: datetime
) -> int:
    """Record an action of the CLI's (token name `cli`), with the options it was given
    (those left unset dropped; times as ISO-8601)."""
    given = {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in parameters.items()
        if value not in (None, (), [])
    }
    return await record(store, AuditEntry(CLI_TOKEN_NAME, action, given, affected), now)


def record_to_json(record: AuditRecord) -> dict[str, Any]:
    entry = record.entry
    return {
        "id": record.id,
        "at": record.at.isoformat(),
        "token_name": entry.token_name,
        "action": entry.action,
        "parameters": dict(entry.parameters),
        "affected": entry.affected,
        "outcome": entry.outcome,
    }
