-- The ledger (docs/ledger.md). A balance transaction is one movement of a merchant's money;
-- its entries spread it over accounts and sum to zero (double entry). Both are append-only:
-- the triggers below refuse every UPDATE and DELETE, so a correction can only be a new
-- transaction. (source_id, txn_type) is unique: no object has the same movement twice,
-- whichever path (request, retry, worker, webhook, another instance) records it.
CREATE TABLE balance_transactions (
    id           TEXT PRIMARY KEY,
    merchant_id  TEXT NOT NULL REFERENCES merchants (id),
    txn_type     TEXT NOT NULL CHECK (txn_type IN ('charge', 'refund', 'refund_failure',
                     'payout', 'payout_failure', 'dispute', 'dispute_reversal')),
    source_id    TEXT NOT NULL,
    amount       BIGINT NOT NULL,
    fee          BIGINT NOT NULL CHECK (fee >= 0),
    net          BIGINT NOT NULL,
    currency     TEXT NOT NULL,
    available_on TIMESTAMP NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    CONSTRAINT balance_transactions_net CHECK (net = amount - fee),
    CONSTRAINT balance_transactions_once UNIQUE (source_id, txn_type)
);

CREATE INDEX balance_transactions_list ON balance_transactions (merchant_id, id);
CREATE INDEX balance_transactions_balance
    ON balance_transactions (merchant_id, currency, available_on);

CREATE TABLE ledger_entries (
    transaction_id TEXT NOT NULL REFERENCES balance_transactions (id),
    account        TEXT NOT NULL CHECK (account IN ('merchant_balance', 'platform_fees',
                       'provider_held', 'payouts_in_transit')),
    merchant_id    TEXT NOT NULL,
    currency       TEXT NOT NULL,
    amount         BIGINT NOT NULL,
    PRIMARY KEY (transaction_id, account)
);

CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME;
END;
$$;

CREATE TRIGGER balance_transactions_append_only BEFORE UPDATE OR DELETE ON balance_transactions
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();

-- Payouts: money sent from a merchant's available balance to its bank account. Like a
-- refund, a payout is its own idempotency record (unique merchant + key; the stored answer
-- is replayed); a request refused with 422 insufficient_balance is kept as 'rejected'.
CREATE TABLE payouts (
    id                  TEXT PRIMARY KEY,
    merchant_id         TEXT NOT NULL REFERENCES merchants (id),
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    amount              BIGINT NOT NULL CHECK (amount > 0),
    currency            TEXT NOT NULL,
    destination         TEXT NOT NULL,
    description         TEXT,
    status              TEXT NOT NULL
        CHECK (status IN ('pending', 'paid', 'failed', 'rejected')),
    provider_payout_id  TEXT,
    failure_code        TEXT,
    response_status     INTEGER,
    response_body       TEXT,
    lease_token         TEXT,
    lease_expires_at    TIMESTAMP,
    provider_attempts   INTEGER NOT NULL DEFAULT 0,
    created_at          TIMESTAMP NOT NULL,
    updated_at          TIMESTAMP NOT NULL,
    CONSTRAINT payouts_idempotency UNIQUE (merchant_id, idempotency_key)
);

CREATE INDEX payouts_list ON payouts (merchant_id, id);
CREATE INDEX payouts_unfinished ON payouts (updated_at) WHERE status = 'pending';

-- The movements that happened before the ledger existed, so that `ledger verify` holds on
-- an upgraded database: each captured payment's charge (fee at the default schedule,
-- 290 bps + 30, available two days after the capture), each refund ever created, and the
-- failure of each failed one. Ids are UUIDv7-shaped at the movement's own time, so lists
-- stay newest first.
CREATE TEMPORARY TABLE ledger_backfill AS
SELECT 'txn_' || lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7'
           || substr(md5(source_id || txn_type), 1, 19) AS id,
       merchant_id, txn_type, source_id, amount, fee, amount - fee AS net, currency,
       available_on, at AS created_at
FROM (
    SELECT merchant_id, 'charge' AS txn_type, id AS source_id, amount_captured AS amount,
           LEAST(amount_captured, (amount_captured * 290 + 5000) / 10000 + 30) AS fee,
           currency, updated_at + INTERVAL '2 days' AS available_on, updated_at AS at
    FROM payments WHERE status = 'succeeded' AND amount_captured > 0
    UNION ALL
    SELECT merchant_id, 'refund', id, -amount, 0, currency, created_at, created_at
    FROM refunds WHERE status IN ('pending', 'succeeded', 'failed')
    UNION ALL
    SELECT merchant_id, 'refund_failure', id, amount, 0, currency, updated_at, updated_at
    FROM refunds WHERE status = 'failed'
) AS movements;

INSERT INTO balance_transactions
    (id, merchant_id, txn_type, source_id, amount, fee, net, currency, available_on, created_at)
SELECT id, merchant_id, txn_type, source_id, amount, fee, net, currency, available_on, created_at
FROM ledger_backfill;

INSERT INTO ledger_entries (transaction_id, account, merchant_id, currency, amount)
SELECT id, 'merchant_balance', merchant_id, currency, net FROM ledger_backfill
UNION ALL
SELECT id, 'platform_fees', merchant_id, currency, fee FROM ledger_backfill WHERE fee <> 0
UNION ALL
SELECT id, 'provider_held', merchant_id, currency, -amount FROM ledger_backfill;

DROP TABLE ledger_backfill;
