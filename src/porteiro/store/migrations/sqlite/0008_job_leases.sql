-- Singleton jobs (the reconciler's stale cycle, each destination's relay): whichever
-- `serve` or `worker` process holds a job's lease runs it, renewing the lease while it
-- does; a lease its holder stopped renewing (a dead process) expires and another takes
-- the job. Times as in 0001.

CREATE TABLE job_leases (
    job         TEXT PRIMARY KEY,  -- "reconcile", "relay:NAME"
    holder      TEXT NOT NULL,     -- host:pid:random of the process
    acquired_at TEXT NOT NULL,
    renewed_at  TEXT NOT NULL,
    lease_until TEXT NOT NULL
);
