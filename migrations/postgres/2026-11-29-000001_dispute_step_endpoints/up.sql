-- An idempotency key's scope is one merchant and one endpoint: a dispute's evidence
-- (`POST /v1/disputes/{id}`, saved or submitted) and its close (`POST /v1/disputes/{id}/close`)
-- are two endpoints, so the same key may be used once on each.
ALTER TABLE dispute_steps DROP CONSTRAINT dispute_steps_idempotency;
CREATE UNIQUE INDEX dispute_steps_idempotency
    ON dispute_steps (merchant_id, (kind = 'close'), idempotency_key);
