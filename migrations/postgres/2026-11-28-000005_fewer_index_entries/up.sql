-- Fewer index entries per new payment (docs/benchmark.md): each index a row enters is work in
-- the transaction that writes it, and a payment's write is the service's hot path.
--
-- Events are pruned by id (a UUIDv7: its first digits are the moment it was made), on the
-- primary key; the index on created_at served only the hourly prune.
DROP INDEX IF EXISTS events_created;
-- An event has no number until the feed is read (docs/events.md): the feed's index holds
-- numbered events only, so an emitter's insert does not enter it. Every query of the feed
-- asks for `seq >` a number, which holds only for numbered events.
DROP INDEX events_merchant_feed;
CREATE INDEX events_merchant_feed ON events (merchant_id, seq) WHERE seq IS NOT NULL;
-- Payments list by customer only for a customer: payments without one are not entered.
DROP INDEX payments_merchant_customer;
CREATE INDEX payments_merchant_customer ON payments (merchant_id, customer_id, id)
    WHERE customer_id IS NOT NULL;
-- The feed's numbers stay unique, among numbered events. (SQLite keeps its column's UNIQUE:
-- it cannot drop a column constraint without rebuilding the table.)
ALTER TABLE events DROP CONSTRAINT events_seq_key;
CREATE UNIQUE INDEX events_seq_numbered ON events (seq) WHERE seq IS NOT NULL;
