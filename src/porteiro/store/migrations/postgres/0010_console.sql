-- The console's (/ui) and GET /api/payments' payment lists, newest first by when the
-- payment was first heard of, paged by (created_at, source, object_id): each page reads
-- only its rows. The anomalous list (paid twice, paid after expiry) is a small partial
-- index of its own. A reference is searched by equality: a hash index, as
-- events_reference (0009), since a btree refuses an entry past 2704 bytes.
CREATE INDEX IF NOT EXISTS payments_created ON payments (created_at, source, object_id);
CREATE INDEX IF NOT EXISTS payments_anomalous ON payments (created_at, source, object_id)
    WHERE anomalies > 0;
CREATE INDEX IF NOT EXISTS payments_reference ON payments USING hash (reference)
    WHERE reference IS NOT NULL;
