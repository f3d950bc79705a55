"""Row <-> dataclass mapping shared by the stores.

Each `*_from_row` takes a mapping-like row (sqlite3.Row, a psycopg dict row) keyed by
column name. Values may arrive as the SQLite text forms (ISO-8601 datetimes, JSON text)
or already decoded by the driver (PostgreSQL timestamptz, jsonb): both are accepted, and
every datetime comes out timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from porteiro.model import (
    EventStatus,
    Kind,
    ParsedEvent,
    Payment,
    PaymentState,
    QuarantinedRequest,
    StoredDelivery,
    StoredEvent,
    Transition,
    Verdict,
)

# Forensics only needs the start of a refused body; this bounds the quarantine table.
QUARANTINE_BODY_LIMIT = 64 * 1024


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def encode_time(value: datetime) -> str:
    """ISO-8601 UTC with microseconds: fixed width, so text order is time order."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r}: the store only takes aware datetimes")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def encode_optional_time(value: datetime | None) -> str | None:
    return None if value is None else encode_time(value)


def decode_time(value: Any) -> datetime:
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        raise ValueError(f"stored datetime {value!r} has no timezone")
    return parsed.astimezone(UTC)


def decode_optional_time(value: Any) -> datetime | None:
    return None if value is None else decode_time(value)


def dump_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def load_json(value: Any) -> Any:
    """JSON text (SQLite) or an already decoded value (PostgreSQL jsonb)."""
    if isinstance(value, str | bytes | bytearray | memoryview):
        return orjson.loads(bytes(value) if isinstance(value, memoryview) else value)
    return value


def dump_headers(headers: Sequence[tuple[str, str]]) -> str:
    return dump_json([[name, value] for name, value in headers])


def load_headers(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(name), str(item)) for name, item in load_json(value))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def event_from_row(row: Row) -> StoredEvent:
    data = load_json(row["data"])
    return StoredEvent(
        id=int(row["id"]),
        source=row["source"],
        dedup_key=row["dedup_key"],
        kind=Kind(row["kind"]),
        type=row["type"],
        object_id=row["object_id"],
        reference=row["reference"],
        amount=_optional_int(row["amount"]),
        currency=row["currency"],
        occurred_at=decode_optional_time(row["occurred_at"]),
        refunded_total=_optional_int(row["refunded_total"]),
        thin=bool(row["thin"]),
        data=data if isinstance(data, Mapping) else {},
        status=EventStatus(row["status"]),
        attempts=int(row["attempts"]),
        next_attempt_at=decode_optional_time(row["next_attempt_at"]),
        last_error=row["last_error"],
        duplicates=int(row["duplicates"]),
        received_at=decode_time(row["received_at"]),
        updated_at=decode_time(row["updated_at"]),
        origin=row["origin"],
    )


def delivery_from_row(row: Row) -> StoredDelivery:
    return StoredDelivery(
        id=int(row["id"]),
        source=row["source"],
        received_at=decode_time(row["received_at"]),
        path=row["path"],
        query=row["query"],
        headers=load_headers(row["headers"]),
        body=bytes(row["body"]),
        peer=row["peer"],
        parse_error=row["parse_error"],
    )


def payment_from_row(row: Row) -> Payment:
    facts = load_json(row["facts"])
    return Payment(
        source=row["source"],
        object_id=row["object_id"],
        state=PaymentState(row["state"]),
        amount=_optional_int(row["amount"]),
        currency=row["currency"],
        refunded_amount=int(row["refunded_amount"]),
        reference=row["reference"],
        version=int(row["version"]),
        last_event_at=decode_optional_time(row["last_event_at"]),
        facts=facts if isinstance(facts, Mapping) else {},
        anomalies=int(row["anomalies"]),
    )


def transition_from_row(row: Row) -> Transition:
    from_state = row["from_state"]
    return Transition(
        event_id=int(row["event_id"]),
        from_state=None if from_state is None else PaymentState(from_state),
        to_state=PaymentState(row["to_state"]),
        verdict=Verdict(row["verdict"]),
        at=decode_time(row["at"]),
        note=row["note"],
    )


def quarantined_from_row(row: Row) -> QuarantinedRequest:
    return QuarantinedRequest(
        id=int(row["id"]),
        source=row["source"],
        received_at=decode_time(row["received_at"]),
        reason=row["reason"],
        detail=row["detail"],
        headers=load_headers(row["headers"]),
        body=bytes(row["body"]),
        peer=row["peer"],
    )


def parse_cursor(cursor: str | None) -> int | None:
    """Event pages are keyed by id, newest first: the cursor is the last id seen."""
    if cursor is None:
        return None
    if not cursor.isdigit():
        raise ValueError(f"invalid cursor {cursor!r}")
    return int(cursor)


def initial_status(event: ParsedEvent) -> EventStatus:
    """A new event with nothing for the ledger to act on is stored already `ignored`."""
    return EventStatus.PENDING if event.actionable else EventStatus.IGNORED
