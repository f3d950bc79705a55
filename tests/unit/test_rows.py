"""Row <-> model mapping details the stores rely on."""

from __future__ import annotations

from dataclasses import fields

from porteiro.model import StoredEvent
from porteiro.store import rows


def test_event_columns_follow_the_stored_event_fields() -> None:
    # `event_from_values` unpacks values by position: in this order, all of them.
    assert tuple(field.name for field in fields(StoredEvent)) == rows.EVENT_COLUMNS
