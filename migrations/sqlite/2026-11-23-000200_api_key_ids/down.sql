-- Rolling back must not bring revoked keys back to life: they are not copied.
CREATE TABLE api_keys_old (
    key_hash    TEXT PRIMARY KEY,
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    created_at  TIMESTAMP NOT NULL
);

INSERT INTO api_keys_old (key_hash, merchant_id, created_at)
    SELECT key_hash, merchant_id, created_at FROM api_keys WHERE revoked_at IS NULL;

DROP TABLE api_keys;
ALTER TABLE api_keys_old RENAME TO api_keys;
