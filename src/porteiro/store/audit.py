"""The audit log's storage verbs, beside the core Store protocol: one row per operator
action (who, what, with which selection, how many rows it changed, how it ended).
Implemented once for both stores, over their connection port, by store/audit_verbs.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from porteiro.store.base import Page


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


@runtime_checkable
class AuditStore(Protocol):
    async def append_audit(self, entry: AuditEntry, now: datetime) -> int:
        """Store one entry at `now`; returns its id."""

    async def list_audit(self, cursor: str | None, limit: int) -> Page[AuditRecord]:
        """Newest first; `cursor` is a page's `next` (ValueError when it is not one)."""


def audit_store(store: object) -> AuditStore:
    """`store` as an AuditStore (both built-in stores are), or TypeError."""
    if not isinstance(store, AuditStore):
        raise TypeError(f"{type(store).__name__} does not implement AuditStore")
    return store
