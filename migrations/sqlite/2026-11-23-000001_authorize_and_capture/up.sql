-- Authorize now, capture later (§10). A manual payment is authorized at the provider and
-- waits in `requires_capture` until exactly one capture or cancel takes it; automatic
-- payments that succeeded have captured their whole amount.
--
-- SQLite cannot change a CHECK constraint, so the table is rebuilt (the documented
-- 12-step procedure; `run_migrations` turns foreign keys off around migrations).
CREATE TABLE payments_new (
    id                  TEXT PRIMARY KEY,
    merchant_id         TEXT NOT NULL REFERENCES merchants (id),
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    amount              BIGINT NOT NULL CHECK (amount > 0),
    currency            TEXT NOT NULL,
    payment_method      TEXT NOT NULL,
    customer_id         TEXT,
    description         TEXT,
    metadata            TEXT NOT NULL,
    status              TEXT NOT NULL
        CHECK (status IN ('processing', 'requires_capture', 'succeeded', 'failed', 'canceled')),
    amount_refunded     BIGINT NOT NULL DEFAULT 0,
    provider_charge_id  TEXT,
    failure_code        TEXT,
    failure_message     TEXT,
    response_status     INTEGER,
    response_body       TEXT,
    lease_token         TEXT,
    lease_expires_at    TIMESTAMP,
    provider_attempts   INTEGER NOT NULL DEFAULT 0,
    created_at          TIMESTAMP NOT NULL,
    updated_at          TIMESTAMP NOT NULL,
    amount_reserved     BIGINT NOT NULL DEFAULT 0
        CHECK (amount_reserved >= 0 AND amount_reserved <= amount),
    capture_method      TEXT NOT NULL DEFAULT 'automatic'
        CHECK (capture_method IN ('automatic', 'manual')),
    amount_capturable   BIGINT NOT NULL DEFAULT 0 CHECK (amount_capturable >= 0),
    amount_captured     BIGINT NOT NULL DEFAULT 0
        CHECK (amount_captured >= 0 AND amount_captured <= amount),
    cancellation_reason TEXT,
    -- When the authorization was given: it expires AUTHORIZATION_EXPIRY_MS later.
    authorized_at       TIMESTAMP,
    -- The capture or cancel that holds the authorization. Set by the guarded update that
    -- decides, among racing captures and cancels, the one that may call the provider.
    operation_id        TEXT,
    CONSTRAINT payments_idempotency UNIQUE (merchant_id, idempotency_key),
    -- A final answer exists exactly when the payment is final.
    CONSTRAINT payments_final_response CHECK ((status = 'processing') = (response_body IS NULL))
);

INSERT INTO payments_new (id, merchant_id, idempotency_key, request_fingerprint, amount,
    currency, payment_method, customer_id, description, metadata, status, amount_refunded,
    provider_charge_id, failure_code, failure_message, response_status, response_body,
    lease_token, lease_expires_at, provider_attempts, created_at, updated_at,
    amount_reserved, amount_captured)
SELECT id, merchant_id, idempotency_key, request_fingerprint, amount,
    currency, payment_method, customer_id, description, metadata, status, amount_refunded,
    provider_charge_id, failure_code, failure_message, response_status, response_body,
    lease_token, lease_expires_at, provider_attempts, created_at, updated_at,
    amount_reserved, CASE WHEN status = 'succeeded' THEN amount ELSE 0 END
FROM payments;

DROP TABLE payments;
ALTER TABLE payments_new RENAME TO payments;

CREATE INDEX payments_merchant_list ON payments (merchant_id, id);
CREATE INDEX payments_merchant_customer ON payments (merchant_id, customer_id, id);
CREATE INDEX payments_unfinished ON payments (updated_at) WHERE status = 'processing';
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
