-- Events (CONTRACT §9): one row per change of a payment or refund, inserted in the
-- transaction that makes the change, with one delivery row per matching endpoint.
--
-- The feed's order is `seq`, assigned after commit by a sequencing pass (see
-- docs/events.md): emitters insert with seq NULL and never wait for each other; a pass
-- holds the event_sequence row, numbers every committed unnumbered event above all
-- earlier numbers, and commits. A reader therefore never sees seq N+1 before seq N.
CREATE TABLE event_sequence (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    n   BIGINT NOT NULL
);
INSERT INTO event_sequence (id, n) VALUES (1, 0);

CREATE TABLE events (
    id          TEXT PRIMARY KEY,
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    seq         BIGINT UNIQUE,
    event_type  TEXT NOT NULL,
    object_id   TEXT NOT NULL,
    -- The event object exactly as it is served and delivered (every attempt, every replay).
    body        TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL
);

CREATE INDEX events_merchant_list ON events (merchant_id, id);
CREATE INDEX events_merchant_type_list ON events (merchant_id, event_type, id);
CREATE INDEX events_merchant_feed ON events (merchant_id, seq);
CREATE INDEX events_unsequenced ON events (id) WHERE seq IS NULL;
CREATE INDEX events_created ON events (created_at);

-- A merchant's webhook endpoints. The secrets sign deliveries, so they are kept as given
-- (like the inbound WEBHOOK_SECRETS); the API shows a secret only when it is made.
CREATE TABLE webhook_endpoints (
    id                          TEXT PRIMARY KEY,
    merchant_id                 TEXT NOT NULL REFERENCES merchants (id),
    url                         TEXT NOT NULL,
    -- JSON array of event types, or ["*"].
    enabled_events              TEXT NOT NULL,
    description                 TEXT,
    status                      TEXT NOT NULL CHECK (status IN ('enabled', 'disabled')),
    secret                      TEXT NOT NULL,
    previous_secret             TEXT,
    previous_secret_expires_at  TIMESTAMP,
    -- Start of the current run of failed attempts (NULL after a success): the endpoint is
    -- disabled once it lasts WEBHOOK_DISABLE_AFTER_MS.
    failing_since               TIMESTAMP,
    created_at                  TIMESTAMP NOT NULL,
    updated_at                  TIMESTAMP NOT NULL
);

CREATE INDEX webhook_endpoints_merchant ON webhook_endpoints (merchant_id, id);

-- One row per (event, endpoint) to deliver; a replay adds another. The worker claims a
-- due row with a lease (guarded update), so across instances one attempt at a time.
CREATE TABLE webhook_deliveries (
    id                  TEXT PRIMARY KEY,
    endpoint_id         TEXT NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id            TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    event_type          TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at     TIMESTAMP,
    lease_token         TEXT,
    lease_expires_at    TIMESTAMP,
    last_attempt_at     TIMESTAMP,
    last_status_code    INTEGER,
    last_error          TEXT,
    last_duration_ms    BIGINT,
    created_at          TIMESTAMP NOT NULL
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_endpoint_list ON webhook_deliveries (endpoint_id, id);
CREATE INDEX webhook_deliveries_endpoint_due
    ON webhook_deliveries (endpoint_id, status, next_attempt_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);

-- Idempotency-Key records of the POSTs that move no money (/v1/webhook_endpoints…):
-- the key, the request it was first used with, and the final answer it replays. An
-- operation that only writes the database stores its answer in its own transaction; a
-- test delivery (an HTTP call) holds a lease until its answer is stored.
CREATE TABLE idempotency_keys (
    merchant_id         TEXT NOT NULL REFERENCES merchants (id),
    scope               TEXT NOT NULL,
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    response_status     INTEGER,
    response_body       TEXT,
    lease_token         TEXT,
    lease_expires_at    TIMESTAMP,
    created_at          TIMESTAMP NOT NULL,
    PRIMARY KEY (merchant_id, scope, idempotency_key)
);

CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
