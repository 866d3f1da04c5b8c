ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_transaction_id_fkey
    FOREIGN KEY (transaction_id) REFERENCES balance_transactions (id);
