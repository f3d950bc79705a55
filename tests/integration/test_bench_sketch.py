"""The benchmark's lean sketches (bench/sketch.py): what each setting keeps per request,
and, on a real PostgreSQL, that the `events` statement keeps every delivery and one
event row per key with its repeats counted, within a batch and across batches, as
Porteiro's ingest does (the sketch is only a fair reference if it does that work)."""

from __future__ import annotations

import orjson
import psycopg
import pytest
from bench import pgdata
from bench import requests as presigned
from bench.sketch import KEEPS, STATEMENTS, columns, row

HEADERS = [(b"host", b"127.0.0.1"), (b"stripe-signature", b"t=1,v1=ab")]


def _body(event_id: str, object_id: str = "pi_1") -> bytes:
    event = {"id": event_id, "type": "payment_intent.succeeded"}
    return orjson.dumps({**event, "data": {"object": {"id": object_id, "amount": 100}}})


def test_each_setting_has_a_statement_and_its_row_fits_it() -> None:
    assert set(STATEMENTS) == set(KEEPS)
    for keeps in KEEPS:
        values = row(keeps, _body("evt_1"), HEADERS)
        assert STATEMENTS[keeps].count("%s") == len(values)
        assert values[-1] == _body("evt_1")  # the body, byte for byte, last


def test_rows_keep_the_id_the_headers_or_the_parsed_event() -> None:
    body = _body("evt_9", "pi_9")
    assert row("id", body, HEADERS) == ("evt_9", body)
    headers, _ = row("headers", body, HEADERS)
    assert orjson.loads(headers) == [["host", "127.0.0.1"], ["stripe-signature", "t=1,v1=ab"]]
    event_id, kind, object_id, kept, _ = row("events", body, HEADERS)
    assert (event_id, kind, object_id, kept) == (
        "evt_9",
        "payment_intent.succeeded",
        "pi_9",
        headers,
    )


def test_a_benchmark_request_gives_its_event_id_and_object() -> None:
    raw = presigned.build("stripe", 1, start=1_796_000_000).requests[0]
    body = raw.split(b"\r\n\r\n", 1)[1]
    event = orjson.loads(body)
    event_id, kind, object_id, _, _ = row("events", body, HEADERS)
    assert (event_id, kind) == (event["id"], event["type"])
    assert object_id == event["data"]["object"]["id"] and object_id


def _commit(conn: psycopg.Connection, keeps: str, bodies: list[bytes]) -> None:
    conn.execute(STATEMENTS[keeps], columns([row(keeps, body, HEADERS) for body in bodies]))


@pytest.mark.postgres
def test_the_events_sketch_counts_repeats_within_and_across_batches(pg_url: str) -> None:
    pgdata.sketch_schema(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _commit(conn, "events", [_body("evt_a"), _body("evt_b", "pi_2"), _body("evt_a")])
        _commit(conn, "events", [_body("evt_b", "pi_2"), _body("evt_c", "pi_3")])
        deliveries = conn.execute("SELECT id FROM sketch_deliveries ORDER BY id").fetchall()
        events = conn.execute(
            "SELECT dedup_key, object_id, duplicates, first_delivery_id, status"
            " FROM sketch_parsed ORDER BY dedup_key"
        ).fetchall()
    first = [delivery for (delivery,) in deliveries]
    assert len(first) == 5  # every delivery kept, repeats too
    assert events == [
        ("evt_a", "pi_1", 1, first[0], "pending"),
        ("evt_b", "pi_2", 1, first[1], "pending"),
        ("evt_c", "pi_3", 0, first[4], "pending"),
    ]


@pytest.mark.postgres
def test_the_headers_and_id_sketches_keep_what_they_say(pg_url: str) -> None:
    pgdata.sketch_schema(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _commit(conn, "headers", [_body("evt_a"), _body("evt_a")])
        _commit(conn, "id", [_body("evt_a"), _body("evt_b")])
        _commit(conn, "id", [_body("evt_a")])
        kept = conn.execute("SELECT headers, body FROM sketch_deliveries").fetchall()
        ids = conn.execute("SELECT id FROM sketch_events ORDER BY id").fetchall()
        parsed = conn.execute("SELECT count(*) FROM sketch_parsed").fetchone()
    assert [body for _, body in kept] == [_body("evt_a")] * 2
    assert all(["stripe-signature", "t=1,v1=ab"] in headers for headers, _ in kept)
    assert ids == [("evt_a",), ("evt_b",)]
    assert parsed == (0,)
