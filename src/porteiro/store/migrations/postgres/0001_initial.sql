-- Porteiro initial schema (PostgreSQL). The same logical schema as the SQLite one.

CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- One row per HTTP request, raw bytes exactly as received. Append-only.
CREATE TABLE deliveries (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source              text        NOT NULL,
    received_at         timestamptz NOT NULL,
    method              text        NOT NULL,
    path                text        NOT NULL,
    query               text        NOT NULL DEFAULT '',
    headers             jsonb       NOT NULL,  -- [[name, value], ...] in arrival order
    body                bytea       NOT NULL,
    peer                text,
    client_cert_subject text,
    parse_error         text
);

-- Retention purges by age.
CREATE INDEX deliveries_received_at ON deliveries (received_at);

-- One row per distinct event; the inbox is also the work queue.
CREATE TABLE events (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source            text        NOT NULL,
    dedup_key         text        NOT NULL,
    kind              text        NOT NULL,
    type              text        NOT NULL,
    object_id         text,
    reference         text,
    amount            bigint,
    currency          text,
    occurred_at       timestamptz,
    refunded_total    bigint,
    thin              boolean     NOT NULL DEFAULT false,
    data              jsonb       NOT NULL DEFAULT '{}',
    status            text        NOT NULL CHECK (
        status IN ('pending', 'processing', 'done', 'retrying', 'dead', 'ignored')
    ),
    attempts          integer     NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    last_error        text,
    duplicates        integer     NOT NULL DEFAULT 0,
    -- Plain ids (no foreign key) so the retention job can purge old deliveries.
    first_delivery_id bigint,
    last_delivery_id  bigint,
    received_at       timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    origin            text        NOT NULL DEFAULT 'webhook',
    claim_token       text,
    claimed_by        text,
    lease_until       timestamptz,
    CONSTRAINT events_source_dedup_key UNIQUE (source, dedup_key)
);

-- Claiming walks these small partial indexes in order and stops after LIMIT rows.
CREATE INDEX events_due ON events (next_attempt_at, id)
    WHERE status IN ('pending', 'retrying');
CREATE INDEX events_lease ON events (lease_until, id)
    WHERE status = 'processing';
CREATE INDEX events_object ON events (source, object_id);
-- DLQ and status listings, newest first.
CREATE INDEX events_status ON events (status, id);

CREATE TABLE event_deliveries (
    event_id    bigint NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    delivery_id bigint NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    PRIMARY KEY (event_id, delivery_id)
);

CREATE INDEX event_deliveries_delivery ON event_deliveries (delivery_id);

-- Canonical state of one gateway object; `facts` belongs to the ledger.
CREATE TABLE payments (
    source          text        NOT NULL,
    object_id       text        NOT NULL,
    state           text        NOT NULL,
    amount          bigint,
    currency        text,
    refunded_amount bigint      NOT NULL DEFAULT 0,
    reference       text,
    version         integer     NOT NULL,
    last_event_at   timestamptz,
    facts           jsonb       NOT NULL DEFAULT '{}',
    anomalies       integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (source, object_id)
);

CREATE TABLE transitions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source     text        NOT NULL,
    object_id  text        NOT NULL,
    event_id   bigint      NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    verdict    text        NOT NULL,
    note       text,
    at         timestamptz NOT NULL
);

CREATE INDEX transitions_payment ON transitions (source, object_id, id);

-- Requests refused at authentication, bounded to the newest N rows by the store.
CREATE TABLE quarantine (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text        NOT NULL,
    received_at timestamptz NOT NULL,
    reason      text        NOT NULL,
    detail      text,
    headers     jsonb       NOT NULL,
    body        bytea       NOT NULL,  -- truncated to 64 KiB
    peer        text
);
