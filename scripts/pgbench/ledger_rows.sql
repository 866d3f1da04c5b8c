-- The ledger's rows of the batch in new_payment_batched.sql, which scripts/bench.sh adds
-- to its transaction, before its COMMIT: every row a new payment writes since the ledger
-- landed. Each payment's balance transaction (the charge, its fee and net) and its three
-- ledger entries (merchant balance, platform fees, provider held).
INSERT INTO balance_transactions (id, merchant_id, txn_type, source_id, amount, fee, net, currency, available_on, created_at) SELECT 'txn_batch_' || (:r)::bigint || '_' || g, 'mer_bench', 'charge', 'pay_batch_' || (:r)::bigint || '_' || g, 2000, 88, 1912, 'usd', now() + interval '2 days', now() FROM generate_series(1, 16) g;
INSERT INTO ledger_entries (transaction_id, account, merchant_id, currency, amount) SELECT 'txn_batch_' || (:r)::bigint || '_' || g, a.account, 'mer_bench', 'usd', a.amount FROM generate_series(1, 16) g, (VALUES ('merchant_balance', 1912::bigint), ('platform_fees', 88::bigint), ('provider_held', -2000::bigint)) AS a (account, amount);
