-- Reconciliation against the provider's settlement report: the discrepancies found (each
-- stored once, resolved when it no longer holds), the movements one run has matched (so a
-- second one for the same operation is a duplicate, in bounded memory), and the lease that
-- lets one instance at a time run it.

CREATE TABLE reconciliation_discrepancies (
    id                   TEXT PRIMARY KEY,
    -- kind, movement type, reference and provider movement: what makes it the same one.
    fingerprint          TEXT NOT NULL,
    kind                 TEXT NOT NULL CHECK (kind IN ('missing_here', 'missing_at_provider',
                             'amount_mismatch', 'currency_mismatch', 'duplicate_at_provider')),
    movement_type        TEXT NOT NULL,
    reference            TEXT NOT NULL,
    provider_movement_id TEXT,
    expected_amount      BIGINT,
    expected_currency    TEXT,
    found_amount         BIGINT,
    found_currency       TEXT,
    -- When the money moved (the provider's movement, or our move's becoming final).
    occurred_at          TIMESTAMP NOT NULL,
    first_seen_at        TIMESTAMP NOT NULL,
    last_seen_at         TIMESTAMP NOT NULL,
    last_run_id          TEXT NOT NULL,
    resolved_at          TIMESTAMP,
    CONSTRAINT reconciliation_discrepancies_once UNIQUE (fingerprint)
);

CREATE INDEX reconciliation_discrepancies_open ON reconciliation_discrepancies (occurred_at)
    WHERE resolved_at IS NULL;

CREATE TABLE reconciliation_seen (
    run_id        TEXT NOT NULL,
    movement_type TEXT NOT NULL,
    reference     TEXT NOT NULL,
    movement_id   TEXT NOT NULL,
    PRIMARY KEY (run_id, movement_type, reference)
);

CREATE TABLE reconciliation_lease (
    name          TEXT PRIMARY KEY,
    -- The run holding it, and until when (renewed while it runs).
    holder        TEXT,
    held_until    TIMESTAMP,
    -- When the scheduled run is next due (NULL: not scheduled yet).
    next_run_at   TIMESTAMP
);

INSERT INTO reconciliation_lease (name) VALUES ('reconcile');
