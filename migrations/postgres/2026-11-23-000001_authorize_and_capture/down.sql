DROP TABLE payment_operations;
DROP INDEX payments_authorizations;
DELETE FROM refunds WHERE payment_id IN (SELECT id FROM payments WHERE status IN ('requires_capture', 'canceled'));
DELETE FROM payments WHERE status IN ('requires_capture', 'canceled');
ALTER TABLE payments DROP COLUMN operation_id, DROP COLUMN authorized_at,
    DROP COLUMN cancellation_reason, DROP COLUMN amount_captured,
    DROP COLUMN amount_capturable, DROP COLUMN capture_method;
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('processing', 'succeeded', 'failed'));
