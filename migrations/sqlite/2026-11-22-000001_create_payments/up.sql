CREATE TABLE merchants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMP NOT NULL
);

-- Only the SHA-256 of a key is stored; the key itself is shown once.
CREATE TABLE api_keys (
    key_hash    TEXT PRIMARY KEY,
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    created_at  TIMESTAMP NOT NULL
);

-- A payment is also its own idempotency record: the unique (merchant_id, idempotency_key)
-- decides which request wins, and response_status/response_body hold the final answer
-- that every retry replays.
CREATE TABLE payments (
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
    status              TEXT NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed')),
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
    CONSTRAINT payments_idempotency UNIQUE (merchant_id, idempotency_key),
    -- A final answer exists exactly when the payment is final.
    CONSTRAINT payments_final_response CHECK ((status = 'processing') = (response_body IS NULL))
);

CREATE INDEX payments_merchant_list ON payments (merchant_id, id);
CREATE INDEX payments_merchant_customer ON payments (merchant_id, customer_id, id);
CREATE INDEX payments_unfinished ON payments (updated_at) WHERE status = 'processing';
