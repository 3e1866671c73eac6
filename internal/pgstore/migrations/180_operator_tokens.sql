-- A person's own tokens for the operator API (PostgreSQL; mirrors the
-- SQLite migration of the same number). Only the secret's SHA-256 is kept.
CREATE TABLE operator_tokens (
    id         TEXT COLLATE "C" PRIMARY KEY,
    hash       TEXT COLLATE "C" NOT NULL UNIQUE,
    person     TEXT COLLATE "C" NOT NULL,
    scope      TEXT COLLATE "C" NOT NULL CHECK (scope IN ('read', 'decide')),
    note       TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE INDEX operator_tokens_person ON operator_tokens (person, created_at);
