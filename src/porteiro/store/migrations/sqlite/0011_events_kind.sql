-- Events by canonical kind, newest first (GET /api/events?kind=, the console's events
-- filter): the equality, then `id` for the ORDER BY id DESC and the `id < cursor` of the
-- next page, so a page of a rare kind reads only its rows instead of walking every event.
CREATE INDEX IF NOT EXISTS events_kind ON events (kind, id);
