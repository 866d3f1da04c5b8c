DROP TABLE deferred_disputes;
ALTER TABLE payments DROP COLUMN disputes_open;
ALTER TABLE payments DROP COLUMN amount_disputed;
DROP TABLE dispute_steps;
DROP TABLE disputes;
