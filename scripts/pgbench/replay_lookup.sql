-- The replay's lookup: the stored answer by (merchant, idempotency key).
\set n random(1, 1000)
SELECT response_status, response_body FROM payments WHERE merchant_id = 'mer_bench' AND idempotency_key = 'lookup-' || :n;
