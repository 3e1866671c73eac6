-- Single sign-on users, passkeys, and the short-lived state of logins and
-- passkey prompts under way.

-- A user is local (name and password) or signs on through an OpenID
-- provider. A single-sign-on user's identity is (issuer, subject); its name,
-- the principal that decisions and audit entries record, is
-- oidc:{issuer host}/{subject}. short_name (the provider's
-- preferred_username), display_name, email and groups are refreshed at
-- every login and only shown. no_role_since is set when the user's last
-- login mapped no group to a role: until a later login maps one, the user
-- has no role at all.
ALTER TABLE users ADD COLUMN kind TEXT NOT NULL DEFAULT 'local' CHECK (kind IN ('local','oidc'));
ALTER TABLE users ADD COLUMN issuer TEXT;
ALTER TABLE users ADD COLUMN subject TEXT;
ALTER TABLE users ADD COLUMN short_name TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN display_name TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN email TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN groups TEXT NOT NULL DEFAULT '[]';   -- JSON array of strings
ALTER TABLE users ADD COLUMN last_login_at INTEGER;
ALTER TABLE users ADD COLUMN no_role_since INTEGER;
-- The WebAuthn user handle: random bytes made at the first passkey
-- registration, never shown.
ALTER TABLE users ADD COLUMN webauthn_handle BLOB;

CREATE UNIQUE INDEX users_oidc_identity ON users (issuer, subject) WHERE kind = 'oidc';
-- Names and short names are compared without regard to case when checking
-- that nobody shadows anybody else.
CREATE INDEX users_name_nocase ON users (name COLLATE NOCASE);
CREATE INDEX users_short_name_nocase ON users (short_name COLLATE NOCASE) WHERE short_name <> '';

-- How a session logged in, and for single sign-on the ID token, sent back
-- to the provider as the hint of RP-initiated logout.
ALTER TABLE sessions ADD COLUMN method TEXT NOT NULL DEFAULT 'password';
ALTER TABLE sessions ADD COLUMN id_token TEXT NOT NULL DEFAULT '';

-- A user's registered passkeys. record is the WebAuthn library's credential
-- record (JSON); public_key (COSE) and sign_count are kept beside it for
-- reading.
CREATE TABLE passkeys (
    id           BLOB PRIMARY KEY,        -- credential id
    user_name    TEXT NOT NULL REFERENCES users (name),
    name         TEXT NOT NULL,
    public_key   BLOB NOT NULL,
    sign_count   INTEGER NOT NULL,
    record       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,        -- unix milliseconds
    last_used_at INTEGER
) STRICT;
CREATE INDEX passkeys_user ON passkeys (user_name, created_at);

-- Logins and passkey prompts under way: taken (deleted) exactly once, by
-- whichever server the browser comes back to. key_hash is SHA-256 of the
-- random key the browser holds.
CREATE TABLE oneshots (
    kind       TEXT NOT NULL,
    key_hash   TEXT NOT NULL,
    value      BLOB NOT NULL,
    expires_at INTEGER NOT NULL,          -- unix milliseconds
    PRIMARY KEY (kind, key_hash)
) STRICT;
CREATE INDEX oneshots_expiry ON oneshots (kind, expires_at);
