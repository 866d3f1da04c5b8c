-- The naive limit: a new payment's SQL as two transactions, as the service ran it before
-- group commit. The claim insert (autocommit); then the finish: the guarded update, the
-- payment's event, the merchant's endpoints (none here), in one transaction.
\set amount random(1, 99999999)
\set r random(1, 9000000000000000000)
INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, amount, currency, payment_method, metadata, status, amount_refunded, lease_token, lease_expires_at, provider_attempts, created_at, updated_at) VALUES ('pay_bench_' || (:r)::bigint, 'mer_bench', 'key-' || (:r)::bigint, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', (:amount)::bigint, 'usd', 'pm_card_visa', '{}', 'processing', 0, 'lease', now() + interval '30 seconds', 1, now(), now());
BEGIN;
UPDATE payments SET status = 'succeeded', provider_charge_id = 'ch_0123456789abcdef0123456789abcdef', response_status = 201, response_body = repeat('x', 420), amount_captured = (:amount)::bigint, lease_token = NULL, lease_expires_at = NULL, updated_at = now() WHERE id = 'pay_bench_' || (:r)::bigint AND status = 'processing';
INSERT INTO events (id, merchant_id, event_type, object_id, body, created_at) VALUES ('evt_bench_' || (:r)::bigint, 'mer_bench', 'payment.succeeded', 'pay_bench_' || (:r)::bigint, repeat('x', 600), now());
SELECT id, enabled_events FROM webhook_endpoints WHERE merchant_id = 'mer_bench' AND status = 'enabled';
COMMIT;
