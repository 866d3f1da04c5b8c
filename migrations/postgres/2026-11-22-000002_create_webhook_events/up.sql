-- Every inbound provider event, by its webhook-id. The row is inserted in the same
-- transaction that applies the event, so the primary key makes each event apply once;
-- body_sha256 tells a redelivery (same body) from a conflicting reuse of the id.
CREATE TABLE webhook_events (
    id           TEXT PRIMARY KEY,
    body_sha256  TEXT NOT NULL,
    event_type   TEXT NOT NULL,
    received_at  TIMESTAMP NOT NULL
);

-- The retention task deletes the oldest rows in batches.
CREATE INDEX webhook_events_received_at ON webhook_events (received_at);
