"""Row <-> model mapping details the stores rely on."""

from __future__ import annotations

import tracemalloc
from dataclasses import fields
from datetime import UTC, datetime

import orjson

from porteiro.model import StoredEvent
from porteiro.store import rows


def test_event_columns_follow_the_stored_event_fields() -> None:
    # `event_from_values` unpacks values by position: in this order, all of them.
    assert tuple(field.name for field in fields(StoredEvent)) == rows.EVENT_COLUMNS


def test_held_documents_are_orjson_sized_to_their_content() -> None:
    document = {"id": 7, "token": "tok_1", "at": datetime(2026, 11, 30, 12, 0, tzinfo=UTC)}
    assert rows.dump_held(document) == orjson.dumps(document)
    tracemalloc.start()
    try:
        held = [rows.dump_held(document) for _ in range(500)]
        traced, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(held) == 500
    # Each is its own ~100-byte object, not a share of orjson's output buffer.
    assert traced < 500 * 200
