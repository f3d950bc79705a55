-- Reconciliation ("malha fina"): payments Porteiro expects, when each was last asked
-- about, and the reports of window audits and stale cycles.

-- A payment the merchant created through porteiro.client (or registered by hand), with
-- its expiry: the reconciler asks the gateway about it once it is past expiry + grace.
CREATE TABLE expectations (
    source     text        NOT NULL,
    object_id  text        NOT NULL,
    reference  text,
    amount     bigint,
    currency   text,
    expires_at timestamptz,
    created_at timestamptz NOT NULL,
    origin     text        NOT NULL DEFAULT 'client',
    PRIMARY KEY (source, object_id)
);

-- One row per object the stale cycle asked the gateway about: the next check backs off
-- so an object that stays pending at the gateway is not polled every cycle.
CREATE TABLE reconcile_checks (
    source        text        NOT NULL,
    object_id     text        NOT NULL,
    checks        integer     NOT NULL DEFAULT 0,
    checked_at    timestamptz NOT NULL,
    next_check_at timestamptz NOT NULL,
    last_error    text,
    PRIMARY KEY (source, object_id)
);

CREATE TABLE reconcile_reports (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source     text        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('audit', 'stale')),
    created_at timestamptz NOT NULL,
    since      timestamptz,
    until      timestamptz,
    summary    jsonb       NOT NULL,
    body       jsonb       NOT NULL
);

CREATE INDEX reconcile_reports_source ON reconcile_reports (source, id);

-- Stale pending payments are found by state.
CREATE INDEX payments_state ON payments (source, state);
