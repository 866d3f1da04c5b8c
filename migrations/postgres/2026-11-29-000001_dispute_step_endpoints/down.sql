DROP INDEX dispute_steps_idempotency;
ALTER TABLE dispute_steps
    ADD CONSTRAINT dispute_steps_idempotency UNIQUE (merchant_id, idempotency_key);
