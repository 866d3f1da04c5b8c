-- Dashboard sessions, server-side so every instance knows them: the cookie carries a random
-- token, stored here only as its SHA-256. A session belongs to the API key it signed in
-- with, and ends with it.
CREATE TABLE dashboard_sessions (
    token_hash   TEXT PRIMARY KEY,
    api_key_hash TEXT NOT NULL REFERENCES api_keys (key_hash),
    merchant_id  TEXT NOT NULL REFERENCES merchants (id),
    csrf_token   TEXT NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP NOT NULL
);

CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);
