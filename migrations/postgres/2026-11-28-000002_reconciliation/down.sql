DROP TABLE reconciliation_lease;
DROP TABLE reconciliation_seen;
DROP TABLE reconciliation_discrepancies;
