"""Stored rows as JSON-able dicts: one shape shared by the admin API and the CLI.

Datetimes are ISO 8601 strings; headers are `[name, value]` pairs in arrival order (a
name may repeat). Raw bodies are shown as text when they are valid UTF-8, else base64,
with `body_base64` saying which, so the bytes can always be recovered exactly.

An event's parsed `data` is shown to DATA_MAX_DEPTH levels: the receiver accepts bodies
nested deeper than orjson can encode (255 levels), and such an event must still be
showable. Deeper containers are replaced by a marker and `data_truncated` says so; the
raw body in `deliveries` always has the whole of it.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from porteiro.model import (
    Payment,
    QuarantinedRequest,
    StoredDelivery,
    StoredEvent,
    Transition,
)

DATA_MAX_DEPTH = 128
TRUNCATED = f"[truncated: nested deeper than {DATA_MAX_DEPTH} levels; see the raw body]"


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def body_to_json(body: bytes) -> dict[str, Any]:
    """`{"body": text-or-base64, "body_base64": bool, "body_size": n}`."""
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    return {"body": text, "body_base64": encoded, "body_size": len(body)}


def body_from_json(view: dict[str, Any]) -> bytes:
    """The exact bytes back from `body_to_json`'s output."""
    body = str(view["body"])
    return base64.b64decode(body) if view["body_base64"] else body.encode("utf-8")


def headers_to_json(headers: Sequence[tuple[str, str]]) -> list[list[str]]:
    return [[name, value] for name, value in headers]


def event_to_json(event: StoredEvent, *, include_data: bool = False) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": event.id,
        "source": event.source,
        "dedup_key": event.dedup_key,
        "kind": event.kind.value,
        "type": event.type,
        "object_id": event.object_id,
        "reference": event.reference,
        "amount": event.amount,
        "currency": event.currency,
        "refunded_total": event.refunded_total,
        "thin": event.thin,
        "occurred_at": iso(event.occurred_at),
        "status": event.status.value,
        "attempts": event.attempts,
        "next_attempt_at": iso(event.next_attempt_at),
        "last_error": event.last_error,
        "duplicates": event.duplicates,
        "received_at": iso(event.received_at),
        "updated_at": iso(event.updated_at),
        "origin": event.origin,
        "warnings": [dict(warning) for warning in event.warnings],
    }
    if include_data:
        view["data"], view["data_truncated"] = bounded(dict(event.data))
    return view


def bounded(value: Any, limit: int = DATA_MAX_DEPTH) -> tuple[Any, bool]:
    """A copy of `value` with each object or array nested deeper than `limit` levels
    replaced by TRUNCATED, and whether one was. Recurses at most `limit` deep."""
    cut = False

    def copy(node: Any, room: int) -> Any:
        nonlocal cut
        if not isinstance(node, dict | list):
            return node
        if room == 0:
            cut = True
            return TRUNCATED
        if isinstance(node, dict):
            return {key: copy(item, room - 1) for key, item in node.items()}
        return [copy(item, room - 1) for item in node]

    return copy(value, limit), cut


def delivery_to_json(delivery: StoredDelivery) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "source": delivery.source,
        "received_at": iso(delivery.received_at),
        "path": delivery.path,
        "query": delivery.query,
        "peer": delivery.peer,
        "parse_error": delivery.parse_error,
        "headers": headers_to_json(delivery.headers),
        **body_to_json(delivery.body),
    }


def event_detail_to_json(
    event: StoredEvent, deliveries: Sequence[StoredDelivery]
) -> dict[str, Any]:
    """An event with its parsed data and every raw delivery that carried it."""
    view = event_to_json(event, include_data=True)
    view["deliveries"] = [delivery_to_json(delivery) for delivery in deliveries]
    return view


def transition_to_json(transition: Transition) -> dict[str, Any]:
    return {
        "from": None if transition.from_state is None else transition.from_state.value,
        "to": transition.to_state.value,
        "event_id": transition.event_id,
        "verdict": transition.verdict.value,
        "note": transition.note,
        "at": iso(transition.at),
    }


def payment_to_json(payment: Payment, history: Sequence[Transition]) -> dict[str, Any]:
    # `facts` is the ledger's private record: not part of the public shape.
    return {
        "source": payment.source,
        "object_id": payment.object_id,
        "state": payment.state.value,
        "amount": payment.amount,
        "currency": payment.currency,
        "refunded_amount": payment.refunded_amount,
        "reference": payment.reference,
        "version": payment.version,
        "last_event_at": iso(payment.last_event_at),
        "anomalies": payment.anomalies,
        "history": [transition_to_json(transition) for transition in history],
    }


def quarantine_to_json(request: QuarantinedRequest) -> dict[str, Any]:
    return {
        "id": request.id,
        "source": request.source,
        "received_at": iso(request.received_at),
        "reason": request.reason,
        "detail": request.detail,
        "peer": request.peer,
        "headers": headers_to_json(request.headers),
        **body_to_json(request.body),
    }
