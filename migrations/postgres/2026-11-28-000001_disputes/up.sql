-- Disputes (chargebacks) opened by the provider, the steps a merchant takes on them
-- (evidence, submit, close: each an idempotent operation), and the provider's dispute
-- events that arrived before their payment was final.

CREATE TABLE disputes (
    id                    TEXT PRIMARY KEY,
    merchant_id           TEXT NOT NULL REFERENCES merchants (id),
    payment_id            TEXT NOT NULL REFERENCES payments (id),
    provider_dispute_id   TEXT NOT NULL,
    amount                BIGINT NOT NULL CHECK (amount > 0),
    currency              TEXT NOT NULL,
    reason                TEXT NOT NULL,
    status                TEXT NOT NULL
        CHECK (status IN ('needs_response', 'under_review', 'won', 'lost')),
    evidence_text         TEXT,
    evidence_submitted_at TIMESTAMP,
    evidence_due_by       TIMESTAMP NOT NULL,
    -- The step (submit or close) at the provider now, if any: one at a time.
    step_id               TEXT,
    created_at            TIMESTAMP NOT NULL,
    updated_at            TIMESTAMP NOT NULL,
    CONSTRAINT disputes_provider_id UNIQUE (provider_dispute_id)
);

CREATE INDEX disputes_list ON disputes (merchant_id, id);
CREATE INDEX disputes_payment ON disputes (payment_id);

CREATE TABLE dispute_steps (
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

CREATE INDEX dispute_steps_unfinished ON dispute_steps (updated_at) WHERE status = 'pending';

-- What a payment's disputes hold: the amount of its open and lost ones, and how many are
-- open (a refund is refused while any is).
ALTER TABLE payments ADD COLUMN amount_disputed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE payments ADD COLUMN disputes_open INTEGER NOT NULL DEFAULT 0
    CHECK (disputes_open >= 0);

-- The provider's dispute events for a payment that is ours but not final yet (its
-- webhooks can come out of order): applied, oldest first, by the recovery pass once the
-- payment is final (a dispute opens only on a captured one). Each stays recorded as a
-- webhook event as well.
CREATE TABLE deferred_disputes (
    webhook_id          TEXT PRIMARY KEY,
    provider_dispute_id TEXT NOT NULL,
    payment_id          TEXT NOT NULL,
    event_type          TEXT NOT NULL,
    data                TEXT NOT NULL,
    created_at          TIMESTAMP NOT NULL
);

CREATE INDEX deferred_disputes_payment ON deferred_disputes (payment_id);
CREATE INDEX deferred_disputes_dispute ON deferred_disputes (provider_dispute_id);
