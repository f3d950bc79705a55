-- The id a destination de-duplicates on (the payload's `id`, the `webhook-id` header, the
-- AMQP message_id) is stored with each outbox row and sent as stored. New rows get the
-- stable event id (a hash of source and de-duplication key: the same on every store);
-- rows enqueued before keep `evt_<event id>`, the id they were, or will be, sent with.
-- SQLite adds a NOT NULL column only with a constant default: '' is overwritten here for
-- every existing row, and every insert gives the id.

ALTER TABLE outbox ADD COLUMN message_id TEXT NOT NULL DEFAULT '';

UPDATE outbox SET message_id = 'evt_' || event_id;
