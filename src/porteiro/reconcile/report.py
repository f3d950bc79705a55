"""What the reconciler reports: findings of a window audit or a stale cycle, as JSON and
CSV (docs/reconciliation.md describes every field).

A window audit compares the gateway with the store:
- `missing`: the gateway has it, the store does not (a webhook that never arrived);
  event-level lists compare dedup keys, payment-level lists compare payments;
- `divergent`: both know the payment, with another state or amount;
- `unknown`: the store has a payment of the window the gateway does not list.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from porteiro.model import ParsedEvent, Payment

CSV_COLUMNS = (
    "category", "object_id", "dedup_key", "kind", "type", "occurred_at", "gateway_state",
    "store_state", "gateway_amount", "store_amount", "gateway_refunded", "store_refunded",
    "ingested", "note",
)  # fmt: skip
NO_STATUS_READ = "no status read: relying on stored notifications"


@dataclass(slots=True)
class Finding:
    category: str  # "missing" | "divergent" | "unknown"
    object_id: str | None
    dedup_key: str | None = None
    kind: str | None = None
    type: str | None = None
    occurred_at: datetime | None = None
    gateway_state: str | None = None
    store_state: str | None = None
    gateway_amount: int | None = None
    store_amount: int | None = None
    gateway_refunded: int | None = None
    store_refunded: int | None = None
    ingested: bool = False
    note: str | None = None

    @classmethod
    def of(
        cls,
        category: str,
        object_id: str | None,
        *,
        event: ParsedEvent | None = None,
        gateway: Payment | None = None,
        store: Payment | None = None,
        note: str | None = None,
    ) -> Finding:
        return cls(
            category=category,
            object_id=object_id,
            dedup_key=None if event is None else event.dedup_key,
            kind=None if event is None else event.kind.value,
            type=None if event is None else event.type,
            occurred_at=None if event is None else event.occurred_at,
            gateway_state=None if gateway is None else gateway.state.value,
            store_state=None if store is None else store.state.value,
            gateway_amount=None if gateway is None else gateway.amount,
            store_amount=None if store is None else store.amount,
            gateway_refunded=None if gateway is None else gateway.refunded_amount,
            store_refunded=None if store is None else store.refunded_amount,
            note=note,
        )

    def to_json(self) -> dict[str, Any]:
        return {column: _plain(getattr(self, column)) for column in CSV_COLUMNS}


@dataclass(slots=True)
class AuditReport:
    source: str
    provider: str
    since: datetime
    until: datetime
    started_at: datetime
    finished_at: datetime | None = None
    status_read: bool = True
    note: str | None = None
    listed: int = 0  # items the gateway listed (events or payment snapshots)
    gateway_payments: int = 0  # distinct payments among them
    missing: list[Finding] = field(default_factory=list)
    divergent: list[Finding] = field(default_factory=list)
    unknown: list[Finding] = field(default_factory=list)
    ingested: int = 0  # new events stored for the worker
    duplicates: int = 0  # ingested ones the store had meanwhile
    id: int | None = None
    files: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        seconds = (
            None
            if self.finished_at is None
            else round((self.finished_at - self.started_at).total_seconds(), 3)
        )
        return {
            "kind": "audit",
            "source": self.source,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "status_read": self.status_read,
            "listed": self.listed,
            "gateway_payments": self.gateway_payments,
            "missing": len(self.missing),
            "divergent": len(self.divergent),
            "unknown": len(self.unknown),
            "ingested": self.ingested,
            "duplicates": self.duplicates,
            "seconds": seconds,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "provider": self.provider,
            "started_at": self.started_at.isoformat(),
            "finished_at": None if self.finished_at is None else self.finished_at.isoformat(),
            "note": self.note,
            **self.summary(),
            "findings": {
                "missing": [f.to_json() for f in self.missing],
                "divergent": [f.to_json() for f in self.divergent],
                "unknown": [f.to_json() for f in self.unknown],
            },
        }

    def findings(self) -> list[Finding]:
        return [*self.missing, *self.divergent, *self.unknown]


@dataclass(slots=True)
class SourceCycle:
    """One source's part of a stale cycle."""

    source: str
    checked: int = 0
    found: int = 0  # status reads that answered
    new: int = 0  # events stored for the worker
    duplicates: int = 0
    errors: list[str] = field(default_factory=list)
    status_read: bool = True
    objects: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "stale",
            "source": self.source,
            "status_read": self.status_read,
            "checked": self.checked,
            "found": self.found,
            "new": self.new,
            "duplicates": self.duplicates,
            "errors": len(self.errors),
            "note": None if self.status_read else NO_STATUS_READ,
        }


@dataclass(slots=True)
class StaleReport:
    at: datetime
    sources: list[SourceCycle] = field(default_factory=list)

    @property
    def checked(self) -> int:
        return sum(cycle.checked for cycle in self.sources)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "sources": [c.to_json() for c in self.sources]}


def to_csv(findings: Sequence[Finding]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for finding in findings:
        row = finding.to_json()
        writer.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])
    return buffer.getvalue()


def write_files(report: AuditReport, out_dir: str | Path) -> list[Path]:
    """`reconcile-{source}-{started}[-{id}].json` and `.csv` in `out_dir` (created)."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = report.started_at.strftime("%Y%m%dT%H%M%SZ")
    suffix = "" if report.id is None else f"-{report.id}"
    base = folder / f"reconcile-{report.source}-{stamp}{suffix}"
    json_path, csv_path = base.with_suffix(".json"), base.with_suffix(".csv")
    json_path.write_bytes(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2))
    csv_path.write_text(to_csv(report.findings()), encoding="utf-8")
    return [json_path, csv_path]


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
