"""The naive baseline's tables: importable without Flask (the harness creates them)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS processed_events (
    event_id     text PRIMARY KEY,
    type         text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS orders (
    id     text PRIMARY KEY,
    status text NOT NULL DEFAULT 'pending'
);
"""
