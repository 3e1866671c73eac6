-- A person's own tokens for the operator API: each acts as its person, with
-- a scope (read or decide), until it expires or is revoked. Only the
-- secret's SHA-256 is kept.
CREATE TABLE operator_tokens (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    person     TEXT NOT NULL,
    scope      TEXT NOT NULL CHECK (scope IN ('read', 'decide')),
    note       TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;

CREATE INDEX operator_tokens_person ON operator_tokens (person, created_at);
