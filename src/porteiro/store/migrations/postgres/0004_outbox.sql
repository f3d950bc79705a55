-- Merchant delivery: the transactional outbox. The ledger transaction writes one row per
-- destination that wants the event; relays (porteiro.sinks) deliver them.

CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination     text        NOT NULL,
    event_id        bigint      NOT NULL,
    source          text        NOT NULL,
    object_id       text        NOT NULL,
    kind            text        NOT NULL,
    payload         jsonb       NOT NULL,  -- Porteiro's normalised event
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivering', 'done', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    last_status     text,                  -- HTTP status or broker result of the last try
    claim_token     text,
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    delivered_at    timestamptz,
    -- A replayed event never enqueues twice for one destination.
    UNIQUE (destination, event_id)
);

-- Relays claim due rows of one destination; the order rule looks up a payment's earlier rows.
CREATE INDEX outbox_due ON outbox (destination, status, next_attempt_at);
CREATE INDEX outbox_order ON outbox (destination, source, object_id, id);

-- Operator state of a destination; a destination without a row is active.
CREATE TABLE destinations (
    name               text        PRIMARY KEY,
    paused             boolean     NOT NULL DEFAULT false,
    disabled_reason    text,
    circuit_open_until timestamptz,
    updated_at         timestamptz NOT NULL
);
