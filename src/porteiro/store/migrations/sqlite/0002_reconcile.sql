-- Reconciliation ("malha fina"): payments Porteiro expects, when each was last asked
-- about, and the reports of window audits and stale cycles. Times as in 0001.

-- A payment the merchant created through porteiro.client (or registered by hand), with
-- its expiry: the reconciler asks the gateway about it once it is past expiry + grace.
CREATE TABLE expectations (
    source     TEXT NOT NULL,
    object_id  TEXT NOT NULL,
    reference  TEXT,
    amount     INTEGER,
    currency   TEXT,
    expires_at TEXT,
    created_at TEXT NOT NULL,
    origin     TEXT NOT NULL DEFAULT 'client',
    PRIMARY KEY (source, object_id)
);

-- One row per object the stale cycle asked the gateway about: the next check backs off
-- so an object that stays pending at the gateway is not polled every cycle.
CREATE TABLE reconcile_checks (
    source        TEXT NOT NULL,
    object_id     TEXT NOT NULL,
    checks        INTEGER NOT NULL DEFAULT 0,
    checked_at    TEXT NOT NULL,
    next_check_at TEXT NOT NULL,
    last_error    TEXT,
    PRIMARY KEY (source, object_id)
);

CREATE TABLE reconcile_reports (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    source     TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('audit', 'stale')),
    created_at TEXT NOT NULL,
    since      TEXT,
    until      TEXT,
    summary    TEXT NOT NULL,  -- JSON: counts
    body       TEXT NOT NULL   -- JSON: the whole report
);

CREATE INDEX reconcile_reports_source ON reconcile_reports (source, id);

-- Stale pending payments are found by state; window audits group events by object.
CREATE INDEX payments_state ON payments (source, state);
