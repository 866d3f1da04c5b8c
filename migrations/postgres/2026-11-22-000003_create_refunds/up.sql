-- What has been promised back to the customer: the sum of refunds that are pending or
-- succeeded. A refund reserves its amount here, with a guarded update in the same
-- transaction that claims its idempotency key, before the provider is called; a failed
-- refund gives it back. amount_refunded (succeeded refunds only) never exceeds it.
ALTER TABLE payments ADD COLUMN amount_reserved BIGINT NOT NULL DEFAULT 0
    CHECK (amount_reserved >= 0 AND amount_reserved <= amount);

-- A refund is also its own idempotency record, like a payment: the unique
-- (merchant_id, idempotency_key) decides which request wins, and
-- response_status/response_body hold the final answer every retry replays. A request
-- refused for business reasons (409 payment_not_refundable, 422 amount_exceeds_refundable)
-- is stored as status 'rejected' with that answer, never shown as a refund.
CREATE TABLE refunds (
    id                  TEXT PRIMARY KEY,
    merchant_id         TEXT NOT NULL REFERENCES merchants (id),
    payment_id          TEXT NOT NULL REFERENCES payments (id),
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    amount              BIGINT NOT NULL CHECK (amount >= 0),
    currency            TEXT NOT NULL,
    status              TEXT NOT NULL
        CHECK (status IN ('pending', 'succeeded', 'failed', 'rejected')),
    reason              TEXT,
    provider_refund_id  TEXT,
    failure_code        TEXT,
    response_status     INTEGER,
    response_body       TEXT,
    lease_token         TEXT,
    lease_expires_at    TIMESTAMP,
    provider_attempts   INTEGER NOT NULL DEFAULT 0,
    created_at          TIMESTAMP NOT NULL,
    updated_at          TIMESTAMP NOT NULL,
    CONSTRAINT refunds_idempotency UNIQUE (merchant_id, idempotency_key)
);

CREATE INDEX refunds_payment_list ON refunds (payment_id, id);
CREATE INDEX refunds_unfinished ON refunds (updated_at) WHERE status = 'pending';
