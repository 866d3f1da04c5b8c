-- A ledger entry no longer references its balance transaction by a foreign key, as on
-- PostgreSQL (see the PostgreSQL migration of the same name): the same schema on both, and
-- `ledger verify` checks that every entry has its transaction. SQLite drops a constraint by
-- building the table again.
CREATE TABLE ledger_entries_new (
    transaction_id TEXT NOT NULL,
    account        TEXT NOT NULL CHECK (account IN ('merchant_balance', 'platform_fees',
                       'provider_held', 'payouts_in_transit')),
    merchant_id    TEXT NOT NULL,
    currency       TEXT NOT NULL,
    amount         BIGINT NOT NULL,
    PRIMARY KEY (transaction_id, account)
);
INSERT INTO ledger_entries_new (transaction_id, account, merchant_id, currency, amount)
    SELECT transaction_id, account, merchant_id, currency, amount FROM ledger_entries;
DROP TABLE ledger_entries;
ALTER TABLE ledger_entries_new RENAME TO ledger_entries;
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: UPDATE on ledger_entries refused'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: DELETE on ledger_entries refused'); END;
