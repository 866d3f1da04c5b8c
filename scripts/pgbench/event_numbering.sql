-- The numbering of the batch's events in new_payment_batched.sql, which scripts/bench.sh
-- adds after its COMMIT, as a transaction of its own: the service numbers each committed
-- event for the feed (its `seq`) in a pass after the event's transaction, a second write of
-- the event's row. `bench_event_seq` (made by bench.sh) stands in for the service's counter
-- row, which would make 64 clients wait on one lock: this counts the rows' work, not that.
UPDATE events SET seq = nextval('bench_event_seq') WHERE id IN (SELECT 'evt_batch_' || (:r)::bigint || '_' || g FROM generate_series(1, 16) g);
