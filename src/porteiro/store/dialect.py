"""What differs between SQLite and PostgreSQL in the SQL both stores share (pure: no I/O).

A shared query is written once, with psycopg's named placeholders (`%(name)s`, `%%` for
a literal percent sign), and its dialect turns it into what its driver takes. The
values differ too: a time (SQLite keeps ISO-8601 UTC text, whose order is time order;
PostgreSQL timestamptz), a JSON document (text; jsonb) and the values of an IN-list (one
placeholder each, within SQLite's bound-variable limit; one array), and row locks (SQLite's
one writer holds the whole database). Nothing else differs in the verbs written over the
connection port (store/port.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from porteiro.model import ParsedEvent
from porteiro.store import rows
from porteiro.store.postgres.queries import json_param
from porteiro.store.records import UNPARSEABLE_TYPE
from porteiro.store.sqlite.executor import sqlite_placeholders

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    # A shared query's text as this driver takes it.
    render: Callable[[str], str]
    # A datetime (aware) as this database stores it.
    time: Callable[[datetime], Any]
    # A JSON document as this database stores it.
    json: Callable[[Any], Any]
    # True: an IN-list binds its values as one array (`= ANY(...)`).
    arrays: bool
    # Values per IN-list at most: callers split longer lists with `chunks`.
    in_list_max: int
    # True: a transaction locks the rows it reads to change (FOR UPDATE); False: its
    # one writer holds the whole database already (SQLite's BEGIN IMMEDIATE).
    locks_rows: bool

    def optional_time(self, value: datetime | None) -> Any:
        return None if value is None else self.time(value)

    def in_list(self, column: str, name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
        """`column` is one of `values`: the condition (placeholders only, named after
        `name`) and its parameters. `column` is a name from the code, never a value."""
        if not values:
            raise ValueError("an IN-list needs at least one value")
        if len(values) > self.in_list_max:
            raise ValueError(f"{len(values)} values in one IN-list: split them with chunks()")
        if self.arrays:
            return f"{column} = ANY(%({name})s)", {name: list(values)}
        params = {f"{name}_{n}": value for n, value in enumerate(values)}
        return f"{column} IN ({', '.join(f'%({key})s' for key in params)})", params

    def lock(self, *, skip_locked: bool = False) -> str:
        """The clause ending a SELECT whose rows its transaction goes on to change:
        locked (or, `skip_locked`, passed over while another transaction holds them)."""
        if not self.locks_rows:
            return ""
        return " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"

    def claim_params(
        self, token: str, now: datetime, lease_until: datetime, limit: int
    ) -> dict[str, Any]:
        """What every claim statement (events, outbox) binds: the fence and the lease."""
        return {
            "token": token,
            "lease_until": self.time(lease_until),
            "now": self.time(now),
            "limit": limit,
        }

    def chunks(self, values: Sequence[T]) -> Iterator[Sequence[T]]:
        """`values` in slices that each fit one IN-list."""
        for start in range(0, len(values), self.in_list_max):
            yield values[start : start + self.in_list_max]


def _same(value: T) -> T:
    return value


# Rendered once per distinct text: the verbs use a few dozen, IN-lists one per length.
_sqlite_text = functools.lru_cache(maxsize=512)(sqlite_placeholders)

SQLITE = Dialect(
    name="sqlite",
    render=_sqlite_text,
    time=rows.encode_time,
    json=rows.dump_json,
    arrays=False,
    # Far below SQLite's limit on bound variables, with room for the query's own.
    in_list_max=500,
    locks_rows=False,
)

POSTGRES = Dialect(
    name="postgres",
    render=_same,
    time=_same,
    json=json_param,
    arrays=True,
    in_list_max=5000,
    locks_rows=True,
)


def event_params(d: Dialect, event: ParsedEvent, source: str, now: datetime) -> dict[str, Any]:
    """A new event's columns (rows.new_event_columns) as `d` binds them, with `now` and the
    unparseable placeholder's type, which the shared upserts compare against."""
    stamp = d.time(now)
    columns = rows.new_event_columns(event, source, stamp)
    columns.update(
        occurred_at=d.optional_time(event.occurred_at),
        data=d.json(columns["data"]),
        now=stamp,
        placeholder=UNPARSEABLE_TYPE,
    )
    return columns
