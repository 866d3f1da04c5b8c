DROP INDEX payments_merchant_customer;
CREATE INDEX payments_merchant_customer ON payments (merchant_id, customer_id, id);
DROP INDEX events_merchant_feed;
CREATE INDEX events_merchant_feed ON events (merchant_id, seq);
CREATE INDEX events_created ON events (created_at);
