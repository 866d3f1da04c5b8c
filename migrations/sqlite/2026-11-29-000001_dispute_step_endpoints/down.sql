CREATE TABLE dispute_steps_by_key (
    id                  TEXT PRIMARY KEY,
    merchant_id         TEXT NOT NULL REFERENCES merchants (id),
    dispute_id          TEXT NOT NULL REFERENCES disputes (id),
    kind                TEXT NOT NULL CHECK (kind IN ('evidence', 'submit', 'close')),
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    evidence_text       TEXT,
    provider_dispute_id TEXT,
    status              TEXT NOT NULL
        CHECK (status IN ('pending', 'succeeded', 'failed', 'rejected')),
    response_status     INTEGER,
    response_body       TEXT,
    lease_token         TEXT,
    lease_expires_at    TIMESTAMP,
    provider_attempts   INTEGER NOT NULL DEFAULT 0,
    created_at          TIMESTAMP NOT NULL,
    updated_at          TIMESTAMP NOT NULL,
    CONSTRAINT dispute_steps_idempotency UNIQUE (merchant_id, idempotency_key)
);
INSERT INTO dispute_steps_by_key
    SELECT id, merchant_id, dispute_id, kind, idempotency_key, request_fingerprint,
           evidence_text, provider_dispute_id, status, response_status, response_body,
           lease_token, lease_expires_at, provider_attempts, created_at, updated_at
    FROM dispute_steps;
DROP TABLE dispute_steps;
ALTER TABLE dispute_steps_by_key RENAME TO dispute_steps;
CREATE INDEX dispute_steps_unfinished ON dispute_steps (updated_at) WHERE status = 'pending';
