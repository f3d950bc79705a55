"""Row <-> dataclass mapping shared by the stores.

Each `*_from_row` takes a mapping-like row (sqlite3.Row, a psycopg dict row) keyed by
column name. Values may arrive as the SQLite text forms (ISO-8601 datetimes, JSON text)
or already decoded by the driver (PostgreSQL timestamptz, jsonb): both are accepted, and
every datetime comes out timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any, Final, Protocol

from porteiro import jsontext
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

# The columns a StoredEvent is read from, in the order `event_from_values` takes them.
EVENT_COLUMNS: Final = (
    "id",
    "source",
    "dedup_key",
    "kind",
    "type",
    "object_id",
    "reference",
    "amount",
    "currency",
    "occurred_at",
    "refunded_total",
    "thin",
    "data",
    "status",
    "attempts",
    "next_attempt_at",
    "last_error",
    "duplicates",
    "received_at",
    "updated_at",
    "origin",
)
_event_values = itemgetter(*EVENT_COLUMNS)
# Enum calls (`Kind(value)`) are slow for lookups made for every row a worker claims.
_KINDS = {kind.value: kind for kind in Kind}
# A kind's text, the member or its plain value alike (a StrEnum hashes as its text):
# `Kind(kind).value` is two Python-level enum calls per event.
_KIND_TEXT: dict[str, str] = {kind.value: kind.value for kind in Kind}
_STATUSES = {status.value: status for status in EventStatus}
_PENDING, _IGNORED = EventStatus.PENDING.value, EventStatus.IGNORED.value
_DEAD = EventStatus.DEAD.value
_TEXT = (str, bytes, bytearray, memoryview)


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
    return jsontext.dumps(value).decode()


def dump_held(value: Any) -> bytes:
    """jsontext.dumps (orjson), copied to its own size, for a document held until its
    batch is sent: orjson's result keeps orjson's whole output buffer (~4 KB however short
    the JSON), and a batch of such buffers cost ~1 us more per document than the copy."""
    return bytes(memoryview(jsontext.dumps(value)))


def load_json(value: Any) -> Any:
    """JSON text (SQLite) or an already decoded value (PostgreSQL jsonb)."""
    if isinstance(value, _TEXT):
        return jsontext.loads(bytes(value) if isinstance(value, memoryview | bytearray) else value)
    return value


def dump_headers(headers: Sequence[tuple[str, str]]) -> str:
    return dump_json([[name, value] for name, value in headers])


def load_headers(value: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(name), str(item)) for name, item in load_json(value))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def event_from_row(row: Row) -> StoredEvent:
    return event_from_values(_event_values(row))


def event_from_values(values: Sequence[Any]) -> StoredEvent:
    """An event from the values of its EVENT_COLUMNS, in that order."""
    (
        id_,
        source,
        dedup_key,
        kind,
        type_,
        object_id,
        reference,
        amount,
        currency,
        occurred_at,
        refunded_total,
        thin,
        data,
        status,
        attempts,
        next_attempt_at,
        last_error,
        duplicates,
        received_at,
        updated_at,
        origin,
    ) = values
    data = load_json(data)
    return StoredEvent(
        id=int(id_),
        source=source,
        dedup_key=dedup_key,
        kind=_KINDS.get(kind) or Kind(kind),
        type=type_,
        object_id=object_id,
        reference=reference,
        amount=_optional_int(amount),
        currency=currency,
        occurred_at=decode_optional_time(occurred_at),
        refunded_total=_optional_int(refunded_total),
        thin=bool(thin),
        data=data if isinstance(data, Mapping) else {},
        status=_STATUSES.get(status) or EventStatus(status),
        attempts=int(attempts),
        next_attempt_at=decode_optional_time(next_attempt_at),
        last_error=last_error,
        duplicates=int(duplicates),
        received_at=decode_time(received_at),
        updated_at=decode_time(updated_at),
        origin=origin,
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
    # ASCII digits of a 64-bit id: isdigit() passes "²", SQLite cannot bind past 64 bits,
    # and int() refuses more than 4300 digits (each was a 500 on the admin API).
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 19 or int(cursor) >= 2**63:
        raise ValueError(f"invalid cursor {cursor[:20]!r}")
    return int(cursor)


def status_counts(found: Sequence[Row], statuses: Sequence[EventStatus] | None) -> dict[str, int]:
    """Each status asked (every one for None) with its count from the (status, n) rows
    of a GROUP BY status, zero where no row came back."""
    counts = {s.value: 0 for s in (EventStatus if statuses is None else statuses)}
    counts.update({row["status"]: int(row["n"]) for row in found})
    return counts


def initial_status(event: ParsedEvent) -> EventStatus:
    """A new event with nothing for the ledger to act on is stored already `ignored`."""
    return EventStatus.PENDING if event.actionable else EventStatus.IGNORED


def parsed_event_columns(event: ParsedEvent) -> dict[str, Any]:
    """The columns an adapter's parse (or enrich) decides, as the parsed event gives them
    (each dialect encodes times, booleans and `data` its own way)."""
    return {
        "kind": _KIND_TEXT.get(event.kind) or Kind(event.kind).value,  # or ValueError
        "type": event.type,
        "object_id": event.object_id,
        "reference": event.reference,
        "amount": event.amount,
        "currency": event.currency,
        "occurred_at": event.occurred_at,
        "refunded_total": event.refunded_total,
        "thin": event.thin,
        "data": dict(event.data),
    }


def payment_columns(payment: Payment) -> dict[str, Any]:
    """A payment's columns as the ledger gives them (each dialect encodes
    `last_event_at` and `facts` its own way)."""
    return {
        "source": payment.source,
        "object_id": payment.object_id,
        "state": payment.state.value,
        "amount": payment.amount,
        "currency": payment.currency,
        "refunded_amount": payment.refunded_amount,
        "reference": payment.reference,
        "version": payment.version,
        "last_event_at": payment.last_event_at,
        "facts": dict(payment.facts),
        "anomalies": payment.anomalies,
    }


def new_event_columns(event: ParsedEvent, source: str, now: datetime | str) -> dict[str, Any]:
    """A new event's columns: its key, its parsed columns, and due `now` (in the caller's
    encoding) when pending."""
    columns = parsed_event_columns(event)  # one dict filled in place: on every ack's path
    columns["source"] = source
    columns["dedup_key"] = event.dedup_key
    if event.error is not None:  # an unreadable item: dead from the start, with why
        columns["status"], columns["next_attempt_at"] = _DEAD, None
        columns["last_error"] = event.error
        return columns
    pending = initial_status(event) is EventStatus.PENDING
    columns["status"] = _PENDING if pending else _IGNORED
    columns["next_attempt_at"] = now if pending else None
    columns["last_error"] = None
    return columns


def reparsed_columns(event: ParsedEvent, now: datetime | str) -> dict[str, Any]:
    """What a re-parse (replay) sets on an event: due now, or `dead` again with the
    reason when the current code still cannot read it."""
    if event.error is not None:
        return {"status": _DEAD, "next_attempt_at": None, "last_error": event.error}
    return {"status": _PENDING, "next_attempt_at": now, "last_error": None}
