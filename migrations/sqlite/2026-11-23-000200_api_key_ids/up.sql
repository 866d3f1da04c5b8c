-- API keys get an id (`key_…`, what operators list and revoke by), an optional label, the
-- key's last 4 characters (to tell keys apart without showing them) and a revocation time.
--
-- SQLite cannot add a column whose default is an expression, so the table is rebuilt.
-- Existing keys keep working: the copy gives every existing row an id from the default,
-- and code that still inserts keys the old way (key_hash, merchant_id, created_at) during
-- a rolling deploy gets an id too. A key is stored only as its hash, so rows from before
-- this migration have no last4. No table references api_keys, so dropping it is safe with
-- foreign keys on.
CREATE TABLE api_keys_new (
    key_hash    TEXT PRIMARY KEY,
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    created_at  TIMESTAMP NOT NULL,
    id          TEXT NOT NULL UNIQUE DEFAULT ('key_' || lower(hex(randomblob(16)))),
    label       TEXT,
    last4       TEXT,
    revoked_at  TIMESTAMP
);

INSERT INTO api_keys_new (key_hash, merchant_id, created_at)
    SELECT key_hash, merchant_id, created_at FROM api_keys;

DROP TABLE api_keys;
ALTER TABLE api_keys_new RENAME TO api_keys;

CREATE INDEX api_keys_merchant ON api_keys (merchant_id, created_at);
