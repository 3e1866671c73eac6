-- Console accounts, their sessions, and the console's cookie keys.

CREATE TABLE users (
    name          TEXT PRIMARY KEY,
    role          TEXT NOT NULL CHECK (role IN ('operator','auditor','admin')),
    password_hash TEXT NOT NULL,            -- argon2id PHC string
    created_at    INTEGER NOT NULL,         -- unix milliseconds
    disabled_at   INTEGER
) STRICT;

-- A session row is the whole session: the browser's cookie carries only a
-- random id, stored here as its SHA-256.
CREATE TABLE sessions (
    id_hash       TEXT PRIMARY KEY,
    user_name     TEXT NOT NULL REFERENCES users (name),
    csrf          TEXT NOT NULL,            -- synchronizer token for forms
    created_at    INTEGER NOT NULL,
    last_seen     INTEGER NOT NULL,
    revoked_at    INTEGER,
    revoke_reason TEXT
) STRICT;
CREATE INDEX sessions_user ON sessions (user_name) WHERE revoked_at IS NULL;

-- Keys that sign and encrypt the session cookie, created on first use so
-- that sessions survive a restart.
CREATE TABLE console_secrets (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
) STRICT;
