DROP TABLE payouts;
DROP TABLE ledger_entries;
DROP TABLE balance_transactions;
