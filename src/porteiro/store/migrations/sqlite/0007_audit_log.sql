-- Who did what: one row per operator action (admin API operate routes, the CLI's replay,
-- DLQ replay and destination commands). Never updated nor deleted by Porteiro. Times as
-- in 0001.

CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         TEXT    NOT NULL,
    token_name TEXT    NOT NULL,  -- the admin token's name, or "cli"; never its value
    action     TEXT    NOT NULL,  -- "replay", "dlq.replay", "destination.pause", ...
    parameters TEXT    NOT NULL,  -- JSON: the selection (ids, filter, flags, destination)
    affected   INTEGER NOT NULL,  -- events or rows the action changed (or would, dry run)
    outcome    TEXT    NOT NULL   -- "ok", "forbidden", "rejected"
);
