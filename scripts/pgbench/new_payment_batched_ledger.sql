-- new_payment_batched.sql with the ledger's rows as well, for 16 payments per batch
-- (multiply tps by 16): every row a new payment writes since the ledger landed. The finish's
-- transaction also inserts each payment's balance transaction (the charge, its fee and net)
-- and its three ledger entries (merchant balance, platform fees, provider held).
\set r random(1, 9000000000000000000)
INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, amount, currency, payment_method, metadata, status, amount_refunded, lease_token, lease_expires_at, provider_attempts, created_at, updated_at) SELECT 'pay_batch_' || (:r)::bigint || '_' || g, 'mer_bench', 'bkey-' || (:r)::bigint || '_' || g, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 2000, 'usd', 'pm_card_visa', '{}', 'processing', 0, 'lease', now() + interval '30 seconds', 1, now(), now() FROM generate_series(1, 16) g ON CONFLICT DO NOTHING RETURNING id;
BEGIN;
UPDATE payments AS p SET status = 'succeeded', provider_charge_id = 'ch_0123456789abcdef0123456789abcdef', response_status = 201, response_body = repeat('x', 420), amount_captured = 2000, lease_token = NULL, lease_expires_at = NULL, updated_at = now() FROM (SELECT 'pay_batch_' || (:r)::bigint || '_' || g AS id FROM generate_series(1, 16) g) AS v WHERE p.id = v.id AND p.status = 'processing' RETURNING p.id;
INSERT INTO events (id, merchant_id, event_type, object_id, body, created_at) SELECT 'evt_batch_' || (:r)::bigint || '_' || g, 'mer_bench', 'payment.succeeded', 'pay_batch_' || (:r)::bigint || '_' || g, repeat('x', 600), now() FROM generate_series(1, 16) g;
SELECT id, enabled_events FROM webhook_endpoints WHERE merchant_id = 'mer_bench' AND status = 'enabled';
INSERT INTO balance_transactions (id, merchant_id, txn_type, source_id, amount, fee, net, currency, available_on, created_at) SELECT 'txn_batch_' || (:r)::bigint || '_' || g, 'mer_bench', 'charge', 'pay_batch_' || (:r)::bigint || '_' || g, 2000, 88, 1912, 'usd', now() + interval '2 days', now() FROM generate_series(1, 16) g;
INSERT INTO ledger_entries (transaction_id, account, merchant_id, currency, amount) SELECT 'txn_batch_' || (:r)::bigint || '_' || g, a.account, 'mer_bench', 'usd', a.amount FROM generate_series(1, 16) g, (VALUES ('merchant_balance', 1912::bigint), ('platform_fees', 88::bigint), ('provider_held', -2000::bigint)) AS a (account, amount);
COMMIT;
