-- Outgoing idempotent requests (porteiro.client): one row per (source, idempotency key),
-- committed before the first attempt so a restart resumes with the same key.
-- Datetimes are ISO-8601 UTC text; request and response_body are JSON text.

CREATE TABLE idempotency_keys (
    source          TEXT NOT NULL,
    key             TEXT NOT NULL,
    operation       TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,  -- sha256 hex of the canonical request
    request         TEXT NOT NULL,  -- what a resume sends again
    state           TEXT NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    response_status INTEGER,
    response_body   TEXT,
    object_id       TEXT,           -- the created payment / order / cob
    last_error      TEXT,
    expected_at     TEXT,           -- when the reconciler was told to expect it
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (source, key)
);

-- What a restart resumes.
CREATE INDEX idempotency_keys_pending ON idempotency_keys (source, updated_at)
    WHERE state = 'pending';
