-- PostgreSQL's naive limit for a new payment: its row written the simplest way, the claim
-- insert and the finishing update as two autocommit statements (two commits), no event, no
-- ledger. What the service does per payment (claim, finish, event, ledger) is measured
-- against this.
\set amount random(1, 99999999)
\set r random(1, 9000000000000000000)
INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, amount, currency, payment_method, metadata, status, amount_refunded, lease_token, lease_expires_at, provider_attempts, created_at, updated_at) VALUES ('pay_naive_' || (:r)::bigint, 'mer_bench', 'naive-' || (:r)::bigint, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', (:amount)::bigint, 'usd', 'pm_card_visa', '{}', 'processing', 0, 'lease', now() + interval '30 seconds', 1, now(), now());
UPDATE payments SET status = 'succeeded', provider_charge_id = 'ch_0123456789abcdef0123456789abcdef', response_status = 201, response_body = repeat('x', 420), amount_captured = (:amount)::bigint, lease_token = NULL, lease_expires_at = NULL, updated_at = now() WHERE id = 'pay_naive_' || (:r)::bigint AND status = 'processing';
