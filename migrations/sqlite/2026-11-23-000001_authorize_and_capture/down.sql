-- Not reversible on SQLite without another rebuild; restore from a backup instead.
DROP TABLE payment_operations;
