-- The example shop's orders, in the store's own database (SQLite and PostgreSQL).
CREATE TABLE IF NOT EXISTS orders (
    reference TEXT PRIMARY KEY,
    amount BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    paid_events INTEGER NOT NULL DEFAULT 0,
    last_event TEXT
);
