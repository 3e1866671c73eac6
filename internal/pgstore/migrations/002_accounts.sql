-- Console accounts, their sessions, and the console's cookie keys
-- (PostgreSQL; mirrors the SQLite migration of the same number).

CREATE TABLE users (
    name          TEXT COLLATE "C" PRIMARY KEY,
    role          TEXT COLLATE "C" NOT NULL CHECK (role IN ('operator','auditor','admin')),
    password_hash TEXT COLLATE "C" NOT NULL,            -- argon2id PHC string
    created_at    BIGINT NOT NULL,          -- unix milliseconds
    disabled_at   BIGINT
);

-- A session row is the whole session: the browser's cookie carries only a
-- random id, stored here as its SHA-256.
CREATE TABLE sessions (
    id_hash       TEXT COLLATE "C" PRIMARY KEY,
    user_name     TEXT COLLATE "C" NOT NULL REFERENCES users (name),
    csrf          TEXT COLLATE "C" NOT NULL,            -- synchronizer token for forms
    created_at    BIGINT NOT NULL,
    last_seen     BIGINT NOT NULL,
    revoked_at    BIGINT,
    revoke_reason TEXT COLLATE "C"
);
CREATE INDEX sessions_user ON sessions (user_name) WHERE revoked_at IS NULL;

-- Keys that sign and encrypt the session cookie, created on first use so
-- that sessions survive a restart and every replica reads the same ones.
CREATE TABLE console_secrets (
    name  TEXT COLLATE "C" PRIMARY KEY,
    value BYTEA NOT NULL
);
