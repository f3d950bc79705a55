-- Events by the merchant's own reference (GET /api/events?reference=, `events list
-- --reference`, replay by reference), newest first: the equality, then `id` for the
-- ORDER BY id DESC and the `id < cursor` of the next page, so a page reads only its
-- rows. Without `source` in front, as a reference is asked for on its own; partial, as
-- many events carry none.
CREATE INDEX IF NOT EXISTS events_reference ON events (reference, id)
    WHERE reference IS NOT NULL;
