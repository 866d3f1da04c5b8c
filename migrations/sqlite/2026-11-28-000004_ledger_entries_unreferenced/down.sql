CREATE TABLE ledger_entries_old (
    transaction_id TEXT NOT NULL REFERENCES balance_transactions (id),
    account        TEXT NOT NULL CHECK (account IN ('merchant_balance', 'platform_fees',
                       'provider_held', 'payouts_in_transit')),
    merchant_id    TEXT NOT NULL,
    currency       TEXT NOT NULL,
    amount         BIGINT NOT NULL,
    PRIMARY KEY (transaction_id, account)
);
INSERT INTO ledger_entries_old (transaction_id, account, merchant_id, currency, amount)
    SELECT transaction_id, account, merchant_id, currency, amount FROM ledger_entries;
DROP TABLE ledger_entries;
ALTER TABLE ledger_entries_old RENAME TO ledger_entries;
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: UPDATE on ledger_entries refused'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: DELETE on ledger_entries refused'); END;
