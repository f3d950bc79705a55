-- Singleton jobs (the reconciler's stale cycle, each destination's relay): whichever
-- `serve` or `worker` process holds a job's lease runs it, renewing the lease while it
-- does; a lease its holder stopped renewing (a dead process) expires and another takes
-- the job. A row, not an advisory lock: the same on SQLite, readable by /readyz and an
-- operator (who holds what, renewed when), and safe behind a transaction pooler.

CREATE TABLE job_leases (
    job         text        PRIMARY KEY,  -- "reconcile", "relay:NAME"
    holder      text        NOT NULL,     -- host:pid:random of the process
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    lease_until timestamptz NOT NULL
);
