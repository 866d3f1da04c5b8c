DROP TABLE refunds;
ALTER TABLE payments DROP COLUMN amount_reserved;
