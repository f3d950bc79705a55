"""The WHERE clause of a list's filter, one way for every list (pure): equality on the
given columns, a time window on one, every value bound (the column names come from the
code, never from the caller)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from porteiro.store.dialect import Dialect
from porteiro.store.port import Params


def where(
    d: Dialect,
    equal: Iterable[tuple[str, Any]],
    timed: str,
    since: datetime | None,
    until: datetime | None,
) -> tuple[str, Params]:
    """`column = value` for each pair whose value is not None, and `since <= timed <
    until` for the bounds given; the conditions joined with AND, and their parameters
    (named after the column, with any `table.` prefix left out)."""
    clauses = ["1 = 1"]
    params: Params = {}
    for column, value in equal:
        if value is not None:
            name = column.rpartition(".")[2]
            clauses.append(f"{column} = %({name})s")
            params[name] = value
    for bound, operator, name in ((since, ">=", "since"), (until, "<", "until")):
        if bound is not None:
            clauses.append(f"{timed} {operator} %({name})s")
            params[name] = d.time(bound)
    return " AND ".join(clauses), params
