"""The connection port the cold verbs are written over, on SQLite and PostgreSQL (the
`store` fixture): one query text for both, times, JSON and IN-lists as each dialect binds
them, and transactions that keep all or nothing."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from porteiro.model import Kind, ParsedEvent
from porteiro.store import rows
from porteiro.store.base import Store
from porteiro.store.dialect import POSTGRES, SQLITE
from porteiro.store.port import Port, Queries
from porteiro.store.reconcile import reconcile_store

NOT_NULL = (sqlite3.IntegrityError, psycopg.errors.NotNullViolation)
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)

INSERT = """
INSERT INTO reconcile_reports (source, kind, created_at, since, until, summary, body)
VALUES (%(source)s, 'audit', %(at)s, NULL, NULL, %(summary)s, %(body)s)"""

BY_SOURCE = "SELECT * FROM reconcile_reports WHERE source = %(source)s ORDER BY id"


def port_of(store: Store) -> Port:
    return store._port


async def test_one_query_text_reads_and_writes_on_both_stores(store: Store) -> None:
    port = port_of(store)
    d = port.dialect
    summary = {"n": 1, "text": "100%% café"}
    params = {"source": "s", "at": d.time(T0), "summary": d.json(summary), "body": d.json([])}
    assert await port.execute(INSERT, params) == 1
    found = await port.fetch(BY_SOURCE, {"source": "s"})
    assert len(found) == 1
    assert rows.decode_time(found[0]["created_at"]) == T0
    assert rows.load_json(found[0]["summary"]) == summary
    assert rows.load_json(found[0]["body"]) == []
    assert await port.fetch_one(BY_SOURCE, {"source": "none"}) is None
    literal = await port.fetch_one("SELECT 'a%%b' AS text", {})
    assert literal is not None and literal["text"] == "a%b"


async def test_an_in_list_longer_than_one_chunk_finds_every_value(store: Store) -> None:
    port = port_of(store)
    d = port.dialect
    wanted = [f"s{n:04}" for n in range(d.in_list_max + 7)]
    at = d.time(T0)
    await port.execute_many(
        INSERT,
        [
            {"source": source, "at": at, "summary": d.json({}), "body": d.json({})}
            for source in wanted[::3]
        ],
    )
    found: list[str] = []
    for chunk in d.chunks(wanted):
        condition, params = d.in_list("source", "sources", chunk)
        query = f"SELECT source FROM reconcile_reports WHERE {condition} ORDER BY source"
        found += [row["source"] for row in await port.fetch(query, params)]
    assert found == wanted[::3]


async def test_write_returning_gives_every_row_in_order_in_one_transaction(
    store: Store,
) -> None:
    port = port_of(store)
    d = port.dialect
    at = d.time(T0 + timedelta(seconds=1))
    params = [
        {"source": source, "at": at, "summary": d.json({}), "body": d.json({})}
        for source in ("a", "b", "c")
    ]
    returned = await port.write_returning(INSERT + " RETURNING id, source", params)
    assert [row["source"] for row in returned] == ["a", "b", "c"]
    ids = [int(row["id"]) for row in returned]
    assert ids == sorted(ids)
    # One failing statement: none of the batch stays.
    broken = [*params[:2], {**params[2], "summary": None}]  # summary is NOT NULL
    with pytest.raises(NOT_NULL):
        await port.write_returning(INSERT + " RETURNING id", broken)
    with pytest.raises(NOT_NULL):
        await port.execute_many(INSERT, broken)
    after = await port.fetch("SELECT count(*) AS n FROM reconcile_reports", {})
    assert int(after[0]["n"]) == 3


def test_the_dialects_differ_only_in_binding() -> None:
    assert SQLITE.render("a = %(a)s AND b LIKE 'x%%'") == "a = :a AND b LIKE 'x%'"
    assert POSTGRES.render("a = %(a)s") == "a = %(a)s"
    assert SQLITE.in_list("c", "v", [1, 2]) == ("c IN (%(v_0)s, %(v_1)s)", {"v_0": 1, "v_1": 2})
    assert POSTGRES.in_list("c", "v", (1, 2)) == ("c = ANY(%(v)s)", {"v": [1, 2]})
    assert SQLITE.time(T0) == "2026-03-01T12:00:00.123456+00:00"
    assert POSTGRES.time(T0) is T0
    assert SQLITE.optional_time(None) is None
    with pytest.raises(ValueError, match="at least one"):
        SQLITE.in_list("c", "v", [])
    with pytest.raises(ValueError, match="chunks"):
        POSTGRES.in_list("c", "v", list(range(POSTGRES.in_list_max + 1)))
    assert [len(c) for c in SQLITE.chunks(list(range(1001)))] == [500, 500, 1]


async def test_a_transaction_keeps_all_of_its_work_or_none(store: Store) -> None:
    port = port_of(store)
    d = port.dialect

    def report(source: str) -> dict[str, object]:
        return {"source": source, "at": d.time(T0), "summary": d.json({}), "body": d.json({})}

    async def both(tx: Queries) -> list[str]:
        assert await tx.execute(INSERT, report("kept")) == 1
        assert await tx.execute(INSERT, report("kept")) == 1
        return [row["source"] for row in await tx.fetch(BY_SOURCE, {"source": "kept"})]

    assert await port.transaction(both) == ["kept", "kept"]

    async def half(tx: Queries) -> None:
        await tx.execute(INSERT, report("lost"))
        assert await tx.fetch_one(BY_SOURCE, {"source": "lost"}) is not None
        raise LookupError("changed its mind")

    with pytest.raises(LookupError):
        await port.transaction(half)
    assert await port.fetch_one(BY_SOURCE, {"source": "lost"}) is None
    assert len(await port.fetch(BY_SOURCE, {"source": "kept"})) == 2


async def test_requeue_takes_more_ids_than_one_in_list(store: Store) -> None:
    count = port_of(store).dialect.in_list_max + 10
    synthetic = [
        ParsedEvent(dedup_key=f"k{n}", kind=Kind.PAYMENT_CREATED, type="t", object_id=f"o{n}")
        for n in range(count)
    ]
    recorded = await reconcile_store(store).record_synthetic("s", synthetic, origin="test", now=T0)
    claimed = await store.claim("w", count, timedelta(seconds=30), T0)
    assert len(claimed) == count
    assert await store.requeue([*recorded.event_ids, 10**9], T0) == count
    assert (await store.status_counts())["pending"] == count
