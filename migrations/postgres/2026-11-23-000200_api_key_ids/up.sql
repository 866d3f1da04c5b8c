-- API keys get an id (`key_…`, what operators list and revoke by), an optional label, the
-- key's last 4 characters (to tell keys apart without showing them) and a revocation time.
--
-- Existing keys keep working: the id's default is evaluated for every existing row (a
-- volatile default makes PostgreSQL rewrite the table), and code that still inserts keys
-- the old way (key_hash, merchant_id, created_at) during a rolling deploy gets an id too.
-- A key is stored only as its hash, so rows from before this migration have no last4.
ALTER TABLE api_keys
    ADD COLUMN id TEXT NOT NULL DEFAULT ('key_' || replace(gen_random_uuid()::text, '-', '')),
    ADD COLUMN label TEXT,
    ADD COLUMN last4 TEXT,
    ADD COLUMN revoked_at TIMESTAMP;

ALTER TABLE api_keys ADD CONSTRAINT api_keys_id UNIQUE (id);

CREATE INDEX api_keys_merchant ON api_keys (merchant_id, created_at);
