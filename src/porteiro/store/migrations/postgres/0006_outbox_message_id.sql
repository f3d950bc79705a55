-- The id a destination de-duplicates on (the payload's `id`, the `webhook-id` header, the
-- AMQP message_id) is stored with each outbox row and sent as stored. New rows get the
-- stable event id (a hash of source and de-duplication key: the same on every store);
-- rows enqueued before keep `evt_<event id>`, the id they were, or will be, sent with.

ALTER TABLE outbox ADD COLUMN message_id text;

UPDATE outbox SET message_id = 'evt_' || event_id;

ALTER TABLE outbox ALTER COLUMN message_id SET NOT NULL;
