-- Who did what: one row per operator action (admin API operate routes, the CLI's replay,
-- DLQ replay and destination commands). Never updated nor deleted by Porteiro.

CREATE TABLE audit_log (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    token_name text        NOT NULL,  -- the admin token's name, or "cli"; never its value
    action     text        NOT NULL,  -- "replay", "dlq.replay", "destination.pause", ...
    parameters jsonb       NOT NULL,  -- the selection (ids, filter, flags, destination)
    affected   bigint      NOT NULL,  -- events or rows the action changed (or would, dry run)
    outcome    text        NOT NULL   -- "ok", "forbidden", "rejected"
);
