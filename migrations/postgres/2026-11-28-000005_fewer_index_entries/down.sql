DROP INDEX events_seq_numbered;
ALTER TABLE events ADD CONSTRAINT events_seq_key UNIQUE (seq);
DROP INDEX payments_merchant_customer;
CREATE INDEX payments_merchant_customer ON payments (merchant_id, customer_id, id);
DROP INDEX events_merchant_feed;
CREATE INDEX events_merchant_feed ON events (merchant_id, seq);
CREATE INDEX events_created ON events (created_at);
