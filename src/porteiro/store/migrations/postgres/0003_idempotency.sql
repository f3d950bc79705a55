-- Outgoing idempotent requests (porteiro.client): one row per (source, idempotency key),
-- committed before the first attempt so a restart resumes with the same key.

CREATE TABLE idempotency_keys (
    source          text        NOT NULL,
    key             text        NOT NULL,
    operation       text        NOT NULL,
    fingerprint     text        NOT NULL,  -- sha256 hex of the canonical request
    request         jsonb       NOT NULL,  -- what a resume sends again
    state           text        NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'succeeded', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    response_status integer,
    response_body   jsonb,
    object_id       text,                  -- the created payment / order / cob
    last_error      text,
    expected_at     timestamptz,           -- when the reconciler was told to expect it
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (source, key)
);

-- What a restart resumes.
CREATE INDEX idempotency_keys_pending ON idempotency_keys (source, updated_at)
    WHERE state = 'pending';
