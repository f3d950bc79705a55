-- Events by the merchant's own reference (GET /api/events?reference=, `events list
-- --reference`, replay by reference). A hash index, not a btree: a btree refuses an
-- entry past 2704 bytes, so a gateway's long reference would fail the whole ingest
-- batch; a hash stores 4 bytes whatever the length. It serves the equality only, and the
-- few events of one reference are then sorted by id for the newest-first page. Without
-- `source` in front, as a reference is asked for on its own; partial, as many events
-- carry none. On a large `events` table an operator who cannot hold writes while it is
-- built creates the same index CONCURRENTLY first: this is then a no-op.
CREATE INDEX IF NOT EXISTS events_reference ON events USING hash (reference)
    WHERE reference IS NOT NULL;
