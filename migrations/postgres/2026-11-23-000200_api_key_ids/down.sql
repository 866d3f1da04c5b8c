-- Rolling back must not bring revoked keys back to life: they are deleted.
DELETE FROM api_keys WHERE revoked_at IS NOT NULL;
DROP INDEX api_keys_merchant;
ALTER TABLE api_keys
    DROP CONSTRAINT api_keys_id,
    DROP COLUMN revoked_at,
    DROP COLUMN last4,
    DROP COLUMN label,
    DROP COLUMN id;
