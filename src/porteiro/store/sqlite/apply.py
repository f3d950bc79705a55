"""SQLite: apply a batch of claimed events (one or more) per IMMEDIATE transaction.

Plain functions of the connection, run on the store's thread inside `_transaction`. In a
batch, each event gets a SAVEPOINT: an event whose `decide` (or write) raises rolls back
to it and the rest still commit, in one fsync. SQLite has a single writer, so the batch
needs no lock ordering: nobody else writes until it commits.

Inside the savepoint, after the ledger: the event's outbox rows are inserted and the
merchant's handlers run on this very connection (driven without an event loop: their
`ctx.execute` is synchronous underneath), so both commit or roll back with the event.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from porteiro.store import rows
from porteiro.store.records import Application, Applied
from porteiro.store.sqlite import queries as q
from porteiro.store.sqlite.executor import SqliteExecutor, run_inline
from porteiro.store.sqlite.outbox import insert_outbox_sqlite


def _apply_one(db: sqlite3.Connection, item: Application, stamp: str) -> bool:
    """Fence, read the payment, decide, persist it and the transition, enqueue the outbox
    rows, run the handlers; False if the claim was lost (nothing written)."""
    claim, event = item.claim, item.event
    if event.object_id is None:
        raise ValueError(f"event {claim.event.id} has no object_id: nothing to apply")
    key = (claim.event.source, event.object_id)
    if event == claim.event.parsed():  # as stored: only the processing columns change
        fenced = db.execute(
            q.FINISH_EVENT, {"id": claim.event.id, "token": claim.token, "now": stamp}
        )
    else:  # enriched: its parsed columns are stored with it
        params = q.event_params(event, claim.event.source, 0, stamp)
        params.update(id=claim.event.id, token=claim.token)
        fenced = db.execute(q.APPLY_EVENT, params)
    if fenced.rowcount == 0:
        return False
    current = db.execute(q.GET_PAYMENT, key).fetchone()
    outcome = item.decide(None if current is None else rows.payment_from_row(current))
    payment, transition = outcome.payment, outcome.transition
    if (payment.source, payment.object_id) != key:
        raise ValueError(f"decide returned payment {payment.object_id!r} for {key!r}")
    db.execute(q.UPSERT_PAYMENT, q.payment_params(payment, stamp))
    db.execute(
        q.INSERT_TRANSITION,
        (
            *key,
            transition.event_id,
            transition.from_state,
            transition.to_state,
            transition.verdict,
            transition.note,
            rows.encode_time(transition.at),
        ),
    )
    if item.outbox is not None:
        insert_outbox_sqlite(db, item.outbox(outcome), rows.decode_time(stamp))
    if item.handle is not None:
        run_inline(item.handle(outcome, SqliteExecutor(db)))
    return True


def apply_many(db: sqlite3.Connection, batch: Sequence[Application], stamp: str) -> list[Applied]:
    results: list[Applied] = []
    for item in batch:
        db.execute("SAVEPOINT porteiro_apply")
        try:
            results.append(_apply_one(db, item, stamp))
        except sqlite3.OperationalError:
            raise  # the database itself failed: the whole batch rolls back
        except Exception as exc:
            db.execute("ROLLBACK TO porteiro_apply")
            results.append(exc)
        db.execute("RELEASE porteiro_apply")
    return results
