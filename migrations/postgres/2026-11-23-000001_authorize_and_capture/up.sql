-- Authorize now, capture later (§10). A manual payment is authorized at the provider and
-- waits in `requires_capture` until exactly one capture or cancel takes it; automatic
-- payments that succeeded have captured their whole amount.
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('processing', 'requires_capture', 'succeeded', 'failed', 'canceled'));
ALTER TABLE payments ADD COLUMN capture_method TEXT NOT NULL DEFAULT 'automatic'
    CHECK (capture_method IN ('automatic', 'manual'));
ALTER TABLE payments ADD COLUMN amount_capturable BIGINT NOT NULL DEFAULT 0
    CHECK (amount_capturable >= 0);
ALTER TABLE payments ADD COLUMN amount_captured BIGINT NOT NULL DEFAULT 0
    CHECK (amount_captured >= 0 AND amount_captured <= amount);
ALTER TABLE payments ADD COLUMN cancellation_reason TEXT;
-- When the authorization was given: it expires AUTHORIZATION_EXPIRY_MS later.
ALTER TABLE payments ADD COLUMN authorized_at TIMESTAMP;
-- The capture or cancel that holds the authorization. Set by the guarded update that
-- decides, among racing captures and cancels, the one that may call the provider.
ALTER TABLE payments ADD COLUMN operation_id TEXT;
UPDATE payments SET amount_captured = amount WHERE status = 'succeeded';

CREATE INDEX payments_authorizations ON payments (authorized_at) WHERE status = 'requires_capture';

-- Captures and cancels: each its own idempotency record (unique per merchant, kind and
-- key), like payments and refunds. A refused request (409/422) is stored as 'rejected'
-- with its answer; a provider's final refusal as 'failed'.
CREATE TABLE payment_operations (
    id                  TEXT PRIMARY KEY,
    merchant_id         TEXT NOT NULL REFERENCES merchants (id),
    payment_id          TEXT NOT NULL REFERENCES payments (id),
    kind                TEXT NOT NULL CHECK (kind IN ('capture', 'cancel')),
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    amount              BIGINT NOT NULL DEFAULT 0 CHECK (amount >= 0),
    cancellation_reason TEXT,
    provider_charge_id  TEXT,
    status              TEXT NOT NULL
        CHECK (status IN ('pending', 'succeeded', 'failed', 'rejected')),
    response_status     INTEGER,
    response_body       TEXT,
    lease_token         TEXT,
    lease_expires_at    TIMESTAMP,
    provider_attempts   INTEGER NOT NULL DEFAULT 0,
    created_at          TIMESTAMP NOT NULL,
    updated_at          TIMESTAMP NOT NULL,
    CONSTRAINT payment_operations_idempotency UNIQUE (merchant_id, kind, idempotency_key)
);

CREATE INDEX payment_operations_unfinished ON payment_operations (updated_at) WHERE status = 'pending';
