"""The adapters' tools for reading past a deviation: ancillary timestamps, warnings, and
one unreadable item of a delivery kept apart from the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest

from porteiro.errors import ParseError
from porteiro.model import UNPARSEABLE_TYPE, Kind, ParsedEvent
from porteiro.providers import fields

BRT = timezone(timedelta(hours=-3))


def test_a_timestamp_with_an_offset_is_read_without_warning() -> None:
    warnings: list[dict[str, str]] = []
    moment = fields.lenient_time(
        "2024-11-28T16:37:11.650Z", field="created_at", rule="gw.time", warnings=warnings
    )
    assert moment == datetime(2024, 11, 28, 16, 37, 11, 650000, tzinfo=UTC)
    assert warnings == []


def test_a_timestamp_without_offset_is_read_in_the_documented_zone_with_a_warning() -> None:
    warnings: list[dict[str, str]] = []
    moment = fields.lenient_time(
        "2017-06-29T20:23:47", field="data.created_at", rule="gw.time", warnings=warnings, naive=UTC
    )
    assert moment == datetime(2017, 6, 29, 20, 23, 47, tzinfo=UTC)
    assert warnings == [
        {"rule": "gw.time", "detail": "data.created_at has no UTC offset: read as UTC"}
    ]
    brt: list[dict[str, str]] = []
    local = fields.lenient_time("2017-06-29T20:23:47", field="t", rule="r", warnings=brt, naive=BRT)
    assert local == datetime(2017, 6, 29, 23, 23, 47, tzinfo=UTC)


@pytest.mark.parametrize("value", ["29/06/2017 20:23", "2017-06-29T20:23:47", 1498768000, "T"])
def test_an_unreadable_timestamp_is_none_with_a_warning(value: object) -> None:
    warnings: list[dict[str, str]] = []  # no `naive` zone: a missing offset is unreadable
    assert fields.lenient_time(value, field="horario", rule="gw.time", warnings=warnings) is None
    assert [w["rule"] for w in warnings] == ["gw.time"]
    assert "horario" in warnings[0]["detail"]


def test_absent_timestamps_are_none_and_no_warning() -> None:
    warnings: list[dict[str, str]] = []
    for value in (None, ""):
        assert fields.lenient_time(value, field="t", rule="r", warnings=warnings) is None
    assert warnings == []


def paid(item: object, where: str) -> Sequence[ParsedEvent]:
    assert isinstance(item, Mapping)
    if not isinstance(item.get("valor"), int):
        raise ParseError(f"{where}.valor must be an integer")
    return [ParsedEvent(str(item["id"]), Kind.PAYMENT_PAID, "paid", str(item["id"]), amount=1)]


def test_one_unreadable_item_becomes_a_dead_event_of_its_own() -> None:
    items = [{"id": "a", "valor": 1}, {"id": "b", "valor": "x"}, {"id": "c", "valor": 3}]
    events = fields.each_item(items, paid, where="pix")
    assert [e.dedup_key for e in events[::2]] == ["a", "c"]
    assert all(e.error is None for e in events[::2])
    bad = events[1]
    assert (bad.kind, bad.type, bad.object_id) == (Kind.OTHER, UNPARSEABLE_TYPE, None)
    assert bad.error == "pix[1]: pix[1].valor must be an integer"
    assert bad.data == {"item": "pix[1]"}
    assert bad.dedup_key.startswith("porteiro:unparseable-item:")


def test_an_unreadable_item_is_keyed_by_its_content_alone() -> None:
    one = fields.unreadable({"b": 1, "a": [2]}, where="pix[0]", error="x")
    same = fields.unreadable({"a": [2], "b": 1}, where="pix[3]", error="y")
    other = fields.unreadable({"a": [2], "b": 2}, where="pix[0]", error="x")
    assert one.dedup_key == same.dedup_key != other.dedup_key
    huge = fields.unreadable({"n": 2**70, "s": "\ud800"}, where="x", error="e")
    assert huge.dedup_key.startswith("porteiro:unparseable-item:")


def test_warnings_are_added_to_the_event_data() -> None:
    event = ParsedEvent("k", Kind.PAYMENT_PAID, "paid", "o", data={"txid": "t"})
    assert fields.with_warnings(event, []) is event
    first = fields.with_warnings(event, [fields.warning("gw.a", "one")])
    both = fields.with_warnings(first, [fields.warning("gw.b", "two")])
    assert [w["rule"] for w in both.warnings] == ["gw.a", "gw.b"]
    assert both.data["txid"] == "t"
    assert event.warnings == ()
