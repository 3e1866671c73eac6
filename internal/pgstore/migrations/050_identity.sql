-- Single sign-on users, passkeys, and the short-lived state of logins and
-- passkey prompts under way (PostgreSQL; mirrors the SQLite migration of
-- the same number). Text the provider sends and nobody checked (display
-- name, email) is BYTEA: PostgreSQL's TEXT cannot hold a NUL.

ALTER TABLE users ADD COLUMN kind TEXT COLLATE "C" NOT NULL DEFAULT 'local' CHECK (kind IN ('local','oidc'));
ALTER TABLE users ADD COLUMN issuer TEXT COLLATE "C";
ALTER TABLE users ADD COLUMN subject TEXT COLLATE "C";
ALTER TABLE users ADD COLUMN short_name TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN display_name BYTEA NOT NULL DEFAULT ''::bytea;
ALTER TABLE users ADD COLUMN email BYTEA NOT NULL DEFAULT ''::bytea;
ALTER TABLE users ADD COLUMN groups TEXT COLLATE "C" NOT NULL DEFAULT '[]';   -- JSON array of strings
ALTER TABLE users ADD COLUMN last_login_at BIGINT;
ALTER TABLE users ADD COLUMN no_role_since BIGINT;
ALTER TABLE users ADD COLUMN webauthn_handle BYTEA;

CREATE UNIQUE INDEX users_oidc_identity ON users (issuer, subject) WHERE kind = 'oidc';
CREATE INDEX users_name_lower ON users (lower(name));
CREATE INDEX users_short_name_lower ON users (lower(short_name)) WHERE short_name <> '';

ALTER TABLE sessions ADD COLUMN method TEXT COLLATE "C" NOT NULL DEFAULT 'password';
ALTER TABLE sessions ADD COLUMN id_token TEXT COLLATE "C" NOT NULL DEFAULT '';

CREATE TABLE passkeys (
    id           BYTEA PRIMARY KEY,        -- credential id
    user_name    TEXT COLLATE "C" NOT NULL REFERENCES users (name),
    name         TEXT NOT NULL,
    public_key   BYTEA NOT NULL,
    sign_count   BIGINT NOT NULL,
    record       TEXT COLLATE "C" NOT NULL,
    created_at   BIGINT NOT NULL,          -- unix milliseconds
    last_used_at BIGINT
);
CREATE INDEX passkeys_user ON passkeys (user_name, created_at);

CREATE TABLE oneshots (
    kind       TEXT COLLATE "C" NOT NULL,
    key_hash   TEXT COLLATE "C" NOT NULL,
    value      BYTEA NOT NULL,
    expires_at BIGINT NOT NULL,            -- unix milliseconds
    PRIMARY KEY (kind, key_hash)
);
CREATE INDEX oneshots_expiry ON oneshots (kind, expires_at);
