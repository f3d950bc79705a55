-- Porteiro schema for SQLite. Datetimes are ISO-8601 UTC text with microseconds
-- ('2026-11-30T06:45:33.123456+00:00'), so text order is time order.
-- JSON columns are text; raw bodies are BLOBs kept byte for byte.

CREATE TABLE IF NOT EXISTS schema_migrations (
    version    TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL
);

CREATE TABLE deliveries (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    source              TEXT NOT NULL,
    received_at         TEXT NOT NULL,
    method              TEXT NOT NULL,
    path                TEXT NOT NULL,
    query               TEXT NOT NULL,
    headers             TEXT NOT NULL,  -- JSON list of [name, value] pairs, arrival order
    body                BLOB NOT NULL,
    peer                TEXT,
    client_cert_subject TEXT,
    parse_error         TEXT
);

CREATE TABLE events (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    source            TEXT NOT NULL,
    dedup_key         TEXT NOT NULL,
    kind              TEXT NOT NULL,
    type              TEXT NOT NULL,
    object_id         TEXT,
    reference         TEXT,
    amount            INTEGER,
    currency          TEXT,
    occurred_at       TEXT,
    refunded_total    INTEGER,
    thin              INTEGER NOT NULL DEFAULT 0 CHECK (thin IN (0, 1)),
    data              TEXT NOT NULL DEFAULT '{}',
    status            TEXT NOT NULL CHECK (status IN
                          ('pending', 'processing', 'done', 'retrying', 'dead', 'ignored')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   TEXT,
    last_error        TEXT,
    duplicates        INTEGER NOT NULL DEFAULT 0,
    first_delivery_id INTEGER,
    last_delivery_id  INTEGER,
    received_at       TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    origin            TEXT NOT NULL DEFAULT 'webhook',
    claim_token       TEXT,
    claimed_by        TEXT,
    lease_until       TEXT,
    UNIQUE (source, dedup_key)
);

-- Claiming scans due work by status then time; expired leases by lease_until.
CREATE INDEX events_due ON events (status, next_attempt_at);
CREATE INDEX events_lease ON events (lease_until) WHERE status = 'processing';
CREATE INDEX events_object ON events (source, object_id);
CREATE INDEX events_received ON events (received_at);

CREATE TABLE event_deliveries (
    event_id    INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    delivery_id INTEGER NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    PRIMARY KEY (event_id, delivery_id)
);

CREATE INDEX event_deliveries_delivery ON event_deliveries (delivery_id);

CREATE TABLE payments (
    source          TEXT NOT NULL,
    object_id       TEXT NOT NULL,
    state           TEXT NOT NULL,
    amount          INTEGER,
    currency        TEXT,
    refunded_amount INTEGER NOT NULL DEFAULT 0,
    reference       TEXT,
    version         INTEGER NOT NULL,
    last_event_at   TEXT,
    facts           TEXT NOT NULL,
    anomalies       INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (source, object_id)
);

CREATE TABLE transitions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    source     TEXT NOT NULL,
    object_id  TEXT NOT NULL,
    event_id   INTEGER NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    verdict    TEXT NOT NULL,
    note       TEXT,
    at         TEXT NOT NULL
);

CREATE INDEX transitions_payment ON transitions (source, object_id, id);

CREATE TABLE quarantine (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    source      TEXT NOT NULL,
    received_at TEXT NOT NULL,
    reason      TEXT NOT NULL,
    detail      TEXT,
    headers     TEXT NOT NULL,
    body        BLOB NOT NULL,  -- truncated to 64 KiB
    peer        TEXT
);
