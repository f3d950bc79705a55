"""SQLite: apply claimed events to the ledger, one or a batch per IMMEDIATE transaction.

Plain functions of the connection, run on the store's thread inside `_transaction`. In a
batch, each event gets a SAVEPOINT: an event whose `decide` (or write) raises rolls back
to it and the rest still commit, in one fsync. SQLite has a single writer, so the batch
needs no lock ordering: nobody else writes until it commits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from porteiro.model import ParsedEvent
from porteiro.store import rows
from porteiro.store import sqlite_sql as q
from porteiro.store.base import Application, Applied, Claim, Decide


def apply_one(
    db: sqlite3.Connection, claim: Claim, event: ParsedEvent, decide: Decide, stamp: str
) -> bool:
    """Fence, read the payment, decide, persist it and the transition; False if the claim
    was lost (nothing written)."""
    if event.object_id is None:
        raise ValueError(f"event {claim.event.id} has no object_id: nothing to apply")
    key = (claim.event.source, event.object_id)
    params = q.event_params(event, claim.event.source, 0, stamp)
    params.update(id=claim.event.id, token=claim.token)
    if db.execute(q.APPLY_EVENT, params).rowcount == 0:
        return False
    current = db.execute(q.GET_PAYMENT, key).fetchone()
    outcome = decide(None if current is None else rows.payment_from_row(current))
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
    return True


def apply_many(db: sqlite3.Connection, batch: Sequence[Application], stamp: str) -> list[Applied]:
    results: list[Applied] = []
    for item in batch:
        db.execute("SAVEPOINT porteiro_apply")
        try:
            results.append(apply_one(db, item.claim, item.event, item.decide, stamp))
        except sqlite3.OperationalError:
            raise  # the database itself failed: the whole batch rolls back
        except Exception as exc:
            db.execute("ROLLBACK TO porteiro_apply")
            results.append(exc)
        db.execute("RELEASE porteiro_apply")
    return results
