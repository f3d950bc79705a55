-- Merchant delivery: the transactional outbox. The ledger transaction writes one row per
-- destination that wants the event; relays (porteiro.sinks) deliver them. Times as in 0001.

CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    destination     TEXT    NOT NULL,
    event_id        INTEGER NOT NULL,
    source          TEXT    NOT NULL,
    object_id       TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,  -- JSON: Porteiro's normalised event
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivering', 'done', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT    NOT NULL,
    last_error      TEXT,
    last_status     TEXT,              -- HTTP status or broker result of the last try
    claim_token     TEXT,
    lease_until     TEXT,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    delivered_at    TEXT,
    -- A replayed event never enqueues twice for one destination.
    UNIQUE (destination, event_id)
);

-- Relays claim due rows of one destination; the order rule looks up a payment's earlier rows.
CREATE INDEX outbox_due ON outbox (destination, status, next_attempt_at);
CREATE INDEX outbox_order ON outbox (destination, source, object_id, id);

-- Operator state of a destination; a destination without a row is active.
CREATE TABLE destinations (
    name               TEXT    PRIMARY KEY,
    paused             INTEGER NOT NULL DEFAULT 0,
    disabled_reason    TEXT,
    circuit_open_until TEXT,
    updated_at         TEXT    NOT NULL
);
